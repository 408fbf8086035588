"""One run, end to end: resolve the spec → load → prepare the method → train → save → score → record.

``run(cfg)`` is what ``train.py`` calls. The config is read once, into a ``hero.spec.RunSpec``, whose checks
refuse a bad value in one line before anything is loaded or printed; every ``method=`` then runs the same steps
through its entry in ``hero.methods`` and every bed through ``hero.bed``: nothing here branches on either's name.
A completed record with the same config hash makes a relaunch a no-op (``force=true`` reruns). Checkpoints live
under ``<paths.root>/checkpoints/<config_hash>/`` so that a relaunch or a requeued job resumes where the last one
stopped; ``results.json`` is written atomically into the run directory and indexed under
``<paths.root>/index/<config_hash>.json`` (``hero.results`` owns both). Scoring — the suite, Retain against the
dense baseline, routing statistics, both cost axes — is ``hero.scoring``. A run whose training config equals a
finished run's in the index (it differs only in how it is scored: ``eval``, ``objective``, ``calibration``,
``intervention``) loads that run's trained state instead of training again, and its record names the donor
(``trained_by``); the seeded run at a calibrated α and the calibration trial that found it are such a pair.
Several ranks: ``hero.distributed``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch
from omegaconf import DictConfig

from hero.calibration_file import transfer_report
from hero.checkpoints import remove_checkpoints
from hero.data import SFTDataset, load_conversations
from hero.distributed import init_distributed, world
from hero.errors import ConfigError
from hero.evaluation.routing import wandb_gate_histograms
from hero.records import RunRecord
from hero.results import RESULTS_FILENAME, completed_record, read_record, trained_records, write_index
from hero.scoring import dense_baseline, score, write_baseline_record
from hero.spec import Loaded, RunSpec
from hero.summary import format_summary
from hero.tracking import tracked_run
from hero.training import fit, seed_everything, set_threads


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float | None:
    """Run one job; returns the objective (``cfg.objective``, a dotted path into the record)."""
    start = time.time()
    spec = RunSpec.resolve(cfg)
    chash, root = spec.config_hash, spec.root
    run_dir = Path(run_dir or _hydra_run_dir() or root / "runs" / chash)
    done = completed_record(root, chash)
    if done is not None and not spec.force:
        print(f"skipping: a completed run with config hash {chash} exists at {done} (force=true reruns)", flush=True)
        discard_run_dir(run_dir)
        return objective(read_record(done), spec.objective)
    print(spec.headline(), flush=True)
    _init_distributed_if_needed()
    rank, _ = world()
    set_threads(spec.trainer)
    loaded = spec.load(device="cuda" if torch.cuda.is_available() else "cpu")
    if rank == 0:
        write_index(root, chash, "running", run_dir)
    with tracked_run(cfg, spec.resolved, str(run_dir), run_id=f"{chash}", enabled=rank == 0) as tracker:
        try:
            record = _execute(spec, loaded, run_dir, tracker, rank)
        except Exception as err:
            if rank == 0:
                reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                failed = spec.identity(status="failed", config=spec.resolved, error=reason)
                failed.wall_time_s = time.time() - start
                write_index(root, chash, "failed", run_dir, record=failed.write(run_dir / RESULTS_FILENAME))
            raise
        record.wall_time_s, record.wandb = time.time() - start, tracker.info
        if rank == 0:
            path = record.write(run_dir / RESULTS_FILENAME)
            write_index(root, chash, "completed", run_dir, record=path)
            tracker.summary(_flat_summary(record))
            print(format_summary(record.to_dict(), str(path)), flush=True)
    remove_checkpoints(root / "checkpoints" / chash)
    return objective(record.to_dict(), spec.objective)


def _execute(spec: RunSpec, loaded: Loaded, run_dir: Path, tracker, rank: int) -> RunRecord:
    """prepare → train → save → score, the same for every method (``hero.methods``)."""
    method, backbone, run_dir = spec.method, loaded.backbone, Path(run_dir)
    baseline = dense_baseline(spec, loaded)
    seed_everything(spec.seed)
    prepared = method.prepare(spec, backbone.model, backbone.tokenizer, loaded.layers, loaded.bed)
    summary, donor = None, _trained_donor(spec, loaded) if prepared.trains else None
    if donor is not None:
        donor_path, donor_record = donor
        print(
            f"reusing the trained state of {donor_path} (same training config; reuse_trained=false trains again)",
            flush=True,
        )
        method.load(prepared, donor_path.parent)
    elif prepared.trains:
        dataset = SFTDataset(
            load_conversations(spec.data, loaded.bed),
            backbone.tokenizer,
            spec.data.max_length,
            spec.data.assistant_only_loss,
        )
        summary = fit(
            prepared.model,
            dataset,
            spec.trainer,
            prepared.weight,
            spec.seed,
            spec.root / "checkpoints" / spec.config_hash,
            on_log=lambda m: tracker.log({f"train/{k}": v for k, v in m.items() if k != "step"}, step=m["step"]),
            routed=method.routes,
            regularizer=prepared.regularizer,
        )
    if prepared.trains and rank == 0:
        method.save(prepared, run_dir)
    record = spec.identity(
        status="completed",
        config=spec.resolved,
        routable_layers=loaded.layers,
        bed=loaded.bed.provenance() if loaded.bed is not None else None,
        router=dict(spec.resolved["router"]),
        router_params=getattr(prepared.model, "hero_param_counts", None),
        train=donor_record["train"] if donor is not None else summary.as_record() if summary else None,
        trained_by=str(donor_path) if donor is not None else None,
    )
    score(spec, loaded, prepared, record, baseline)
    if baseline is not None and rank == 0:
        write_baseline_record(spec, loaded, baseline, record.eval_meta, spec.root)
    if spec.knob is not None and spec.knob.calibrated:
        record.calibration = transfer_report(spec.knob, spec.calibration_file, record.skip["param_rate"])
    tracker.log({f"eval/{task}/{metric}": v for task, ms in record.eval.items() for metric, v in ms.items()})
    tracker.log_routing(record.skip, record.rho)
    if tracker.run is not None and record.skip.get("gate_histogram"):
        tracker.log(wandb_gate_histograms(record.skip))
    return record


def _trained_donor(spec: RunSpec, loaded: Loaded) -> tuple[Path, dict] | None:
    """(path, record) of a finished run that trained what this one would (same ``training_hash``, same bed
    files, its trained state on disk), or None: ``reuse_trained=false`` or ``force=true`` train again."""
    if not spec.reuses_trained:
        return None
    provenance = loaded.bed.provenance() if loaded.bed is not None else None
    for path, record in trained_records(spec.root, spec.training_hash):
        if (path.parent / spec.method.state_dir).is_dir() and record.get("bed") == provenance:
            return path, record
    return None


def objective(record: dict, dotted: str | None) -> float | None:
    """The value at ``dotted`` in the record (``objective: null`` returns nothing, e.g. for method=dense)."""
    if dotted is None:
        return None
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ConfigError(f"objective={dotted!r}: the record has no such field")
        value = value[key]
    return float(value)


def _flat_summary(record: RunRecord) -> dict:
    out = {"skip/param_rate": record.skip["param_rate"]}
    if record.retain and record.retain["value"] is not None:
        out["retain"] = record.retain["value"]
    if record.train:
        out.update({f"train/{k}": v for k, v in record.train.items()})
    return out


def discard_run_dir(run_dir: str | Path | None = None) -> None:
    """Remove a run directory (default: Hydra's) that holds nothing but Hydra's own files (``.hydra/``, ``*.log``).

    A run refused by validation (``train.py`` calls this on a ``ConfigError``) or a relaunch that finds its
    record leaves no directory behind that analysis would list as an incomplete run; a directory with anything
    else in it (a record, router weights) is kept.
    """
    run_dir = run_dir or _hydra_run_dir()
    if run_dir is None or not Path(run_dir).is_dir():
        return
    entries = list(Path(run_dir).iterdir())
    if all(e.name == ".hydra" or (e.is_file() and e.suffix == ".log") for e in entries):
        shutil.rmtree(run_dir, ignore_errors=True)


def _hydra_run_dir() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None


def _init_distributed_if_needed() -> None:
    """Join the process group when launched with several tasks (torchrun or SLURM ntasks > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        init_distributed()
