"""A GRU sentiment classifier: a workload kept outside bakeoff's package, in PyTorch, TensorFlow and JAX.

None of the shipped workloads has a recurrent layer, and a GRU is where ports go wrong without a shape error to
say so: PyTorch orders a GRU's gates (r, z, n), Keras (z, r, n), and Flax's own ``GRUCell`` has no recurrent bias
for r and z. The model::

    tokens (B, T) ─► Embedding (e) ─► GRU (h, every step's output) ─► LayerNorm ─► mean over the review's tokens
      ─► Dropout ─► Dense (h, relu) ─► Dense ─► sigmoid (2 classes) / softmax (more)

Canonical weights are Keras' (``keras.layers.GRU(reset_after=True)``, its default): ``gru.kernel (e, 3h)``,
``gru.recurrent_kernel (h, 3h)`` and ``gru.bias (2, 3h)`` (input bias, recurrent bias), gates in Keras' order
(z, r, n); dense kernels ``(in, out)``; LayerNorm ``gamma``/``beta`` with epsilon 1e-5 in every framework (Keras'
default is 1e-3). ``dense.kernel`` is square (h, h): a missing transpose there changes no shape.

The mean over the review's tokens (not the GRU's last state) keeps padding out without any framework's masking
machinery: padding is at the end, so a valid position's output never depends on it, and each framework only
averages what the same mask keeps.

Data: the shipped fine-food reviews (``bakeoff.data.text``), tokenised as the text classifier does (fitted on the
training texts), or the user's own file (``--data train=FILE``), whose target is derived from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Batch, Dataset, Weights, Workload
from bakeoff.workloads.common.targets import halfway_from_majority

PRESETS: dict[str, dict[str, Any]] = {
    # A CPU demo: 39,489 parameters on two-class data; a 20-step run takes seconds in each framework.
    "tiny": dict(vocab_size=1000, seq_len=48, embed_dim=32, units=32, dropout=0.2, learning_rate=3e-3),
}

# Accuracy on the shipped fine-food test split (1,000 reviews; majority class 0.658), measured: tiny, batch 32, seed
# 0, 3 epochs (375 steps), evaluated every 25 (`bakeoff run --workload ... --max-epochs 3 --eval-every 25`). PyTorch
# eager, TensorFlow graph and JAX jit each first reach 0.73 at step 75 (0.748, 0.745, 0.751), then stay at
# 0.71-0.75 to the end (0.734, 0.735, 0.744): the plateau of this size, below the Transformer's 0.76-0.80.
TARGETS = {"tiny": 0.73}

LAYER_NORM_EPS = 1e-5  # PyTorch's default, pinned in every framework: Keras' default is 1e-3, Flax's 1e-6


def orthogonal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """An orthogonal matrix, as Keras' recurrent initialiser draws one: the Q of a Gaussian matrix's QR (signs fixed
    by R's diagonal, so the draw is uniform over orthogonal matrices)."""
    q, r = np.linalg.qr(rng.normal(0, 1, (max(rows, cols), min(rows, cols))))
    q = q * np.sign(np.diag(r))
    return (q if rows >= cols else q.T).astype(np.float32)


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


class SentimentGRU(Workload):
    """Review sentiment (or any text classes) with an embedding, a GRU and a small dense head."""

    name: ClassVar[str] = "sentiment_gru"
    model_class: ClassVar[str] = "SentimentGRU"  # in torch_model.py, tf_model.py and jax_model.py beside this file
    serving_inputs: ClassVar[dict[str, tuple[str | None, ...]]] = {"tokens": ("batch", "seq")}
    metric_name: ClassVar[str] = "accuracy"
    presets: ClassVar[tuple[str, ...]] = tuple(PRESETS)
    preset_configs: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    targets: ClassVar[Mapping[str, float]] = TARGETS
    measured_targets: ClassVar[tuple[str, ...]] = ("tiny",)

    def config(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> dict[str, Any]:
        cfg = self.preset_config(preset, spec)
        cfg["num_classes"] = len(data.info["classes"]) if data is not None else 2
        cfg["layer_norm_eps"] = LAYER_NORM_EPS
        return cfg

    def load_data(self, spec: RunSpec) -> Dataset:
        from bakeoff.data.text import encode_dataset, load_text_dataset

        cfg = self.config(spec.preset, spec)
        text = load_text_dataset(spec.data_options)
        train, test, tokenizer = encode_dataset(text, cfg["vocab_size"], cfg["seq_len"])
        counts = np.bincount(test["labels"], minlength=len(text.classes))
        majority = float(counts.max() / counts.sum())
        info: dict[str, Any] = {"source": text.source, "classes": list(text.classes), "majority_rate": majority}
        if spec.data_options:  # the user's file: the shipped data's measured target says nothing about it
            info["target"] = halfway_from_majority(majority)
        serving = {"tokenizer": "bakeoff.data.text.WordTokenizer, the first seq_len tokens, padded with 0 at the end",
                   "seq_len": cfg["seq_len"], "vocabulary": tokenizer.vocab, "classes": list(text.classes)}
        return Dataset(train=train, test=test, info=info, serving=serving)

    @staticmethod
    def output_units(config: Mapping[str, Any]) -> int:
        """One sigmoid unit for two classes, one softmax unit per class otherwise."""
        return 1 if config["num_classes"] == 2 else int(config["num_classes"])

    def init_weights(self, config: Mapping[str, Any], seed: int) -> Weights:
        # Keras' kinds of initialiser, drawn once in numpy so every framework starts alike: Glorot-uniform kernels,
        # an orthogonal recurrent kernel for each gate, zero biases, LayerNorm 1 and 0; the embedding N(0, 0.05).
        rng = np.random.default_rng([seed, 20261])
        e, h, units = config["embed_dim"], config["units"], self.output_units(config)
        recurrent = np.concatenate([orthogonal(rng, h, h) for _ in range(3)], axis=1)  # (h, 3h): z, r, n
        return {"embed.tokens": rng.normal(0, 0.05, (config["vocab_size"], e)).astype(np.float32),
                "gru.kernel": glorot(rng, e, 3 * h), "gru.recurrent_kernel": recurrent,
                "gru.bias": np.zeros((2, 3 * h), np.float32),
                "norm.gamma": np.ones(h, np.float32), "norm.beta": np.zeros(h, np.float32),
                "dense.kernel": glorot(rng, h, h), "dense.bias": np.zeros(h, np.float32),
                "out.kernel": glorot(rng, h, units), "out.bias": np.zeros(units, np.float32)}

    def metric(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> float:
        # outputs: (N,) probability of class 1, or (N, C) class probabilities.
        predicted = (outputs > 0.5).astype(np.int64) if outputs.ndim == 1 else outputs.argmax(axis=1)
        return float((predicted == split["labels"]).mean())

    def units_per_example(self, batch: Batch) -> dict[str, float]:
        return {"tokens": float((batch["tokens"] != 0).sum())}
