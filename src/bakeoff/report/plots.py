"""The report's two figures, as PNG bytes: throughput per configuration, and quality against training time.

matplotlib is imported inside the functions (importing the report stays cheap) and drawn on a bare ``Figure``
with the Agg canvas, so no global pyplot state or interactive backend is touched.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.analysis.stats import ConfigSummary
from bakeoff.core import frameworks
from bakeoff.core.spec import Status

COLOURS = {name: info.colour for name, info in frameworks.FRAMEWORKS.items()}
LINESTYLES = {"eager": (0, (1, 1.5)), "graph": "-", "xla": "-."}

Groups = Mapping[tuple[str, str], Sequence[ConfigSummary]]


def colour(framework: str) -> str:
    return COLOURS.get(framework, "#777777")


def _title(workload: str, preset: str, what: str, width: int = 80) -> str:
    """A panel's title, wrapped to ``width`` characters: a section named by its overrides or its data set
    (``tiny (d_ff=1024, d_model=256, num_layers=4, ...)``) would otherwise run off the figure."""
    return textwrap.fill(f"{workload} / {preset}: {what}", width, break_on_hyphens=False)


def _figure(n_panels: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 3.6 * max(n_panels, 1)), layout="constrained")
    return fig, list(fig.subplots(max(n_panels, 1), 1, squeeze=False)[:, 0])


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # No "Software" metadata: the PNG then carries no URL and the same data gives the same bytes.
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def error_bars(configs: Sequence[ConfigSummary], name: str = "examples_per_s") -> tuple[list[float], list[float]]:
    """Each configuration's 95% bar below and above its median of ``name``, as matplotlib's ``yerr`` takes them;
    0 and 0 (no bar) where it has no interval: not measured, or one successful run (the card says "one run a side:
    no interval", and the plot does not draw one)."""
    low, high = [], []
    for c in configs:
        m = c.value(name) or 0.0
        lo, hi = (c.interval(name) if c.n_ok >= 2 else None) or (m, m)
        low.append(max(0.0, m - lo))
        high.append(max(0.0, hi - m))
    return low, high


def throughput_png(groups: Groups) -> bytes:
    """Median steady examples/s per configuration, 95% bootstrap error bars, coloured by framework; a panel per
    group. A configuration with one successful run draws no bar: the card and the verdict give it no interval."""
    fig, axes = _figure(len(groups))
    if not groups:
        axes[0].text(0.5, 0.5, "no results", ha="center", va="center", transform=axes[0].transAxes)
    for ax, ((workload, preset), configs) in zip(axes, groups.items(), strict=False):
        xs = list(range(len(configs)))
        med = [c.value("examples_per_s") or 0.0 for c in configs]
        low, high = error_bars(configs)
        ax.bar(xs, med, yerr=[low, high], capsize=4, color=[colour(c.framework) for c in configs],
               edgecolor="#333333", linewidth=0.5)
        for x, c in zip(xs, configs, strict=True):
            if c.value("examples_per_s") is None:
                ax.text(x, 0, " not measured", rotation=90, ha="center", va="bottom", fontsize=8, color="#555555")
            elif c.n_ok < 2:
                ax.text(x, c.value("examples_per_s"), "1 run:\nno interval", ha="center", va="bottom", fontsize=7,
                        color="#555555")
        ax.set_xticks(xs, [c.label for c in configs], rotation=20, ha="right")
        ax.set_ylabel("examples/s (median, 95% CI)" if any(c.n_ok >= 2 for c in configs) else "examples/s")
        ax.set_title(_title(workload, preset, "steady throughput"), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def quality_png(groups: Groups) -> bytes:
    """The quality curve of every successful trial against the training clock, coloured by framework."""
    fig, axes = _figure(len(groups))
    if not groups:
        axes[0].text(0.5, 0.5, "no results", ha="center", va="center", transform=axes[0].transAxes)
    for ax, ((workload, preset), configs) in zip(axes, groups.items(), strict=False):
        drawn = False
        for c in configs:
            for i, trial in enumerate(r for r in c.trials if r.status is Status.OK and r.curve):
                points = sorted(trial.curve, key=lambda p: p["train_s"])
                ax.plot([p["train_s"] for p in points], [p["metric"] for p in points], color=colour(c.framework),
                        linestyle=LINESTYLES.get(c.execution, "--"), alpha=0.85, marker=".", markersize=3,
                        label=c.label if i == 0 else None)
                drawn = True
        target = next((c.target for c in configs if c.target is not None), None)
        if target is not None:
            ax.axhline(target, color="#222222", linestyle="--", linewidth=1, label=f"target {target:g}")
        if not drawn:
            ax.text(0.5, 0.5, "no quality curve recorded", ha="center", va="center", transform=ax.transAxes)
        metric = next((c.metric_name for c in configs if c.metric_name), "metric")
        ax.set_xlabel("training clock, s (compile included, evaluation excluded)")
        ax.set_ylabel(metric)
        ax.set_title(_title(workload, preset, f"{metric} vs training time (one line per trial)"), fontsize=11)
        ax.grid(alpha=0.3)
        if drawn or target is not None:
            ax.legend(fontsize=8, loc="lower right")
    return _png(fig)


def scaling_png(groups: Mapping[tuple[str, str], Sequence[Any]]) -> bytes:
    """Per (workload, preset): steady throughput (left) and scaling efficiency (right) against replicas, a line
    per framework, strategy and mode, starting from its one-replica baseline. ``groups`` holds
    :class:`bakeoff.analysis.scaling.ScalingRow` lists."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6 * max(len(groups), 1)), layout="constrained")
    axes = fig.subplots(max(len(groups), 1), 2, squeeze=False)
    for (ax_thr, ax_eff), ((workload, preset), rows) in zip(axes, groups.items(), strict=False):
        lines: dict[tuple[str, str, str], list] = {}
        for r in rows:
            lines.setdefault((r.framework, r.strategy, r.config.execution), []).append(r)
        for (framework, strategy, execution), members in lines.items():
            members = sorted(members, key=lambda r: r.workers)
            base = next((r.baseline for r in members if r.baseline is not None), None)
            start = base is not None and all(r.workers != 1 for r in members)  # draw from the baseline at 1
            xs = [1] * start + [r.workers for r in members]
            thr = ([base.value("examples_per_s")] if start else []) + [r.config.value("examples_per_s")
                                                                       for r in members]
            eff = [1.0] * start + [r.efficiency for r in members]
            style = dict(color=colour(framework), linestyle=LINESTYLES.get(execution, "-"), marker="o",
                         label=f"{framework} {strategy} ({execution})")
            ax_thr.plot(xs, [t if t is not None else float("nan") for t in thr], **style)
            ax_eff.plot(xs, [e if e is not None else float("nan") for e in eff], **style)
        ax_eff.axhline(1.0, color="#999999", linewidth=0.8, linestyle=":")
        for ax, what in ((ax_thr, "examples/s (median)"), (ax_eff, "scaling efficiency")):
            ax.set_xlabel("replicas")
            ax.set_ylabel(what)
            ax.grid(alpha=0.3)
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax_thr.set_title(_title(workload, preset, "throughput", 48), fontsize=11)
        ax_eff.set_title(_title(workload, preset, "efficiency", 48), fontsize=11)
        ax_eff.legend(fontsize=8)
    return _png(fig)
