"""The contracts every part of bakeoff agrees on.

* :class:`RunSpec` — a frozen, hashable, JSON-serialisable description of one trial.
* :class:`Workload` — the framework-free half of a workload: config presets, data, metric, target.
* :class:`ModelImpl` — one framework's implementation of a workload's model, exchanging weights under
  canonical names so parity can be tested across frameworks.
* :class:`TrialResult` — what one trial measured, with every raw sample, versioned.

Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

SCHEMA_VERSION = 2

Batch = dict[str, np.ndarray]
"""A batch: named numpy arrays, identical for every framework."""

Weights = dict[str, np.ndarray]
"""Canonical weights: the same keys, shapes and layouts (``x @ kernel`` convention) in every framework."""


class SpecError(ValueError):
    """A spec, suite or option that cannot be run; the message names the bad value and the accepted ones."""


class _Choice(enum.StrEnum):
    @classmethod
    def parse(cls, value: str | enum.Enum, what: str) -> Any:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            accepted = ", ".join(m.value for m in cls)
            raise SpecError(f"unknown {what} {value!r}; accepted: {accepted}") from None


class Framework(_Choice):
    TORCH = "torch"
    TENSORFLOW = "tensorflow"
    JAX = "jax"
    # The same Keras 3 model code on each backend (text classifier and MNIST): "should our Keras team move to JAX
    # or PyTorch underneath?"
    KERAS_JAX = "keras-jax"
    KERAS_TORCH = "keras-torch"
    KERAS_TENSORFLOW = "keras-tensorflow"


class Execution(_Choice):
    EAGER = "eager"  # op by op: PyTorch eager, TF eager
    GRAPH = "graph"  # compiled graph: torch.compile, tf.function
    XLA = "xla"  # tf.function(jit_compile=True)


class Precision(_Choice):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class Parallelism(_Choice):
    NONE = "none"
    DATA_PARALLEL = "data_parallel"  # one machine, N replicas: DDP under torchrun, MirroredStrategy
    MULTI_WORKER = "multi_worker"  # N worker processes (hosts): torchrun rendezvous, MultiWorkerMirroredStrategy
    PARAMETER_SERVER = "parameter_server"  # TF ParameterServerStrategy: chief, workers, parameter servers
    HOROVOD = "horovod"

    @property
    def synchronous(self) -> bool:
        """Whether every replica takes a shard of each global batch and all apply the same update."""
        return self in (Parallelism.DATA_PARALLEL, Parallelism.MULTI_WORKER, Parallelism.HOROVOD)


class Status(_Choice):
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    UNSUPPORTED = "unsupported"


class Device(_Choice):
    AUTO = "auto"  # CUDA when the framework sees one, else CPU
    CPU = "cpu"
    CUDA = "cuda"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One trial, completely described. Its :meth:`key` identifies the trial in the store.

    Training stops at the first of ``max_steps``, ``max_epochs`` and ``max_seconds`` that is set, or when the
    target is reached if ``stop_at_target``. Evaluation runs every ``eval_every`` steps, off the clock.

    ``batch_size`` is the *global* batch of one micro-step, whatever the parallelism: under synchronous data
    parallelism each of the ``workers`` replicas takes ``batch_size / workers`` consecutive examples of it
    (:func:`shard_batch`), so the union of the replicas' shards is exactly the single-device batch. Under
    ``parameter_server`` training is asynchronous: each step is one global batch, run by whichever worker is free.
    """

    workload: str
    framework: Framework
    preset: str = "tiny"
    execution: Execution = Execution.EAGER
    precision: Precision = Precision.FP32
    parallelism: Parallelism = Parallelism.NONE
    workers: int = 1
    # multi_worker across machines: the host of each worker, in rank order (the first is the rendezvous host);
    # empty: every worker on this machine. A host that is not this machine is reached with ssh (see launchers).
    hosts: tuple[str, ...] = ()
    batch_size: int = 32
    grad_accum: int = 1
    max_steps: int | None = None
    max_epochs: float | None = None
    max_seconds: float | None = None
    eval_every: int = 50
    warmup_steps: int = 3  # steady-state statistics skip the first step and these many more
    stop_at_target: bool = False
    checkpoint_every: int = 0  # steps between checkpoints (0: none); a trial resumes from its last one
    learning_rate: float | None = None  # None: the workload preset's
    seed: int = 0
    repeat: int = 0
    device: Device = Device.AUTO
    threads: int = 0  # CPU threads for the framework; 0: all cores the machine reports
    data: tuple[tuple[str, str], ...] = ()  # workload data options, e.g. (("train", "reviews.csv"),)
    config: tuple[tuple[str, str], ...] = ()  # overrides of preset fields, e.g. (("d_model", "512"),)
    target: float | None = None  # the quality target; None: the workload's (derived from the data for user data)
    # What the result depends on beyond these fields (see bakeoff.core.identity): content hashes of the data files the
    # data options name ("data:train"), of the resolved configuration, and the bakeoff and framework versions.
    # Filled in by the runner; a data option with a content hash counts in the key by its content, not its path.
    content: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # Accept plain strings (from TOML, JSON or the CLI) and normalise them, so equal specs hash equally.
        set_ = object.__setattr__
        set_(self, "framework", Framework.parse(self.framework, "framework"))
        set_(self, "execution", Execution.parse(self.execution, "execution mode"))
        set_(self, "precision", Precision.parse(self.precision, "precision"))
        set_(self, "parallelism", Parallelism.parse(self.parallelism, "parallelism"))
        set_(self, "device", Device.parse(self.device, "device"))
        for name in ("data", "config", "content"):
            pairs = getattr(self, name)
            pairs = pairs.items() if isinstance(pairs, Mapping) else pairs
            set_(self, name, tuple(sorted((str(k), str(v)) for k, v in pairs)))
        if self.target is not None:
            set_(self, "target", float(self.target))
        hosts = (self.hosts,) if isinstance(self.hosts, str) else self.hosts
        set_(self, "hosts", tuple(str(h).strip() for h in hosts))
        if self.hosts and (self.parallelism is not Parallelism.MULTI_WORKER or len(self.hosts) != self.workers
                           or not all(self.hosts)):
            raise SpecError(f"hosts {', '.join(self.hosts)}: hosts name one machine per worker of a multi_worker "
                            f"trial ({len(self.hosts)} given for parallelism {self.parallelism.value} with "
                            f"{self.workers} worker{'s' if self.workers > 1 else ''})")
        for name in ("workers", "batch_size", "grad_accum", "eval_every"):
            if int(getattr(self, name)) < 1:
                raise SpecError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.parallelism is Parallelism.NONE and self.workers != 1:
            raise SpecError(f"workers = {self.workers} needs a parallelism (data_parallel, multi_worker, "
                            "parameter_server or horovod); without one a trial has 1 worker")
        if self.parallelism.synchronous and self.batch_size % self.workers:
            raise SpecError(f"batch_size {self.batch_size} is the global batch and must divide evenly over "
                            f"{self.workers} replicas: use a multiple of {self.workers}")
        if self.parallelism.synchronous and self.workers > 1 and self.max_seconds is not None:
            # Each rank would stop on its own clock: one leaves while another waits in a collective, until the
            # timeout. Agreeing would take a collective per step, which the step times would then include.
            raise SpecError(f"max_seconds {self.max_seconds:g} cannot stop {self.workers} synchronous replicas "
                            f"({self.parallelism.value}) at one step: each would stop on its own clock; give the "
                            "budget as max_steps or max_epochs")
        if min(self.warmup_steps, self.threads, self.repeat, self.checkpoint_every) < 0:
            raise SpecError("warmup_steps, threads, repeat and checkpoint_every must not be negative")
        if self.max_steps is None and self.max_epochs is None and self.max_seconds is None:
            raise SpecError("a trial needs a budget: set max_steps, max_epochs or max_seconds")

    @property
    def data_options(self) -> dict[str, str]:
        return dict(self.data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, enum.Enum):
                value = value.value
            elif f.name in ("data", "config", "content"):
                value = dict(value)
            elif f.name == "hosts":
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SpecError(f"unknown spec field(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}")
        return cls(**raw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def config_overrides(self) -> dict[str, str]:
        return dict(self.config)

    @functools.cached_property
    def info(self):  # -> bakeoff.core.frameworks.FrameworkInfo (a lazy import: frameworks imports this module)
        """Its framework's record (:mod:`bakeoff.core.frameworks`), looked up once per spec."""
        from bakeoff.core import frameworks

        return frameworks.get(self.framework.value)

    def key(self) -> str:
        """A stable identifier: the hash of the canonical JSON form, in which a data option whose file content is
        hashed in ``content`` counts by that hash, not by its path (one file through two paths is one trial)."""
        raw = self.to_dict()
        content = raw["content"]
        raw["data"] = {k: v for k, v in raw["data"].items() if f"data:{k}" not in content}
        if not raw["hosts"]:
            del raw["hosts"]  # a field added later counts only when set, so earlier keys stay valid
        return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short human name of the configuration (without seed and repeat)."""
        parts = [self.framework.value, self.execution.value]
        if self.precision is not Precision.FP32:
            parts.append(self.precision.value)
        if self.grad_accum > 1:
            parts.append(f"accum{self.grad_accum}")
        if self.parallelism is not Parallelism.NONE:
            parts.append(f"{self.parallelism.value}x{self.workers}")
        return "/".join(parts)


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
    (:attr:`targets`) were measured on the shipped data; a spec's ``target`` replaces them, and user data gets one
    derived from the data (:meth:`target_and_rule`).
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
    targets: ClassVar[Mapping[str, float]]  # preset -> target measured on the shipped data

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
        """The quality a trial must reach on the test split to count as trained (see :meth:`target_and_rule`)."""
        return self.target_and_rule(preset, spec, data)[0]

    def target_and_rule(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None
                        ) -> tuple[float, str]:
        """The target and how it was set, in words: the spec's ``target`` when given; else, for user data, the one
        :meth:`load_data` derived from it (``data.info["target"]``); else the preset's, measured on shipped data."""
        if spec is not None and spec.target is not None:
            return spec.target, "set by the user"
        derived = data.info.get("target") if data is not None else None
        if derived is not None:
            return float(derived["value"]), str(derived["rule"])
        self.check_preset(preset)
        rule = f"measured for preset {preset} on the shipped data"
        if spec is not None and spec.config:
            rule += "; the config overrides may move what is reachable"
        return self.targets[preset], rule

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


@dataclasses.dataclass
class TrialResult:
    """Everything one trial measured. Raw samples are kept: ``step_times_s`` holds every step."""

    spec: dict[str, Any]
    key: str
    status: Status
    reason: str = ""
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    import_s: float | None = None
    build_s: float | None = None
    first_step_s: float | None = None  # graph build / compile happens here
    step_times_s: list[float] = dataclasses.field(default_factory=list)  # every step, the first included
    losses: list[float] = dataclasses.field(default_factory=list)  # training loss (mean) at every step
    examples_per_step: int = 0
    units_per_step: dict[str, float] = dataclasses.field(default_factory=dict)
    steady_step_s: float | None = None  # median of steady steps
    throughput: dict[str, float] = dataclasses.field(default_factory=dict)  # examples/s, tokens/s: steady
    # Memory, in bytes, read by the engine's probe (``memory_kind`` names it: process RSS on CPU, the framework's
    # allocator on GPU). ``peak_memory_bytes`` is the whole trial's peak, the framework's import included;
    # ``memory_baseline_bytes`` what was in use after import and model build; ``memory_train_peak_bytes`` the peak
    # over training steps only (evaluation excluded); ``memory_increment_bytes`` = train peak - baseline, what
    # training itself costs (the memory criterion scores it).
    peak_memory_bytes: int | None = None
    memory_kind: str = ""
    memory_baseline_bytes: int | None = None
    memory_train_peak_bytes: int | None = None
    memory_increment_bytes: int | None = None
    curve: list[dict[str, float]] = dataclasses.field(default_factory=list)  # step, train_s, metric
    metric_name: str = ""
    higher_is_better: bool = True  # the metric's direction (accuracy: higher; error rates: lower)
    target: float | None = None
    # Training clock (compile included, evaluation excluded) at which the metric crossed the target, interpolated
    # linearly between the last evaluation short of it and the first that reached it; steps likewise (a float).
    time_to_target_s: float | None = None
    steps_to_target: float | None = None
    final_metric: float | None = None
    best_metric: float | None = None
    num_params: int | None = None
    train_s: float | None = None  # training clock at the end
    wall_s: float | None = None  # whole process, evaluation and import included
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialResult:
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SpecError(
                f"trial result has schema_version {version!r}; this bakeoff reads version {SCHEMA_VERSION}. "
                "Re-run the trials with this version, or read them with the bakeoff that wrote them.")
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in raw.items() if k in known}
        data["status"] = Status.parse(data["status"], "status")
        return cls(**data)

    @property
    def run_spec(self) -> RunSpec:
        return RunSpec.from_dict(self.spec)
