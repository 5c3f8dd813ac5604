"""The encoder block for TensorFlow's models: Keras 3 layers on the TensorFlow backend, the same code as the Keras
rows' (:mod:`.keras_encoder`, where the block and the canonical-weight mapping live).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from bakeoff.workloads.common.keras_encoder import Rows, TransformerBlock, get_weights, set_weights  # noqa: E402

__all__ = ["Rows", "TransformerBlock", "get_weights", "set_weights"]
