# foglab: `make run` runs the quickstart experiment, `make test` runs the tests.
# Both create the virtual environment in .venv on first use (Python >= 3.11 with venv).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# What `make run` needs (the model, no Spark or Docker SDK), and everything the tests need.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
NOTEBOOK_STAMP := $(VENV)/.installed-notebooks
# Test files run on this many processes, a file's tests on one (so its fixtures are made once;
# see tests/conftest.py). Two, as the host has cores: with three, CI's host was 92 % busy over
# the parallel phase and its tests failed by Spark's fixed 10 s for a Python worker to start
# and by emulated Pis late on their schedule. Two: the parallel phase took 28:46 rather than
# 26:37, with 1 failure in place of 5 and 4 errors (CI on 559e9d3 against 5858347).
TEST_WORKERS ?= 2

.PHONY: setup setup-run host run test test-fast notebook lint schemas bench bench-guard clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "foglab needs Python 3.11 or newer as $(PYTHON)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || \
		{ echo "could not create $(VENV): on Debian or Ubuntu, apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	@if [ -f $(DEV_STAMP) ] && [ $(DEV_STAMP) -nt pyproject.toml ]; then :; else \
		$(PY) -m pip install --quiet -e . ; fi
	@touch $@

$(DEV_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

# JupyterLab and what the notebooks run (the emulation's host side for those on containers),
# not the tests' extra (PySpark, pytest): the images carry their own Spark.
$(NOTEBOOK_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[emu,notebooks]'
	@touch $@

setup-run: $(RUN_STAMP)

setup: $(DEV_STAMP)

# What the tests use beyond Python: Mosquitto and a Java runtime (Spark tests); Docker Engine,
# binfmt for arm64 and debootstrap (emulation tests, through the host doctor). Root only.
host: setup
	@if [ "$$(id -u)" = 0 ]; then \
		missing=""; \
		command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || missing="$$missing mosquitto"; \
		command -v java >/dev/null || missing="$$missing openjdk-17-jre-headless"; \
		if [ -n "$$missing" ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		fi; \
		$(PY) -m emu.host --fix; \
	else \
		echo "not root: Spark and emulation tests run only where their services are present"; \
	fi

run: setup-run
	$(VENV)/bin/foglab run quickstart

# The test files on TEST_WORKERS processes, then those that need the host to themselves one
# at a time (marked `alone`, and the CPU-heavy files: tests/conftest.py); each run ends with its 15 slowest tests (pyproject's --durations), and the
# total time closes the output: where CI's minutes go.
test: setup host
	@start=$$(date +%s); status=0; \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" || status=$$?; \
		$(PY) -m pytest -m alone || status=$$?; \
		echo "tests: $$(( $$(date +%s) - start )) s in all"; exit $$status

test-fast: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not emu and not slow"

# JupyterLab on the notebooks (the results they write go to a temporary folder unless
# FOGLAB_RESULTS names one).
notebook: $(NOTEBOOK_STAMP)
	$(VENV)/bin/jupyter lab notebooks/

lint: setup
	$(VENV)/bin/ruff check .

# The JSON Schemas the catalog's files name in their first line (the YAML language server's
# modeline), written again after a change to a description's fields (tests/api/test_schema_files.py
# says when they are behind).
schemas: setup-run
	for kind in experiment topology workload; do \
		$(VENV)/bin/foglab schema --kind $$kind --out docs/schema/$$kind.json; done

bench: setup
	$(PY) benchmarks/sim_throughput.py
	$(PY) benchmarks/sim_scale.py
	$(PY) benchmarks/link_accuracy.py

# The model's benchmarks on this working tree against BASE (a revision; by default the last
# commit: what the uncommitted changes cost), in alternating rounds within GUARD_BUDGET
# seconds; fails on a benchmark over 10 % slower (docs/benchmarks.md, the slowdown guard).
BASE ?= HEAD
GUARD_BUDGET ?= 600
bench-guard: setup
	$(PY) benchmarks/guard.py --base $(BASE) --budget $(GUARD_BUDGET)

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis *.egg-info
