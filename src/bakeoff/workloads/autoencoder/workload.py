"""Transformer autoencoder: the framework-free half.

The classic side-by-side snippet — ``nn.TransformerEncoder`` of 2 ``TransformerEncoderLayer(d_model=128, nhead=8)``
then ``nn.Linear(128, 128)``, trained with MSE to reproduce its input — as a workload::

    inputs (B, T, d) ─► 2 × post-norm Transformer block (d, heads, FFN d_ff, relu)
      ─► Dense(d) ─► reconstruction (B, T, d);   loss: squared error summed over every element

The snippet feeds a 2-D ``(1000, 128)`` array of noise to an encoder that expects ``(batch, seq, d_model)``:
PyTorch silently reads it as one unbatched sequence of 1000 tokens, and pure noise leaves nothing to learn. We do
the sensible thing instead. The data are batches of sequences, ``(N, T=32, d_model)`` ``float32`` (d_model 128 in
the paper preset, 64 in tiny), with structure to learn: each sequence is 16 smooth latent signals (random sums
of sinusoids over time) mixed into d_model features by one fixed random matrix and scaled to unit variance, so
the reconstruction error can fall far below the trivial baseline (predicting zeros: MSE ≈ 1). Like the snippet,
the model has no positional encoding and its input width is d_model (no input projection).

Both frameworks start from the same numpy-drawn weights (:meth:`init_weights`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.core.workload import Batch, Dataset, Weights, Workload
from bakeoff.data import DataError
from bakeoff.workloads.common.encoder import LAYER_NORM_EPS, encoder_block_flops, glorot, init_encoder_block

PRESETS: dict[str, dict[str, Any]] = {
    # CPU demo size: the snippet's two blocks at half the width (64 features, 4 heads of 16, FFN 128), 2048
    # sequences; about 1/15 of the paper preset's FLOPs per example.
    "tiny": dict(d_model=64, num_heads=4, d_ff=128, num_layers=2, dropout=0.1, learning_rate=3e-3,
                 seq_len=32, latent_dim=16, num_train=2048, num_test=256),
    # The snippet's sizes: TransformerEncoderLayer(128, 8) keeps PyTorch's defaults d_ff 2048 and dropout 0.1.
    "paper": dict(d_model=128, num_heads=8, d_ff=2048, num_layers=2, dropout=0.1, learning_rate=1e-3,
                  seq_len=32, latent_dim=16, num_train=8192, num_test=1024),
}

# Test MSE (lower is better; predicting zeros scores ≈ 1.0), set from measured runs (batch 32, seed 0, 64 steps an
# epoch in tiny, 256 in paper):
#   tiny (`bakeoff run --workload autoencoder --max-epochs 3 --eval-every 20`), every framework and mode alike:
#   0.37 at step 20, 0.14 at 40, 0.068 at 60, 0.046 at 80, 0.032 at 120, 0.015 at 192.
#   paper (TF graph, 400 steps, eval every 40): 0.058 at 40, 0.033-0.028 from 80 to 200 (a plateau), 0.024 at 280,
#   0.019 at 320, 0.0074 at 400; the target sits after the plateau, where the curve falls steeply.
TARGETS = {"tiny": 0.05, "paper": 0.02}

DATA_OPTIONS = {"seed": "0"}
"""Accepted data options and their defaults: ``seed`` picks the generated data set."""


def make_sequences(num: int, seq_len: int, features: int, latent_dim: int, seed: int) -> np.ndarray:
    """``(num, seq_len, features)`` float32 smooth signals, deterministic per ``seed``.

    Each sequence holds ``latent_dim`` latent signals, each a sum of 3 sinusoids with random frequency (0.5 to 3
    cycles per sequence), phase and amplitude; one mixing matrix (drawn once per seed, so shared by every sequence
    and both splits) maps them to ``features`` channels; the result is scaled to unit overall variance.
    """
    rng = np.random.default_rng([seed, 31337])
    mixing = rng.normal(0.0, 1.0, (latent_dim, features)) / np.sqrt(latent_dim)  # (k, F)
    freq = rng.uniform(0.5, 3.0, (num, 1, latent_dim, 3))  # cycles per sequence
    phase = rng.uniform(0.0, 2 * np.pi, (num, 1, latent_dim, 3))
    amp = rng.uniform(0.5, 1.5, (num, 1, latent_dim, 3))
    t = np.arange(seq_len).reshape(1, seq_len, 1, 1) / seq_len
    latent = (amp * np.sin(2 * np.pi * freq * t + phase)).sum(-1)  # (num, T, k)
    x = latent @ mixing  # (num, T, F)
    return (x / x.std()).astype(np.float32)


class AutoencoderWorkload(Workload):
    """Sequence reconstruction with a 2-block Transformer encoder and a linear head, MSE loss."""

    name: ClassVar[str] = "autoencoder"
    model_class: ClassVar[str] = "TransformerAutoencoder"  # in each framework's model file beside this one
    # softmax over keys ignores the key bias (the same q·b_k added to every logit of a query): zero in theory
    zero_gradient: ClassVar[tuple[str, ...]] = ("attn.k.bias",)
    serving_inputs: ClassVar[dict[str, tuple[str | None, ...]]] = {"inputs": ("batch", "seq", None)}
    metric_name: ClassVar[str] = "mse"
    higher_is_better: ClassVar[bool] = False
    presets: ClassVar[tuple[str, ...]] = tuple(PRESETS)
    metric_bounds: ClassVar[tuple[float, float]] = (0.0, math.inf)
    preset_configs: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    targets: ClassVar[Mapping[str, float]] = TARGETS
    measured_targets: ClassVar[tuple[str, ...]] = ("tiny", "paper")

    def config(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> dict[str, Any]:
        cfg = self.preset_config(preset, spec)
        if cfg["d_model"] % cfg["num_heads"]:
            raise SpecError(f"config d_model={cfg['d_model']} for {self.name}: must be divisible by num_heads "
                            f"{cfg['num_heads']}")
        cfg["layer_norm_eps"] = LAYER_NORM_EPS
        return cfg

    def load_data(self, spec: RunSpec) -> Dataset:
        cfg = self.config(spec.preset, spec)  # the sequences' length and width follow seq_len and d_model
        options = spec.data_options
        unknown = sorted(set(options) - set(DATA_OPTIONS))
        if unknown:
            raise DataError(f"unknown data option(s) {', '.join(unknown)} for {self.name}; "
                            f"accepted: {', '.join(DATA_OPTIONS)}")
        try:
            seed = int(options.get("seed", DATA_OPTIONS["seed"]))
        except ValueError:
            raise DataError(f"data option seed must be an integer, got {options['seed']!r}") from None
        n_train, n_test = cfg["num_train"], cfg["num_test"]
        x = make_sequences(n_train + n_test, cfg["seq_len"], cfg["d_model"], cfg["latent_dim"], seed)
        train, test = x[:n_train], x[n_train:]
        info = {
            "source": f"generated smooth sequences (seed {seed}), {n_train} train / {n_test} test, "
                      f"each ({cfg['seq_len']}, {cfg['d_model']})",
            "baseline_mse": float(np.mean(test.astype(np.float64) ** 2)),  # the score of predicting zeros
        }
        return Dataset(train={"inputs": train}, test={"inputs": test}, info=info)

    def init_weights(self, config: Mapping[str, Any], seed: int) -> Weights:
        # Dense kernels Glorot-uniform (Keras' default); biases 0; LayerNorm 1/0.
        rng = np.random.default_rng([seed, 20241])
        d = config["d_model"]
        w: Weights = {}
        for i in range(config["num_layers"]):
            w.update(init_encoder_block(rng, f"blocks.{i}.", d, config["d_ff"]))
        w["head.kernel"], w["head.bias"] = glorot(rng, d, d), np.zeros(d, np.float32)
        return w

    def metric(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> float:
        # outputs: (N, T, F) reconstructions of split["inputs"]; the mean squared error over every element.
        return float(np.mean((outputs.astype(np.float64) - split["inputs"]) ** 2))

    def units_per_example(self, batch: Batch) -> dict[str, float]:
        return {"tokens": float(batch["inputs"].shape[0] * batch["inputs"].shape[1])}

    def flops_per_example(self, config: Mapping[str, Any]) -> float | None:
        # Forward: the blocks plus the head's 2·T·d². Training: 3× forward (forward, weight and input gradients)
        # less the first block's input gradient through its Q, K, V projections (2·T·d·3d): its input is the data
        # (torch's FlopCounterMode agrees: tests/test_flops.py).
        d, t = config["d_model"], config["seq_len"]
        forward = config["num_layers"] * encoder_block_flops(d, config["d_ff"], t) + 2 * t * d * d
        return float(3 * forward - 6 * t * d * d)
