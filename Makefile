# Two entry points for a fresh Debian machine with Python 3.11+:
#   make demo   set up a venv and play a ClusterPlugin's whole lifecycle in memory
#   make test   set up a venv and run lint, types and the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint types pytest bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/function-cluster-plugin simulate examples/selfhosted-full/xr.yaml \
		--required examples/selfhosted-full/required

lint: $(STAMP)
	$(BIN)/ruff check function tests scripts

types: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

test: lint types pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
