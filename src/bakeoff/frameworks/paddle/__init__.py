"""PaddlePaddle to bakeoff: its record, engine (dygraph, paddle.jit.to_static), data-parallel strategies, probes,
launchers (``paddle.distributed.launch``), deployment adapter and runtime (Paddle Inference). Importing this package
imports no framework; its modules import Paddle where they need it."""

import warnings

# Paddle 3.3.1 warns on every import that ccache is not installed, which matters only to compiling C++ extensions
# (bakeoff compiles none): kept out of each Paddle trial's, probe's and export's output. Its modules are imported
# through this package, so the filter is in place before their `import paddle`.
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
