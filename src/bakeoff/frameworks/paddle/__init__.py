"""PaddlePaddle to bakeoff: its record, engine (dygraph, paddle.jit.to_static), data-parallel strategies, probes,
launchers (``paddle.distributed.launch``), deployment adapter and runtime (Paddle Inference). Importing this package
imports no framework; its modules import Paddle where they need it."""

import warnings


def quiet_import() -> None:
    """Paddle 3.3.1 warns on every import that ccache is not installed, which matters only to compiling C++
    extensions (bakeoff compiles none): filtered, so it stays out of each Paddle trial's, probe's and export's output.
    Called here, as Paddle's modules in this package are imported through it, before their ``import paddle``; and by
    whatever imports Paddle itself where a warnings context may since have dropped the filter (the tests)."""
    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)


quiet_import()
