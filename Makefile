# `make demo` and `make test` each build .venv when it is missing, install what they need, then run.
# On a machine without CUDA the CPU wheels are used: torch==2.13.0 and triton==3.6.0 (Triton's
# interpreter runs the kernels on the CPU).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BASE_STAMP := $(VENV)/.tileflip-base

# The demo needs the [cuda] extra (cuda-python, NVRTC) only to run the CUDA C++ kernels, which needs a GPU.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
DEMO_EXTRAS := $(if $(HAS_GPU),[cuda])
# One stamp per kind of machine, so that a venv built without a GPU gains the extra once there is one.
DEMO_STAMP := $(VENV)/.tileflip-demo-$(if $(HAS_GPU),gpu,cpu)
TEST_STAMP := $(VENV)/.tileflip-test

.PHONY: demo test gpu-test clean

$(BASE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0 triton==3.6.0
	touch $(BASE_STAMP)

$(DEMO_STAMP): $(BASE_STAMP)
	$(PY) -m pip install --quiet -e '.$(DEMO_EXTRAS)'
	touch $(DEMO_STAMP)

# [cuda] on every machine: without a GPU the tests still compile each .cu file with NVRTC from its wheel.
$(TEST_STAMP): $(BASE_STAMP)
	$(PY) -m pip install --quiet -e '.[test,cuda]'
	touch $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/tileflip demo

# One pytest worker per core (pytest-xdist). worksteal hands each worker a contiguous half of the tests,
# which keeps a module's shared fixtures and its child processes on one worker, then rebalances at the end.
test: $(TEST_STAMP)
	$(PY) -m pytest -q -n auto --dist worksteal

# On a machine that already has torch and triton with a GPU (no venv, no network):
gpu-test:
	PYTHONPATH=src python3 -m pytest -m gpu -q

clean:
	rm -rf $(VENV) .pytest_cache
