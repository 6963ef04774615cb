# The only entry points: run, test, test-fast, lint, proto, bench, sim.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CONFIG ?=
# Where `make run` keeps its data (the default configuration uses ./data/journal).
RUN_DIR ?= .

# requires-python in pyproject.toml; checked before a virtualenv is made with anything older.
MIN_PYTHON := 3.11
# A shell command that fails, saying which interpreter to use, when $(1) is older than MIN_PYTHON.
python_ok = $(1) -c 'import sys; sys.exit(sys.version_info < ($(subst .,$(comma),$(MIN_PYTHON)),))' \
	2>/dev/null || { \
	found=$$(for p in python3.13 python3.12 python3.11; do command -v $$p >/dev/null && echo $$p && break; done); \
	echo "amps needs Python >= $(MIN_PYTHON); $(1) is $$($(1) --version 2>&1 || echo missing)." >&2; \
	echo "$(2)Use a newer one: make PYTHON=$${found:-python3.11} $(MAKECMDGOALS)" >&2; \
	exit 1; }
comma := ,

.PHONY: run test test-fast lint proto proto-check bench clean venv docker-up docker-down cluster sim

$(VENV)/bin/activate:
	@$(call python_ok,$(PYTHON),)
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(PIP) install --quiet --upgrade pip || { rm -rf $(VENV); exit 1; }

# Runtime install: re-run when pyproject.toml changes. A .venv left by an older Python (made
# before this check existed) is named, with the way out.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/activate
	@$(call python_ok,$(PY),$(VENV) was made with it: run make clean first. )
	$(PIP) install --quiet -e .
	touch $@

# The spark extra too (CI runs the Spark tests). editable_mode=compat puts the checkout itself on
# sys.path, where Spark's lookup of `pyspark_*` modules (pyspark_amps) can list it.
$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/activate
	@$(call python_ok,$(PY),$(VENV) was made with it: run make clean first. )
	$(PIP) install --quiet --config-settings editable_mode=compat -e '.[dev,spark]'
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed

# Bytecode compiled ahead (quick when current): an editable install writes none, and an
# instance that compiles its modules at every start takes ~0.1 s longer to serve.
run: $(VENV)/.installed
	$(PY) -m compileall -q amps replication
	cd $(RUN_DIR) && exec $(abspath $(VENV))/bin/amps server $(if $(CONFIG),--config $(abspath $(CONFIG)),)

# Three local instances replicating to each other (deploy/amps-N.xml, journals in ./data);
# Ctrl-C stops them all. deploy/prometheus.yml scrapes their admin ports.
cluster: $(VENV)/.installed
	$(PY) -m compileall -q amps replication
	cd $(RUN_DIR) && exec $(abspath $(PY)) -m amps.tools.cluster $(abspath deploy/amps-1.xml) $(abspath deploy/amps-2.xml) $(abspath deploy/amps-3.xml)

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q tests

# Everything but the Spark tests (a Spark session takes ~10 s to start, more on a busy machine).
test-fast: $(VENV)/.installed-dev
	$(PY) -m pytest -q -m "not spark" tests

# The seeded cluster simulation (tests/simulation/): SEEDS=n runs n seeds from FIRST (0), SEED=n replays one
# seed with its transcript, PROXIED=1 runs with proxied transfer on one survivor, INSTANCES=n
# simulates n instances (3 by default), TOPOLOGY=line joins them in a line (mesh by default),
# FAILOVER=1 lets publishers fail over across sync destinations (the CI seeds do, issue 9).
SEEDS ?= 1000
sim: $(VENV)/.installed-dev
	$(PY) -m tests.simulation.cluster_sim $(if $(SEED),--seed $(SEED) -v,--seeds $(SEEDS) $(if $(FIRST),--first $(FIRST),)) $(if $(PROXIED),--proxied,) \
		$(if $(INSTANCES),--instances $(INSTANCES),) $(if $(TOPOLOGY),--topology $(TOPOLOGY),) \
		$(if $(FAILOVER),--failover,)

lint: $(VENV)/.installed-dev proto-check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy amps replication tests bench

proto: $(VENV)/.installed-dev
	$(PY) -m amps.tools.genproto proto .

# Fails when the committed generated code differs from what `make proto` would write.
proto-check: $(VENV)/.installed-dev
	$(PY) -m amps.tools.genproto --check proto .

bench: $(VENV)/.installed-dev
	$(PY) -m compileall -q amps replication
	$(PY) -m bench

# A Docker engine of our own and the test base images, for the tests marked `docker` (root).
docker-up:
	bash tests/docker/engine.sh up

docker-down:
	bash tests/docker/engine.sh down

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
