"""PaddlePaddle to bakeoff: its record, engine (dygraph, paddle.jit.to_static), data-parallel strategies, probes,
launchers (``paddle.distributed.launch``), deployment adapter and runtime (Paddle Inference). Importing this package
imports no framework; its modules import Paddle where they need it."""
