"""Weight layouts between PyTorch, Keras/TensorFlow and Flax, so that a port's weight mapping is a table of names.

bakeoff's canonical weights (:data:`bakeoff.core.workload.Weights`) use Keras' and Flax's layouts — a dense kernel
``(in, out)`` for ``x @ kernel``, a convolution kernel ``(*spatial, in, out)``, channels last — which is where
PyTorch differs and where ports go wrong. This module is numpy only: a model file of any framework uses it, and so
can a user's.

* :class:`Layout` — one conversion and its inverse (:data:`AS_IS`, :data:`DENSE`, :data:`CONV`, :data:`CONV_TRANSPOSE`,
  :func:`flattened`), and :func:`to_canonical` / :func:`from_canonical`, which move a whole state through a table
  ``canonical name -> (native name, layout)``, checking shapes and naming both names when one does not fit::

      TABLE = {"conv1.kernel": ("conv1.weight", CONV), "conv1.bias": ("conv1.bias", AS_IS),
               "dense.kernel": ("fc.weight", DENSE), "dense.bias": ("fc.bias", AS_IS)}
      weights = to_canonical({k: v.detach().cpu().numpy() for k, v in module.state_dict().items()}, TABLE)
      module.load_state_dict({k: torch.from_numpy(v) for k, v in from_canonical(weights, TABLE).items()},
                             strict=False)

* Recurrent cells: :func:`reorder_gates` and the gate orders of each framework's LSTM and GRU; :func:`gru_from_torch` /
  :func:`gru_to_torch` and :func:`lstm_from_torch` / :func:`lstm_to_torch` between ``nn.GRU``/``nn.LSTM``'s four
  tensors and Keras' ``kernel``, ``recurrent_kernel``, ``bias``.
* Normalisation: :data:`NORM_NAMES` (what each framework calls a norm's scale, offset and running statistics),
  :data:`NORM_EPSILON` (their defaults differ: Keras 1e-3, PyTorch and Flax 1e-5), and :func:`torch_bn_momentum` /
  :func:`keras_bn_momentum` (PyTorch's ``momentum`` is the weight of the *new* batch statistic, Keras' and Flax's the
  weight of the *old* running value: PyTorch's default 0.1 is Keras' 0.9, Keras' default 0.99 is PyTorch's 0.01).

What a table cannot fix is said where it matters: PyTorch's BatchNorm keeps an *unbiased* running variance
(``n / (n - 1)`` times the batch variance) where Keras and Flax keep the biased one, and PyTorch's LSTM has two bias
vectors where Keras has one (:func:`lstm_to_torch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Array = np.ndarray


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a framework stores a canonical tensor: ``native`` turns the canonical array into the framework's,
    ``canonical`` turns it back (each the other's inverse)."""

    name: str
    native: Callable[[Array], Array]
    canonical: Callable[[Array], Array]


def _dense(value: Array) -> Array:
    if value.ndim != 2:
        raise ValueError(f"a dense kernel is 2-d, (in, out) or PyTorch's (out, in); got shape {value.shape}")
    return value.T


def _conv_native(kernel: Array) -> Array:
    if kernel.ndim < 3:
        raise ValueError(f"a convolution kernel is (*spatial, in, out); got shape {kernel.shape}")
    n = kernel.ndim
    return kernel.transpose(n - 1, n - 2, *range(n - 2))  # (*k, in, out) -> (out, in, *k)


def _conv_canonical(weight: Array) -> Array:
    if weight.ndim < 3:
        raise ValueError(f"a PyTorch convolution weight is (out, in, *spatial); got shape {weight.shape}")
    return weight.transpose(*range(2, weight.ndim), 1, 0)  # (out, in, *k) -> (*k, in, out)


def _conv_t_native(kernel: Array) -> Array:
    if kernel.ndim < 3:
        raise ValueError(f"a transposed-convolution kernel is (*spatial, out, in); got shape {kernel.shape}")
    n = kernel.ndim
    return kernel.transpose(n - 1, n - 2, *range(n - 2))  # Keras (*k, out, in) -> PyTorch (in, out, *k)


def _conv_t_canonical(weight: Array) -> Array:
    if weight.ndim < 3:
        raise ValueError(f"a PyTorch transposed-convolution weight is (in, out, *spatial); got shape {weight.shape}")
    return weight.transpose(*range(2, weight.ndim), 1, 0)  # (in, out, *k) -> (*k, out, in)


AS_IS = Layout("as is", lambda v: v, lambda v: v)
"""Biases, norm scales and offsets, embeddings: the same in every framework."""

DENSE = Layout("dense", _dense, _dense)
"""``nn.Linear.weight`` ``(out, in)`` against the canonical ``(in, out)``."""

CONV = Layout("conv", _conv_native, _conv_canonical)
"""``nn.Conv{1,2,3}d.weight`` ``(out, in, *k)`` against the canonical (Keras', Flax's) ``(*k, in, out)``."""

CONV_TRANSPOSE = Layout("conv transpose", _conv_t_native, _conv_t_canonical)
"""``nn.ConvTranspose{1,2,3}d.weight`` ``(in, out, *k)`` against Keras' ``Conv*DTranspose`` kernel ``(*k, out, in)``
(in and out named as the layer's input and output channels). Flax's ``ConvTranspose`` kernel is ``(*k, in, out)``
with ``transpose_kernel=False`` (its default): a separate swap of the last two axes."""


def flattened(feature_shape: Sequence[int]) -> Layout:
    """A dense kernel after a flatten: PyTorch flattens an NCHW map in ``(C, *spatial)`` order, Keras and Flax
    flatten NHWC in ``(*spatial, C)`` order, so the canonical rows are in channels-last order and PyTorch's
    ``nn.Linear.weight`` holds ``(out, C·H·W)``. ``feature_shape`` is the map's channels-last shape ``(*spatial, C)``
    (without the batch axis)."""
    shape = tuple(int(s) for s in feature_shape)
    rows = int(np.prod(shape))
    n = len(shape)
    to_first = (n - 1, *range(n - 1))  # (*spatial, C) -> (C, *spatial)
    to_last = (*range(1, n), 0)

    def native(kernel: Array) -> Array:
        if kernel.ndim != 2 or kernel.shape[0] != rows:
            raise ValueError(f"a dense kernel after flattening a {shape} map has {rows} rows; got {kernel.shape}")
        out = kernel.shape[1]
        return kernel.reshape(*shape, out).transpose(*to_first, n).reshape(rows, out).T

    def canonical(weight: Array) -> Array:
        if weight.ndim != 2 or weight.shape[1] != rows:
            raise ValueError(f"a PyTorch Linear after flattening a {shape} map takes {rows} inputs; got "
                             f"{weight.shape}")
        out = weight.shape[0]
        first = (shape[-1], *shape[:-1])
        return weight.T.reshape(*first, out).transpose(*to_last, n).reshape(rows, out)

    return Layout(f"dense after flattening {shape}", native, canonical)


Table = Mapping[str, tuple[str, Layout]]
"""canonical name -> (the framework's name for it, its layout there)."""


def to_canonical(native: Mapping[str, Array], table: Table) -> dict[str, Array]:
    """A framework's named arrays (e.g. a ``state_dict`` as numpy) as canonical weights, through ``table``.

    Raises ``KeyError`` naming the canonical and the missing native name; names of ``native`` the table does not
    list (buffers, counters) are ignored. Every array is a copy: ``tensor.numpy()`` shares the tensor's memory, and
    weights read before a training step must not move with it."""
    out: dict[str, Array] = {}
    for name, (native_name, layout) in table.items():
        if native_name not in native:
            known = ", ".join(sorted(native)[:12])
            raise KeyError(f"weight {name}: the model has no {native_name!r} (it has {known}"
                           f"{', ...' if len(native) > 12 else ''})")
        out[name] = np.array(layout.canonical(np.asarray(native[native_name])), copy=True, order="C")
    return out


def from_canonical(weights: Mapping[str, Array], table: Table,
                   shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, Array]:
    """Canonical weights as the framework's named arrays, through ``table``; float32, contiguous, copies.

    With ``shapes`` (the framework's own shapes by native name, e.g. ``{k: v.shape for k, v in
    module.state_dict().items()}``) each converted array is checked against the shape it replaces. Raises
    ``KeyError`` for a canonical name missing from ``weights``, ``ValueError`` naming both names and both shapes for a
    shape that does not fit."""
    out: dict[str, Array] = {}
    for name, (native_name, layout) in table.items():
        if name not in weights:
            raise KeyError(f"weight {name} (the model's {native_name}) is not among the canonical weights given")
        value = np.array(layout.native(np.asarray(weights[name], np.float32)), copy=True, order="C")
        if shapes is not None and native_name in shapes and tuple(shapes[native_name]) != value.shape:
            raise ValueError(f"weight {name}: the model's {native_name} has shape {tuple(shapes[native_name])}, the "
                             f"canonical {np.shape(weights[name])} becomes {value.shape} under layout {layout.name!r}")
        out[native_name] = value
    return out


# --- recurrent cells ------------------------------------------------------------------------------------------
# Gate blocks along the gates axis, by framework. PyTorch: nn.LSTM (i, f, g, o), nn.GRU (r, z, n). Keras: LSTM
# (i, f, c, o) — the same order, the candidate called c — and GRU (z, r, h). Flax's LSTMCell and GRUCell keep one
# Dense per gate (named ii, if, ig, io / ir, iz, in ...), so no order applies there.
TORCH_LSTM = ("i", "f", "g", "o")
KERAS_LSTM = ("i", "f", "g", "o")  # Keras' c is PyTorch's g: the cell candidate
TORCH_GRU = ("r", "z", "n")
KERAS_GRU = ("z", "r", "n")  # Keras' h is PyTorch's n: the candidate


def reorder_gates(value: Array, source: Sequence[str], target: Sequence[str], axis: int = -1) -> Array:
    """``value`` with its gate blocks (equal slices along ``axis``) moved from ``source`` order to ``target``."""
    if sorted(source) != sorted(target):
        raise ValueError(f"gate orders {tuple(source)} and {tuple(target)} name different gates")
    if value.shape[axis] % len(source):
        raise ValueError(f"an axis of {value.shape[axis]} does not split into {len(source)} gates")
    blocks = dict(zip(source, np.split(value, len(source), axis=axis), strict=True))
    return np.concatenate([blocks[g] for g in target], axis=axis)


def gru_from_torch(weight_ih: Array, weight_hh: Array, bias_ih: Array, bias_hh: Array) -> tuple[Array, Array, Array]:
    """``nn.GRU``'s layer tensors -> Keras ``GRU(reset_after=True)``'s ``kernel (in, 3h)``, ``recurrent_kernel
    (h, 3h)`` and ``bias (2, 3h)`` (input bias, recurrent bias). The two compute the same cell — PyTorch's
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` is Keras' ``reset_after=True`` (its default) — so training
    agrees too. Flax's ``GRUCell`` has no recurrent bias for r and z: equal outputs when they are folded in, but an
    optimizer then trains one bias where PyTorch trains two."""
    kernel = reorder_gates(np.asarray(weight_ih).T, TORCH_GRU, KERAS_GRU)
    recurrent = reorder_gates(np.asarray(weight_hh).T, TORCH_GRU, KERAS_GRU)
    bias = np.stack([reorder_gates(np.asarray(b), TORCH_GRU, KERAS_GRU) for b in (bias_ih, bias_hh)])
    return kernel, recurrent, bias


def gru_to_torch(kernel: Array, recurrent_kernel: Array, bias: Array) -> tuple[Array, Array, Array, Array]:
    """The inverse of :func:`gru_from_torch`: ``(weight_ih, weight_hh, bias_ih, bias_hh)``."""
    bias = np.asarray(bias)
    if bias.shape[0] != 2 or bias.ndim != 2:
        raise ValueError(f"a GRU bias of Keras' reset_after=True is (2, 3h); got {bias.shape} (reset_after=False has "
                         "no PyTorch equivalent)")
    return (reorder_gates(np.asarray(kernel), KERAS_GRU, TORCH_GRU).T,
            reorder_gates(np.asarray(recurrent_kernel), KERAS_GRU, TORCH_GRU).T,
            reorder_gates(bias[0], KERAS_GRU, TORCH_GRU), reorder_gates(bias[1], KERAS_GRU, TORCH_GRU))


def lstm_from_torch(weight_ih: Array, weight_hh: Array, bias_ih: Array, bias_hh: Array) -> tuple[Array, Array, Array]:
    """``nn.LSTM``'s layer tensors -> Keras ``LSTM``'s ``kernel (in, 4h)``, ``recurrent_kernel (h, 4h)``, ``bias
    (4h)``: the gate order is the same, PyTorch's two biases add up to Keras' one (see :func:`lstm_to_torch`)."""
    return np.asarray(weight_ih).T, np.asarray(weight_hh).T, np.asarray(bias_ih) + np.asarray(bias_hh)


def lstm_to_torch(kernel: Array, recurrent_kernel: Array, bias: Array) -> tuple[Array, Array, Array, Array]:
    """``(weight_ih, weight_hh, bias_ih, bias_hh)`` for ``nn.LSTM`` from Keras' three tensors: the bias goes to
    ``bias_ih`` and ``bias_hh`` is zero. Outputs then agree; for training to agree too, freeze ``bias_hh`` at zero
    (``requires_grad_(False)``): otherwise the optimizer moves two biases where Keras moves one, and Adam's update of
    their sum is twice as large."""
    bias = np.asarray(bias)
    return np.asarray(kernel).T, np.asarray(recurrent_kernel).T, bias, np.zeros_like(bias)


# --- normalisation ----------------------------------------------------------------------------------------------
NORM_NAMES: dict[str, dict[str, str]] = {
    "torch": {"scale": "weight", "offset": "bias", "mean": "running_mean", "variance": "running_var"},
    "keras": {"scale": "gamma", "offset": "beta", "mean": "moving_mean", "variance": "moving_variance"},
    # Flax Linen: scale and bias in the "params" collection, mean and var in "batch_stats".
    "flax": {"scale": "scale", "offset": "bias", "mean": "mean", "variance": "var"},
}
"""What each framework calls a normalisation layer's parts (BatchNorm; LayerNorm has scale and offset only)."""

NORM_EPSILON: dict[str, dict[str, float]] = {
    "torch": {"batch_norm": 1e-5, "layer_norm": 1e-5},
    "keras": {"batch_norm": 1e-3, "layer_norm": 1e-3},
    "flax": {"batch_norm": 1e-5, "layer_norm": 1e-6},
}
"""Default epsilons (``nn.BatchNorm2d``/``nn.LayerNorm``, ``keras.layers.BatchNormalization``/``LayerNormalization``,
``flax.linen.BatchNorm``/``LayerNorm``): left at their defaults, three ports of one model normalise differently."""


def torch_bn_momentum(keras_momentum: float) -> float:
    """PyTorch's BatchNorm ``momentum`` for Keras' or Flax's: ``running = (1 - m) * running + m * batch`` in
    PyTorch, ``running = m * running + (1 - m) * batch`` in Keras and Flax; Keras' default 0.99 is PyTorch's 0.01
    (PyTorch's default, 0.1, is Keras' 0.9)."""
    if not 0.0 <= keras_momentum <= 1.0:
        raise ValueError(f"a momentum is in [0, 1]; got {keras_momentum}")
    return 1.0 - keras_momentum


def keras_bn_momentum(torch_momentum: float) -> float:
    """Keras' (and Flax's) BatchNorm ``momentum`` for PyTorch's: the inverse of :func:`torch_bn_momentum`."""
    return torch_bn_momentum(torch_momentum)
