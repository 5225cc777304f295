# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sgpc-installed
# torch, installed only where the venv has none (an existing torch, CPU or CUDA, is kept). The default is the
# CPU build 2.13.0, which this machine's pip takes from a wheel on local disk. Elsewhere pip's default index
# gives the CUDA build for that pin on Linux: pass the CPU index, e.g.
#   make TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# or install the torch you want into .venv first (README, "Install").
TORCH_SPEC     ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# `make test-min`: the declared lower bounds (tools/min_requirements.py) in a venv of their own
VENV_MIN := .venv-min

.PHONY: demo test test-slow test-min bench install clean docs docs-quick

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
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

# The suite against the lowest declared versions of numpy, scipy, scikit-learn, tqdm, pyarrow and matplotlib.
# torch is $(TORCH_SPEC) as for `make` (the local CPU wheel); `make test-min TORCH_SPEC=torch==2.3.0` tests the floor
# (PyPI's 2.3.0 is a CUDA build, about 5 GB installed; it runs on the CPU).
test-min:
	@test -x $(VENV_MIN)/bin/python || $(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/pip install -q $(TORCH_PIP_ARGS) '$(TORCH_SPEC)'
	$(VENV_MIN)/bin/python tools/min_requirements.py > $(VENV_MIN)/requirements-min.txt
	$(VENV_MIN)/bin/pip install -q -r $(VENV_MIN)/requirements-min.txt pytest hypothesis
	$(VENV_MIN)/bin/pip install -q --no-deps -e .
	@$(VENV_MIN)/bin/python -c "import importlib.metadata as m; print('test-min:', ', '.join(f'{p} {m.version(p)}' \
		for p in ('torch', 'numpy', 'scipy', 'scikit-learn', 'tqdm', 'pyarrow', 'matplotlib')))"
	$(VENV_MIN)/bin/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/perf/vi_throughput.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache docs/_build docs/auto_examples docs/sg_execution_times.rst

	rm -rf $(VENV) $(VENV_MIN) build src/*.egg-info .pytest_cache
