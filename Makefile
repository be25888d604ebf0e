# Fresh machine: `make demo` runs the demo, `make test` runs the tests; both create .venv first.
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch: on this project's machines `torch==2.13.0` resolves to a CPU wheel already on disk.
# Elsewhere on Linux, ask PyTorch's CPU index so no CUDA wheels are downloaded, e.g.
#   make TORCH_INSTALL="torch --index-url https://download.pytorch.org/whl/cpu" test
TORCH_INSTALL ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install demo test test-all lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_INSTALL)
	$(BIN)/pip install -q -e ".[examples,test,export]"
	touch $@

demo: install
	$(BIN)/python examples/demo.py

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test-all: install
	$(BIN)/python -m pytest -q -m "slow or not slow"

clean:
	rm -rf $(VENV) build dist src/*.egg-info
