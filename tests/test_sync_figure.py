"""The "all-reduce alone" figure's one method (bakeoff.measure.sync): the loop and the record every framework's
data-parallel strategy uses, checked here on counts and order, not on time."""

from __future__ import annotations

import statistics

from bakeoff.measure import sync


def test_each_call_starts_from_a_barrier_and_only_the_calls_after_the_warmup_are_kept():
    events: list[str] = []
    samples = sync.time_reductions(lambda: events.append("reduce"), lambda: events.append("barrier"))
    assert events == ["barrier", "reduce"] * (sync.WARMUP + sync.REPEATS)
    assert len(samples) == sync.REPEATS and all(s >= 0 for s in samples)


def test_the_record_holds_the_common_definition_the_median_and_the_loss_totals_bytes():
    samples = [0.3, 0.1, 0.2]
    record = sync.figures(samples, 400, "Framework: what its call ran", buckets=2)
    assert record["definition"] == sync.DEFINITION and record["method"].startswith(sync.DEFINITION)
    assert record["method"].endswith("Framework: what its call ran")
    assert record["per_step_s"] == statistics.median(samples) == 0.2 and record["samples_s"] == samples
    assert record["gradient_bytes"] == 400 and record["bytes_per_step"] == 408  # + summed loss and count, fp32
    assert (record["warmup"], record["repeats"], record["buckets"]) == (sync.WARMUP, sync.REPEATS, 2)
    assert f"median of {sync.REPEATS} after {sync.WARMUP} untimed" in sync.DEFINITION
