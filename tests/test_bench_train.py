"""The training benchmark (``python -m hero.bench train``): config errors, phase marks, and a real SmolLM2 update."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import CONF, REPO
from hydra import compose, initialize_config_dir

from hero.bench.train import PHASES, PhaseClock, check
from hero.errors import ConfigError


def bench_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="bench_train", overrides=overrides)


@pytest.mark.parametrize(
    "override, message",
    [
        ("samples=mine", "samples='mine': allowed values are standin, bed"),
        ("recipe=x100", "recipe='x100': allowed values are full, x10, micro"),
        ("clock=cpu", "clock='cpu': allowed values are wall, process"),
        ("+variants.x={precision: fp16}", r"variants.x.precision='fp16': allowed values are fp32, bf16"),
        ("+variants.x={ffn_skip: 2}", r"variants.x.ffn_skip=2: must lie in \[0, 1\]"),
        ("+variants.x={lr: 2}", r"variants.x: unknown keys \['lr'\]"),
    ],
)
def test_bad_bench_options_are_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        check(bench_cfg([override]))


def test_phase_marks_add_up_to_the_update():
    clock = PhaseClock(torch.device("cpu"), "wall")
    clock.start()
    clock.forward_start()  # collate → "other"
    clock.mark("prefix")
    clock.mark("routable_fwd")
    clock.forward_start()  # a second sub-batch: the first one's head ran in between
    assert clock.previous == "head_fwd"
    clock.mark("head_fwd")
    clock.head_grad_ready()  # first grad at the head: the loss's own backward
    assert clock.previous == "head_bwd"
    clock.mark("routable_bwd")
    clock.head_grad_ready()  # the next sub-batch's head: what ran before was a routable backward
    assert clock.previous == "routable_bwd"
    clock.mark("optimizer")
    assert set(clock.totals) == set(PHASES)
    assert sum(clock.totals.values()) == pytest.approx(clock.total(), abs=1e-9)


def test_cli_times_a_real_smollm2_update(tmp_path):
    """Two variants, one update each, on the converted SmolLM2 backbone (converted once into the cache)."""
    out = tmp_path / "bench"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hero.bench",
            "train",
            "repeats=1",
            "warmup=0",
            "updates=1",
            "global_batch=2",
            "standin_samples=8",
            "~variants",
            "+variants={plain: {}, cheap: {labelled_logits: true, pad_waste: 0.0, prefix_cache: true}}",
            f"out_dir={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads((out / "bench_train.json").read_text())
    plain, cheap = data["variants"]["plain"], data["variants"]["cheap"]
    assert plain["phases_unaccounted_s"] < 1e-6 and cheap["phases_unaccounted_s"] < 1e-6
    assert plain["phases_s"]["prefix"] > 0 and cheap["phases_s"]["prefix"] < plain["phases_s"]["prefix"] / 10
    assert cheap["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert cheap["padding_share"] == 0.0 <= plain["padding_share"]
    # the ceiling: plain's time over each variant's own work at the SGEMM rate (no prefix where it is cached)
    assert plain["ceiling_vs_plain"] == pytest.approx(1 / plain["flop_ideal_fraction"], rel=1e-9)
    assert (
        cheap["required_ideal_s"] < plain["required_ideal_s"] and cheap["ceiling_vs_plain"] > plain["ceiling_vs_plain"]
    )
    assert "avx2" in data["cpu_flags"] or data["cpu_flags"] == []
    assert data["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "cheap" in result.stdout
