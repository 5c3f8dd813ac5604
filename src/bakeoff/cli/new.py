"""``bakeoff new workload NAME``: the flags into :func:`bakeoff.workloads.skeleton.new_workload`, then what was
written and what to run next. Exit 0 when written, 2 on bad input (nothing written)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bakeoff.cli.options import comma_list
from bakeoff.core import frameworks


def _help() -> str:
    """What ``bakeoff new workload --help`` says: the model files and the parity command follow the framework
    records (a framework's folder adds its file here; no framework is imported)."""
    native = frameworks.native()
    models = [f"NAME/{frameworks.get(name).model_module}.py" for name in native]
    described = ["one model file per --framework, the same class name in each: loss as (sum, count), never",
                 "a mean; weights under the canonical names through a table of names",
                 "(bakeoff.workloads.common.layouts; Flax names its modules as the canonical weights)"]
    lines = [f"  {model:<22} {words}".rstrip() for model, words in
             zip(models, described + [""] * (len(models) - len(described)), strict=False)]
    return f"""\
Writes into --dir (the current folder by default) a workload package NAME/ that runs as written, a small MLP
telling apart Gaussian blobs generated from a fixed seed, for you to make yours. Each file's docstrings state the
contract it keeps:
  NAME/__init__.py
  NAME/workload.py       the framework-free half: presets, the data as numpy, initial weights under canonical
                         names, the metric, targets (to be measured: the comment says how), FLOPs
{chr(10).join(lines)}
  NAME/keras_model.py    with --framework keras: one file for keras-jax, keras-torch and keras-tensorflow
  NAME/suite.toml        the bake-off: each framework in the mode its users train in, 3 repeats
  NAME/test_parity.py    pytest: `bakeoff parity` on the ports must pass
  NAME/README.md         what to run next, and how to make it yours

Next, from the folder that holds NAME/ (bakeoff finds the workload by module under the current folder), e.g. for
NAME my_task:
  bakeoff parity --workload my_task.workload:MyTaskWorkload --framework {",".join(native)}
  bakeoff run --suite my_task/suite.toml --max-steps 20 --repeats 1
  pytest my_task/test_parity.py

Refused with exit 2, nothing written: a NAME that is not a lowercase Python identifier (a letter, then letters,
digits or underscores), a Python keyword, a shipped or installed workload's name, or a module `import NAME`
already finds; a DIR/NAME that exists (nothing is overwritten); an unknown framework."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    new = sub.add_parser("new", help="write a new workload package that runs, to make yours",
                         description="Write a new workload package: `bakeoff new workload NAME` (see its --help).")
    kinds = new.add_subparsers(dest="kind", metavar="KIND", required=True)
    workload = kinds.add_parser("workload", help="a workload package: workload, models, suite, parity test",
                                description=_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    workload.add_argument("name", metavar="NAME", help="the workload's name and package, e.g. my_task")
    workload.add_argument("--framework", type=comma_list, default=frameworks.native(),
                          help="comma-separated, the first is parity's reference: "
                               f"{', '.join(frameworks.by_folder())} [{','.join(frameworks.native())}]")
    workload.add_argument("--dir", type=Path, default=Path("."),
                          help="the folder NAME/ is written into, created when missing [the current folder]")


def cmd_new(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from bakeoff.cli.console import console
    from bakeoff.workloads.skeleton import new_workload

    written = new_workload(args.name, args.framework, args.dir)
    console.print(f"wrote {escape(str(written.folder))}/: {escape(', '.join(written.files))}", soft_wrap=True)
    where = written.folder.parent
    console.print("next" + ("" if where == Path(".") else f", from {escape(str(where))}") + ":")
    for command, what in written.next_steps():
        console.print(f"  {escape(command)}   [dim]# {escape(what)}[/]", soft_wrap=True)
    return 0
