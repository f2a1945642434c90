# Everything the CI checks is `make test`; `make demo` shows the scheduler on the embedded cluster.
# Both work from nothing: they create .venv and install into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck contracts unit bench e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sluice simulate examples/

test: lint typecheck contracts unit

lint: $(STAMP)
	$(BIN)/ruff check scheduler tests bench
	$(BIN)/ruff format --check scheduler tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench all

clean:
	rm -rf $(VENV) build dist *.egg-info
