"""Dispatch at scale: submitit glue for Hydra multiruns, on a laptop and on SLURM.

What lives here
---------------
* ``HeroSubmititLauncher`` (and its ``Slurm`` / ``Local`` flavours, exposed to Hydra through the
  shim ``hydra_plugins/hero_launcher``): a drop-in for hydra-submitit-launcher that
    - submits a seeded multirun as ONE job array (``map_array``);
    - gives every job a stable output dir named after its overrides and config hash, so a relaunch
      finds it again (no job-number collisions, nothing overwritten);
    - skips jobs whose completed record (``results.json``) already exists for the same config and
      reruns only missing or failed ones (a failed record is moved aside, the checkpoints are kept
      so the rerun resumes);
    - makes a job that raises FAIL (in SLURM, in submitit, in W&B) instead of returning a Hydra
      ``JobReturn`` that SLURM counts as COMPLETED;
    - waits for the array, never stops at the first failure, and writes ``summary.json`` listing
      every job's state, output dir and log path (failed jobs first);
    - or, with ``wait: false``, writes a manifest (job ids, overrides, output dirs) and returns at
      once (fire-and-forget); ``python -m hero.launch status|collect <manifest or sweep dir>``
      then reports the jobs' states and collects their records;
    - is checkpointable: on USR2 / time limit submitit calls ``checkpoint()``, which runs the
      training loop's registered save hook, then requeues the same job (``max_num_timeout`` times
      for time limits); the requeued job reruns in the same output dir and the pipeline resumes
      from its latest checkpoint.
* DDP helpers: ``init_distributed()`` (torchrun env, srun tasks, or submitit-local tasks; gloo on
  CPU, nccl on CUDA), ``allreduce_gradients``, ``shard``, ``is_main_process``, ...
* Preemption hooks for the training loop: ``register_checkpoint_fn``, ``preemption_requested``.
* ``wandb_run_id(run_dir)``: one stable W&B run id per run dir, so a requeued job resumes it.
* ``python -m hero.launch sweep sweeps/<study>.yaml [overrides]``: run a named study.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

log = logging.getLogger(__name__)

RESULTS_FILENAME = "results.json"
MANIFEST_DIRNAME = "manifests"
SUMMARY_FILENAME = "summary.json"

# =============================================================================================
# DDP
# =============================================================================================


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
    import torch
    import torch.distributed as dist

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
    log.info("joined process group: rank %d of %d (%s, master %s:%s)", rank, world, backend,
             denv["MASTER_ADDR"], denv["MASTER_PORT"])
    return rank, world


def get_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """True on rank 0 (and when not distributed): the one process that writes checkpoints,
    records and W&B."""
    return get_rank() == 0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def destroy_distributed() -> None:
    import torch.distributed as dist

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
    collective and ends with identical gradients; one with no gradient on any rank stays ``None``. Equivalent to single-process training on the
    concatenated global batch when each rank's loss is the mean over an equal share of it.
    """
    import torch
    import torch.distributed as dist

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
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def broadcast_parameters(parameters: Iterable[Any], src: int = 0) -> None:
    """Make every rank start from rank ``src``'s values of the given tensors (trainable init)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    for p in parameters:
        dist.broadcast(p.data, src=src)


# =============================================================================================
# Preemption hooks and W&B run identity
# =============================================================================================

_PREEMPTED = threading.Event()
_CHECKPOINT_FNS: list[Callable[[], Any]] = []


def register_checkpoint_fn(fn: Callable[[], Any]) -> Callable[[], None]:
    """Register ``fn()`` to be called when the job is preempted or about to time out (submitit's
    ``checkpoint()``, on USR2), just before the job is requeued. ``fn`` must save a resumable
    state as of the last COMPLETED optimizer step (it runs inside a signal handler, possibly
    mid-step). Returns an unregister function. Only rank 0 is called."""
    _CHECKPOINT_FNS.append(fn)
    return lambda: _CHECKPOINT_FNS.remove(fn) if fn in _CHECKPOINT_FNS else None


def preemption_requested() -> bool:
    """True once a preemption/timeout signal reached this job (loops may poll it at step ends)."""
    return _PREEMPTED.is_set()


def _run_checkpoint_fns() -> None:
    _PREEMPTED.set()
    for fn in list(_CHECKPOINT_FNS):
        try:
            fn()
        except Exception:  # noqa: BLE001 - a failing save must not stop the requeue
            log.exception("checkpoint hook %r failed; the requeued job resumes from the previous checkpoint", fn)


def wandb_run_id(run_dir: str | os.PathLike) -> str:
    """The W&B run id of the run in ``run_dir``: created once (``<run_dir>/.wandb_run_id``) and read
    back by a requeued or relaunched job, so ``wandb.init(id=..., resume="allow")`` continues the
    same run instead of starting a duplicate."""
    path = Path(run_dir) / ".wandb_run_id"
    if path.exists():
        rid = path.read_text().strip()
        if rid:
            return rid
    path.parent.mkdir(parents=True, exist_ok=True)
    rid = secrets.token_hex(4)
    tmp = path.with_name(f".wandb_run_id.{os.getpid()}")
    tmp.write_text(rid + "\n")
    try:
        os.link(tmp, path)  # atomic create-if-absent: a concurrent rank/requeue keeps the first id
    except FileExistsError:
        rid = path.read_text().strip() or rid
    except OSError:
        if not path.exists():
            os.replace(tmp, path)
        rid = path.read_text().strip() or rid
    finally:
        tmp.unlink(missing_ok=True)
    return rid


def _finish_wandb_failed() -> None:
    """Mark an active W&B run as failed (exit code 1), if the job used W&B."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    try:
        if getattr(wandb, "run", None) is not None:
            wandb.finish(exit_code=1)
    except Exception:  # noqa: BLE001
        log.exception("could not mark the W&B run failed")


# =============================================================================================
# Job identity, records
# =============================================================================================

_LAUNCH_ONLY_PREFIXES = ("hydra.", "hydra/", "+hydra", "~hydra")


def task_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides that change what a job computes (drops hydra.* and launcher ones)."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]


def job_key(overrides: Sequence[str], chash: str) -> str:
    """A stable, filesystem-safe name for a job: its task overrides (sorted) + 8 hex of its
    config hash, e.g. ``ablation=no_memory_read,seed=42__1a2b3c4d``."""
    items = sorted(task_overrides(overrides))
    name = ",".join(items) if items else "default"
    name = re.sub(r"[^A-Za-z0-9=,._+\-]", "_", name)
    if len(name) > 96:
        name = name[:80] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{name}__{chash[:8]}"


def read_record(path: str | os.PathLike) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def record_completed(rec: dict | None) -> bool:
    return bool(rec) and rec.get("status", "completed") == "completed"


def index_records(root: str | os.PathLike) -> dict[str, Path]:
    """config_hash -> path of a completed results.json, for every record under ``root``."""
    out: dict[str, Path] = {}
    root = Path(root)
    if not root.exists():
        return out
    for path in root.rglob(RESULTS_FILENAME):
        rec = read_record(path)
        if record_completed(rec):
            for key in ("config_hash", "launch_hash"):
                if rec.get(key):
                    out.setdefault(str(rec[key]), path)
    return out


def indexed_record(index_file: str | None) -> Path | None:
    """The completed record that hero.pipeline indexed under ``<paths.root>/index/<hash>.json``."""
    if not index_file or not Path(index_file).exists():
        return None
    entry = read_record(index_file) or {}
    rec = entry.get("record")
    if entry.get("status") == "completed" and rec and record_completed(read_record(rec)):
        return Path(rec)
    return None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, payload: Any) -> Path:
    from hero.results import write_atomic

    return write_atomic(path, payload)


# =============================================================================================
# The job callable (pickled, runs on the node)
# =============================================================================================


class JobFailed(RuntimeError):
    """The task function raised: the job fails (SLURM FAILED, submitit error result)."""


class HydraJob:
    """One Hydra job, as submitit runs it. Checkpointable: on preemption/timeout submitit calls
    ``checkpoint`` and requeues ``DelayedSubmission(self, same args)``; the rerun uses the same
    output dir, where the pipeline resumes from its latest checkpoint."""

    def __init__(self, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_subdir: str | None,
                 singleton_state: dict) -> Any:
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobStatus, run_job, setup_globals
        from omegaconf import open_dict

        Singleton.set_state(singleton_state)
        setup_globals()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(sweep_overrides))
        env = submitit.JobEnvironment()
        with open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.id = env.job_id
            sweep_config.hydra.job.num = job_num
        if job_subdir is not None:
            with open_dict(sweep_config.hydra.sweep):
                sweep_config.hydra.sweep.subdir = job_subdir
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        log.info("hero job %s (num %d, restart %s): %s", env.job_id, job_num, restarts, " ".join(sweep_overrides))
        ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                      job_dir_key=job_dir_key, job_subdir_key="hydra.sweep.subdir")
        if ret.status == JobStatus.FAILED:
            _finish_wandb_failed()
            err = ret._return_value
            raise JobFailed(f"job {env.job_id} ({' '.join(sweep_overrides)}) raised "
                            f"{type(err).__name__}: {err}") from err
        # Drop the configs from what travels back (the record on disk is the result).
        ret.cfg = None
        ret.hydra_cfg = None
        return ret

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        _run_checkpoint_fns()
        log.warning("preempted / timing out: requeueing %s", " ".join(args[0]) if args else "")
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


# =============================================================================================
# The Hydra launcher (driver side)
# =============================================================================================

# Keys handled by HeroSubmititLauncher itself, not passed on to submitit.
HERO_KEYS = ("skip_existing", "wait", "records_root", "job_dir", "poll_s")  # poll_s: accepted, unused


try:  # hydra-submitit-launcher is a hard dependency; keep `import hero.launch` cheap otherwise
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher as _Base
except Exception:  # pragma: no cover
    _Base = object  # type: ignore


class HeroSubmititLauncher(_Base):  # type: ignore[misc,valid-type]
    """hydra-submitit-launcher with idempotent sweeps, real failures, summaries and fire-and-forget.

    Extra launcher keys (besides every hydra-submitit-launcher key):
      skip_existing  (true)   skip jobs whose completed record exists (same dir or same config hash
                              under ``records_root``); ``force=true`` in a job's overrides disables it
      wait           (true)   false: submit, write the manifest, return at once (SLURM only)
      records_root   (null)   where to look for existing records; default the sweep dir
      job_dir        ("key")  "key": subdir = job_key(overrides, hash); "hydra": keep hydra.sweep.subdir
    """

    _EXECUTOR = "slurm"

    def __init__(self, **params: Any) -> None:
        from omegaconf import OmegaConf

        hero = {k: params.pop(k) for k in HERO_KEYS if k in params}
        hero = {k: (OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v) for k, v in hero.items()}
        super().__init__(**params)
        self.hero = {"skip_existing": True, "wait": True, "records_root": None, "job_dir": "key", **hero}

    # ---- planning -------------------------------------------------------------------------
    def _plan(self, overrides: Sequence[str], num: int) -> dict:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, open_dict, read_write

        from hero.results import config_hash

        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg.hydra.job):
            cfg.hydra.job.num = num
            cfg.hydra.job.id = f"plan_{num}"
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = "<output_dir>"  # keeps the hash independent of the dir
        prev = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(cfg)
        try:
            task = copy.deepcopy(cfg)
            with read_write(task), open_dict(task):
                del task["hydra"]
            try:
                container = OmegaConf.to_container(task, resolve=True)
            except Exception:  # noqa: BLE001 - unresolvable outside a job: hash the raw config
                container = OmegaConf.to_container(task, resolve=False)
            if isinstance(container, dict) and "alpha" in container:
                try:  # hero.pipeline hashes the numeric α it resolved
                    container["alpha"] = float(container["alpha"])
                except (TypeError, ValueError):
                    pass
            chash = config_hash(container)
            force = bool(container.get("force", False)) if isinstance(container, dict) else False
            objective_key = container.get("objective") if isinstance(container, dict) else None
            root = OmegaConf.select(task, "paths.root", default=None)
            index_file = str((Path(str(root)) / "index" / f"{chash}.json").absolute()) if root else None
            sweep_dir = Path(str(cfg.hydra.sweep.dir))
            if self.hero["job_dir"] == "hydra":
                subdir = None
                out = sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
            else:
                subdir = job_key(overrides, chash)
                out = sweep_dir / subdir
        finally:
            if prev is not None:
                HydraConfig.instance().set_config(prev)
        return {"num": num, "overrides": list(overrides), "subdir": subdir, "output_dir": str(out.absolute()),
                "launch_hash": chash, "index_file": index_file, "force": force,
                "objective_key": objective_key if isinstance(objective_key, str) else None}

    def _executor(self) -> Any:
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        params = dict(self.params)
        init_params: dict[str, Any] = {"folder": params["submitit_folder"]}
        if "max_num_timeout" in params:
            init_params[f"{self._EXECUTOR}_max_num_timeout"] = params["max_num_timeout"]
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{
            (k if k in baseparams else f"{self._EXECUTOR}_{k}"): v
            for k, v in params.items() if k not in init_keys and v is not None
        })
        return executor

    # ---- launch ---------------------------------------------------------------------------
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, JobStatus, filter_overrides

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + f"_{os.getpid()}"
        plans = [self._plan(o, initial_job_idx + i) for i, o in enumerate(job_overrides)]

        # Idempotency: skip what is done, set aside failed records so the rerun is a rerun.
        index: dict[str, Path] | None = None
        for p in plans:
            p["state"], p["record"] = "TO_SUBMIT", None
            own = Path(p["output_dir"]) / RESULTS_FILENAME
            rec = read_record(own) if own.exists() else None
            if self.hero["skip_existing"] and not p["force"]:
                if record_completed(rec):
                    p["state"], p["record"] = "SKIPPED", str(own)
                    continue
                indexed = indexed_record(p.get("index_file"))
                if indexed is not None:
                    p["state"], p["record"] = "SKIPPED", str(indexed)
                    continue
                if index is None:
                    index = index_records(self.hero["records_root"] or sweep_dir)
                hit = index.get(p["launch_hash"]) or (index.get(rec.get("config_hash")) if rec else None)
                if hit is not None:
                    p["state"], p["record"] = "SKIPPED", str(hit)
                    continue
            if rec is not None and own.exists():
                aside = own.with_name(f"results.{rec.get('status', 'old')}.{stamp}.json")
                os.replace(own, aside)
                log.info("set aside the previous record of %s -> %s", p["subdir"] or p["output_dir"], aside.name)

        todo = [p for p in plans if p["state"] == "TO_SUBMIT"]
        skipped = [p for p in plans if p["state"] == "SKIPPED"]
        log.info("hero launcher (%s): sweep dir %s — %d jobs, %d to submit, %d skipped (record exists)",
                 self._EXECUTOR, sweep_dir, len(plans), len(todo), len(skipped))
        for p in plans:
            log.info("\t#%d %-9s %s", p["num"], "skip" if p["state"] == "SKIPPED" else "submit",
                     " ".join(filter_overrides(p["overrides"])))

        jobs: list[Any] = []
        if todo:
            executor = self._executor()
            job = HydraJob(self.hydra_context, self.task_function, self.config)
            args = [(p["overrides"], "hydra.sweep.dir", p["num"], p["subdir"], Singleton.get_state()) for p in todo]
            jobs = executor.map_array(job, *zip(*args))
            for p, j in zip(todo, jobs):
                p["job_id"] = j.job_id
                p["state"] = "SUBMITTED"
                p["log"] = str(j.paths.stderr)
                p["stdout"] = str(j.paths.stdout)
        manifest_path = sweep_dir / MANIFEST_DIRNAME / f"{stamp}.json"
        manifest = {
            "created": _now(), "cluster": self._EXECUTOR, "sweep_dir": str(sweep_dir),
            "submitit_folder": str(self.params.get("submitit_folder")),
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "n_jobs": len(plans), "n_submitted": len(todo), "n_skipped": len(skipped),
            "jobs": plans,
        }
        _write_json(manifest_path, manifest)
        log.info("manifest: %s", manifest_path)

        wait = bool(self.hero["wait"])
        if not wait and self._EXECUTOR == "local":
            log.warning("wait=false is not possible with the local executor (its jobs die with this process): waiting")
            wait = True
        if not wait:
            print(f"submitted {len(todo)} job(s), skipped {len(skipped)}; manifest: {manifest_path}\n"
                  f"  state:   python -m hero.launch status {manifest_path}\n"
                  f"  records: python -m hero.launch collect {manifest_path}", flush=True)
            return [_job_return(p, JobStatus.COMPLETED, {"submitted": p.get("job_id"), "manifest": str(manifest_path)})
                    for p in plans]

        # Wait for every job; a failure does not stop the others.
        results: dict[int, Any] = {}
        for p, j in zip(todo, jobs):
            try:
                out = j.results()[0]
                p["state"] = "COMPLETED"
                results[p["num"]] = out
            except Exception as e:  # noqa: BLE001 - FailedJobError, UncompletedJobError, ...
                p["state"] = "FAILED"
                p["error"] = _error_line(str(e))
                results[p["num"]] = e
            try:
                p["slurm_state"] = j.state
            except Exception:  # noqa: BLE001
                pass
            rec_path = Path(p["output_dir"]) / RESULTS_FILENAME
            if not rec_path.exists():
                rec_path = indexed_record(p.get("index_file")) or rec_path
            if rec_path.exists():
                p["record"] = str(rec_path)
        summary = _summarise(plans, sweep_dir, manifest_path)
        _print_summary(summary, to_log=True)

        returns = []
        for p in plans:
            if p["state"] == "COMPLETED":
                r = results[p["num"]]
                if isinstance(r, JobReturn):
                    r.status = JobStatus.COMPLETED
                    returns.append(r)
                else:
                    returns.append(_job_return(p, JobStatus.COMPLETED, r))
            elif p["state"] == "SKIPPED":
                rec = read_record(p["record"]) or {}
                returns.append(_job_return(p, JobStatus.COMPLETED, _dotted(rec, p.get("objective_key"))))
            else:
                returns.append(_job_return(p, JobStatus.FAILED, JobFailed(
                    f"job {p.get('job_id')} failed ({p.get('error', '')}); log: {p.get('log')}")))
        return returns


class HeroSlurmLauncher(HeroSubmititLauncher):
    _EXECUTOR = "slurm"


class HeroLocalLauncher(HeroSubmititLauncher):
    _EXECUTOR = "local"


def _dotted(record: dict, key: str | None) -> Any:
    """``record[a][b]`` for key ``a.b`` (the value train.py returns for a skipped job), else None."""
    cur: Any = record
    for part in (key or "").split("."):
        if not part or not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _job_return(p: dict, status: Any, value: Any) -> Any:
    from hydra.core.utils import JobReturn

    r = JobReturn()
    r.overrides = p["overrides"]
    r.working_dir = p["output_dir"]
    r.status = status
    r._return_value = value
    return r


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Interrupt|Exit)\b:?")


def _error_line(text: str) -> str:
    """The most telling line of a traceback / submitit error: the last 'SomeError: message' line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    hits = [ln for ln in lines if _EXC_LINE.match(ln)]
    return (hits[-1] if hits else (lines[-1] if lines else ""))[:400]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _summarise(plans: list[dict], sweep_dir: Path, manifest_path: Path | None) -> dict:
    order = {"FAILED": 0, "UNKNOWN": 1, "RUNNING": 2, "PENDING": 3, "COMPLETED": 4, "SKIPPED": 5}
    jobs = sorted(plans, key=lambda p: (order.get(p["state"], 1), p["num"]))
    counts: dict[str, int] = {}
    for p in plans:
        counts[p["state"]] = counts.get(p["state"], 0) + 1
    summary = {
        "created": _now(), "sweep_dir": str(sweep_dir), "manifest": str(manifest_path) if manifest_path else None,
        "counts": counts,
        "failed": [{"num": p["num"], "job_id": p.get("job_id"), "overrides": p["overrides"],
                    "output_dir": p["output_dir"], "log": p.get("log"), "error": p.get("error")}
                   for p in jobs if p["state"] == "FAILED"],
        "jobs": [{k: p.get(k) for k in ("num", "job_id", "state", "slurm_state", "overrides", "output_dir",
                                          "record", "log", "error")} for p in jobs],
    }
    _write_json(sweep_dir / SUMMARY_FILENAME, summary)
    return summary


def _print_summary(summary: dict, to_log: bool = False) -> None:
    counts = ", ".join(f"{v} {k.lower()}" for k, v in sorted(summary["counts"].items()))
    lines = [f"== sweep summary: {counts} — {summary['sweep_dir']}/{SUMMARY_FILENAME}"]
    for j in summary["jobs"]:
        where = j.get("record") or j.get("output_dir")
        lines.append(f"  {j['state']:<9} #{j['num']:<3} {str(j.get('job_id') or '-'):<12} "
                     f"{' '.join(task_overrides(j['overrides'])) or '(defaults)'}  {where}")
    for f in summary["failed"]:
        lines.append(f"  FAILED job {f['job_id']} ({' '.join(task_overrides(f['overrides']))}): {f.get('error')}")
        lines.append(f"         log: {f['log']}")
    text = "\n".join(lines)
    if to_log:
        log.info(text)
    else:
        print(text, flush=True)


# =============================================================================================
# Manifests: status / collect (fire-and-forget)
# =============================================================================================


def load_manifests(target: str | os.PathLike) -> tuple[Path, list[dict]]:
    """Jobs of one manifest file, or of every manifest of a sweep dir (latest entry per output
    dir wins: a relaunch supersedes the earlier submission of the same job)."""
    target = Path(target)
    files = sorted((target / MANIFEST_DIRNAME).glob("*.json")) if target.is_dir() else [target]
    if not files:
        raise FileNotFoundError(f"no manifest in {target}")
    jobs: dict[str, dict] = {}
    cluster = "slurm"
    for f in files:
        m = read_record(f) or {}
        cluster = m.get("cluster", cluster)
        for j in m.get("jobs", []):
            j = dict(j, manifest=str(f), cluster=m.get("cluster", "slurm"))
            prev = jobs.get(j["output_dir"])
            if prev is None or j.get("state") != "SKIPPED" or prev.get("state") == "SKIPPED":
                jobs[j["output_dir"]] = j
    sweep_dir = Path(read_record(files[-1]).get("sweep_dir", target if target.is_dir() else target.parent.parent))
    return sweep_dir, sorted(jobs.values(), key=lambda j: j["num"])


def _sacct_states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id -> SLURM state (latest attempt), via sacct; squeue as a fallback."""
    ids = [j for j in job_ids if j]
    out: dict[str, str] = {}
    if not ids:
        return out
    try:
        r = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(ids)],
                           capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 2:
                out[parts[0]] = parts[1].split()[0] if parts[1] else "UNKNOWN"
    except (OSError, subprocess.SubprocessError):
        pass
    missing = [j for j in ids if j not in out]
    if missing:
        try:
            r = subprocess.run(["squeue", "-h", "-o", "%i|%T", "-j", ",".join(missing)],
                               capture_output=True, text=True, timeout=60)
            for line in r.stdout.splitlines():
                jid, _, st = line.partition("|")
                out[jid.strip()] = st.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _result_pickle_state(job: dict) -> tuple[str | None, str | None]:
    """('COMPLETED'|'FAILED'|None, error) from submitit's result pickle of the job (rank 0)."""
    folder = job.get("stdout")
    if not folder:
        return None, None
    res = Path(folder).with_name(f"{job['job_id']}_0_result.pkl")
    if not res.exists():
        return None, None
    try:
        import pickle

        with open(res, "rb") as f:
            kind, payload = pickle.load(f)
    except Exception:  # noqa: BLE001
        return None, None
    if kind == "success":
        return "COMPLETED", None
    return "FAILED", _error_line(str(payload))


def job_states(jobs: list[dict]) -> list[dict]:
    """Fill ``state`` (PENDING/RUNNING/COMPLETED/FAILED/SKIPPED/...), ``record`` and ``error`` of each job."""
    sacct = _sacct_states([j.get("job_id") for j in jobs if j.get("cluster", "slurm") == "slurm"])
    for j in jobs:
        rec_path = Path(j["output_dir"]) / RESULTS_FILENAME
        if j.get("state") == "SKIPPED":
            continue
        if not rec_path.exists():  # the pipeline found an identical finished run elsewhere
            rec_path = indexed_record(j.get("index_file")) or rec_path
        rec = read_record(rec_path) if rec_path.exists() else None
        pk_state, err = _result_pickle_state(j)
        sched = sacct.get(str(j.get("job_id")))
        j["slurm_state"] = sched
        if pk_state == "FAILED" or (rec and rec.get("status") == "failed"):
            j["state"], j["error"] = "FAILED", err or (rec or {}).get("error")
        elif pk_state == "COMPLETED" and record_completed(rec):
            j["state"] = "COMPLETED"
        elif sched in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING",
                       "REQUEUE_HOLD", "REQUEUE_FED"):
            j["state"] = "RUNNING" if sched in ("RUNNING", "COMPLETING", "CONFIGURING") else "PENDING"
        elif sched in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                       "PREEMPTED"):
            j["state"], j["error"] = "FAILED", j.get("error") or f"SLURM state {sched}"
        elif record_completed(rec):
            j["state"] = "COMPLETED"
        elif sched == "COMPLETED":
            j["state"], j["error"] = "FAILED", "job ended without a record"
        else:
            j["state"] = "UNKNOWN"
        if rec_path.exists():
            j["record"] = str(rec_path)
    return jobs


def status(target: str | os.PathLike) -> dict:
    sweep_dir, jobs = load_manifests(target)
    jobs = job_states(jobs)
    return _summarise(jobs, sweep_dir, Path(target) if Path(target).is_file() else None)


def collect(target: str | os.PathLike) -> dict:
    """States of the manifest's jobs plus their records, written to ``<sweep dir>/collected.json``."""
    summary = status(target)
    records = []
    for j in summary["jobs"]:
        if j.get("record") and j["state"] in ("COMPLETED", "SKIPPED"):
            rec = read_record(j["record"])
            if rec is not None:
                records.append({"path": j["record"], "overrides": task_overrides(j["overrides"]), "record": rec})
    out = {"created": _now(), "sweep_dir": summary["sweep_dir"], "counts": summary["counts"],
           "failed": summary["failed"], "records": records}
    _write_json(Path(summary["sweep_dir"]) / "collected.json", out)
    summary["records"] = records
    return summary


# =============================================================================================
# Named studies (sweeps/*.yaml)
# =============================================================================================


def load_study(path: str | os.PathLike) -> dict:
    import yaml

    with open(path) as f:
        study = yaml.safe_load(f)
    study.setdefault("name", Path(path).stem)
    study.setdefault("entry", "train.py")
    if not Path(study["entry"]).exists():  # studies live in <repo>/sweeps/, entries at <repo>/
        beside = Path(path).resolve().parent.parent / study["entry"]
        if beside.exists():
            study["entry"] = str(beside)
    study.setdefault("overrides", [])
    study.setdefault("grid", {})
    study.setdefault("variants", [{"name": "main", "overrides": []}])
    return study


def _grid_size(grid: dict) -> int:
    n = 1
    for v in grid.values():
        vals = v if isinstance(v, list) else str(v).split(",")
        n *= len(vals)
    return n


def _okey(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def study_commands(study: dict, extra: Sequence[str] = (), sweep_root: str = "multirun/studies") -> list[list[str]]:
    """One ``python train.py -m ...`` per variant of the study, all into one sweep dir
    (``<sweep_root>/<name>``). Later overrides replace earlier ones with the same key:
    study < variant < grid < ``extra`` (so ``model=tiny`` on the command line wins)."""
    cmds = []
    for var in study["variants"]:
        merged: dict[str, str] = {}
        grid = {**study["grid"], **(var.get("grid") or {})}
        items = list(study["overrides"]) + list(var.get("overrides") or [])
        for k, v in grid.items():
            vals = v if isinstance(v, list) else [v]
            items.append(f"{k}={','.join(str(x) for x in vals)}")
        items.append(f"hydra.sweep.dir={sweep_root}/{study['name']}")
        for o in [*items, *extra]:
            merged.pop(_okey(o), None)
            merged[_okey(o)] = o
        cmds.append([sys.executable, study["entry"], "-m", *merged.values()])
    return cmds


def command_size(cmd: Sequence[str]) -> int:
    """Jobs of one multirun command line (product of the comma-separated sweeps)."""
    n = 1
    for o in cmd[3:]:
        if "=" in o and not _okey(o).startswith("hydra"):
            val = o.split("=", 1)[1]
            if "," in val and not val.strip().startswith(("[", "{")):
                n *= len(val.split(","))
    return n


def study_size(study: dict) -> int:
    return sum(_grid_size({**study["grid"], **(v.get("grid") or {})}) for v in study["variants"])


# =============================================================================================
# CLI
# =============================================================================================


def _cli_status(args: argparse.Namespace, collect_records: bool) -> int:
    summary = collect(args.target) if collect_records else status(args.target)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        _print_summary(summary)
        if collect_records:
            print(f"{len(summary['records'])} record(s) -> {summary['sweep_dir']}/collected.json")
    states = summary["counts"]
    if any(states.get(s) for s in ("PENDING", "RUNNING", "UNKNOWN")):
        return 3  # not final yet
    return 1 if states.get("FAILED") else 0


def _cli_sweep(args: argparse.Namespace) -> int:
    study = load_study(args.study)
    extra = list(args.overrides)
    launcher = next((o.split("=", 1)[1] for o in extra if _okey(o) == "hydra/launcher"), "")
    to_cluster = launcher.startswith("slurm") or launcher == "local"
    if to_cluster and not args.wait and not any(_okey(o) == "hydra.launcher.wait" for o in extra):
        extra.append("hydra.launcher.wait=false")  # submit every variant's array, then return
    cmds = study_commands(study, extra, args.sweep_root)
    n = study_size(study)
    expected = study.get("expected_jobs")
    print(f"study {study['name']}: {len(study['variants'])} variant(s), {n} job(s)"
          + (f" (expected {expected})" if expected is not None else ""))
    if expected is not None and int(expected) != n:
        print(f"ERROR: the study lists {expected} jobs but its grid gives {n}", file=sys.stderr)
        return 2
    rc = 0
    for cmd in cmds:
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        if not args.dry_run:
            rc = subprocess.call(cmd) or rc
    sweep_dir = f"{args.sweep_root}/{study['name']}"
    if to_cluster and not args.dry_run:
        print(f"state:   python -m hero.launch status {sweep_dir}\nrecords: python -m hero.launch collect {sweep_dir}")
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ap = argparse.ArgumentParser(prog="python -m hero.launch", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, helptext in (("status", "state of a manifest's jobs"),
                           ("collect", "states + records of a manifest's jobs (writes collected.json)")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("target", help="a manifest file, or a sweep dir (all its manifests)")
        sp.add_argument("--json", action="store_true")
    sp = sub.add_parser("sweep", help="run a named study from sweeps/")
    sp.add_argument("study", help="sweeps/<name>.yaml")
    sp.add_argument("overrides", nargs="*", help="extra overrides, e.g. hydra/launcher=slurm hydra.launcher.wait=false")
    sp.add_argument("--dry-run", action="store_true", help="print the commands and the job count only")
    sp.add_argument("--wait", action="store_true",
                    help="with a SLURM launcher, wait for each variant's array (default: submit all and return)")
    sp.add_argument("--sweep-root", default="multirun/studies")
    args, unknown = ap.parse_known_args(argv)
    if unknown and args.cmd != "sweep":
        ap.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.cmd == "sweep":
        args.overrides = list(args.overrides) + unknown
    if args.cmd == "status":
        return _cli_status(args, collect_records=False)
    if args.cmd == "collect":
        return _cli_status(args, collect_records=True)
    return _cli_sweep(args)


if __name__ == "__main__":
    sys.exit(main())
