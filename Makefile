# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sgpc-installed

.PHONY: demo test test-slow bench install clean docs docs-quick

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

# The documentation site (Sphinx; not part of `make test`): warnings are errors, every gallery example runs,
# then the built HTML's internal links and images are checked. `make docs-quick` (CI) runs two examples.
DOCS_STAMP := $(VENV)/.sgpc-docs-installed
SPHINX     := $(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install -q -e '.[docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	OMP_NUM_THREADS=1 $(SPHINX)
	$(BIN)/python docs/check_links.py docs/_build/html

docs-quick: $(DOCS_STAMP)
	SGPC_DOCS_QUICK=1 OMP_NUM_THREADS=1 $(SPHINX)
	$(BIN)/python docs/check_links.py docs/_build/html

bench: $(STAMP)
	$(BIN)/python benchmarks/perf/vi_throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache docs/_build docs/auto_examples docs/sg_execution_times.rst
