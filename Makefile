# Everything the CI checks is `make test`; `make demo` shows the scheduler on the embedded cluster.
# Both work from nothing: they create .venv and install into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts unit bench e2e e2e-real clean

# The runtime dependencies at the versions of requirements.lock (the image's), so that
# what is tested is what ships; the dev tools take the newest that fit.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sluice simulate examples/demo/ --report .sluice/demo-report.html

test: lint typecheck contracts unit

lint: $(STAMP)
	$(BIN)/ruff check scheduler tests bench e2e
	$(BIN)/ruff format --check scheduler tests bench e2e

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench all

# The end-to-end suite against the cluster named by KUBECONFIG (skipped without one).
# `make test` runs the same suite against the in-process API emulator.
e2e: $(STAMP)
	cd e2e && ../$(BIN)/pytest

# The end-to-end suite against a real kube-apiserver started for the run from
# ../shared/k8s (up, the suite, down); skipped with a message when it is absent.
e2e-real: $(STAMP)
	e2e/run-real-server

clean:
	rm -rf $(VENV) build dist *.egg-info
