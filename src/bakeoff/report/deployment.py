"""The deployment section: per workload, one row per (framework, format) with what exporting and inference
measured, which targets each framework reached, and the deployment criteria a decision can weigh."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bakeoff.analysis.conditions import display_name
from bakeoff.core.formats import FORMATS
from bakeoff.report.templates import Block, Facts, Heading, Para, Table

COLUMNS = ("framework", "format", "status", "export s", "size", "load s", "first ms", "p50 ms", "p95 ms", "p99 ms",
           "ex/s @B", "peak RSS", "max |Δ| (tol)", "metric (Δ)", "dynamic axes")

CRITERIA = {"deploy_latency": "batch-1 p50 latency of the framework's fastest format that exported and matched "
                              "(a quantised one: its metric within the bound)",
            "deploy_size": "file size of the framework's smallest format that exported and matched (a quantised "
                           "one: its metric within the bound)"}
"""Measured deployment criteria, scored per framework (best / value), weight 0 unless the user gives one."""

QUANTISED_BOUND = 0.01
"""A quantised format (no output tolerance: its change is reported) counts toward :data:`CRITERIA` only when the
workload's metric on its outputs moved by at most this from the framework model's: 1 point of a rate (accuracy,
CER, WER), 1% of the reference value of any other metric (MSE). A faster int8 file that lost accuracy is not a
faster deployment of the same model."""

RATES = ("accuracy", "cer", "wer")


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def _size(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def loaded(inference: Mapping[str, Any]) -> bool:
    """Whether other work held more than every core while the format was measured (at its start or end)."""
    cores = inference.get("cores")
    loads = [inference.get(k) for k in ("load_average_1m_at_start", "load_average_1m_at_end")]
    return bool(cores) and any(v is not None and v > cores for v in loads)


def usable(row: Mapping[str, Any]) -> bool:
    """Exported, ran in its runtime, and matched the framework model (or is quantised, its change reported)."""
    return row.get("status") == "ok" and row.get("inference", {}).get("parity") in ("ok", "reported")


def quantised_within_bound(row: Mapping[str, Any]) -> bool | None:
    """For a quantised row (parity "reported"): whether its metric change is within :data:`QUANTISED_BOUND`
    (``False`` when either metric is missing); ``None`` for any other row."""
    inf = row.get("inference", {})
    if inf.get("parity") != "reported":
        return None
    metric, ref = inf.get("metric"), (row.get("reference") or {}).get("metric")
    if metric is None or ref is None:
        return False
    rate = str(inf.get("metric_name") or (row.get("reference") or {}).get("metric_name", "")).lower() in RATES
    return abs(metric - ref) <= (QUANTISED_BOUND if rate else QUANTISED_BOUND * abs(ref))


def counts(row: Mapping[str, Any]) -> bool:
    """Whether a row counts toward :data:`CRITERIA`: usable, and a quantised one within its metric bound."""
    return usable(row) and quantised_within_bound(row) is not False


def cells(row: Mapping[str, Any]) -> list[str]:
    """One table row of :data:`COLUMNS` for a stored deployment row."""
    exp, inf = row.get("export", {}), row.get("inference", {})
    status = row.get("status", "?")
    if status != "ok":
        status = f"{status} ({row.get('stage', '')}): {str(row.get('reason', ''))[:160]}"
    elif inf.get("parity") == "differs":
        status = "ok, outputs differ"
    if status.startswith("ok") and loaded(inf):
        status += f" (machine load {inf['load_average_1m_at_end']:g} on {inf['cores']} cores: latencies unreliable)"
    lat = inf.get("latency_s", {})
    tol = inf.get("tolerance")
    diff = inf.get("max_abs_diff")
    diff_text = "–" if diff is None else f"{diff:.2g} ({'int8: reported' if tol is None else f'{tol:g}'})"
    metric, ref = inf.get("metric"), (row.get("reference") or {}).get("metric")
    metric_text = "–" if metric is None else f"{metric:.4g}" + (f" ({metric - ref:+.2g})" if ref is not None else "")
    if status == "ok" and (within := quantised_within_bound(row)) is not None:
        metric_text += " counted" if within else " not counted: beyond the bound"
    settings = row.get("settings", {})
    eps = inf.get("examples_per_s")
    return [display_name(row["framework"]), row.get("display", row["format"]), status,
            "–" if exp.get("export_s") is None else f"{exp['export_s']:.2f}", _size(exp.get("bytes")),
            "–" if inf.get("load_s") is None else f"{inf['load_s']:.2f}", _ms(inf.get("first_s")),
            _ms(lat.get("p50")), _ms(lat.get("p95")), _ms(lat.get("p99")),
            "–" if eps is None else f"{eps:,.0f} @{settings.get('batch', '?')}",
            _size(inf.get("peak_rss_bytes")), diff_text, metric_text, inf.get("dynamic", "–")]


def line(row: Mapping[str, Any]) -> str:
    """One line of what a format measured, for the console."""
    c = dict(zip(COLUMNS, cells(row), strict=True))
    head = f"{c['framework']} {c['format']}: {c['status']}"
    if row.get("status") != "ok":
        return head
    inf = row.get("inference", {})
    load = inf.get("load_average_1m_at_end")
    eps = inf.get("examples_per_s")
    throughput = f"{eps:,.0f} ex/s at batch {row.get('settings', {}).get('batch', '?')}" if eps else "–"
    return (f"{head} · {c['size']} · load {c['load s']} s · first {c['first ms']} ms · batch 1 p50 {c['p50 ms']} / "
            f"p95 {c['p95 ms']} / p99 {c['p99 ms']} ms · {throughput} · peak RSS {c['peak RSS']} · "
            f"max |Δ| {c['max |Δ| (tol)']} · {inf.get('metric_name', 'metric')} {c['metric (Δ)']} · dynamic axes "
            f"{c['dynamic axes']}" + (f" · machine load {load:g}" if load is not None else ""))


def latest(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest row per (workload, preset, framework, format)."""
    keep: dict[tuple, Mapping[str, Any]] = {}
    for row in rows:
        keep[(row["workload"], row["preset"], row["framework"], row["format"])] = row
    return list(keep.values())


def targets(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """``{framework: {target: [formats that reached it]}}``, from rows that exported, ran and matched only."""
    out: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        if usable(row):
            for target in row.get("targets", []):
                out.setdefault(row["framework"], {}).setdefault(target, []).append(row.get("display", row["format"]))
    return out


def criteria(rows: Sequence[Mapping[str, Any]], frameworks: Iterable[str]) -> dict[str, dict[str, float]]:
    """:data:`CRITERIA` as ``{criterion: {framework: 0..5}}`` (5 × best / value, like a measured criterion), for
    one workload and preset; a framework with no usable format scores 0."""
    best_lat: dict[str, float] = {}
    best_size: dict[str, float] = {}
    for row in rows:
        if not counts(row):
            continue
        fw = row["framework"]
        p50 = row["inference"].get("latency_s", {}).get("p50")
        size = row.get("export", {}).get("bytes")
        if p50:
            best_lat[fw] = min(best_lat.get(fw, float("inf")), p50)
        if size:
            best_size[fw] = min(best_size.get(fw, float("inf")), size)
    out = {}
    for name, values in (("deploy_latency", best_lat), ("deploy_size", best_size)):
        top = min(values.values()) if values else None
        out[name] = {fw: (5 * top / values[fw] if top and fw in values else 0.0) for fw in frameworks}
    return out


def blocks(rows: Sequence[Mapping[str, Any]]) -> list[Block]:
    """The report's deployment section (empty when nothing was deployed)."""
    rows = latest(rows)
    if not rows:
        return []
    out: list[Block] = [
        Heading(2, "Deployment"),
        Para("Each kept model was exported to each format in its own process, then measured in a fresh process "
             "with the format's own runtime (ONNX Runtime and LiteRT load no framework): load, first inference, "
             "batch-1 latency percentiles, throughput, peak resident memory, file size, and the outputs against the "
             "framework model on the same test examples.")]
    for key in sorted({(r["workload"], r["preset"]) for r in rows}):
        order = {name: i for i, name in enumerate(FORMATS)}  # frameworks and formats as formats.py lists them
        part = sorted((r for r in rows if (r["workload"], r["preset"]) == key),
                      key=lambda r: order.get(r["format"], len(order)))
        settings = part[0].get("settings", {})
        reached = targets(part)
        out += [Heading(3, f"{key[0]} / {key[1]}"),
                Table(list(COLUMNS), [cells(r) for r in part], notes=[
                    f"Threads {settings.get('cpu_threads', '?')} in every runtime; {settings.get('calls', '?')} "
                    f"timed batch-1 calls after {settings.get('warmup', '?')} warm-up; throughput at batch "
                    f"{settings.get('batch', '?')}, median of {settings.get('rounds', '?')} passes over "
                    f"{settings.get('examples', '?')} test examples (the first of the test split; the metric is "
                    "theirs).",
                    "max |Δ|: largest absolute difference from the framework model's outputs (probabilities, "
                    "reconstructions or log-probabilities) against the format's tolerance; metric (Δ): the "
                    "workload's metric on the format's outputs and its change from the framework model's; a "
                    "quantised format counts toward the deployment criteria only when that change is within 1 point "
                    "of a rate (accuracy, CER) or 1% of any other metric.",
                    "dynamic axes: a batch of another size with shorter sequences ran and matched.",
                    *(["JAX's runtime has no thread-count setting: jax.export ran on every core the process may "
                       "use (threads recorded as requested, not applied)."]
                      if any(r.get("inference", {}).get("threads_applied") is False for r in part) else [])],
                      align="lll" + "r" * (len(COLUMNS) - 4) + "l"),
                Facts([(display_name(fw), "; ".join(f"{t} ({', '.join(f)})" for t, f in sorted(
                    reached.get(fw, {}).items())) or "no target: no format exported, ran and matched")
                       for fw in sorted({r["framework"] for r in part})])]
    out.append(Para("Targets count only formats that exported here, ran in their runtime and matched the framework "
                    "model: facts of this run, not of a brochure. Browser and mobile through ONNX mean the file "
                    "ran in ONNX Runtime here (onnxruntime-web and ONNX Runtime Mobile run the same file); no "
                    "browser or phone ran it. Deployment criteria a decision can weigh "
                    "(`bakeoff report --weight deploy_latency=1`): "
                    + "; ".join(f"{k}: {v}" for k, v in CRITERIA.items()) + "."))
    return out
