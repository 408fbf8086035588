"""Exact resume, proven: a resumed run starts at its checkpoint's update (not at 0) and ends as the uninterrupted run.

Training is exactly deterministic, so a "resume" that silently restarted from update 0 would end with the same
record; these tests also count the updates the resumed process ran. HeRo routes deterministically; random_skip
(adapters trained) draws its routing from the global torch RNG in training, so its record also depends on the RNG
state a checkpoint restores. A preemption (submitit's USR2 handler, ``hero.dispatch.job``) can land anywhere in an
update: between the micro-batches of one update or inside its optimizer step.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
import torch
from conftest import compose_train
from safetensors.torch import load_file

import hero.training as training
from hero import preemption
from hero.dispatch.job import HydraJob
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


def _preempt_here():
    """What SLURM does to a job: USR2 to the process; the handler (set up by the test) saves and exits."""
    os.kill(os.getpid(), signal.SIGUSR2)


@pytest.fixture
def submitit_usr2_handler():
    """submitit's USR2 handler on a node: ``HydraJob.checkpoint`` (the loop's save hooks), then requeue and exit."""

    def handler(signum, frame):
        HydraJob(None, None, None).checkpoint()
        raise SystemExit(-1)  # submitit: requeue, then sys.exit(-1)

    previous = signal.signal(signal.SIGUSR2, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR2, previous)
        preemption._PREEMPTED.clear()


@pytest.mark.parametrize("when", ["second micro-batch", "optimizer step"])
@pytest.mark.parametrize("method", METHODS)
def test_a_run_preempted_inside_an_update_resumes_at_the_last_completed_one_exactly(
    method, when, micro_overrides, tmp_path, monkeypatch, capsys, submitit_usr2_handler
):
    """USR2 lands in update 2 of 3 (global_batch = 2 × micro_batch): during its second micro-batch, after the first
    drew its routing noise, or in its optimizer step, after the parameters moved. The save hook must write a
    completed update as it ended: update 1 (its parameters, optimizer, scheduler, and the RNG state the
    uninterrupted run had when update 2 began, not the one update 2's draws advanced), or, from the optimizer step,
    update 2 once it has completed, never update 1's step count with update 2's parameters."""
    overrides = [
        *_overrides(micro_overrides, method),
        "eval=none",
        "trainer.max_steps=3",
        "trainer.checkpoint_every=100",  # no periodic checkpoint: the resume reads the preemption's
    ]
    run(compose_train([*overrides, f"paths.root={tmp_path}/ref"]), run_dir=tmp_path / "ref")
    cfg = compose_train([*overrides, f"paths.root={tmp_path}/preempted"])
    calls: list[int] = []
    if when == "second micro-batch":
        real = training.micro_batch_loss

        def signalled(*args, **kwargs):
            out = real(*args, **kwargs)
            calls.append(1)
            if len(calls) == 4:  # update 2, micro-batch 2 (its routing drawn)
                _preempt_here()
            return out

        monkeypatch.setattr(training, "micro_batch_loss", signalled)
    else:
        real_step = torch.optim.AdamW.step

        def signalled(self, *args, **kwargs):
            out = real_step(self, *args, **kwargs)
            calls.append(1)
            if len(calls) == 2:  # update 2's parameters moved
                _preempt_here()
            return out

        monkeypatch.setattr(torch.optim.AdamW, "step", signalled)
    with pytest.raises(SystemExit):
        run(cfg, run_dir=tmp_path / "preempted-1")
    assert preemption.preemption_requested()
    done = 1 if when == "second micro-batch" else 2  # the optimizer step's update completes before the handler runs
    saved = sorted(p.name for p in (tmp_path / "preempted" / "checkpoints").rglob("step-*.pt"))
    assert saved == [f"step-{done:08d}.pt"]
    monkeypatch.undo()
    capsys.readouterr()
    micro_batches = _count_updates(monkeypatch)
    run(cfg, run_dir=tmp_path / "preempted-2")
    assert _resumed_step(capsys.readouterr().out) == done
    assert len(micro_batches) == (3 - done) * 2
    _assert_same_run(tmp_path / "preempted-2", tmp_path / "ref", method)


def test_a_preemption_signal_inside_a_deferred_block_is_handled_once_when_it_ends():
    seen: list[str] = []

    def handler(signum, frame):
        seen.append("handled")

    previous = signal.signal(signal.SIGUSR2, handler)
    try:
        with preemption.preemption_deferred():
            _preempt_here()
            _preempt_here()
            seen.append("block ended")
        assert seen == ["block ended", "handled"]
        assert signal.getsignal(signal.SIGUSR2) is handler
        _preempt_here()
        assert seen == ["block ended", "handled", "handled"]
    finally:
        signal.signal(signal.SIGUSR2, previous)
