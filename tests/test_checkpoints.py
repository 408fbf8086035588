"""Checkpoints (``hero.checkpoints``), field by field on a toy model: what is saved is what a resume restores.

The end-to-end proof (a resumed training run equals the uninterrupted one, for a method that draws noise) is
``tests/test_resume.py``; these tests are the fast ones ``make mutation`` runs against the module.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from hero.checkpoints import (
    CheckpointError,
    latest_checkpoint,
    load_latest,
    remove_checkpoints,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def toy(seed: int):
    """A two-tensor model after one AdamW step under a warm-up schedule: every state a checkpoint must carry."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / 10)
    model(torch.randn(4, 3)).pow(2).sum().backward()
    optimizer.step()
    scheduler.step()
    return dict(model.named_parameters()), optimizer, scheduler


def draws() -> tuple:
    return torch.rand(3).tolist(), random.random(), float(np.random.rand())


def test_a_checkpoint_restores_tensors_optimizer_schedule_rng_and_curve(tmp_path, capsys):
    tmp_path = tmp_path / "checkpoints" / "0123abcd"  # as the pipeline names it: created with its parents
    named, optimizer, scheduler = toy(0)
    history = [{"step": 0, "loss": 2.5}, {"step": 1, "loss": 2.25}]
    torch.manual_seed(7), random.seed(7), np.random.seed(7)
    path = save_checkpoint(tmp_path, 2, 480, named, optimizer, scheduler, keep=2, history=history)
    assert path == tmp_path / "step-00000002.pt" and latest_checkpoint(tmp_path) == path
    expected = draws()  # what the run would have drawn next
    saved = {n: p.detach().clone() for n, p in named.items()}
    moments = {k: v.clone() for k, v in optimizer.state_dict()["state"][0].items()}
    other, other_optimizer, other_scheduler = toy(1)  # another model: nothing of it may survive the load
    assert not torch.equal(other["weight"], saved["weight"])
    step, tokens, curve = load_latest(tmp_path, other, other_optimizer, other_scheduler)
    assert (step, tokens, curve) == (2, 480, history)
    assert all(torch.equal(other[n], saved[n]) for n in saved)
    restored = other_optimizer.state_dict()["state"][0]
    assert all(torch.equal(restored[k], v) for k, v in moments.items())
    assert other_scheduler.state_dict()["last_epoch"] == 1 and other_optimizer.param_groups[0]["lr"] == pytest.approx(
        0.02
    )
    assert draws() == expected
    assert capsys.readouterr().out.strip() == f"resumed from {path} (step 2)"


def test_the_rng_state_saved_is_the_one_given_not_the_current_one(tmp_path):
    """A preemption mid-update saves the state its update started from (``hero.training._save_on_preemption``)."""
    named, optimizer, scheduler = toy(0)
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    start = rng_state()
    expected = draws()
    draws()  # the interrupted update's micro-batches drew noise since
    save_checkpoint(tmp_path, 5, 0, named, optimizer, scheduler, keep=1, rng=start)
    draws()
    load_latest(tmp_path, named, optimizer, scheduler)
    assert draws() == expected
    set_rng_state(start)
    assert draws() == expected


def test_only_the_newest_are_kept_and_no_checkpoint_starts_at_zero(tmp_path):
    named, optimizer, scheduler = toy(0)
    assert load_latest(tmp_path / "none", named, optimizer, scheduler) == (0, 0, [])
    assert latest_checkpoint(tmp_path / "none") is None
    for step in (1, 2, 3, 10):
        save_checkpoint(tmp_path, step, step * 8, named, optimizer, scheduler, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003.pt", "step-00000010.pt"]
    assert latest_checkpoint(tmp_path).name == "step-00000010.pt"  # by number, not by the name's last digits
    assert load_latest(tmp_path, named, optimizer, scheduler)[:2] == (10, 80)
    remove_checkpoints(tmp_path)
    assert not tmp_path.exists()
    remove_checkpoints(tmp_path)  # already gone: nothing to do


def test_a_checkpoint_of_other_tensors_is_refused_in_one_line(tmp_path):
    named, optimizer, scheduler = toy(0)
    save_checkpoint(tmp_path, 1, 0, named, optimizer, scheduler, keep=1)
    with pytest.raises(CheckpointError, match=r"step-00000001.pt holds different trainable tensors than this model"):
        load_latest(tmp_path, {"weight": named["weight"]}, optimizer, scheduler)


def test_a_checkpoint_written_before_checkpoints_kept_the_curve_resumes_with_none(tmp_path):
    named, optimizer, scheduler = toy(0)
    path = save_checkpoint(tmp_path, 4, 64, named, optimizer, scheduler, keep=1)
    payload = torch.load(path, weights_only=False)
    del payload["history"]
    torch.save(payload, path)
    assert load_latest(tmp_path, named, optimizer, scheduler) == (4, 64, [])
