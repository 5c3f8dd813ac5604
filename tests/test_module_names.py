"""No two modules of bakeoff share a name, so a module's name says which one it is (issue #53: four ``parity.py`` and
four ``claims.py`` once meant a reader had to look at the folder to know which was meant).

The stated exceptions:

- ``__init__`` and ``__main__``: Python's own names.
- ``main``: a process's entry point — ``cli/main.py`` the ``bakeoff`` command, ``trial/main.py`` the child's
  ``python -m bakeoff.trial``.
- A family of sibling folders with the same module names by design (Keras 3's ``backend/<name>/trainer.py``,
  AlgoPerf's ``workloads/<w>/<w>_<framework>/workload.py``): every workload's folder (``workloads/<w>/workload.py``,
  ``<framework>_model.py``, beside the contract ``core/workload.py``) and every framework's (``frameworks/<name>/``).
  A module there is named by its folder and its name together, so it is left out of the count.
- ``cli/<command>.py`` is named by its command (``bakeoff claims`` → ``cli/claims.py``): that is where a reader looks
  for a command. So no other module takes a command's name.

A pair still to be resolved is listed in :data:`KNOWN`, with its reason; the list can only shrink.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import bakeoff

PACKAGE = Path(bakeoff.__file__).parent

PYTHON_NAMES = {"__init__", "__main__"}
ENTRY_POINT = "main"
FAMILIES = {"workloads": "workload.py", "frameworks": None}
"""Packages one folder a thing: a member is a subfolder (of ``workloads/``: one with a ``workload.py``, not
``common/``), its modules named alike in every member."""

KNOWN: dict[str, str] = {}
"""Names still shared, each with why; a fixed one must leave it (test_the_known_shared_names_are_still_shared)."""


def _in_family(relative: Path) -> bool:
    """``workloads/mnist/torch_model.py`` is (a member folder's module); ``workloads/common/layouts.py`` is not."""
    parts = relative.parts
    if len(parts) < 3 or parts[0] not in FAMILIES:
        return False
    marker = FAMILIES[parts[0]]
    return marker is None or (PACKAGE / parts[0] / parts[1] / marker).is_file()


def _modules() -> dict[str, list[Path]]:
    """Each module name → the files (relative to the package) that carry it, family members left out."""
    out: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) >= 2 and path.stem not in PYTHON_NAMES and not _in_family(relative):
            out[path.stem].append(relative)
    return out


def test_no_two_modules_share_a_name():
    shared = {name: [str(p) for p in paths] for name, paths in _modules().items()
              if len(paths) > 1 and name != ENTRY_POINT and name not in KNOWN}
    assert shared == {}


def test_the_entry_points_are_the_only_mains():
    assert sorted(str(p) for p in _modules()[ENTRY_POINT]) == ["cli/main.py", "trial/main.py"]


def test_no_module_takes_a_commands_name():
    commands = {p.stem for p in (PACKAGE / "cli").glob("*.py")} - PYTHON_NAMES - {"main", "console", "options"}
    assert {"claims", "parity", "plan", "run"} <= commands  # the commands this rule was written for
    taken = sorted(str(p) for name in commands for p in _modules()[name] if p.parts[0] != "cli")
    assert taken == []


def test_the_known_shared_names_are_still_shared():
    """A name fixed must leave KNOWN, so the list only shrinks."""
    modules = _modules()
    assert sorted(name for name in KNOWN if len(modules.get(name, [])) < 2) == []


def test_only_the_member_folders_of_a_family_are_left_out():
    assert _in_family(Path("workloads/mnist/torch_model.py")) and _in_family(Path("workloads/mnist/workload.py"))
    assert not _in_family(Path("workloads/common/keras_function_model.py"))
    assert not _in_family(Path("workloads/skeleton.py"))
    assert [str(p) for p in _modules()["workload"]] == ["core/workload.py"]
