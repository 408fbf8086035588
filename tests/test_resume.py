"""Exact resume, proven: a resumed run starts at its checkpoint's update (not at 0) and ends as the uninterrupted run.

Training is exactly deterministic, so a "resume" that silently restarted from update 0 would end with the same
record; these tests also count the updates the resumed process ran. HeRo routes deterministically; random_skip
(adapters trained) draws its routing from the global torch RNG in training, so its record also depends on the RNG
state a checkpoint restores.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import compose_train
from safetensors.torch import load_file

import hero.training as training
from hero.pipeline import run

METHODS = ["hero", "random_skip"]  # random_skip: method.adapter=true by default (its adapters train)


def _overrides(micro_overrides, method):
    return [*micro_overrides, f"method={method}", *(["method.adapter=true"] if method == "random_skip" else [])]


def _trained(run_dir, method) -> dict[str, torch.Tensor]:
    state = run_dir / ("router" if method == "hero" else "trained")
    return {k: v for f in sorted(state.glob("*.safetensors")) for k, v in load_file(f).items()}


def _assert_same_run(resumed_dir, reference_dir, method):
    a = json.loads((reference_dir / "results.json").read_text())
    b = json.loads((resumed_dir / "results.json").read_text())
    ta, tb = _trained(reference_dir, method), _trained(resumed_dir, method)
    assert ta and ta.keys() == tb.keys()
    diff = max(float((ta[k] - tb[k]).abs().max()) for k in ta)
    loss = (a["train"]["final_loss"], b["train"]["final_loss"])
    assert diff == 0.0, f"trained tensors differ by up to {diff:.3g} (final loss {loss[0]!r} vs {loss[1]!r})"
    assert b["train"] == a["train"] and b["skip"] == a["skip"] and b["rho"] == a["rho"]


def _count_updates(monkeypatch) -> list[int]:
    """Spy on the loop's micro-batches: the list grows by one per micro-batch run."""
    calls: list[int] = []
    real = training.micro_batch_loss

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "micro_batch_loss", spy)
    return calls


def _resumed_step(out: str) -> int:
    found = re.findall(r"resumed from \S+step-(\d+)\.pt \(step (\d+)\)", out)
    assert len(found) == 1, out
    assert int(found[0][0]) == int(found[0][1])
    return int(found[0][1])


@pytest.mark.parametrize("method", METHODS)
def test_a_crashed_run_resumes_at_its_checkpoint_and_ends_as_the_uninterrupted_run(
    method, micro_overrides, tmp_path, monkeypatch, capsys
):
    overrides = [
        *_overrides(micro_overrides, method),
        "eval=none",
        "trainer.max_steps=4",
        "trainer.checkpoint_every=2",
    ]  # global_batch 4 = 2 micro-batches of 2
    run(compose_train([*overrides, f"paths.root={tmp_path}/ref"]), run_dir=tmp_path / "ref")
    real_save = training.save_checkpoint

    def save_then_crash(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("killed right after the first checkpoint")

    monkeypatch.setattr(training, "save_checkpoint", save_then_crash)
    cfg = compose_train([*overrides, f"paths.root={tmp_path}/crash"])
    with pytest.raises(KeyboardInterrupt):
        run(cfg, run_dir=tmp_path / "crash-1")
    monkeypatch.setattr(training, "save_checkpoint", real_save)
    capsys.readouterr()
    micro_batches = _count_updates(monkeypatch)
    run(cfg, run_dir=tmp_path / "crash-2")
    assert _resumed_step(capsys.readouterr().out) == 2
    assert len(micro_batches) == (4 - 2) * 2  # updates 3 and 4 only, two micro-batches each
    _assert_same_run(tmp_path / "crash-2", tmp_path / "ref", method)
