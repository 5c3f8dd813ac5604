"""The flags that describe trials, shared by ``run``, ``train`` and ``deploy``, and the values they parse to (the
suite fields of :mod:`bakeoff.plan.suite`)."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_STORE = Path("results/bakeoff.sqlite")
DEFAULT_REPORTS = Path("reports")

OVERRIDE_RULES = """\
With --workload (and no --suite) these describe ad-hoc trials; [defaults] in brackets.
With a suite (--suite, or the quick suite when neither is given) each flag given overrides the suite in every
trial, as if written into it: the field is set everywhere and dropped from the matrix and the variants (the
excludes still apply); a list flag (--framework torch) becomes the matrix's list; a budget flag replaces the
whole budget; --data and --set merge key by key; --repeats sets every variant's repeats. The run prints what was
overridden and stores the trials as suite NAME+HASH, apart from the suite's own. Refused with a suite (exit 2):
--workload (a suite names its workloads), and --target when the suite runs several workloads."""


def comma_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def add_trial_options(parser: argparse.ArgumentParser, rules: str = "") -> None:
    """The flags that describe trials, shared by run, train and deploy."""
    grid = parser.add_argument_group("trial options", rules or OVERRIDE_RULES)
    grid.add_argument("--workload", help="workload name, see `bakeoff list` (ad hoc only)")
    grid.add_argument("--preset", help="size preset, see `bakeoff list --presets` [tiny]")
    grid.add_argument("--set", dest="config", action="append", metavar="KEY=VALUE",
                      help="override a field of the preset, repeatable: d_model=128, num_layers=4, num_heads=8, "
                           "seq_len=256, dropout=0.2, learning_rate=3e-4, filters=16,32 (`bakeoff list --presets` "
                           "names each workload's fields)")
    grid.add_argument("--target", type=float, help="quality target on the test split [the workload's for the preset, "
                                                   "measured on the shipped data; derived from user data]")
    from bakeoff.core import frameworks  # framework-free records (no framework imported)
    from bakeoff.core.choices import Execution, Parallelism
    from bakeoff.plan.suite import ADHOC_MATRIX

    grid.add_argument("--framework", type=comma_list,
                      help=f"comma-separated frameworks: {', '.join(frameworks.names())} (`bakeoff list` says what "
                           f"each runs) [{','.join(ADHOC_MATRIX['framework'])}: those the workload has a model in]")
    # The native frameworks' words, from their records: each graph note starts with its compiler's API.
    native = [frameworks.get(name) for name in frameworks.native()]
    compilers = ", ".join(info.execution_notes[Execution.GRAPH].split()[0] for info in native)
    production = ", ".join(f"{info.display} {info.production[0].value}" for info in native)
    with_xla = " / ".join(info.display for info in native if Execution.XLA in info.executions)
    grid.add_argument("--execution", type=comma_list,
                      help=f"comma-separated modes: eager, graph (compiled: {compilers}), xla ({with_xla}), or "
                           f"production: each framework in the mode its users train in ({production}) "
                           f"[{','.join(ADHOC_MATRIX['execution'])}]")
    grid.add_argument("--precision", type=comma_list, help="comma-separated: fp32, bf16, fp16 [fp32]")

    def strategies(parallelism: Parallelism) -> str:
        return " / ".join(info.strategies[parallelism] for info in native if parallelism in info.strategies)

    with_ps = " / ".join(info.display for info in native if Parallelism.PARAMETER_SERVER in info.launchers)
    grid.add_argument("--parallelism", type=comma_list,
                      help="comma-separated: none, data_parallel (one machine, N replicas: "
                           f"{strategies(Parallelism.DATA_PARALLEL)}), multi_worker (N worker processes: "
                           f"{strategies(Parallelism.MULTI_WORKER)}), parameter_server ({with_ps}) [none]")
    grid.add_argument("--workers", type=comma_list,
                      help="comma-separated replica / worker counts, e.g. 1,2; --batch-size is the global batch, split "
                           "evenly over them [1]")
    grid.add_argument("--repeats", type=repeats,
                      help="repeats per configuration, seeds seed..seed+N-1; or 'auto': 3, then one more at a time "
                           "where a verdict is unsettled, up to --max-repeats (each look's intervals at a "
                           "group-sequential level, so stopping early makes no chance win likelier) [1]")
    grid.add_argument("--max-repeats", type=int, help="with --repeats auto: at most this many runs per "
                                                       "configuration [10]")
    grid.add_argument("--batch-size", help="examples per micro-batch, or 'auto': the largest that fits under "
                                           "--memory-cap [32]")
    grid.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step [1]")
    grid.add_argument("--memory-cap", help="with --batch-size auto on CPU: resident-memory cap per trial, e.g. 6GiB "
                                           "[half the machine's memory]")
    grid.add_argument("--batch-step", type=int, help="with --batch-size auto: grow by this step, not by doubling")
    grid.add_argument("--checkpoint-every", type=int,
                      help="checkpoint every N steps; an interrupted trial resumes from its last checkpoint [0: none]")
    grid.add_argument("--max-steps", type=int, help="step budget per trial")
    grid.add_argument("--max-epochs", type=float, help="epoch budget per trial [1 when no budget is given]")
    grid.add_argument("--max-seconds", type=float, help="training-clock budget per trial")
    grid.add_argument("--eval-every", type=int, help="evaluate every N steps (off the clock) [25]")
    grid.add_argument("--stop-at-target", action=argparse.BooleanOptionalAction,
                      help="stop a trial once it reaches the target [no]")
    grid.add_argument("--seed", type=int, help="seed of the first repeat [0]")
    grid.add_argument("--threads", type=int, help="CPU threads per trial [0: all cores]")
    grid.add_argument("--device", help="auto, cpu or cuda [auto]")
    grid.add_argument("--data", action="append", metavar="KEY=VALUE",
                      help="data option, repeatable. text_classifier: train=FILE test=FILE (.csv, .tsv or .jsonl, "
                           "optionally .gz) text_column=... label_column=... test_fraction=0.2 split_seed=0 "
                           "skip_bad_rows=false (true: leave out rows without text or label, counted in the "
                           "report); speech_ctc: train=MANIFEST "
                           "test=MANIFEST (test alone: train on the embedded corpus; test=cards: 5 real shipped "
                           "recordings) batching=pad|bucket pad_multiple=N; mnist: dir=FOLDER (the four MNIST "
                           "IDX files); autoencoder: seed=N")


def repeats(text: str) -> int | str:
    """``--repeats``: a number, or ``auto``."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of repeats or 'auto', got {text!r}") from None


def key_values(items: list[str], what: str) -> dict[str, str]:
    from bakeoff.core.spec import SpecError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{what} must look like KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# Flags that describe trials (argparse dest = suite field or override key, see bakeoff.plan.suite.check_overrides).
TRIAL_FLAGS = ("workload", "preset", "config", "target", "framework", "execution", "precision", "parallelism",
               "workers", "repeats", "max_repeats",
               "batch_size", "grad_accum", "memory_cap", "batch_step", "checkpoint_every", "max_steps", "max_epochs",
               "max_seconds", "eval_every", "stop_at_target", "seed", "threads", "device", "data")


def trial_flags(args: argparse.Namespace) -> dict:
    """The trial flags given on the command line (argparse leaves the others None), as suite values."""
    given = {name: getattr(args, name) for name in TRIAL_FLAGS if getattr(args, name) is not None}
    for name, flag in (("data", "--data"), ("config", "--set")):
        if name in given:
            given[name] = key_values(given[name], flag)
    if "workers" in given:
        given["workers"] = [int(w) if w.isdigit() else w for w in given["workers"]]
    size = given.get("batch_size")
    if size is not None and size.strip().isdigit():
        given["batch_size"] = int(size)
    return given
