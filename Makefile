# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sgpc-installed

.PHONY: demo test test-slow bench install clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# torch is pinned to the CPU wheel on local disk; an unpinned torch pulls a multi-GB CUDA build.
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,plot,parquet]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/sgpc demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/perf/vi_throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
