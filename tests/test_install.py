"""scripts/install.py, the Makefile's install step: pip's sources and constraints handed to uv as pip reads them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "install.py"


def _module():
    spec = importlib.util.spec_from_file_location("install_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pips_sources_become_uvs_and_a_missing_local_source_is_left_out(tmp_path):
    install = _module()
    wheels, index = tmp_path / "wheels", tmp_path / "simple"
    wheels.mkdir()
    index.mkdir()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    args = install.uv_arguments({
        "find-links": [str(wheels), str(tmp_path / "gone")],
        "extra-index-url": [f"file://{index}", f"file://{tmp_path}/missing", "https://example.org/simple"],
        "constraint": [str(constraints)]})
    assert args == ["--index-strategy", "unsafe-best-match", "--compile-bytecode", "--extra-index-url", f"file://{index}",
                    "--extra-index-url", "https://example.org/simple", "--find-links", str(wheels),
                    "--constraint", str(constraints)]


def test_pip_config_is_read_from_files_and_the_environment(tmp_path, monkeypatch):
    install = _module()
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///a/simple file:///b/simple\nfind-links = /w\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_CONSTRAINT", "/c.txt")
    settings = install.pip_settings()
    assert settings["extra-index-url"][-2:] == ["file:///a/simple", "file:///b/simple"]
    assert "/w" in settings["find-links"] and "/c.txt" in settings["constraint"]


def test_the_packages_uv_must_take_from_pypi_name_an_index_that_exists():
    import tomllib

    project = tomllib.loads((SCRIPT.parent.parent / "pyproject.toml").read_text())
    uv = project["tool"]["uv"]
    indexes = {index["name"]: index for index in uv["index"]}
    assert uv["sources"]["soundfile"] == {"index": "pypi"}
    assert indexes["pypi"]["url"] == "https://pypi.org/simple" and indexes["pypi"]["explicit"] is True
