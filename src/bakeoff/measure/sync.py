"""One method for the "all-reduce alone" figure of synchronous data parallel, the same in every framework.

What is timed (``TrialResult.distributed.sync``): after training, with every replica of every process taking
part, the reductions one optimizer step of that framework performs — the gradients, shaped and grouped the way
its own step reduces them (DDP's buckets; Keras' reduction of the gradient list; one compiled sum of the
gradient pytree), and the loss totals (the summed loss and the example count, 2 fp32 scalars) — blocking until
the reduced values are usable by this process. Each call starts from a barrier of every process, so a slow
process's lateness is not timed as communication; :data:`WARMUP` untimed calls come first (compilation, first-call
set-up), then :data:`REPEATS` timed ones, and the median is the figure. The framework's engine supplies the two
callables and says, in ``how``, what its call runs; this module owns the loop and the record, so the three
frameworks' figures mean the same thing.

Parameter servers have no all-reduce: their "sync" is a pull and push of every variable, defined by their
strategy (``bakeoff.frameworks.tensorflow.distributed.ParameterServer``), not here.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

WARMUP = 3
"""Untimed calls before the timed ones: the first compiles (XLA, tf.function) or sets up buffers."""
REPEATS = 20
"""Timed calls; the median is kept, every sample stored."""
LOSS_TOTALS_BYTES = 8
"""The summed loss and the example count, two fp32 scalars, all-reduced every step with the gradients."""

DEFINITION = (f"after training, every replica together: one optimizer step's reductions (the gradients, grouped "
              f"as the framework's step reduces them, and the loss totals), blocking until usable, each call "
              f"from a barrier of every process; median of {REPEATS} after {WARMUP} untimed")


def time_reductions(reduce: Callable[[], object], barrier: Callable[[], object]) -> list[float]:
    """Seconds of each timed ``reduce()``, each started after ``barrier()``; ``reduce`` returns only when its
    results are usable by this process (the caller blocks on them)."""
    samples = []
    for call in range(WARMUP + REPEATS):
        barrier()
        start = time.perf_counter()
        reduce()
        if call >= WARMUP:
            samples.append(time.perf_counter() - start)
    return samples


def figures(samples: list[float], gradient_bytes: int, how: str, **more: Any) -> dict[str, Any]:
    """The ``sync`` record: the common definition, what this framework's call ran (``how``; ``method`` is both),
    the samples and their median, and the bytes one step all-reduces (gradients and loss totals); ``more`` adds a
    framework's own counts."""
    return {
        "definition": DEFINITION,
        "method": f"{DEFINITION}. {how}",
        "how": how,
        "per_step_s": statistics.median(samples),
        "samples_s": samples,
        "warmup": WARMUP,
        "repeats": REPEATS,
        "gradient_bytes": gradient_bytes,
        "bytes_per_step": gradient_bytes + LOSS_TOTALS_BYTES,
        **more,
    }
