"""Shared fixtures: composing the real Hydra configs, a seconds-to-build micro testbed, small random Llamas."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def compose_train(overrides: list[str]):
    """The config ``python train.py <overrides>`` would run (without Hydra's own keys)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


# `make test` runs the files in this order (xdist --dist loadfile --no-loadscope-reorder): the files with a test
# that needs the full embedded testbed (marker `testbed`) go last, so the workers run everything else while
# the background build (Makefile, PREBUILD) makes it. xdist's default reorders files by test count instead,
# which handed them out mid-run, and a worker waited on the build's lock while there was other work to do.
# Among those, the file with nothing but such tests (test_testbed_training.py: two minutes of LoRA on the sampled
# data, the last thing the build makes) goes last, and every other full-testbed check lives in test_testbed.py
# (four short ones, at its end). xdist hands a worker its next file once it has two tests or fewer left: the
# worker holding test_testbed.py waits on the build with four tests left and takes nothing more, so the LoRA
# file goes to the other worker, and when the build ends the LoRA and the four checks run side by side. With a
# full-testbed check in a second file (test_evaluation.py until 2026-12-03), the LoRA's worker also held that
# check, or the checks' worker took the LoRA after them: fresh-clone runs at e189dbc and 1011596 put 27–38 s of
# checks before the LoRA on the critical path.
def pytest_collection_modifyitems(items):
    marked, total = Counter(), Counter()
    for item in items:
        total[item.path] += 1
        marked[item.path] += bool(item.get_closest_marker("testbed"))
    items.sort(key=lambda item: (marked[item.path] > 0, marked[item.path] == total[item.path]))


@pytest.fixture(scope="session")
def micro_cache(tmp_path_factory) -> Path:
    """One cache root per test session holding the micro testbed (built on first use, ~20 s)."""
    return tmp_path_factory.mktemp("hero-cache")


# A random-weight Llama small enough for a unit test (nothing downloaded): six layers of width 64, so
# ``second_half`` routes layers 3-5. Tests that need another shape pass keyword overrides of these sizes.
SMALL = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)


def small_llama_config(**overrides):
    """``LlamaConfig`` of ``SMALL`` with ``overrides`` (any ``LlamaConfig`` field)."""
    from transformers import LlamaConfig

    return LlamaConfig(**{**SMALL, **overrides})


def small_llama(seed: int = 0, **overrides):
    """A ``LlamaForCausalLM`` of ``small_llama_config(**overrides)``, weights drawn after ``torch.manual_seed(seed)``,
    in eval mode."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(small_llama_config(**overrides)).eval()


def trained_looking(seed: int = 0):
    """``small_llama`` with HeRo on ``second_half``, its router putting gates on both sides of τ and its adapters
    non-zero (as after training; the initialisation puts every gate above τ and the adapters at zero)."""
    import torch

    import hero

    model = hero.attach(small_llama(seed), "second_half")
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and not name.endswith(".eta"):
                p.copy_(torch.randn(p.shape, generator=gen) / max(1, p.shape[-1]) ** 0.5)
        for head in (model.hero_router.local_head, model.hero_router.history_head):
            head[2].bias.zero_()
    return model


# The micro backbone is at chance on fact_select (often 0 of its few items, so Retain is undefined there):
# tests that check a micro run's Retain score it on heldout_ppl only.
MICRO_RETAIN = "eval.tasks.fact_select.retain=false"


@pytest.fixture
def micro_overrides(micro_cache, tmp_path) -> list[str]:
    """Overrides for a fast end-to-end run on the micro testbed, outputs under tmp_path."""
    return [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path / 'outputs'}",
        "trainer.max_steps=3",
        "trainer.global_batch=4",
        "trainer.micro_batch=2",
        "trainer.checkpoint_every=1",
        "trainer.log_every=1",
        "trainer.progress=false",
        "logger=none",
    ]
