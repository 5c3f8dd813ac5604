"""How each framework's training holds the model states in memory: its mixed-precision *recipe*, in bytes a parameter
for the weights, the gradients and the optimizer state (Adam), as its own API does it (issue #49).

The recipes differ by 2.4–2.8× per device once ZeRO shards some of the states and not others, so the capacity plan
(:mod:`bakeoff.predict.capacity`) names the recipe of every row, and ``bakeoff plan --recipe NAME`` changes it.

Bytes a parameter, weights (+ the 16-bit copy the compute reads) / gradients / Adam:

* ``fp32`` — no mixed precision: 4 / 4 / 8.
* ``torch-autocast`` — ``torch.autocast(dtype=torch.bfloat16)``: fp32 parameters, each op casts them to bf16 and
  the casts are cached for the backward: 4 + 2 / 4 / 8.
* ``fsdp-mixed`` — FSDP's ``MixedPrecision``, FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``: fp32 sharded parameters (the optimizer steps them), bf16 ones gathered to compute, fp32
  sharded gradients: 4 + 2 / 4 / 8.
* ``zero`` — DeepSpeed's ZeRO as the ZeRO paper counts it (Rajbhandari et al. 2020, §3.1, K = 12): 16-bit
  parameters and gradients, fp32 master weights + m + v in the optimizer state: 2 / 2 / 12. (DeepSpeed's bf16 at
  stage 0-1 accumulates gradients in fp32 unless ``data_types.grad_accum_dtype`` is bf16: DeepSpeed PR #4713.)
* ``keras-mixed`` — ``keras.mixed_precision.set_global_policy("mixed_bfloat16")``: fp32 variables, each layer casts
  them to bf16 to compute: 4 + 2 / 4 / 8.
* ``flax-mixed`` — Flax modules with ``param_dtype=float32, dtype=bfloat16`` (MaxText's ``weight_dtype`` float32):
  4 + 2 / 4 / 8.
* ``flax-bf16`` — Flax ``param_dtype=bfloat16`` with an fp32 master copy the training loop keeps beside Optax's m
  and v: 2 / 2 / 12.

Where each lives under a strategy (:func:`states`): ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too,
ZeRO-3 the weights too; tensor and pipeline parallelism split all of it. The 16-bit copy is the recipe's own:

* a cast each op makes and keeps for its backward (autocast, Keras, Flax): the whole model's, whatever ZeRO shards
  (the casts of every layer are alive when the backward starts); split only by tensor and pipeline parallelism;
* FSDP's gathered parameters: under ZeRO-3 (``FULL_SHARD``, ``fully_shard``) a layer at a time (two: the one
  computing and the next, prefetched), under ZeRO-2 (``SHARD_GRAD_OP``: not resharded after the forward) the whole
  model's, while the fp32 parameters stay sharded (FSDP2's docstring: "FSDP does not require any extra memory to keep
  a high-precision copy of the parameters for the optimizer step");
* none (fp32, zero, flax-bf16): the compute reads the weights themselves; ZeRO-3 gathers two layers of them.

The default of each row (:data:`DEFAULTS`) is what that framework's strategy does with mixed precision: PyTorch's DDP,
``ZeroRedundancyOptimizer`` (it shards an ordinary optimizer's state and leaves the fp32 model to autocast), tensor
and pipeline parallelism under autocast; FSDP (``SHARD_GRAD_OP``) and FSDP2 (``fully_shard``) with their mixed
precision policy, as torchtitan trains; Keras' policy under every ``tf.distribute`` strategy; Flax's fp32
parameters with a bf16 compute dtype under every ``jax.jit`` sharding (XLA decides where each cast lives; the plan
counts the cast copy as autocast keeps it, an upper bound). At fp32 every row is ``fp32``.
"""

from __future__ import annotations

import dataclasses

from bakeoff.core import frameworks


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Bytes a parameter each part of the model states takes, before any sharding: ``weights`` (the parameters
    themselves), ``copy`` (the 16-bit copy of them the compute reads, 0 when it reads the weights), ``gradients``,
    ``optimizer`` (Adam's m and v, and an fp32 master copy where the weights are 16-bit); ``gathered``: the copy is
    FSDP's gathered parameters (freed by layer under ZeRO-3) rather than casts each op keeps for its backward;
    ``frameworks``: whose API it is; ``api``: what the user writes."""

    name: str
    api: str
    weights: int
    copy: int
    gradients: int
    optimizer: int
    frameworks: tuple[str, ...]
    gathered: bool = False
    mixed: bool = True

    @property
    def per_param(self) -> int:
        """Bytes a parameter of the model states, all of them, unsharded (the ZeRO paper's 2 + 2 + K)."""
        return self.weights + self.copy + self.gradients + self.optimizer

    @property
    def bytes_text(self) -> str:
        """``weights + copy / grads / Adam`` in bytes a parameter, as the tables print it."""
        weights = f"{self.weights}+{self.copy}" if self.copy else f"{self.weights}"
        return f"{weights}/{self.gradients}/{self.optimizer} B"

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "per_param": self.per_param}


_PLANNED = {name: info.capacity for name, info in frameworks.FRAMEWORKS.items() if info.capacity is not None}
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("fp32", "no mixed precision: fp32 weights, gradients and Adam state", 4, 0, 4, 8, tuple(_PLANNED),
           mixed=False),
    *(Recipe(**fields, frameworks=(name,)) for name, capacity in _PLANNED.items() for fields in capacity.recipes),
)}
"""Every recipe by name (``bakeoff plan --recipe NAME``, a plan file's ``recipe``): fp32, then each framework's
own (its record's ``capacity.recipes``)."""

DEFAULTS: dict[tuple[str, str], str] = {
    (name, kind): recipe for name, capacity in _PLANNED.items() for kind, recipe in capacity.defaults.items()}
"""The recipe a framework's strategy uses with mixed precision when none is chosen (at fp32: ``fp32``)."""

GATHERED_LAYERS = 2
"""Layers ZeRO-3 holds gathered at once: the one computing and the next, prefetched (FSDP's forward and backward
prefetch; DeepSpeed's ``stage3_prefetch_bucket_size``)."""


def default(framework: str, kind: str, precision: str) -> Recipe:
    """The recipe of a framework's strategy when none is chosen."""
    if precision == "fp32":
        return RECIPES["fp32"]
    return RECIPES[DEFAULTS.get((framework, kind), "fp32")]


def states(recipe: Recipe, kind: str, devices: int, params: float, layer_params: float) -> tuple[float, float, float,
                                                                                                  float]:
    """Bytes a device holds of (weights, the 16-bit copy the compute reads, gradients, optimizer state) under
    strategy ``kind`` over ``devices``: ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too (and FSDP's
    fp32 parameters, gathered in bf16 for the step), ZeRO-3 the weights too with :data:`GATHERED_LAYERS` gathered;
    tensor and pipeline parallelism split everything; the parameter servers hold the optimizer state (0 here)."""
    n = devices
    split = n if kind in ("tensor", "pipeline") else 1
    weights_shard = {"zero2": n if recipe.gathered else 1, "zero3": n}.get(kind, split)
    gradients_shard = n if kind in ("zero2", "zero3") else split
    optimizer = 0.0 if kind == "parameter_server" else (
        params * recipe.optimizer / (n if kind in ("zero1", "zero2", "zero3") else split))
    if kind == "zero3":  # the layers gathered to compute: FSDP's in bf16, the others' in the weights' dtype
        copy = GATHERED_LAYERS * layer_params * (recipe.copy if recipe.gathered else recipe.weights)
        if recipe.copy and not recipe.gathered:  # casts kept for the backward: every layer's
            copy += params * recipe.copy
    else:
        copy = params * recipe.copy / split
    return params * recipe.weights / weights_shard, copy, params * recipe.gradients / gradients_shard, optimizer
