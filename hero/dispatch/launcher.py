"""The Hydra launcher: a seeded multirun as ONE submitit job array, idempotent, failing for real.

``HeroSubmititLauncher`` (``HeroSlurmLauncher`` / ``HeroLocalLauncher``, exposed to Hydra by the
shim ``hydra_plugins/hero_launcher``) is a drop-in for hydra-submitit-launcher. ``launch``:

1. plans every job (``hero.dispatch.plan``): stable output dir named after its overrides and
   config hash; SKIPPED when a completed record for the same config exists, a failed record
   moved aside (the checkpoints stay, so the rerun resumes);
2. writes the manifest (``hero.dispatch.manifests``) with the rest PENDING, submits them as one
   array (``map_array`` of ``hero.dispatch.job.HydraJob``) - or, locally under run slots, one by
   one, rewriting the manifest as each starts - and writes it again with every job id;
3. with ``wait: false`` returns at once (``python -m hero.dispatch status|collect`` follow up);
   otherwise waits for every job, never stopping at the first failure, writes ``summary.json``
   and returns a FAILED ``JobReturn`` for every job that failed.

Extra launcher keys (besides every hydra-submitit-launcher key):
  skip_existing  (true)   skip jobs whose completed record exists (same dir or same config hash
                          under ``records_root``); ``force=true`` in a job's overrides disables it
  wait           (true)   false: submit, write the manifest, return at once (SLURM only)
  records_root   (null)   where to look for existing records; default the sweep dir
  job_dir        ("key")  "key": subdir = job_key(overrides, hash); "hydra": keep hydra.sweep.subdir
  slots          (null)   local only: a directory whose ``array_parallelism`` run slots are shared
                          by every launch naming it (``hero.dispatch.slots``); null: this process's own
  collect_into   (null)   a directory: copy each completed record there as it finishes, named
                          ``<method>[-<variant>][-<knob>]-s<seed>`` (``hero.dispatch.manifests.collect_into``:
                          a study's committed records dir; never overwrites another record)
  name_keys      ([])     override keys whose values the collected names add (``-<last part>=<value>``): a
                          study that runs one variant at several values of a key, e.g. calibration.target_skip

``array_parallelism`` caps the jobs running at once on SLURM (submitit's key) and, with the local
executor, on this machine too: a new job starts as soon as a run slot frees (submitit's local
executor would otherwise start every job of the array at once).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

from hero.dispatch.job import HydraJob, JobFailed
from hero.dispatch.manifests import collect_into, error_line, print_summary, record_entry, summarise, write_manifest
from hero.dispatch.plan import JobPlan, JobState, plan_job, record_of, settle
from hero.dispatch.slots import SlotPool
from hero.results import is_completed, read_record_or_none

log = logging.getLogger(__name__)

# Keys handled by HeroSubmititLauncher itself, not passed on to submitit.
HERO_KEYS = (
    "skip_existing",
    "wait",
    "records_root",
    "job_dir",
    "slots",
    "collect_into",
    "name_keys",
    "poll_s",
)  # poll_s: accepted, unused


class HeroSubmititLauncher(BaseSubmititLauncher):
    """hydra-submitit-launcher with idempotent sweeps, real failures, summaries and fire-and-forget."""

    _EXECUTOR = "slurm"

    def __init__(self, **params: Any) -> None:
        from omegaconf import OmegaConf

        hero = {k: params.pop(k) for k in HERO_KEYS if k in params}
        hero = {k: (OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v) for k, v in hero.items()}
        super().__init__(**params)
        self.hero = {
            "skip_existing": True,
            "wait": True,
            "records_root": None,
            "job_dir": "key",
            "slots": None,
            "collect_into": None,
            "name_keys": [],
            **hero,
        }
        self._held: list[tuple[Any, int, dict]] = []  # (local job, its run slot's descriptor, its plan) while it runs

    def _executor(self) -> Any:
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from omegaconf import OmegaConf

        params = dict(self.params)
        init_params: dict[str, Any] = {"folder": params["submitit_folder"]}
        if "max_num_timeout" in params:
            init_params[f"{self._EXECUTOR}_max_num_timeout"] = params["max_num_timeout"]
        init_keys = {"submitit_folder", "max_num_timeout"} | (
            {"array_parallelism"} if self._EXECUTOR == "local" else set()
        )
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init_params)
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                (k if k in baseparams else f"{self._EXECUTOR}_{k}"): v
                for k, v in params.items()
                if k not in init_keys and v is not None
            }
        )
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, JobStatus, filter_overrides

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S") + f"_{os.getpid()}"
        plans = [
            plan_job(self.hydra_context, self.config, o, initial_job_idx + i, self.hero["job_dir"])
            for i, o in enumerate(job_overrides)
        ]
        settle(plans, bool(self.hero["skip_existing"]), Path(self.hero["records_root"] or sweep_dir), stamp)

        todo = [p for p in plans if p["state"] == JobState.TO_SUBMIT]
        skipped = [p for p in plans if p["state"] == JobState.SKIPPED]
        log.info(
            "hero launcher (%s): sweep dir %s — %d jobs, %d to submit, %d skipped (record exists)",
            self._EXECUTOR,
            sweep_dir,
            len(plans),
            len(todo),
            len(skipped),
        )
        for p in plans:
            log.info(
                "\t#%d %-9s %s",
                p["num"],
                "skip" if p["state"] == JobState.SKIPPED else "submit",
                " ".join(filter_overrides(p["overrides"])),
            )

        def write() -> Path:
            return write_manifest(sweep_dir, stamp, self._EXECUTOR, str(self.params.get("submitit_folder")), plans)

        jobs: list[Any] = []
        if todo:
            for p in todo:
                p["state"] = JobState.PENDING
            write()  # `status` sees every planned job while a local launch waits for run slots
            executor = self._executor()
            job = HydraJob(self.hydra_context, self.task_function, self.config)
            args = [(p["overrides"], "hydra.sweep.dir", p["num"], p["subdir"], Singleton.get_state()) for p in todo]
            jobs = self._submit(executor, job, args, todo, lambda k, j: (_mark_submitted(todo[k], j), write()))
            for p, j in zip(todo, jobs):
                _mark_submitted(p, j)
        manifest_path = write()
        log.info("manifest: %s", manifest_path)

        wait = bool(self.hero["wait"])
        if not wait and self._EXECUTOR == "local":
            log.warning("wait=false is not possible with the local executor (its jobs die with this process): waiting")
            wait = True
        if not wait:
            print(
                f"submitted {len(todo)} job(s), skipped {len(skipped)}; manifest: {manifest_path}\n"
                f"  state:   python -m hero.dispatch status {manifest_path}\n"
                f"  records: python -m hero.dispatch collect {manifest_path}",
                flush=True,
            )
            return [
                _job_return(p, JobStatus.COMPLETED, {"submitted": p.get("job_id"), "manifest": str(manifest_path)})
                for p in plans
            ]

        # Wait for every job; a failure does not stop the others.
        while self._held:
            self._free_finished()
            time.sleep(1.0)
        results: dict[int, Any] = {}
        for p, j in zip(todo, jobs):
            try:
                out = j.results()[0]
                p["state"] = JobState.COMPLETED
                results[p["num"]] = out
            except Exception as e:  # noqa: BLE001 - FailedJobError, UncompletedJobError, ...
                p["state"] = JobState.FAILED
                p["error"] = error_line(str(e))
                results[p["num"]] = e
            try:
                p["slurm_state"] = j.state
            except Exception:  # noqa: BLE001
                pass
            rec_path = record_of(p)
            if rec_path.exists():
                p["record"] = str(rec_path)
        self._collect([p for p in plans if p["state"] in (JobState.COMPLETED, JobState.SKIPPED)])
        summary = summarise(plans, sweep_dir, manifest_path)
        print_summary(summary, to_log=True)

        returns = []
        for p in plans:
            if p["state"] == JobState.COMPLETED:
                r = results[p["num"]]
                if isinstance(r, JobReturn):
                    r.status = JobStatus.COMPLETED
                    returns.append(r)
                else:
                    returns.append(_job_return(p, JobStatus.COMPLETED, r))
            elif p["state"] == JobState.SKIPPED:
                rec = read_record_or_none(p["record"]) or {}
                returns.append(_job_return(p, JobStatus.COMPLETED, _dotted(rec, p.get("objective_key"))))
            else:
                returns.append(
                    _job_return(
                        p,
                        JobStatus.FAILED,
                        JobFailed(f"job {p.get('job_id')} failed ({p.get('error', '')}); log: {p.get('log')}"),
                    )
                )
        return returns

    def _submit(
        self, executor: Any, job: Any, args: list[tuple], plans: list[JobPlan], started: Callable[[int, Any], Any]
    ) -> list[Any]:
        """Submit every job: one array, or, on the local executor with ``array_parallelism`` set, one
        job at a time as run slots free, calling ``started(k, job)`` as the k-th starts (this returns
        when the last one has started; ``launch`` frees the rest of the slots as their jobs end)."""
        limit = self.params.get("array_parallelism")
        slots = self.hero["slots"]
        if self._EXECUTOR != "local" or not limit or (int(limit) >= len(args) and not slots):
            return executor.map_array(job, *zip(*args))
        pool = SlotPool(slots, int(limit))
        jobs: list[Any] = []
        for a, plan in zip(args, plans):
            fd = pool.acquire(self._free_finished)
            jobs.append(executor.submit(job, *a))
            self._held.append((jobs[-1], fd, plan))
            started(len(jobs) - 1, jobs[-1])
            log.info(
                "\tstarted #%d (%d of this launch running, %d slot(s)%s)",
                a[2],
                len(self._held),
                int(limit),
                f" shared in {slots}" if slots else "",
            )
        return jobs

    def _free_finished(self) -> None:
        """Give back the run slots of the jobs that have ended, and collect their records."""
        ended = [h for h in self._held if h[0].done()]
        for held in ended:
            SlotPool.release(held[1])
            self._held.remove(held)
        self._collect([plan for _, _, plan in ended])

    def _collect(self, plans: list[JobPlan]) -> None:
        """Copy the completed records of ``plans`` to ``collect_into`` (when set); a conflict is logged, not fatal."""
        if not self.hero["collect_into"]:
            return
        found = [
            e for p in plans if (e := record_entry(p, p.get("record") or record_of(p))) and is_completed(e["record"])
        ]
        new, _, conflicts = collect_into(found, self.hero["collect_into"], self.hero["name_keys"])
        for path in new:
            log.info("collected %s", path)
        for c in conflicts:
            log.warning("not collected: %s", c)


class HeroSlurmLauncher(HeroSubmititLauncher):
    _EXECUTOR = "slurm"


class HeroLocalLauncher(HeroSubmititLauncher):
    _EXECUTOR = "local"


def _mark_submitted(p: dict, job: Any) -> None:
    p.update(job_id=job.job_id, state=JobState.SUBMITTED, log=str(job.paths.stderr), stdout=str(job.paths.stdout))


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
