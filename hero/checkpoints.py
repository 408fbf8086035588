"""Checkpoints of a training run: the trainable tensors, optimizer, scheduler, RNG state and training curve.

``fit`` (``hero.training``) writes ``<paths.root>/checkpoints/<config_hash>/step-<n>.pt`` every
``trainer.checkpoint_every`` updates and on preemption, and resumes from the newest one, so a relaunched or
requeued job continues at the update it stopped after: the same tensors, optimizer moments, learning-rate
schedule, RNG draws and curve as the uninterrupted run (``tests/test_resume.py`` proves it end to end,
``tests/test_checkpoints.py`` field by field). A checkpoint is written to a temporary file and renamed, so a crash
mid-write leaves the last one intact; only the newest ``keep`` are kept.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from hero.errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint that does not fit the model being resumed."""


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(
    directory: Path,
    step: int,
    tokens: int,
    named: dict[str, torch.Tensor],
    optimizer,
    scheduler,
    keep: int,
    history: list[dict] = (),
    rng: dict | None = None,
) -> Path:
    """Write ``step-<n>.pt`` atomically (temp file + rename), keep the newest ``keep``; ``history`` is every update's
    metrics so far, so that a resumed run's record keeps the whole training curve; ``rng``: the RNG state to resume
    with (default: the current one)."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "step": step,
        "tokens": tokens,
        "history": list(history),
        "trainable": {n: p.detach().cpu() for n, p in named.items()},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state() if rng is None else rng,
    }
    path = directory / f"step-{step:08d}.pt"
    tmp = directory / f".{path.name}.tmp-{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for old in sorted(directory.glob("step-*.pt"))[:-keep]:
        old.unlink()
    return path


def latest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.glob("step-*.pt")) if directory.is_dir() else []
    return found[-1] if found else None


def load_latest(directory: Path, named: dict[str, torch.Tensor], optimizer, scheduler) -> tuple[int, int, list[dict]]:
    """Restore the newest checkpoint in ``directory``; returns (step to continue from, tokens seen, the updates'
    metrics so far: empty for a checkpoint written before checkpoints carried them)."""
    path = latest_checkpoint(directory)
    if path is None:
        return 0, 0, []
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if set(payload["trainable"]) != set(named):
        raise CheckpointError(
            f"checkpoint {path} holds different trainable tensors than this model; delete it or change paths.root"
        )
    with torch.no_grad():
        for name, tensor in payload["trainable"].items():
            named[name].copy_(tensor)
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    set_rng_state(payload["rng"])
    print(f"resumed from {path} (step {payload['step']})", flush=True)
    return int(payload["step"]), int(payload["tokens"]), list(payload.get("history", []))


def remove_checkpoints(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
