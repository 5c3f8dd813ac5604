"""What a workload is, framework-free, and what each framework's model of it implements.

* :class:`Workload` — the framework-free half of a workload: config presets, data, metric, target, FLOPs.
* :class:`Dataset`, :data:`Batch`, :data:`Weights` — numpy data and canonical weights, identical for every framework.
* :class:`ModelImpl` — one framework's implementation of a workload's model, exchanging weights under canonical
  names so parity can be tested across frameworks.

Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from bakeoff.core.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from bakeoff.core.keras_function import KerasFunction

Batch = dict[str, np.ndarray]
"""A batch: named numpy arrays, identical for every framework."""


Weights = dict[str, np.ndarray]
"""Canonical weights: the same keys, shapes and layouts (``x @ kernel`` convention) in every framework."""

TARGET_SOURCES = {"measured": "measured", "declared": "declared by the workload", "derived": "derived from the data",
                  "user": "set by the user"}
"""Where a trial's target came from (:attr:`Target.source`, recorded as ``training.target_source``), in the words
every report uses: measured on the shipped data, declared by the workload (its author's choice, not measured),
derived from the user's data (:meth:`Workload.load_data`), or set by the user (``--target``, a suite's ``target``)."""

TARGET_NOT_RECORDED = "source not recorded"
"""What a report says of a target whose source its result did not record (stored before sources were)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """The quality a trial must reach to count as trained, where it came from, and how it was set."""

    value: float
    source: str  # a key of TARGET_SOURCES
    rule: str  # how it was set, in words: "measured for preset tiny on the shipped data"


@dataclasses.dataclass
class Dataset:
    """A workload's data, as numpy arrays, split into train and test, plus facts the report shows."""

    train: dict[str, np.ndarray]
    test: dict[str, np.ndarray]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    # What a kept model needs to take raw input the way it was trained (a tokenizer's vocabulary, the feature or
    # pixel scaling), written into its model directory's manifest; not stored with trial results.
    serving: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_train(self) -> int:
        return len(next(iter(self.train.values())))

    @property
    def num_test(self) -> int:
        return len(next(iter(self.test.values())))


def differing(model: Iterable[str], weights: Iterable[str], has: str = "the model has",
              have: str = "the weights have", most: int = 12) -> str:
    """Which names one side has and the other lacks, each side said (``"the model has embed, norm.gamma that the
    weights lack; the weights have embed.embedding, norm.scale that the model lacks"``), up to ``most`` a side."""
    a, b = set(model), set(weights)

    def names(found: set[str]) -> str:
        shown = sorted(found)
        return ", ".join(shown[:most]) + (f" and {len(shown) - most} more" if len(shown) > most else "")

    lacks = {"the model has": "the weights lack", "the weights have": "the model lacks"}
    parts = [f"{has} {names(a - b)} that {lacks.get(has, 'the other lacks')}" if a - b else "",
             f"{have} {names(b - a)} that {lacks.get(have, 'the other lacks')}" if b - a else ""]
    return "; ".join(p for p in parts if p) or "the same names"


def _kind(default: Any) -> str:
    """What a config field holds, in words, judged by the preset's own value."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "integer"
    if isinstance(default, float):
        return "number"
    if isinstance(default, list | tuple):
        return f"list of {_kind(default[0])}s" if default else "list"
    return "text"


def _typed(workload: str, key: str, raw: str, default: Any) -> Any:
    """A config override (a string: from the CLI, or a TOML value through ``str``) as the type of ``default``."""
    text = raw.strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            value = float(text)
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(text)
            return value
        if isinstance(default, list | tuple):  # "16,32" (CLI) or "[16, 32]" (TOML)
            items = [item.strip() for item in text.strip("[]() ").split(",") if item.strip()]
            if not items:
                raise ValueError(text)
            return [_typed(workload, key, item, default[0]) for item in items] if default else items
    except (ValueError, SpecError):
        raise SpecError(f"config {key}={raw!r} for {workload}: {key} is {'an' if _kind(default) == 'integer' else 'a'} "
                        f"{_kind(default)}, like the preset's {default!r}") from None
    return text


def _out_of_range(key: str, value: Any) -> str:
    """Why a config field's value cannot be used ('' when it can): sizes are positive, dropout is in [0, 1)."""
    if key == "dropout":
        return "" if 0 <= value < 1 else "dropout must be at least 0 and below 1"
    if key == "learning_rate":
        return "" if value > 0 else "learning_rate must be above 0"
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values) and min(values) < 1:
        return f"{key} must be {'positive integers' if isinstance(value, list) else 'a positive integer'}"
    return ""


class Workload(ABC):
    """The framework-free half of a workload.

    Its size presets (:attr:`preset_configs`) hold the model and training fields; a spec's ``config`` overrides
    any of them (:meth:`preset_config`: typed like the preset's own value, then range-checked). Its targets
    (:attr:`targets`) are declared by the workload, and count as measured only for the presets named in
    :attr:`measured_targets`; a spec's ``target`` replaces them, and user data gets one derived from the data
    (:meth:`resolve_target`).
    """

    name: ClassVar[str]
    metric_name: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    metric_bounds: ClassVar[tuple[float, float]] = (0.0, 1.0)  # the metric's range; a target outside is refused
    presets: ClassVar[tuple[str, ...]]
    # The model's inference inputs as the deployment formats take them: name -> one entry per axis, the axis's
    # name where its size varies ("batch", "seq", "frames") and None where the model fixes it.
    serving_inputs: ClassVar[dict[str, tuple[str | None, ...]]] = {}
    preset_configs: ClassVar[Mapping[str, Mapping[str, Any]]]  # preset -> the fields a spec's config may override
    targets: ClassVar[Mapping[str, float]]  # preset -> the quality a trial must reach on the workload's own data
    # The presets whose target was measured on that data (say how beside the targets); any other preset's target is
    # declared by the workload, and reports say so rather than call it measured.
    measured_targets: ClassVar[tuple[str, ...]] = ()
    # Where its model is in each framework (:func:`bakeoff.core.discover.models`). By convention, the class named
    # ``model_class`` in each module beside this one named for a framework's ``model_module`` (``torch_model.py``,
    # ``tf_model.py``, ``jax_model.py``; ``keras_model.py`` for every Keras 3 row): a framework whose file is there
    # implements the workload. ``models`` names a framework's ``"module:Class"`` where the convention does not fit,
    # and wins over it.
    model_class: ClassVar[str] = ""
    models: ClassVar[Mapping[str, str]] = {}
    # Or, for the Keras rows without a keras_model.py or a ``models`` entry: the model as one Keras 3 function, run
    # on every backend with canonical names the Keras variables' own paths (:mod:`bakeoff.core.keras_function`).
    keras_function: ClassVar[KerasFunction | None] = None
    # Files or folders whose content the trials depend on beyond the Python modules the workload's files import
    # (which count by themselves, :func:`bakeoff.core.identity.workload_code`): a tokenizer's vocabulary read at
    # build time, a C extension's source. Relative to the workload's file; an edit to any of them runs anew.
    code_files: ClassVar[tuple[str, ...]] = ()
    # Canonical tensors (names, or their endings) whose gradient is zero in theory: ``bakeoff parity`` holds their
    # gradients to being rounding noise and does not compare their trained weights (Adam moves them by noise).
    # Tensors measured so are treated alike without being named
    # (:func:`bakeoff.analysis.parity_tolerances.zero_gradients`).
    zero_gradient: ClassVar[tuple[str, ...]] = ()

    def check_preset(self, preset: str) -> None:
        """Raise :class:`SpecError` naming the accepted presets when ``preset`` is not one of them."""
        if preset not in self.presets:
            raise SpecError(f"unknown preset {preset!r} for {self.name}; accepted: {', '.join(self.presets)}")

    def preset_config(self, preset: str, spec: RunSpec | None = None) -> dict[str, Any]:
        """The preset's fields with the spec's ``config`` overrides and ``learning_rate`` applied.

        Each override is read as the type of the preset's own value (integer, number, list of integers, ...).
        Raises :class:`SpecError` for an unknown key (naming the accepted keys and their types), a value of the
        wrong type or out of range, a ``learning_rate`` given twice, or a target outside the metric's range.
        """
        self.check_preset(preset)
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in self.preset_configs[preset].items()}
        if spec is None:
            return cfg
        overrides = spec.config_overrides
        unknown = sorted(set(overrides) - set(cfg))
        if unknown:
            accepted = ", ".join(f"{k} ({_kind(v)})" for k, v in cfg.items())
            raise SpecError(f"unknown config key(s) {', '.join(map(repr, unknown))} for {self.name}; "
                            f"accepted: {accepted}")
        for key, raw in overrides.items():
            cfg[key] = _typed(self.name, key, raw, cfg[key])
        if spec.learning_rate is not None:
            if "learning_rate" in overrides and cfg["learning_rate"] != spec.learning_rate:
                raise SpecError(f"learning_rate is given twice, {spec.learning_rate} as a spec field and "
                                f"{overrides['learning_rate']} in config: give it once")
            cfg["learning_rate"] = float(spec.learning_rate)
        for key, value in cfg.items():
            problem = _out_of_range(key, value)
            if problem:
                raise SpecError(f"config {key}={value!r} for {self.name}: {problem}")
        low, high = self.metric_bounds
        if spec.target is not None and not low <= spec.target <= high:
            raise SpecError(f"target {spec.target} is outside the range of {self.name}'s {self.metric_name} "
                            f"({low:g} to {high:g})")
        return cfg

    @abstractmethod
    def config(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> dict[str, Any]:
        """Model and training hyperparameters of a size preset, adjusted to the spec's overrides and the data;
        raises :class:`SpecError` when the fields do not fit together (``d_model`` not divisible by heads, ...)."""

    def data_files(self, spec: RunSpec) -> dict[str, list[Path]]:
        """The files each data option stands for, whose content identifies the trial (:mod:`bakeoff.core.identity`):
        by default the file or folder an option names; a workload whose files name other files (a speech
        manifest and its audio) lists those too."""
        return {key: [Path(value)] for key, value in spec.data if value and Path(value).exists()}

    @abstractmethod
    def load_data(self, spec: RunSpec) -> Dataset:
        """The data set the spec names, as numpy arrays; raises ``DataError`` before any training.

        For user data, ``info["target"]`` states the target derived from it: ``{"value": ..., "rule": ...}``.
        """

    @abstractmethod
    def init_weights(self, config: Mapping[str, Any], seed: int) -> Weights:
        """Initial weights under canonical names, drawn once in numpy so every framework starts identically."""

    def num_params(self, config: Mapping[str, Any]) -> int:
        """Number of trainable scalars of the model ``config`` describes (what every framework's impl counts)."""
        return sum(int(w.size) for w in self.init_weights(config, 0).values())

    def target(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> float:
        """The quality a trial must reach on the test split to count as trained (see :meth:`resolve_target`)."""
        return self.resolve_target(preset, spec, data).value

    def target_and_rule(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None
                        ) -> tuple[float, str]:
        """The target and how it was set, in words (:meth:`resolve_target`)."""
        target = self.resolve_target(preset, spec, data)
        return target.value, target.rule

    def resolve_target(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> Target:
        """The target, where it came from (:data:`TARGET_SOURCES`) and how it was set: the spec's ``target`` when
        given; else, for user data, the one :meth:`load_data` derived from it (``data.info["target"]``); else the
        preset's, measured when :attr:`measured_targets` names the preset and declared by the workload otherwise."""
        if spec is not None and spec.target is not None:
            return Target(spec.target, "user", "set by the user")
        derived = data.info.get("target") if data is not None else None
        if derived is not None:
            return Target(float(derived["value"]), "derived", str(derived["rule"]))
        self.check_preset(preset)
        if preset in self.measured_targets:
            source, rule = "measured", f"measured for preset {preset} on the shipped data"
        else:
            source, rule = "declared", f"declared by the workload for preset {preset}, not measured"
        if spec is not None and spec.config:
            rule += "; the config overrides may move what is reachable"
        return Target(self.targets[preset], source, rule)

    @abstractmethod
    def metric(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> float:
        """The quality metric from the model's outputs on a whole split."""

    def metrics(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Every metric worth recording (the primary one under ``metric_name``); each lands in the quality curve."""
        return {self.metric_name: self.metric(outputs, split)}

    @abstractmethod
    def units_per_example(self, batch: Batch) -> dict[str, float]:
        """Throughput units a batch holds besides examples, e.g. ``{"tokens": 4096}``."""

    def flops_per_example(self, config: Mapping[str, Any]) -> float | None:
        """Training FLOPs per example, when known: what one training step computes (forward, weight gradients,
        and input gradients except those of the data itself), counted on the model's matmuls and convolutions,
        padding included; within 2% of torch's ``FlopCounterMode`` on a real batch (``tests/test_flops.py``)."""
        return None

    def batches(self, split: Mapping[str, np.ndarray], batch_size: int, seed: int, epoch: int,
                shuffle: bool = True, drop_last: bool = True, shard: tuple[int, int] = (0, 1)) -> Iterator[Batch]:
        """Batches of ``batch_size`` (global) in a deterministic order per (seed, epoch), identical for every
        framework; with ``shard=(rank, world)``, each batch's slice that replica ``rank`` of ``world`` trains on."""
        n = len(next(iter(split.values())))
        order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            idx = order[start:start + batch_size]
            yield shard_batch({k: v[idx] for k, v in split.items()}, *shard)

    def merge(self, batches: Sequence[Batch]) -> Batch:
        """One batch holding the examples of ``batches`` (what k micro-batches stand for, in parity tests).

        Batches of one shape are concatenated; a workload whose batches are padded to their own length
        (speech) pads them to a common length first.
        """
        return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def shard_batch(batch: Batch, rank: int, world: int) -> Batch:
    """Replica ``rank``'s share of a global batch: its ``1/world`` of consecutive examples (every array is batch
    first; a padded batch keeps its padded length, so every replica's shard has one shape)."""
    if world == 1:
        return batch
    n = len(next(iter(batch.values())))
    if n % world or not 0 <= rank < world:
        raise ValueError(f"cannot give replica {rank} of {world} an equal share of a batch of {n}")
    size = n // world
    return {k: v[rank * size:(rank + 1) * size] for k, v in batch.items()}


class ModelImpl(Protocol):
    """One framework's model for a workload. Constructed as ``Impl(config)`` then :meth:`build`."""

    def build(self, weights: Weights) -> None:
        """Create the framework model and load the canonical initial weights."""

    def loss(self, batch: Mapping[str, Any], training: bool) -> tuple[Any, Any]:
        """``(summed_loss, count)`` as framework tensors: never a pre-averaged mean."""

    def outputs(self, batch: Mapping[str, Any]) -> Any:
        """Model outputs used by the workload's metric (probabilities or scores), inference mode."""

    def trainable(self) -> Any:
        """What the engine's optimizer updates (parameters / trainable variables)."""

    def get_weights(self) -> Weights:
        """Current weights under canonical names."""

    def set_weights(self, weights: Weights) -> None:
        """Load weights given under canonical names; shapes must match."""

    def num_params(self) -> int:
        """Number of trainable scalars."""
