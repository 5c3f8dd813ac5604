"""Render trial results as a decision report: ``report.md``, a self-contained ``report.html``, and two PNGs.

Per (workload, preset) the report gives, in this order: the one-line verdict, the environment, one row per
configuration with every measured quantity (noisy values marked, missing ones explained), the scores of every
mode, the weights, the sensitivity of the verdict to each weight, and the trials that did not succeed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.analysis.decide import MEASURED, Decision, Qualitative, decide_each, display_name
from bakeoff.analysis.stats import NOISY_THRESHOLD, ConfigSummary, Summary, fmt, short_reason, summarise_groups
from bakeoff.report import plots
from bakeoff.report.templates import Block, Heading, Image, Para, Table, to_html, to_markdown
from bakeoff.spec import Status, TrialResult

MIB = 2**20
NOISY_MARK = "†"


class _Footnotes:
    """Numbered footnotes; the same text gets the same number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{i}] {t}" for i, t in enumerate(self.texts, 1)]


def _value(cs: ConfigSummary, quantity: str, notes: _Footnotes, scale: float = 1.0, spread: bool = False,
           suffix: str = "") -> str:
    """One table cell: the median (and q1–q3), "†" when noisy; "—" with a footnote saying why when missing."""
    s: Summary | None = cs.get(quantity)
    if s is None:
        return f"—{suffix} {notes.ref(f'{cs.label}: {cs.missing[quantity]}')}"
    text = fmt(s.median * scale)
    if spread and s.n > 1:
        text += f" ({fmt(s.q1 * scale)}–{fmt(s.q3 * scale)})"
    return text + suffix + (f" {NOISY_MARK}" if s.noisy else "")


def _comparison_table(configs: Sequence[ConfigSummary]) -> Table:
    notes = _Footnotes()
    tokens = any(c.tokens_per_s for c in configs)
    kinds = sorted({c.memory_kind for c in configs if c.memory_kind})
    metric = next((c.metric_name for c in configs if c.metric_name), "metric")
    header = ["configuration", "ok / trials", "examples/s median (q1–q3)"]
    header += ["tokens/s median (q1–q3)"] if tokens else []
    builds = any(r.extras.get("graph_builds") for c in configs for r in c.trials)
    batches = {c.label: _batch(c) for c in configs}
    header[1:1] = ["batch"] if len(set(batches.values())) > 1 else []
    header += ["first step (compile) s", "steady step ms"]
    header += ["graph builds (their extra s)"] if builds else []
    header += ["time to target s (reached)", f"final {metric}",
               f"peak memory MiB ({', '.join(kinds) or 'unknown probe'})", "import s", "build s"]
    rows = []
    for c in configs:
        reached = f" ({c.reached}/{c.n_ok})" if c.n_ok else ""
        row = [c.label] + ([batches[c.label]] if "batch" in header else [])
        row += [f"{c.n_ok}/{c.n_total}", _value(c, "examples_per_s", notes, spread=True)]
        row += [_value(c, "tokens_per_s", notes, spread=True)] if tokens else []
        to_target = _value(c, "time_to_target_s", notes, suffix=reached)
        if c.n_ok and not c.reached and c.best_metric is not None:
            to_target = to_target.replace("—", f"not reached, best {fmt(c.best_metric.median)}", 1)
        row += [_value(c, "first_step_s", notes), _value(c, "steady_step_s", notes, scale=1000)]
        row += [_graph_builds(c)] if builds else []
        row += [to_target, _value(c, "final_metric", notes),
                _value(c, "peak_memory_bytes", notes, scale=1 / MIB), _value(c, "import_s", notes),
                _value(c, "build_s", notes)]
        rows.append(row)
    footnotes = notes.lines()
    if any(NOISY_MARK in cell for row in rows for cell in row):
        footnotes.insert(0, f"{NOISY_MARK} noisy: spread above {NOISY_THRESHOLD:.0%} of the median (IQR, or the "
                            "full range with fewer than 4 trials) — treat differences in it with suspicion")
    footnotes.append("Medians over successful trials; time to target is the median over the trials that reached it.")
    if builds:
        footnotes.append("Graph builds: training steps that traced (tf.function) or compiled (torch.compile) a graph, "
                         "each new input shape adding one; \"×3 graphs\": each build made 3 graphs, the pieces "
                         "between graph breaks; their extra seconds are what those steps took beyond a steady step, "
                         "the first step included.")
    return Table(header, rows, footnotes)


def _batch(c: ConfigSummary) -> str:
    """Examples per optimizer step: ``32``, or ``4×8`` for accumulated micro-batches."""
    spec = c.trials[0].run_spec
    return f"{spec.grad_accum}×{spec.batch_size}" if spec.grad_accum > 1 else str(spec.batch_size)


def _graph_builds(c: ConfigSummary) -> str:
    """Median steps that built graphs (their extra seconds); with graph breaks, the graphs those steps made."""
    ok = [r for r in c.trials if r.status is Status.OK]
    steps = [len(r.extras.get("graph_build_steps", [])) or r.extras.get("graph_builds", 0) for r in ok]
    graphs = [r.extras.get("graph_builds", 0) for r in ok]
    if not steps or not any(steps):
        return "0" if steps else "—"
    extra = [r.extras["graph_build_s"] for r in ok if "graph_build_s" in r.extras]
    text = fmt(float(np.median(steps)))
    if np.median(graphs) > np.median(steps):
        text += f" ×{fmt(float(np.median(graphs)) / float(np.median(steps)))} graphs"
    return text + (f" ({fmt(float(np.median(extra)))})" if extra else "")


def _mode_effects_table(configs: Sequence[ConfigSummary]) -> Table | None:
    """Each mixed-precision or accumulation configuration against its plain baseline: same framework and execution,
    fp32, no accumulation, the same number of examples per optimizer step."""

    def shape(c: ConfigSummary) -> tuple:
        s = c.trials[0].run_spec
        return s.framework, s.execution, s.precision.value, s.grad_accum, s.batch_size * s.grad_accum

    def ratio(a: Summary | None, b: Summary | None) -> str:
        return f"{a.median / b.median:.2f}×" if a and b and b.median else "—"

    by_shape = {shape(c): c for c in configs if c.trials}
    rows = []
    for c in configs:
        framework, execution, precision, accum, per_step = shape(c) if c.trials else (None,) * 5
        if framework is None or (precision == "fp32" and accum == 1):
            continue
        base = by_shape.get((framework, execution, "fp32", 1, per_step))
        if base is None:
            continue
        quality = f"{fmt(c.final_metric.median) if c.final_metric else '—'} vs " \
                  f"{fmt(base.final_metric.median) if base.final_metric else '—'}"
        to_target = f"{fmt(c.time_to_target_s.median) if c.time_to_target_s else 'not reached'} vs " \
                    f"{fmt(base.time_to_target_s.median) if base.time_to_target_s else 'not reached'}"
        rows.append([c.label, base.label, ratio(c.examples_per_s, base.examples_per_s),
                     ratio(c.peak_memory_bytes, base.peak_memory_bytes), quality, to_target])
    if not rows:
        return None
    return Table(["mode", "against", "throughput", "peak memory", "final metric (mode vs baseline)",
                  "time to target s (mode vs baseline)"], rows,
                 ["Ratios of medians: throughput above 1× is faster, peak memory below 1× is smaller. The baseline is "
                  "the same framework and execution in fp32 without accumulation, with as many examples per step."],
                 align="llrrll")


def _batch_search_table(configs: Sequence[ConfigSummary]) -> Table | None:
    rows = []
    for c in configs:
        search = next((r.extras["batch_search"] for r in c.trials if "batch_search" in r.extras), None)
        if search:
            peak = search.get("peak_memory_bytes")
            tried = ", ".join(f"{p['batch_size']} {p['status']}" for p in search["probes"])
            rows.append([c.label, str(search["batch_size"]), fmt(peak / MIB) if peak else "—",
                         search.get("memory_kind", ""), tried])
    if not rows:
        return None
    return Table(["configuration", "batch size found", "peak memory MiB at it", "memory probe", "probes"], rows,
                 ["Each probe ran a few steps in its own process; the largest that stayed under the memory cap won."],
                 align="lrrll")


def _scores_table(decision: Decision) -> Table:
    criteria = list(decision.weights)
    best = {f.label for f in decision.ranking}
    header = ["configuration", "score", *criteria]
    rows = []
    for cs in sorted(decision.configs, key=lambda c: -c.score):
        mark = " ◀ judged by" if cs.label in best else ""
        parts = [fmt(cs.parts[c], 2) if cs.parts.get(c) is not None else "—" for c in criteria]
        rows.append([cs.label + mark, f"{cs.score:.3f}", *parts])
    notes = ["Each criterion is scaled to 0..1 against the best configuration (higher-better: v/best, lower-better: "
             "best/v; never reaching the target scores 0); a framework is judged by its best configuration (◀)."]
    return Table(header, rows, notes)


def _weights_table(decision: Decision, qualitative: Qualitative) -> Table:
    rows = []
    for c, given in decision.given.items():
        if c in MEASURED:
            kind, what = "measured", MEASURED[c].description
        else:
            kind, what = "qualitative", "your score 0..5 per framework, /5: " + ", ".join(
                f"{display_name(fw)} {v:g}" for fw, v in sorted(qualitative.get(c, {}).items()))
        if c in decision.weights:
            used = f"{decision.weights[c]:.3f}"
        elif c in decision.excluded and given > 0:
            used = f"0 (excluded: {decision.excluded[c]})"
        else:
            used = "0"
        rows.append([c, kind, what, f"{given:g}", used])
    return Table(["criterion", "kind", "what it scores", "weight given", "weight used (normalised)"], rows,
                 align="lllrr")


def _sensitivity_block(decision: Decision) -> Block:
    if not decision.sensitivity:
        return Para("No sensitivity analysis: fewer than two frameworks have a score.")

    def who(framework: str | None) -> str:
        return display_name(framework) if framework else "—"

    rows = [[r.criterion, f"{r.weight:.3f}", who(r.winner_if_zero), who(r.winner_if_halved),
             who(r.winner_if_doubled), f"×{r.flips_at:g} → {who(r.flips_to)}" if r.flips_at is not None else "never"]
            for r in decision.sensitivity]
    grid = "0, 0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 2, 3 … 10"
    notes = [f"One weight scaled at a time, the others fixed, then renormalised. \"flips at\": the multiplier "
             f"nearest ×1 on the grid {grid} at which another framework leads. "
             + ("Robust: no single weight halved or doubled changes the leader." if decision.robust
                else "Not robust: some weight halved or doubled changes the leader.")]
    return Table(["criterion", "weight", "leader if ×0", "leader if ×0.5", "leader if ×2", "flips at"], rows, notes,
                 align="lrllll")


def _failures_block(configs: Sequence[ConfigSummary]) -> Block:
    rows = [[c.label, str(r.run_spec.seed), str(r.run_spec.repeat), r.status.value, short_reason(r.reason, 300)]
            for c in configs for r in c.trials if r.status is not Status.OK]
    if not rows:
        return Para("Every trial succeeded.")
    return Table(["configuration", "seed", "repeat", "status", "reason"], rows, align="lrrll")


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in env.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def environment_line(configs: Sequence[ConfigSummary]) -> str:
    """Every environment key the trials recorded; a key whose value differs lists each value with its framework."""
    seen: dict[str, dict[str, list[str]]] = {}  # key -> value -> frameworks
    for c in configs:
        for r in c.trials:
            for k, v in _flatten(r.environment).items():
                frameworks = seen.setdefault(k, {}).setdefault(v, [])
                if c.framework not in frameworks:
                    frameworks.append(c.framework)
    parts = []
    for key, values in seen.items():
        if len(values) == 1:
            parts.append(f"{key} {next(iter(values))}")
        else:
            parts.append(f"{key} " + ", ".join(f"{v} ({'/'.join(fws)})" for v, fws in values.items()))
    return "Environment: " + (" · ".join(parts) if parts else "not recorded")


def _section(configs: Sequence[ConfigSummary], decision: Decision, qualitative: Qualitative) -> list[Block]:
    blocks: list[Block] = [
        Heading(2, f"{decision.workload} / {decision.preset}"),
        Para(decision.verdict, "verdict"),
        Para(environment_line(configs), "env"),
        Heading(3, "Configurations"),
        _comparison_table(configs),
    ]
    effects = _mode_effects_table(configs)
    if effects is not None:
        blocks += [Heading(3, "What each mode buys"), effects]
    searched = _batch_search_table(configs)
    if searched is not None:
        blocks += [Heading(3, "Batch-size search"), searched]
    if decision.configs:
        blocks += [Heading(3, "Scores (every mode)"), _scores_table(decision)]
    blocks += [Heading(3, "Weights"), _weights_table(decision, qualitative),
               Heading(3, "Sensitivity of the verdict"), _sensitivity_block(decision),
               Heading(3, "Trials that did not succeed"), _failures_block(configs)]
    return blocks


def render_report(results: Sequence[TrialResult], out_dir: Path, weights: Mapping[str, float] | None = None,
                  qualitative: Qualitative | None = None, title: str = "bakeoff report") -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``throughput.png`` and ``quality_vs_time.png`` into ``out_dir``.

    Args:
        results: every trial, any mix of workloads, presets, configurations and statuses.
        out_dir: created if missing; existing report files in it are overwritten.
        weights: criterion -> weight, merged over :data:`bakeoff.analysis.decide.DEFAULT_WEIGHTS`.
        qualitative: ``{criterion: {framework: 0..5}}`` for criteria that cannot be measured.
        title: the report's heading.

    Returns:
        ``{"markdown", "html", "throughput", "quality_vs_time"}`` -> the path written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qualitative = qualitative or {}
    summaries = summarise_groups(results)
    decisions = decide_each(summaries, weights, qualitative)
    groups = {key: [s for s in summaries if (s.workload, s.preset) == key] for key in decisions}

    images = {"throughput": Image("throughput.png", "steady throughput per configuration",
                                  plots.throughput_png(groups)),
              "quality_vs_time": Image("quality_vs_time.png", "quality against training time, one line per trial",
                                       plots.quality_png(groups))}
    n_ok = sum(r.status is Status.OK for r in results)
    blocks: list[Block] = [Para(f"{len(results)} trials ({n_ok} successful) in {len(summaries)} configurations "
                                f"on {len(decisions)} workload/preset pair{'s' if len(decisions) != 1 else ''}.")]
    blocks += [Para(d.verdict, "verdict") for d in decisions.values() if len(decisions) > 1]
    for key, decision in decisions.items():
        blocks += _section(groups[key], decision, qualitative)
    blocks += [Heading(2, "Plots"), images["throughput"], images["quality_vs_time"]]

    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["markdown"].write_text(to_markdown(title, blocks), encoding="utf-8")
    paths["html"].write_text(to_html(title, blocks), encoding="utf-8")
    for name, image in images.items():
        paths[name] = out_dir / image.filename
        paths[name].write_bytes(image.png)
    return paths
