# throttlescope — the two commands: `make run` and `make test`. Everything else is set up by them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test bench lint java venv clean

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

run: $(STAMP) java
	$(VENV)/bin/honcho start -f Procfile

test: $(STAMP)
	@bash scripts/system-deps.sh
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks --write-readme

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
