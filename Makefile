# The two set-up commands in the README are `make demo` and `make test`; .ci/run calls `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e '.[all,dev]'
	touch $(STAMP)

# Install everything, run the quick suite on the embedded data, write the report.
demo: $(STAMP)
	$(VENV)/bin/bakeoff run --suite quick

# Install everything and run the whole test suite (lint first: it is part of "green").
test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/cli_startup.py
	$(PY) bench/step_overhead.py
	$(PY) bench/quick_suite.py
	$(PY) bench/accumulation.py
	$(PY) bench/speech_corpus.py
	$(PY) bench/trial_footprint.py
	$(PY) bench/distributed.py
	$(PY) bench/compile_time.py
	$(PY) bench/inference_harness.py

clean:
	rm -rf $(VENV) results reports
