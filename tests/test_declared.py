"""Declared criteria (issue #30, item 3): the team file's parser and each bad input, the team-familiarity rule, the
deployment-target check on synthetic stored deployments, the decision weighing both, and the report showing each
declared value's source and date apart from the measured ones. No framework and no trial: hand-made results
(:mod:`fake_results`); the two CLI tests start a Python process each (a few seconds)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.analysis import verdict
from bakeoff.analysis.stats import summarise_groups
from bakeoff.core import formats
from bakeoff.core.spec import SpecError
from bakeoff.predict import team as team_file
from bakeoff.report import declared
from bakeoff.report.write import decisions, stored, write_report
from fake_results import default_results, readme_command, store_as_readme

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "team.toml"

GOOD = """\
[survey]
source = "team survey"
date = 2026-11-20

[[answer]]
person = "ana"
torch = 5
tensorflow = 1

[[answer]]
person = "bo"
torch = 2
jax = 4
source = "bo, by e-mail"
date = "2026-11-22"

[targets]
need = ["server", "mobile", "edge"]
source = "product brief"
date = 2026-11-18
"""


def parse(text: str) -> team_file.Team:
    import tomllib

    return team_file.parse(tomllib.loads(text), text, "team.toml")


def test_the_example_file_reads_and_scores_by_the_stated_rule():
    team = team_file.load(EXAMPLE)
    assert [a.person for a in team.answers] == ["ana", "bo", "chen", "dara"]
    # the mean over all 4 people, a framework a person did not rate counting 0: torch (4+3+5+2)/4, tensorflow
    # (2+4+0+1)/4, jax (1+0+3+0)/4; keras-jax rated by nobody
    assert team.familiarity(["torch", "tensorflow", "jax", "keras-jax"]) == {
        "torch": 3.5, "tensorflow": 1.75, "jax": 1.0, "keras-jax": 0.0}
    assert team.weights == {"team_familiarity": 0.2, "deploy_targets": 0.1}
    assert team.needs.targets == ("server", "mobile")
    dara = team.answers[3]
    assert dara.provenance.text() == "declared by dara, by e-mail (on leave during the survey), 2026-11-24"
    assert team.answers[0].provenance.date == datetime.date(2026, 11, 20)  # [survey]'s, taken by the answer
    assert team.answers[0].line == 12 and dara.line == 28  # the [[answer]] headers' lines in the file


def test_answers_take_their_own_provenance_and_strings_as_dates():
    team = parse(GOOD)
    assert [a.provenance.text() for a in team.answers] == ["declared by team survey, 2026-11-20",
                                                           "declared by bo, by e-mail, 2026-11-22"]
    assert team.familiarity(["torch", "jax"]) == {"torch": 3.5, "jax": 2.0}
    assert team.weights == {}  # no weight given: the criteria weigh 0 unless the suite or --weight gives one
    assert team_file.familiarity([], ["torch"]) == {"torch": 0.0}


@pytest.mark.parametrize(("old", "new", "message"), [
    ("tensorflow = 1", "mxnet = 1",
     r"team.toml line 8: unknown framework 'mxnet' in the answer of 'ana'; accepted: torch, tensorflow, jax, "
     r"keras-jax, keras-torch, keras-tensorflow"),
    ("torch = 5", "torch = 7",
     r"team.toml line 7: proficiency 7 of ana for torch is outside the scale: an integer from 0 to 5 \(0 never used "
     r"it, 1 followed a tutorial, .*5 could teach it or debug its internals\)"),
    ("torch = 5", "torch = 3.5", r"line 7: proficiency 3.5 of ana for torch is outside the scale"),
    ("torch = 5", "torch = -1", r"line 7: proficiency -1 of ana for torch is outside the scale"),
    ("torch = 5", "torch = true", r"line 7: proficiency True of ana for torch is outside the scale"),
    ('source = "team survey"\n', "",
     r"team.toml line 4: the answer of 'ana' has no source: add source = \"WHO OR WHAT DECLARED IT\" \(give it in "
     r"the answer or in \[survey\]\)"),
    ("date = 2026-11-20\n", "", r"team.toml line 4: the answer of 'ana' has no date: add date = YYYY-MM-DD"),
    ('person = "bo"', 'person = "ana"',
     r"team.toml line 11: 'ana' answered twice \(first at line 6\); each person answers once"),
    ('person = "ana"\n', "", r"team.toml line 5: answer 1 has no person"),
    ('date = "2026-11-22"', 'date = "last week"', r"line 15: date of the answer of 'bo' must be a date like"),
    ('need = ["server", "mobile", "edge"]', 'need = ["server", "watch"]',
     r"team.toml line 18: unknown deployment target 'watch'; accepted: server, mobile, browser, edge"),
    ('source = "product brief"\n', "", r"line 17: \[targets\] has no source"),
    ("[targets]", "[target]", r"line 17: unknown section or key 'target'; accepted: \[survey\], \[\[answer\]\]"),
    ("date = 2026-11-20", "date = 2026-11-20\nweight = -1", r"line 4: weight in \[survey\] must be a number >= 0"),
    ("date = 2026-11-20", "date = 2026-11-20\nowner = 'x'",
     r"line 4: unknown key 'owner' in \[survey\]; accepted: source, date, weight"),
])
def test_bad_input_names_the_line_and_the_accepted_values(old, new, message):
    assert GOOD.count(old) >= 1
    with pytest.raises(SpecError, match=message):
        parse(GOOD.replace(old, new, 1))


def test_a_file_that_declares_nothing_or_is_not_toml_is_refused(tmp_path):
    with pytest.raises(SpecError, match="declares nothing"):
        parse("# nothing\n")
    broken = tmp_path / "t.toml"
    broken.write_text("[survey\n")
    with pytest.raises(SpecError, match=r"--survey .*t.toml: not valid TOML: .*line 1"):
        team_file.load(broken)
    with pytest.raises(SpecError, match="cannot read it"):
        team_file.load(tmp_path / "missing.toml")


def _row(framework: str, fmt: str, status: str = "ok", diff: float = 1e-6, reason: str = "") -> dict:
    f = formats.get(fmt)
    return {"key": f"{framework}-{fmt}", "model_key": "k-" + framework, "workload": "text_classifier",
            "preset": "tiny", "framework": framework, "format": fmt, "display": f.display, "targets": list(f.targets),
            "status": status, "reason": reason, "stage": "export" if status != "ok" else "",
            "reference": {"metric": 0.9}, "export": {"export_s": 1.0, "bytes": 1000},
            "finished_at": "2026-12-01T10:00:00+00:00",
            "inference": {} if status != "ok" else {
                "latency_s": {"p50": 1e-3}, "max_abs_diff": diff, "tolerance": f.tolerance, "metric": 0.9,
                "parity": "ok" if diff <= f.tolerance else "differs"}}


ROWS = [_row("torch", "torchscript"), _row("torch", "torch-onnx", status="failed", reason="UnsupportedOp: aten::x"),
        _row("tensorflow", "savedmodel"), _row("tensorflow", "litert", diff=0.5)]


def test_targets_are_met_not_met_or_not_tried_with_the_evidence():
    checks = {(c.framework, c.target): c for c in declared.check_targets(
        ["server", "mobile", "edge"], ROWS, ["torch", "tensorflow", "keras-jax"], "text_classifier", "tiny")}
    assert checks["torch", "server"].outcome == "met"
    assert checks["torch", "server"].evidence == "TorchScript exported, ran and matched (deployed 2026-12-01)"
    # torch reaches mobile only through its ONNX file, which failed to export
    assert checks["torch", "mobile"].outcome == "not met"
    assert checks["torch", "mobile"].evidence == "ONNX (torch.onnx) failed at export: UnsupportedOp: aten::x"
    assert checks["torch", "edge"].outcome == "not tried"
    assert checks["torch", "edge"].evidence == "bakeoff exports no PyTorch format that reaches edge"
    assert checks["tensorflow", "server"].outcome == "met"
    assert checks["tensorflow", "mobile"].outcome == "not met"  # LiteRT ran, but its outputs differ
    assert "LiteRT (float) ran, but its outputs differ" in checks["tensorflow", "mobile"].evidence
    assert checks["tensorflow", "edge"].outcome == "not met"
    assert checks["keras-jax", "server"].outcome == "not tried"
    nothing = declared.check_targets(["mobile"], [], ["tensorflow"], "text_classifier", "tiny")
    assert nothing[0].outcome == "not tried" and "run `bakeoff deploy --workload text_classifier --preset tiny`" \
        in nothing[0].evidence and "LiteRT (float)" in nothing[0].evidence
    team = parse(GOOD)
    scores = declared.scores(team, ["torch", "tensorflow"], ROWS, "text_classifier", "tiny")
    assert scores["deploy_targets"] == {"torch": pytest.approx(5 / 3), "tensorflow": pytest.approx(5 / 3)}
    assert scores["team_familiarity"] == {"torch": 3.5, "tensorflow": 0.5}


def test_the_decision_weighs_declared_criteria_only_through_their_weight():
    summaries = summarise_groups(default_results())  # torch leads on every measured criterion
    team = parse(GOOD.replace("torch = 5", "torch = 0").replace("tensorflow = 1", "tensorflow = 5"))
    unweighted = decisions(summaries, None, None, ROWS, team)[("text_classifier", "tiny")]
    assert unweighted.given["team_familiarity"] == 0 and "team_familiarity" not in unweighted.weights
    assert unweighted.ranking[0].framework == "torch"
    heavy = decisions(summaries, {"team_familiarity": 20.0}, None, ROWS, team)[("text_classifier", "tiny")]
    parts = {c.framework: c.parts["team_familiarity"] for c in heavy.configs}
    assert parts == {"torch": pytest.approx(0.2), "tensorflow": pytest.approx(0.5)}  # (0+2)/2/5, (5+0)/2/5
    assert heavy.ranking[0].framework == "tensorflow"
    # the verdict says whose figures they are: the team's, not measured ones
    assert "team_familiarity: 2.5 vs 1 (your score)" in heavy.verdict
    needs = decisions(summaries, {"deploy_targets": 20.0}, None, [r for r in ROWS if r["framework"] == "torch"],
                      team)[("text_classifier", "tiny")]
    assert "deploy_targets: 1.7 vs 0 (your needed targets, 5 = every one met)" in needs.verdict
    assert set(verdict.DECLARED) <= {team_file.FAMILIARITY, team_file.TARGETS}
    with pytest.raises(SpecError, match=r"team_familiarity is declared twice: by \[qualitative.team_familiarity\]"):
        decisions(summaries, None, {"team_familiarity": {"torch": 4, "tensorflow": 2}}, ROWS, team)


def test_the_report_shows_each_declared_value_with_its_source_and_date(tmp_path):
    team = team_file.load(EXAMPLE)
    results = default_results()
    written = write_report(results, tmp_path, None, None, "t", deployments=ROWS, team=team)
    md = written.paths["markdown"].read_text()
    html = written.paths["html"].read_text()
    section = md.split("## Declared criteria", 1)[1].split("\n## ", 1)[0]
    assert "declared by ML platform team survey (form answers, exported from the wiki), 2026-11-20" in section
    assert "declared by dara, by e-mail (on leave during the survey), 2026-11-24" in section
    assert "| PyTorch | 3.50 | 3 of 4 | 4 of 4 |" in section  # score, at level 3+, rated it
    assert "| TensorFlow | 1.75 | 1 of 4 | 3 of 4 |" in section
    assert "Needed: server, mobile — declared by product brief v3, section 'Where it runs', 2026-11-18" in section
    assert re.search(r"\| PyTorch \| mobile \| not met \| ONNX \(torch.onnx\) failed at export", section)
    # the weights table calls them declared, beside the measured criteria, with the scores the decision used
    weights = md.split("### Weights", 1)[1].split("###", 1)[0]
    assert re.search(r"\| team_familiarity \| declared \(see Declared criteria\) \| the team's mean proficiency "
                     r"0\.\.5 \(a team survey\), /5: PyTorch 3\.5, TensorFlow 1\.8 \| 0\.2 \|", weights)
    assert "| throughput | measured |" in weights
    assert "<h2>Declared criteria</h2>" in html and "2026-11-18" in html
    assert md.index("## Decision") < md.index("## Plots") < md.index("## Declared criteria")  # the card first


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_cli_refuses_a_bad_survey_before_anything_runs_or_is_written(tmp_path):
    bad = tmp_path / "team.toml"
    bad.write_text(GOOD.replace('person = "bo"', 'person = "ana"'))
    r = _cli("run", "--workload", "mnist", "--framework", "torch", "--max-steps", "2", "--survey", str(bad),
             "--store", "s.sqlite", cwd=tmp_path)
    assert r.returncode == 2 and "line 11: 'ana' answered twice" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.toml"]  # no store, no report
    r = _cli("report", "--survey", str(bad), "--store", "s.sqlite", cwd=tmp_path)
    assert r.returncode == 2 and "line 11: 'ana' answered twice" in r.stderr


def test_the_readme_survey_command_runs(tmp_path):
    """The README's `bakeoff report ... --survey examples/team.toml` command, as written, on a store of hand-made
    results (no framework)."""
    store_as_readme(tmp_path, default_results())
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "team.toml").write_text(EXAMPLE.read_text())
    r = _cli(*readme_command("report", "--survey"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "reports" / "quick" / "report.md").read_text()
    assert "## Declared criteria" in md and "declared by product brief v3" in md
    # --weight may weigh a criterion only a team file declares
    team = team_file.load(EXAMPLE)
    got = stored(tmp_path / "results" / "bakeoff.sqlite", "quick", {"team_familiarity": "1"}, "--weight", team)
    assert got.weights["team_familiarity"] == 1.0
    with pytest.raises(SpecError, match="team_familiarity"):
        stored(tmp_path / "results" / "bakeoff.sqlite", "quick", {"team_familiarity": "1"}, "--weight")
