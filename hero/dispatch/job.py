"""The callable submitit pickles and runs on the node: one Hydra job, failing for real, requeueable.

``HydraJob(sweep overrides, ...)`` restores Hydra's state, composes the job's config and runs the
task function in the job's output dir. A task that raises makes the job raise ``JobFailed``:
SLURM records FAILED, submitit's result is an error and an active W&B run is marked failed
(Hydra's own ``JobReturn`` would have made it COMPLETED). On USR2 / time limit submitit calls
``checkpoint``: the training loop's save hooks run (``hero.preemption``) and the same call is
requeued; the rerun uses the same output dir, where the pipeline resumes from its checkpoint.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from hero.preemption import run_checkpoint_fns

log = logging.getLogger(__name__)


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

    def __call__(
        self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_subdir: str | None, singleton_state: dict
    ) -> Any:
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
        ret = run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=sweep_config,
            job_dir_key=job_dir_key,
            job_subdir_key="hydra.sweep.subdir",
        )
        if ret.status == JobStatus.FAILED:
            _finish_wandb_failed()
            err = ret._return_value
            raise JobFailed(
                f"job {env.job_id} ({' '.join(sweep_overrides)}) raised {type(err).__name__}: {err}"
            ) from err
        # Drop the configs from what travels back (the record on disk is the result).
        ret.cfg = None
        ret.hydra_cfg = None
        return ret

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        run_checkpoint_fns()
        log.warning("preempted / timing out: requeueing %s", " ".join(args[0]) if args else "")
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


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
