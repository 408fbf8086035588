"""Score finished runs again on another suite: ``python -m hero.rescore RUN_DIR [RUN_DIR ...] eval=paper7 [eval.limit=100]``.

Or with an evaluation-only intervention (``hero.model.intervention``): ``python -m hero.rescore RUN_DIR
intervention.unscaled=true`` (also ``intervention.force_execute=[29]``, ``intervention.identity_adapter=true``);
the new record's variant carries the intervention's suffix (``full@unscaled``) and so does its directory.

Every trained run keeps its trainable tensors beside its record (``hero.methods``: HeRo's
``router/``, any other method's ``trained/``), so a run need not be trained again to be read on
another yardstick. The run's model is rebuilt from the resolved config in its record (the
method's ``prepare``, then ``load``), scored on the suite that ``conf/eval/<name>.yaml`` and the
``eval.*`` overrides compose, with Retain against the dense baseline of that suite (computed once
per backbone × suite and cached). The new record (``origin: rescored``, ``rescored_from``) goes
to ``RUN_DIR/rescored/<suite>-<fingerprint>/results.json``, beside the dense baseline record of
that suite, so ``python -m analysis.report RUN_DIR/rescored`` reads it like any study.

Several runs at once (a calibration's trials: every router it trained, each a point on the method's
Retain–skip curve): ``python -m hero.rescore outputs/calibration/trials/<bed>/<layers>/<variant>/*/*/*
eval=smollm2 --into docs/studies/<study>/records``. Every run is checked before the first is scored; a run
already scored on that suite the same way (same config hash) is skipped, so a relaunch after an interruption goes
on where it stopped, and two such commands side by side share the list (each run is claimed under an ``fcntl``
lock). ``--into`` copies each new record to ``DIR/<method>-<variant>-<run dir name>-s<seed>/results.json`` (a
trial's directory is named by its knob: ``hero-full+u900-alpha=0.0001-s42``), and the suite's dense record to
``DIR/baselines/`` unless a record there already carries its ``baseline_key``. One scoring per suite is kept:
the same suite at other ``eval.thresholds`` scores the run again and replaces it.

A study's own records stand for their runs: ``python -m hero.rescore docs/studies/<study>/records/hero-* eval=public
--into docs/studies/<study>/public_records`` finds each run directory through the config-hash index under the
record's ``paths.root`` (on the machine that ran the study), or, for a copy of a rescoring, through its
``rescored_from``, and names each copy as its record is named there.
"""

from __future__ import annotations

import argparse
import fcntl
import re
import shutil
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hero.errors import ConfigError
from hero.evaluation import suite_fingerprint
from hero.logs import logged_to
from hero.records import RunRecord
from hero.results import (
    ITEMS_FILENAME,
    RESULTS_FILENAME,
    completed_record,
    is_completed,
    read_record_or_none,
    write_atomic,
)
from hero.scoring import dense_baseline, score, write_baseline_record
from hero.spec import RunSpec
from hero.training import seed_everything, set_threads

CONF = Path(__file__).resolve().parents[1] / "conf"


class RescoreError(ConfigError):
    """The run cannot be rescored as asked."""


def rescore_spec(record: dict, overrides: list[str]) -> RunSpec:
    """The spec of the run's resolved config with its ``eval`` (and ``intervention``) group replaced by the one the
    overrides compose; without ``eval`` overrides the run's own suite is kept, without ``intervention.*`` its own
    intervention."""
    bad = [o for o in overrides if not o.lstrip("+~").startswith(("eval=", "eval.", "paths.", "intervention."))]
    if bad:
        raise RescoreError(
            f"{bad[0]!r}: rescoring changes only the suite (eval=..., eval.*), an evaluation-only "
            "intervention (intervention.*) and paths.*; anything else is another run (python train.py ...)"
        )
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        composed = compose(config_name="train", overrides=overrides)
    cfg = OmegaConf.create(record["config"])
    if any(o.lstrip("+~").startswith(("eval=", "eval.")) for o in overrides) or "eval" not in cfg:
        cfg.eval = composed.eval
    if any(o.lstrip("+~").startswith("intervention.") for o in overrides) or "intervention" not in cfg:
        cfg.intervention = composed.intervention
    for override in overrides:
        if override.startswith("paths."):
            key = override.split("=", 1)[0]
            OmegaConf.update(cfg, key, OmegaConf.select(composed, key))
    return RunSpec.resolve(cfg)


def run_of(path: Path) -> Path:
    """The run directory behind ``path``: ``path`` itself, or, where ``path`` is a study's copy of a run's record
    (``hero.dispatch``'s ``collect_into``: the record and its items, not the trained tensors), the run directory
    that the config-hash index under the record's ``paths.root`` names for it; where ``path`` is a copy of a
    rescoring (its config hash is the rescoring's, which the index does not hold), the run its ``rescored_from``
    names, where that exists on this machine."""
    record = read_record_or_none(path / RESULTS_FILENAME) or {}
    source = Path(record.get("rescored_from") or "")
    if record.get("origin") == "rescored" and source.is_file() and source.parent.resolve() != path.resolve():
        return source.parent
    root = ((record.get("config") or {}).get("paths") or {}).get("root")
    found = completed_record(root, record["config_hash"]) if root and record.get("config_hash") else None
    return found.parent if found is not None and found.parent.resolve() != path.resolve() else path


def _checked(run_dir: Path, overrides: list[str]) -> tuple[dict, RunSpec]:
    """The run's record and the spec it is rescored under, or one line saying why it cannot be."""
    record = read_record_or_none(run_dir / RESULTS_FILENAME)
    if not is_completed(record):
        raise RescoreError(f"{run_dir}: no completed run record ({RESULTS_FILENAME}) to rescore")
    spec = rescore_spec(record, overrides)
    if not spec.evaluates:
        raise RescoreError("eval=none: rescoring needs a suite to score on")
    if record.get("train") and not (run_dir / spec.method.state_dir).is_dir():
        raise RescoreError(
            f"{run_dir}: no trained {record['method']} tensors ({spec.method.state_dir}/) beside the record, and no "
            f"run with its config hash {record['config_hash']} in {spec.root}/index: rescore the run's own directory"
        )
    return record, spec


def rescored_path(run_dir: Path, spec: RunSpec) -> Path:
    """Where the rescoring of ``run_dir`` under ``spec`` writes its record."""
    name = f"{spec.eval.suite}-{suite_fingerprint(spec.eval)}{spec.intervention.suffix}"
    return run_dir / "rescored" / name / RESULTS_FILENAME


def rescore(run_dir: str | Path, overrides: list[str]) -> Path:
    """Score the run in ``run_dir`` on the suite of ``overrides``; returns the new record's path."""
    start = time.time()
    run_dir = Path(run_dir)
    record, spec = _checked(run_dir, overrides)
    out = rescored_path(run_dir, spec)
    with logged_to(out.parent / "rescore.log"):
        return _rescore(run_dir, record, spec, out, start)


def _rescore(run_dir: Path, record: dict, spec: RunSpec, out: Path, start: float) -> Path:
    """``rescore`` once the run is checked; what libraries log goes to ``rescore.log`` beside the new record."""
    source = run_dir / RESULTS_FILENAME
    set_threads(spec.trainer)
    loaded = spec.load()
    baseline = dense_baseline(spec, loaded)
    seed_everything(spec.seed)
    backbone = loaded.backbone
    prepared = spec.method.prepare(spec, backbone.model, backbone.tokenizer, loaded.layers, loaded.bed)
    if prepared.trains:
        spec.method.load(prepared, run_dir)
    new = RunRecord(
        status="completed",
        method=record["method"],
        variant=record["variant"].split("@")[0] + spec.intervention.suffix,
        backbone=record["backbone"],
        seed=record["seed"],
        alpha=record["alpha"],
        layer_set=record["layer_set"],
        memory_dim=record["memory_dim"],
        config_hash=spec.config_hash,
        routable_layers=loaded.layers,
        bed=record.get("bed"),
        router=record.get("router"),
        router_params=record.get("router_params"),
        train=record.get("train"),
        calibration=record.get("calibration"),
        origin="rescored",
        rescored_from=str(source),
        config=spec.resolved,
    )
    score(spec, loaded, prepared, new, baseline)
    if baseline is not None:
        write_baseline_record(spec, loaded, baseline, new.eval_meta, run_dir / "rescored")
    new.wall_time_s = time.time() - start
    return new.write(out)


def copy_into(path: Path, run_dir: Path, into: Path, name: str | None = None) -> Path:
    """Copy the rescored record at ``path`` (and the dense record its Retain names) into the study folder ``into``, as
    ``name`` (a study's copy of the run's record keeps its own name), else named by the run directory."""
    record = read_record_or_none(path)
    name = name or f"{record['method']}-{record['variant']}-{run_dir.name}-s{record['seed']}"
    target = into / name / RESULTS_FILENAME
    if (path.parent / ITEMS_FILENAME).is_file():  # first: a record never names items its folder lacks
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path.parent / ITEMS_FILENAME, target.parent / ITEMS_FILENAME)
    write_atomic(target, record)
    keys = {(read_record_or_none(f) or {}).get("baseline_key") for f in into.glob(f"*/{RESULTS_FILENAME}")}
    keys |= {(read_record_or_none(f) or {}).get("baseline_key") for f in into.glob(f"baselines/*/{RESULTS_FILENAME}")}
    # the run's rescored/ holds every suite's dense record: only the one this record's Retain names is copied
    own = Path((record.get("retain") or {}).get("baseline_source") or "").stem
    for dense in sorted(path.parents[1].glob(f"baselines/*/{RESULTS_FILENAME}")):
        if (key := (read_record_or_none(dense) or {}).get("baseline_key")) == own and key not in keys:
            (into / "baselines" / dense.parent.name).mkdir(parents=True, exist_ok=True)
            if (dense.parent / ITEMS_FILENAME).is_file():
                shutil.copyfile(dense.parent / ITEMS_FILENAME, into / "baselines" / dense.parent.name / ITEMS_FILENAME)
            shutil.copyfile(dense, into / "baselines" / dense.parent.name / RESULTS_FILENAME)
    return target


def rescore_many(run_dirs: list[Path], overrides: list[str], into: Path | None = None):
    """Rescore each run not yet scored on this suite, skipping runs another process holds; yields
    ``(run_dir, record path, what happened)`` with ``scored``, ``already scored`` or ``taken``. Every run is
    checked before the first is scored, so a bad one stops the command before any compute. A study's copy of a
    record stands for its run (``run_of``)."""
    runs = [(given, run_of(given)) for given in run_dirs]
    plans = [(given, run, _checked(run, overrides)[1]) for given, run in runs]
    for given, run_dir, spec in plans:
        path = rescored_path(run_dir, spec)
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent.parent / f"{path.parent.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield run_dir, path, "taken"
                continue
            # the suite's folder holds one scoring; another of the same suite (other eval.thresholds) replaces it
            there = read_record_or_none(path)
            state = "already scored" if is_completed(there) and there["config_hash"] == spec.config_hash else "scored"
            if state == "scored":
                rescore(run_dir, overrides)
            if into is not None:
                copy_into(path, run_dir, into, given.name if given != run_dir else None)
            yield run_dir, path, state


_OVERRIDE = re.compile(r"[+~]{0,2}[A-Za-z_][\w.]*=")


def split_arguments(arguments: list[str]) -> tuple[list[Path], list[str]]:
    """Run directories and overrides from the positional arguments: ``key=value`` is an override unless it
    names an existing directory (a trial's ``alpha=0.0001``); anything else is a run directory."""
    runs, overrides = [], []
    for arg in arguments:
        if _OVERRIDE.match(arg) and not Path(arg).is_dir():
            overrides.append(arg)
        else:
            runs.append(Path(arg))
    return runs, overrides


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hero.rescore", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "arguments",
        nargs="+",
        metavar="RUN_DIR ... OVERRIDE ...",
        help="finished runs' directories (each holding results.json), then eval=<suite> and eval.* / "
        "intervention.* / paths.* overrides",
    )
    ap.add_argument("--into", type=Path, help="copy each new record (and the suite's dense record) into this folder")
    args = ap.parse_args(argv)
    run_dirs, overrides = split_arguments(args.arguments)
    try:
        if not run_dirs:
            raise RescoreError(f"no run directory among {args.arguments}: give at least one finished run's directory")
        for run_dir, path, state in rescore_many(run_dirs, overrides, args.into):
            if state == "taken":
                print(f"skipped {run_dir}: another process is scoring it", flush=True)
                continue
            record = read_record_or_none(path)
            retain = (record.get("retain") or {}).get("value")
            print(
                f"{'rescored' if state == 'scored' else 'already scored'} {run_dir} on "
                f"{record['eval_meta']['suite']}: Retain {'-' if retain is None else f'{retain:.2f}'} → {path}",
                flush=True,
            )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
