"""Output through a pipe, as ``bakeoff ... | tee log`` or ``> file`` gets it (issue #50, item 6): the CLI run as a
subprocess with its standard output a pipe. No line is cut at 80 columns inside a word or a path, no table cuts its
own headers short (``strat…``), prose is wrapped between words at 100 columns, and no line ends in blanks. The
store is hand-made (fake_results): nothing trains."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fake_results as fr
from bakeoff.core import registry
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status

PLAN = ("plan", "--params", "100e9", "--devices", "8", "--memory", "80GB", "--batch", "64")
DEEP = "a_folder_with_a_long_name/" * 5  # a path well past 80 columns


def piped(*args: str, cwd: Path, columns: int | None = None) -> list[str]:
    """``bakeoff ARGS``'s standard output, read from a pipe, as lines (``COLUMNS`` unset unless given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # standard output a pipe, as `| tee` gives it
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and not [line for line in lines if line != line.rstrip()], "a line ends in blanks"
    return lines


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``results/bakeoff.sqlite`` holds the default bake-off (text_classifier/tiny, 3 runs each)."""
    where = tmp_path_factory.mktemp("piped")
    fr.store_as_readme(where, fr.default_results())
    return where


def test_list_presets_keeps_each_presets_fields_on_one_line(folder):
    lines = piped("list", "--presets", cwd=folder)
    shapes = (r"workload \w+ \(\w+, (higher|lower) is better\)", r"  \w+: [\d,]+ parameters; target .*\)",
              r"    fields \(--set KEY=VALUE\): (\w+=\S+ ?)+", r"    derived \(from the data, or fixed\): .*")
    assert [line for line in lines if not any(re.fullmatch(shape, line) for shape in shapes)] == []
    assert "    fields (--set KEY=VALUE): filters=8,16 kernel_size=3 dropout=0.1 learning_rate=0.003" in lines


def test_report_wraps_verdicts_between_words_keeps_the_card_narrow_and_paths_whole(folder):
    lines = piped("report", "--out", f"{DEEP}report", cwd=folder)
    card = lines.index("text_classifier/tiny: PyTorch (graph) wins")
    verdicts = lines[:card]
    assert verdicts[0].startswith("verdict: PyTorch (graph) wins text_classifier/tiny over TensorFlow (graph)")
    assert len(verdicts) > 2 and all(len(line) <= 100 for line in verdicts)
    assert all(line.startswith(("verdict: ", "  ")) for line in verdicts)  # continuation lines indented
    assert "(0.51x, 95% CI 0.51–0.51x, reached in 3/3 vs 3/3 runs)" in " ".join(line.strip() for line in verdicts)
    # the card: a table per workload within 80 columns (it was 199 wide, a row a line), each ratio over its
    # interval, words whole — steady throughput, TensorFlow graph against PyTorch graph: 520 / 950 = 0.55x
    table = lines[card:next(i for i, line in enumerate(lines) if line.startswith("recommendation: "))]
    assert all(len(line) <= 80 for line in table) and "…" not in "\n".join(table)
    row = next(i for i, line in enumerate(table) if line.lstrip().startswith("TensorFlow"))
    assert table[row].split()[2] == "worse" and table[row + 1].split()[1] == "0.55x"
    assert re.fullmatch(r"0\.5\d–0\.5\d", table[row + 2].split()[0])
    prose = lines[next(i for i, line in enumerate(lines) if line.startswith("recommendation: ")):-1]
    assert all(len(line) <= 100 for line in prose)
    assert lines[-1] == f"report: {DEEP}report/report.html  (Markdown: {DEEP}report/report.md)"


@pytest.mark.parametrize("columns", [None, 80])
def test_plan_shows_its_tables_headers_whole(folder, columns):
    lines = piped(*PLAN, cwd=folder, columns=columns)
    header = next(i for i, line in enumerate(lines) if "strategy" in line)
    words = " ".join(lines[header - 1:header + 2]).split()  # at 80 columns a header may take two lines
    for word in ("strategy", "recipe", "weights", "grads", "Adam", "activ.", "total", "fits", "comm", "offered", "by"):
        assert word in words
    assert not [line for line in lines if "…" in line]
    assert "memory per device in GB; recipe: how the states are held, in bytes a parameter" in lines[
        next(i for i, line in enumerate(lines) if line.startswith("memory per device"))]  # a note, as prose
    if columns is None:  # a table at the width its cells need: the rows whole
        row = r"│ data parallel +│ torch-autocast, keras-mixed, flax-mixed"
        assert [line for line in lines if re.search(row, line)]
        assert max(len(line) for line in lines if line.startswith("│")) < 200  # four frameworks' recipes in a cell
    prose = [line for line in lines if line.startswith(("note: ", "left out: ", "  recipe "))]
    assert prose and all(len(line) <= (columns or 100) for line in prose)


def test_claims_table_keeps_its_headers_and_a_readable_width(folder):
    lines = piped("claims", "--no-run", cwd=folder)
    header = next(i for i, line in enumerate(lines) if "verdict" in line and "why" in line)
    for word in ("claim:", "what", "compares", "verdict", "measured:", "interval)", "why"):
        assert word in " ".join(lines[header - 1:header + 1]).split()
    assert not [line for line in lines if "…" in line]
    assert max(map(len, lines[1:])) <= 160  # the first line, what was judged on what, is one line however long
    assert any(line.startswith("verdicts: ") for line in lines)


def test_dry_run_keeps_the_store_path_and_each_trial_on_one_line(folder):
    store = f"{DEEP}s.sqlite"
    lines = piped("run", "--dry-run", "--store", store, cwd=folder)
    assert lines[0] == f"quick: 24 trials from bakeoff/suites/quick.toml; store {store}"
    trials = [line for line in lines if re.match(r" +\d+  ", line)]
    assert len(trials) == 24 and all(re.search(r"seed \d+  key [0-9a-f]{16}", line) for line in trials)


# --- a run's progress: the heartbeat of a long trial, the ETA once a compile time is known ------------------------

@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_a_long_trial_prints_a_heartbeat_with_its_step_through_a_pipe(tmp_path):
    """A real trial of 3 s on the training clock (however fast the machine), its heartbeat every second (30 by
    default) and its log's progress line every half second (10 by default)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"BAKEOFF_HEARTBEAT_S": "1",
                                                                     "BAKEOFF_PROGRESS_S": "0.5"}
    done = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
                           "--execution", "eager", "--max-seconds", "3", "--eval-every", "100000", "--store",
                           "r.sqlite", "--no-report"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    beats = [line for line in done.stdout.splitlines() if line.startswith("  … still running: ")]
    said = r"  … still running: mnist/tiny torch/eager seed 0, \d+ s, (no training step done yet|step (\d+)(/\d+)?)"
    assert beats and all(re.fullmatch(said, line) for line in beats), done.stdout
    steps = [int(m.group(2)) for line in beats if (m := re.fullmatch(said, line)) and m.group(2)]
    assert steps and steps == sorted(steps), beats
    assert done.stdout.index(beats[-1]) < done.stdout.index("mnist/tiny torch/eager seed 0: ok")


def test_the_eta_counts_a_first_trials_compile_only_for_trials_that_compile():
    """The claims run that prompted it: a first trial (PyTorch graph) compiling for 70 s of its 100 took every
    other trial for 100 s long. Hand-counted: its steady part is 100 - (70.5 - 0.5) = 30 s."""
    from bakeoff.cli.console import RunProgress, console

    def spec(framework: str, execution: str, preset: str = "tiny") -> RunSpec:
        return RunSpec(workload="mnist", preset=preset, framework=framework, execution=execution, max_steps=2)

    def ok(s: RunSpec, wall_s: float, first_step_s: float) -> TrialResult:
        return TrialResult(spec=s.to_dict(), key=s.key(), status=Status.OK, wall_s=wall_s, first_step_s=first_step_s,
                           steady_step_s=0.5, throughput={"examples_per_s": 64.0})

    torch_graph, tf_graph = spec("torch", "graph"), spec("tensorflow", "graph")
    eager = [spec("jax", "eager"), spec("torch", "eager"), spec("tensorflow", "eager")]
    later = spec("torch", "graph", "paper")  # a configuration not run yet, in a mode that compiled
    with console.capture(), RunProgress(6) as progress:
        for s in (torch_graph, tf_graph, *eager, later):
            progress("queued", s, None)
        progress("start", torch_graph, None)
        progress("done", torch_graph, ok(torch_graph, 100.0, 70.5))
        # TensorFlow's graph: 30 s and a compile not known yet; each eager trial 30 s; PyTorch's graph 30 + 70 s
        assert progress.eta_text() == "at least 3 min 40 s left"  # not 5 × 100 s
        progress("start", tf_graph, None)
        progress("done", tf_graph, ok(tf_graph, 32.0, 2.5))  # a compile of 2 s: its steady part 30 s as well
        assert progress.eta_text() == "about 3 min 10 s left"  # 3 × 30 + (30 + 70)
        progress("skip", later, None)  # stored meanwhile by another run on the store: no time left for it
        assert progress.eta_text() == "about 1 min 30 s left"  # 3 × 30
