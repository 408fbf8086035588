"""DDP for the training loop: join the process group, shard the global batch, average gradients.

``init_distributed()`` reads torchrun's env, or derives it from an srun step (SLURM tasks: the
launcher's ``tasks_per_node > 1``) or from submitit's local tasks; gloo on CPU, nccl on CUDA.
Rank 0 (``is_main_process``) is the one process that writes checkpoints, records and W&B. The
gradients of the trainable tensors are summed or averaged in one flat buffer
(``allreduce_gradients``); the frozen backbone has none. Single process: every helper is a no-op.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def _first_host(nodelist: str | None) -> str:
    """First host of a SLURM node list: 'vm' -> 'vm', 'gpu[003-005,007],cpu1' -> 'gpu003'."""
    if not nodelist:
        return "127.0.0.1"
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    first = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist)
    if not first:
        return nodelist
    prefix, _, ranges = first.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _port_for(job_id: str | None, base: int = 20000, span: int = 20000) -> int:
    """A rendezvous port derived from the job id, so two jobs on one node do not collide."""
    if not job_id:
        return 29500
    digits = re.sub(r"\D", "", str(job_id)) or "0"
    return base + int(digits) % span


def distributed_env() -> dict[str, str]:
    """The torch.distributed env (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) for this
    process, derived from torchrun, an srun step (SLURM tasks), or submitit's local tasks.
    Empty when single process."""
    env = os.environ
    if "WORLD_SIZE" in env and "RANK" in env:  # torchrun / explicit
        out = {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k in env}
        out.setdefault("LOCAL_RANK", out["RANK"])
        out.setdefault("MASTER_ADDR", "127.0.0.1")
        out.setdefault("MASTER_PORT", "29500")
        return out if int(out["WORLD_SIZE"]) > 1 else {}
    # An srun step (submitit runs every task through srun). SLURM_STEP_NUM_TASKS, not SLURM_NTASKS:
    # a python started directly in a multi-task batch script is one process, not a world.
    ntasks = int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if ntasks > 1 and "SLURM_PROCID" in env:
        return {
            "RANK": env["SLURM_PROCID"],
            "WORLD_SIZE": str(ntasks),
            "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
            "MASTER_ADDR": _first_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")),
            "MASTER_PORT": str(_port_for(env.get("SLURM_JOB_ID"))),
        }
    ntasks = int(env.get("SUBMITIT_LOCAL_NTASKS", "1") or 1)
    if ntasks > 1 and "SUBMITIT_LOCAL_GLOBALID" in env:
        return {
            "RANK": env["SUBMITIT_LOCAL_GLOBALID"],
            "WORLD_SIZE": str(ntasks),
            "LOCAL_RANK": env.get("SUBMITIT_LOCAL_LOCALID", env["SUBMITIT_LOCAL_GLOBALID"]),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_port_for(env.get("SUBMITIT_LOCAL_JOB_ID"))),
        }
    return {}


def init_distributed(backend: str | None = None, timeout_s: float = 600.0) -> tuple[int, int]:
    """Join the process group when this process is one of several; return ``(rank, world_size)``.

    No-op ``(0, 1)`` for a single process. Reads torchrun's env, or derives it from an srun step
    (``tasks_per_node > 1`` under SLURM: MASTER_ADDR = first node, MASTER_PORT from the job id) or
    from submitit's local tasks. Backend: nccl when CUDA is available, else gloo (``backend``
    overrides). Idempotent: a second call returns the existing group's rank and size.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    denv = distributed_env()
    if not denv:
        return 0, 1
    for k, v in denv.items():
        os.environ[k] = str(v)
    rank, world = int(denv["RANK"]), int(denv["WORLD_SIZE"])
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(denv["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1))
    dist.init_process_group(
        backend, init_method="env://", rank=rank, world_size=world, timeout=_dt.timedelta(seconds=timeout_s)
    )
    log.info(
        "joined process group: rank %d of %d (%s, master %s:%s)",
        rank,
        world,
        backend,
        denv["MASTER_ADDR"],
        denv["MASTER_PORT"],
    )
    return rank, world


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` when not distributed."""
    return get_rank(), get_world_size()


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """True on rank 0 (and when not distributed): the one process that writes checkpoints,
    records and W&B."""
    return get_rank() == 0


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def destroy_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard(items: Sequence[Any], rank: int | None = None, world_size: int | None = None) -> Sequence[Any]:
    """This rank's share of a global batch (strided: rank, rank + W, ...)."""
    rank = get_rank() if rank is None else rank
    world_size = get_world_size() if world_size is None else world_size
    return items[rank::world_size]


def allreduce_gradients(parameters: Iterable[Any], average: bool = True) -> None:
    """Sum (or average) the gradients of the trainable parameters across ranks, in one flat buffer.

    Frozen parameters (``requires_grad=False``) are skipped. A trainable parameter with no gradient on
    this rank (e.g. an adapter no token was routed to) contributes zeros, so every rank runs the same
    collective and ends with identical gradients; one with no gradient on any rank stays ``None``.
    Equivalent to single-process training on the concatenated global batch when each rank's loss is
    the mean over an equal share of it.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    # Which parameters got a gradient on SOME rank: those reduce (zeros where absent); a parameter
    # without a gradient on every rank keeps grad None, as in single-process training.
    has = torch.tensor([0.0 if p.grad is None else 1.0 for p in params], device=params[0].device)
    dist.all_reduce(has, op=dist.ReduceOp.SUM)
    params = [p for p, h in zip(params, has.tolist()) if h > 0]
    if not params:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.detach().reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    if average:
        flat /= dist.get_world_size()
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def all_mean(value: float, device: torch.device) -> float:
    """The mean of a scalar over all ranks (loss and token counts of a step)."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t) / dist.get_world_size()
