# The only entry points: run, test, lint, proto, bench.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CONFIG ?=
# Where `make run` keeps its data (the default configuration uses ./data/journal).
RUN_DIR ?= .

.PHONY: run test lint proto proto-check bench clean venv

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Runtime install: re-run when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/activate
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/activate
	$(PIP) install --quiet -e '.[dev]'
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed

# Bytecode compiled ahead (quick when current): an editable install writes none, and an
# instance that compiles its modules at every start takes ~0.1 s longer to serve.
run: $(VENV)/.installed
	$(PY) -m compileall -q amps replication
	cd $(RUN_DIR) && exec $(abspath $(VENV))/bin/amps server $(if $(CONFIG),--config $(abspath $(CONFIG)),)

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q tests

lint: $(VENV)/.installed-dev proto-check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy amps replication

proto: $(VENV)/.installed-dev
	$(PY) -m amps.tools.genproto proto .

# Fails when the committed generated code differs from what `make proto` would write.
proto-check: $(VENV)/.installed-dev
	$(PY) -m amps.tools.genproto --check proto .

bench: $(VENV)/.installed-dev
	$(PY) -m compileall -q amps replication
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
