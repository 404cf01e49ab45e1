# `make demo` and `make test` each build .venv when it is missing, install what they need, then run.
# On a machine without CUDA the CPU wheels are used: torch==2.13.0 and triton==3.6.0 (Triton's
# interpreter runs the kernels on the CPU).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tileflip-installed

.PHONY: demo test gpu-test clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0 triton==3.6.0
	$(PY) -m pip install --quiet -e '.[test,cuda]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tileflip demo

test: $(STAMP)
	$(PY) -m pytest -q

# On a machine that already has torch and triton with a GPU (no venv, no network):
gpu-test:
	PYTHONPATH=src python3 -m pytest -m gpu -q

clean:
	rm -rf $(VENV) .pytest_cache
