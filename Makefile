# The two set-up commands in the README are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test lint bench clean

# scripts/install.py: uv, given pip's own sources and constraints (41 s instead of 103 s), pip where uv cannot.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) scripts/install.py '.[all,dev]'
	touch $(STAMP)

# Install everything, run the quick suite on the embedded data, write the report.
demo: $(STAMP)
	$(VENV)/bin/bakeoff run --suite quick

# Install everything and run the whole test suite (lint first: it is part of "green"), a worker per core (at most
# 4), each pinned to its own cores: tests/conftest.py.
# Debian's slurm-wlm and munge, when this is root with apt (CI's machine): tests/test_slurm_executor.py then starts a
# real Slurm on this machine (scripts/slurm-local); without them those few tests skip, saying why (about 20 s).
# Debian's chromium likewise: tests/test_report_browser.py opens the report in it, headless; without it they skip.
test: $(STAMP)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v sbatch >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
	    || echo "slurm-wlm not installed: the real-Slurm tests will skip"; fi
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v chromium >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
	    || echo "chromium not installed: the browser tests of the report will skip"; fi
	$(VENV)/bin/ruff check src tests bench scripts examples
	$(PY) -m pytest -n auto --maxprocesses 4 --dist loadfile --durations=25

# The benches also compare with public reference implementations: the bench extra, and keras-hub without its
# tensorflow-text -> tensorflow dependency (which would install the full TensorFlow wheel over tensorflow-cpu).
$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) scripts/install.py '.[all,dev,bench]'
	$(PY) -m pip install --no-deps 'keras-hub==0.32.0'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) bench/cli_startup.py
	$(PY) bench/calibration.py
	$(PY) bench/step_overhead.py
	$(PY) bench/quick_suite.py
	$(PY) bench/accumulation.py
	$(PY) bench/speech_corpus.py
	$(PY) bench/text_encoding.py
	$(PY) bench/trial_footprint.py
	$(PY) bench/distributed.py
	$(PY) bench/compile_time.py
	$(PY) bench/inference_harness.py
	$(PY) bench/reference_efficiency.py --check
	$(PY) bench/reference_efficiency.py --store results/bakeoff.sqlite

clean:
	rm -rf $(VENV) results reports
