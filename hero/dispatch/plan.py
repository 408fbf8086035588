"""What each job of a sweep is, and whether it must run, decided on the driver before submitting.

A job's identity is its task overrides (``hydra.*`` dropped) plus the hash of its composed config,
the same ``config_hash`` the pipeline records; its output dir ``<sweep dir>/<job_key>`` is
therefore found again by a relaunch (no job numbers, nothing overwritten). ``plan_job`` composes
one job's config and returns its ``JobPlan`` (a typed dict that the manifest stores as JSON);
``JobState`` names where a job stands, from planning to its end. ``settle`` marks
a job SKIPPED when a completed record for it exists (in its dir, in the pipeline's config-hash
index, or anywhere under ``records_root``) and moves a failed record aside, so that the rerun is
a rerun and resumes from the checkpoints left in place.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from hero.calibration_file import resolved_config
from hero.results import (
    RESULTS_FILENAME,
    config_hash,
    index_file,
    index_records,
    indexed_record,
    is_completed,
    read_record_or_none,
)

log = logging.getLogger(__name__)


class JobState(StrEnum):
    """Where a job of a sweep stands; manifests and summaries store the name (a ``str``)."""

    TO_SUBMIT = "TO_SUBMIT"  # planned, no completed record for its config: it will be submitted
    SKIPPED = "SKIPPED"  # a completed record for its config exists (``record``): not submitted
    SUBMITTED = "SUBMITTED"  # handed to the scheduler (``job_id``), not looked at since
    PENDING = "PENDING"  # waiting for a node or a local run slot
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"  # ended with a completed record
    FAILED = "FAILED"  # ended without one (``error``: the line that says why)
    UNKNOWN = "UNKNOWN"  # the scheduler has no row for it (yet) and there is no record


class JobPlan(TypedDict, total=False):
    """One job of a sweep as the manifest stores it: ``plan_job`` fills the first block, ``settle``
    the state, the launcher what the scheduler answered, ``manifests.job_states`` how it ended."""

    num: int  # the job's number in the sweep
    overrides: list[str]  # its sweep overrides (Hydra's), hydra.* included
    subdir: str  # <job_key>: task overrides + config hash, stable across relaunches
    output_dir: str
    launch_hash: str  # config_hash of the composed config, as the pipeline records it
    index_file: str | None  # the pipeline's config-hash index entry for it
    force: bool  # submit even when a completed record exists
    objective_key: str | None  # a calibration trial's objective, else None
    state: JobState
    record: str | None  # the completed record (own, indexed, or found under records_root)
    cluster: str  # "slurm" or "local"
    job_id: str | None
    launcher_pid: int  # local jobs: the launcher that hands out run slots
    log: str  # submitit's stderr file
    stdout: str
    slurm_state: str | None  # sacct's state of the latest attempt
    error: str | None


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


def plan_job(hydra_context: Any, config: Any, overrides: Sequence[str], num: int, job_dir: str) -> JobPlan:
    """Compose job ``num`` of the sweep and return its plan: overrides, output dir, config hash
    (``launch_hash``), the pipeline's index entry for that hash, ``force`` and the objective key.

    ``job_dir="key"`` names the output dir ``job_key(overrides, hash)``; ``"hydra"`` keeps
    ``hydra.sweep.subdir``."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    cfg = hydra_context.config_loader.load_sweep_config(config, list(overrides))
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
        container = _hashed_config(task)
        chash = config_hash(container)
        force = bool(container.get("force", False)) if isinstance(container, dict) else False
        objective_key = container.get("objective") if isinstance(container, dict) else None
        root = OmegaConf.select(task, "paths.root", default=None)
        entry = str(index_file(str(root), chash).absolute()) if root else None
        sweep_dir = Path(str(cfg.hydra.sweep.dir))
        if job_dir == "hydra":
            subdir = None
            out = sweep_dir / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))
        else:
            subdir = job_key(overrides, chash)
            out = sweep_dir / subdir
    finally:
        if prev is not None:
            HydraConfig.instance().set_config(prev)
    return {
        "num": num,
        "overrides": list(overrides),
        "subdir": subdir,
        "output_dir": str(out.absolute()),
        "launch_hash": chash,
        "index_file": entry,
        "force": force,
        "objective_key": objective_key if isinstance(objective_key, str) else None,
    }


def _hashed_config(task: Any) -> Any:
    """The job's config as hero.pipeline hashes it (α and a calibrated knob resolved to numbers), else, for
    another task function or a config that does not resolve outside a job, the config as composed."""
    from omegaconf import OmegaConf

    try:
        return resolved_config(task)
    except Exception:  # noqa: BLE001 - not a HeRo train config, or a lookup the job itself will report
        pass
    try:
        container = OmegaConf.to_container(task, resolve=True)
    except Exception:  # noqa: BLE001 - unresolvable outside a job: hash the raw config
        container = OmegaConf.to_container(task, resolve=False)
    if isinstance(container, dict) and "alpha" in container:
        try:
            container["alpha"] = float(container["alpha"])
        except (TypeError, ValueError):
            pass
    return container


def settle(plans: list[JobPlan], skip_existing: bool, records_root: Path, stamp: str) -> None:
    """Set each plan's ``state`` to SKIPPED (``record``: the completed record found) or TO_SUBMIT.

    A plan with ``force`` or ``skip_existing=False`` is always submitted. The record of a job to
    submit again is moved aside to ``results.<status>.<stamp>.json`` (its checkpoints stay)."""
    index: dict[str, Path] | None = None
    for p in plans:
        p["state"], p["record"] = JobState.TO_SUBMIT, None
        own = Path(p["output_dir"]) / RESULTS_FILENAME
        rec = read_record_or_none(own)
        if skip_existing and not p["force"]:
            if is_completed(rec):
                p["state"], p["record"] = JobState.SKIPPED, str(own)
                continue
            indexed = indexed_record(p.get("index_file"))
            if indexed is not None:
                p["state"], p["record"] = JobState.SKIPPED, str(indexed)
                continue
            if index is None:
                index = index_records(records_root)
            hit = index.get(p["launch_hash"]) or (index.get(rec.get("config_hash")) if rec else None)
            if hit is not None:
                p["state"], p["record"] = JobState.SKIPPED, str(hit)
                continue
        if rec is not None and own.exists():
            aside = own.with_name(f"results.{rec.get('status', 'old')}.{stamp}.json")
            os.replace(own, aside)
            log.info("set aside the previous record of %s -> %s", p["subdir"] or p["output_dir"], aside.name)


def record_of(plan: dict) -> Path:
    """Where a job's record is: its own ``results.json``, else the completed record the pipeline
    indexed for the same config (the job found an identical finished run elsewhere)."""
    own = Path(plan["output_dir"]) / RESULTS_FILENAME
    if own.exists():
        return own
    return indexed_record(plan.get("index_file")) or own
