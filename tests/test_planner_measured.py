"""The planner against a real run: a few updates of the micro testbed on this CPU (``hero.dispatch.measure``), in a
subprocess with glibc's mmap threshold fixed so that its resident set follows the live tensors. What autograd keeps
for backward, the trainable parameter count and the update's memory must match the planner's figures for the very
micro-batches that ran; its time is checked loosely here (a shared machine), tightly in docs/planner/README.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "setting",
    [
        [],  # fp32, no checkpointing, one routable layer
        # the paper's setting: bf16 autocast (the router stays fp32), gradient checkpointing, two routable layers
        # (the memory state S crosses a checkpoint boundary)
        ["trainer.precision=bf16", "trainer.gradient_checkpointing=true", "layers=all"],
    ],
    ids=["fp32", "bf16-checkpointed"],
)
def test_planner_matches_a_real_micro_run(micro_cache, tmp_path, setting):
    """Kills: an activation term dropped or doubled (saved bytes off by more than 10 %: the router's content encoder
    alone is a third of them here), the router or adapters missing from the meta-built count, the backward or the
    router's FLOPs dropped (time off by 2×). The resident set is compared on the testbed and SmolLM2 in
    docs/planner (hundreds of MB); at the micro testbed's tens of MB the allocator's own noise is as large. The
    checkpointed bf16 case kills: the router's float32 counted at bf16 width, checkpointed blocks' activations
    counted as kept to the end of the forward."""
    overrides = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        "trainer.global_batch=16",
        "trainer.micro_batch=16",
        # the options the planner does not model (it says so: JobCost.unmodelled), off as the model assumes
        "trainer.labelled_logits=false",
        "trainer.pad_waste=1.0",
        "logger=none",
        *setting,
    ]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "1048576", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hero.dispatch.measure",
            "--updates",
            "2",
            "--out",
            str(tmp_path / "measured.json"),
            *overrides,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads((tmp_path / "measured.json").read_text())
    assert out["trainable_params"] == out["predicted_trainable_params"]
    for row in out["updates"]:
        assert abs(row["predicted_saved_bytes"] / row["saved_bytes"] - 1) < 0.10, row
        assert 0.5 < row["predicted_time_s"] / row["time_s"] < 2.0, row
