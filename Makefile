# throttlescope — the two commands: `make run` and `make test`. Everything else is set up by them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run run-observability run-replicated test bench screenshots lint java venv clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: Java was not found. PySpark 4 needs a Java 17 or 21 runtime."; \
	  echo "       On Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless"; \
	  echo "       Or set JAVA_HOME to an existing JDK and put \$$JAVA_HOME/bin on PATH."; exit 1; }
	@java -version 2>&1 | head -1

# honcho hands out PORT per process (base + 100 per line): `web` is the first line, so it gets $PORT (8501).
run: $(STAMP) java
	$(VENV)/bin/honcho start -f Procfile -p $${PORT:-8501}

# The same processes plus Debian's prometheus scraping the control plane (deploy/prometheus.yml, with the control
# plane's address and data directory of THROTTLESCOPE_HOST/PORT/DATA_DIR: metrics/scrape_config.py); the dashboard
# then reads history from it. Needs `prometheus` on PATH (apt-get install prometheus).
run-observability: $(STAMP) java
	@command -v prometheus >/dev/null 2>&1 || { \
	  echo "error: prometheus was not found. On Debian/Ubuntu: sudo apt-get install -y prometheus"; exit 1; }
	@cat Procfile Procfile.observability > .Procfile.all
	PROMETHEUS_URL=http://127.0.0.1:$${PROMETHEUS_PORT:-9090} $(VENV)/bin/honcho start -f .Procfile.all -p $${PORT:-8501}

# The same demo served by three control-plane replicas on one address (SO_REUSEPORT), the shared limits' grants
# in Debian's redis-server (no persistence), policies in the one SQLite file of the data directory.
run-replicated: $(STAMP) java
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "error: redis-server was not found. On Debian/Ubuntu: sudo apt-get install -y redis-server"; exit 1; }
	$(VENV)/bin/honcho start -f Procfile.replicated -p $${PORT:-8501}

# The whole suite in two phases: the unit layer (pure, on a ManualClock) and the tests marked parallel (they measure
# no rate nor duration) on every core at once, a test file to a core (its module's servers start once); then every
# other test one at a time -- they run processes and measure rates, with margins for a noisy machine, not for a
# second test beside them. Both phases run and either fails the target. With PYTEST_ARGS, one run of what they select.
test: $(STAMP)
	@bash scripts/system-deps.sh
ifeq ($(strip $(PYTEST_ARGS)),)
	@status=0; \
	echo "$(PY) -m pytest -m 'unit or parallel' -n auto --dist loadfile"; \
	$(PY) -m pytest -m 'unit or parallel' -n auto --dist loadfile || status=$$?; \
	echo "$(PY) -m pytest -m 'not unit and not parallel'"; $(PY) -m pytest -m 'not unit and not parallel' || status=$$?; \
	exit $$status
else
	$(PY) -m pytest $(PYTEST_ARGS)
endif

bench: $(STAMP)
	$(PY) -m benchmarks --write-readme

# the README's pictures of the dashboard: the browser tests, saving each page to docs/screenshots/
screenshots: $(STAMP)
	@bash scripts/system-deps.sh
	THROTTLESCOPE_SCREENSHOTS=1 $(PY) -m pytest tests/dashboard/test_browser.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
