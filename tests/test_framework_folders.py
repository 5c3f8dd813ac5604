"""A framework is one folder, ``bakeoff/frameworks/<name>/``: the rule that no other module names a framework, the
folders' common shape, and a new folder seen everywhere without touching another file.

**The rule.** No module of bakeoff outside ``frameworks/<name>/`` mentions a framework, except files named for
their framework under ``workloads/`` (``workloads/**/<prefix>_*.py``: a workload's ``torch_model.py``, shared model
code such as ``workloads/common/torch_encoder.py``) and the exceptions listed in :data:`EXCEPTIONS` with why.
*Mentions* is read from the code (``ast``), not from its prose: an identifier (a name, an attribute, a function,
class or argument name, a keyword argument, an imported module or its alias) or a string literal without whitespace
(a key, a module path, an environment variable's name) whose words — split at every character that is not a letter
or a digit, so ``torch_model``, ``TF_CONFIG`` and ``"bakeoff.frameworks.jax.engine"`` count — include a framework's
name or model-file prefix (``torch``, ``tensorflow``, ``tf``, ``jax``, ``keras``). Docstrings, comments and strings
with whitespace (help texts and messages: what a user reads) are prose and do not count; nor does the workload API's
name ``keras_function`` (an attribute users declare on their Workload; a name, not a branch).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import bakeoff
import bakeoff.frameworks
from bakeoff.core import frameworks, registry

PACKAGE = Path(bakeoff.__file__).parent
FOLDERS = PACKAGE / "frameworks"

EXCEPTIONS = {
    "workloads/common/layouts.py": "the canonical-weight translations model files call by framework "
                                   "(layouts.gru_to_torch, layouts.NORM_NAMES['keras']): a documented API of model "
                                   "code, which converts between frameworks by nature",
}
"""Shared modules that may still name a framework, and why."""


def _names() -> set[str]:
    """Every framework's name and model-file prefix, as its records give them (``keras-jax`` gives keras and jax)."""
    out: set[str] = set()
    for name, info in frameworks.FRAMEWORKS.items():
        out |= set(name.split("-")) | {info.model_module.removesuffix("_model")}
    return out


NAMES = _names()


def _words(text: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", re.sub(r"keras_?function", "", text, flags=re.IGNORECASE).lower())) - {""}


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def mentions(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each mention of a framework in ``source`` (module docstring)."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        match node:
            case ast.Name(id=text) | ast.Attribute(attr=text) | ast.arg(arg=text) | ast.keyword(arg=str(text)):
                pass
            case ast.FunctionDef(name=text) | ast.AsyncFunctionDef(name=text) | ast.ClassDef(name=text):
                pass
            case ast.alias(name=name, asname=asname):
                text = f"{name} {asname or ''}"
            case ast.ImportFrom(module=str(text)):
                pass
            case ast.Constant(value=str(text)) if id(node) not in prose and not re.search(r"\s", text):
                pass
            case _:
                continue
        if _words(text) & NAMES:
            found.append((getattr(node, "lineno", 0), text))
    return found


def _exempt(relative: Path) -> bool:
    parts = relative.parts
    if parts[0] == "frameworks" or relative.as_posix() in EXCEPTIONS:
        return True
    return parts[0] == "workloads" and relative.name.split("_")[0] in NAMES


def test_the_names_checked_are_the_frameworks():
    # typed in: the rows bakeoff ships, and TensorFlow's model-file prefix
    assert {"torch", "tensorflow", "tf", "jax", "keras", "paddle"} <= NAMES


def test_the_rule_reads_identifiers_and_keys_not_prose():  # the checker itself, on made-up code
    source = textwrap.dedent('''
        """A docstring naming torch is prose."""
        import torch_helpers as helpers
        TF_CONFIG = "x"
        value = {"jax": 1}
        words = "help text naming keras and tf.function"  # a comment naming torch
        uses = frameworks.get(name).keras_function
        ''')
    assert [text for _, text in mentions(source)] == ["torch_helpers helpers", "TF_CONFIG", "jax"]


def test_no_module_outside_a_framework_folder_names_a_framework():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if not _exempt(relative) and (hits := mentions(path.read_text())):
            found[relative.as_posix()] = hits[:5]
    assert found == {}


def test_every_exception_is_still_needed():
    for relative in EXCEPTIONS:
        assert mentions((PACKAGE / relative).read_text()), f"{relative} names no framework now: drop its exception"


def test_each_folder_has_a_record_and_an_engine_and_its_records_name_its_own_modules():
    folders = frameworks.by_folder()
    assert list(folders) == ["torch", "tensorflow", "jax", "keras", "paddle"]  # the CLI's order (records' ORDER)
    assert folders["keras"] == ["keras-jax", "keras-torch", "keras-tensorflow"]
    modules = {folder: {p.stem for p in (FOLDERS / folder).glob("*.py")} for folder in folders}
    for folder, names in modules.items():
        assert {"__init__", "record", "engine"} <= names, folder
    # the native frameworks' folders hold the same modules (Keras 3 distributes, deploys and probes through its
    # backend's)
    assert modules["torch"] - {"__init__"} >= {"record", "engine", "distributed", "probes", "launch", "deploy",
                                                "runtime"}
    own = {"tensorflow": {"server", "optim"}, "paddle": {"launched_rank"}}  # what only that framework needs
    assert {folder: names for folder, names in modules.items() if folder != "keras"} == {
        folder: modules["torch"] | own.get(folder, set()) for folder in ("torch", "tensorflow", "jax", "paddle")}
    for folder, rows in folders.items():
        for row in rows:
            info = frameworks.get(row)
            own = [info.engine, info.deploy, info.probes, info.launch, *info.runtimes.values()]
            assert all(m.startswith(f"bakeoff.frameworks.{folder}.") for m in own if m), row


def test_a_record_module_imports_only_core_and_records():
    for path in FOLDERS.glob("*/record.py"):
        imported = {node.module for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bakeoff")}
        assert all(m.startswith("bakeoff.core.") or re.fullmatch(r"bakeoff\.frameworks\.\w+\.record", m)
                   for m in imported), (path, imported)


def test_discovering_the_frameworks_imports_none():
    code = ("import sys; from bakeoff.core import frameworks; from bakeoff.core.spec import Framework; "
            "frameworks.names(); list(Framework); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'keras', 'flax', 'paddle') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]"]


FAKE_RECORD = '''
from bakeoff.core.frameworks import FrameworkInfo, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision

ORDER = 99
RECORDS = (FrameworkInfo(
    name="fakefw", display="Fake", colour="#000000", modules=("fakefw_not_installed",), extra="fakefw",
    dists=("fakefw-not-installed",), engine="bakeoff.frameworks.fakefw.engine:FakeEngine", model_module="fakefw_model",
    executions=(Execution.EAGER,), execution_notes=frozen({Execution.EAGER: "fake eager"}),
    production=(Execution.EAGER,), compiled=(), precisions=(Precision.FP32,),
    launchers=frozen({Parallelism.NONE: "single"}), strategies=frozen({})),)
'''


@pytest.fixture
def fake_framework(tmp_path, monkeypatch):
    """A framework folder ``fakefw/`` (a record, nothing else) beside the shipped ones, for this test only."""
    (tmp_path / "fakefw").mkdir()
    (tmp_path / "fakefw" / "__init__.py").write_text("")
    (tmp_path / "fakefw" / "record.py").write_text(FAKE_RECORD)
    monkeypatch.setattr(bakeoff.frameworks, "__path__", [*bakeoff.frameworks.__path__, str(tmp_path)])
    frameworks.rediscover()
    yield tmp_path
    monkeypatch.undo()
    frameworks.rediscover()


def test_a_new_framework_folder_is_a_framework_without_touching_another_file(fake_framework):
    from bakeoff.core.spec import Framework, RunSpec

    assert frameworks.names() == ["torch", "tensorflow", "jax", "keras-jax", "keras-torch", "keras-tensorflow",
                                  "paddle", "fakefw"]
    assert Framework.FAKEFW.value == "fakefw"
    spec = RunSpec(workload="mnist", framework="fakefw", execution="eager", max_steps=1)
    assert spec.framework == "fakefw" and spec.label().startswith("fakefw")
    assert not registry.installed("fakefw")
    assert registry.not_installed("fakefw").endswith("pip install 'bakeoff[fakefw]'")


def test_bakeoff_list_lists_a_new_framework_folder(fake_framework):
    code = ("import bakeoff.frameworks, sys; bakeoff.frameworks.__path__.append(sys.argv[1]); "
            "from bakeoff.cli.main import main; sys.exit(main(['list']))")
    out = subprocess.run([sys.executable, "-c", code, str(fake_framework)], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("framework ")]
    assert [line.split(":")[0] for line in lines] == [
        "framework torch", "framework tensorflow", "framework jax", "framework keras-jax", "framework keras-torch",
        "framework keras-tensorflow", "framework paddle", "framework fakefw"]
    assert lines[-1] == ("framework fakefw: not installed (pip install 'bakeoff[fakefw]') (Fake); execution modes: "
                         "eager (fake eager); precisions: fp32; parallelism: none")  # the extra whole, not markup
