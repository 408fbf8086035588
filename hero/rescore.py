"""Score a finished run again on another suite: ``python -m hero.rescore RUN_DIR eval=paper7 [eval.limit=100]``.

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
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hero import backbones, methods
from hero.errors import ConfigError
from hero.evaluation import check_config, suite_fingerprint
from hero.pipeline import check_intervention, dense_baseline, intervention_of, score, seed_everything, set_threads
from hero.records import RunRecord
from hero.results import RESULTS_FILENAME, config_hash, is_completed, read_record_or_none

CONF = Path(__file__).resolve().parents[1] / "conf"


class RescoreError(ConfigError):
    """The run cannot be rescored as asked."""


def rescore_config(record: dict, overrides: list[str]):
    """The run's resolved config with its ``eval`` (and ``intervention``) group replaced by the one the overrides
    compose; without ``eval`` overrides the run's own suite is kept, without ``intervention.*`` its own intervention."""
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
    intervention_of(cfg)
    for override in overrides:
        if override.startswith("paths."):
            key = override.split("=", 1)[0]
            OmegaConf.update(cfg, key, OmegaConf.select(composed, key))
    check_config(cfg.eval)
    return cfg


def rescore(run_dir: str | Path, overrides: list[str]) -> Path:
    """Score the run in ``run_dir`` on the suite of ``overrides``; returns the new record's path."""
    start = time.time()
    run_dir = Path(run_dir)
    source = run_dir / RESULTS_FILENAME
    record = read_record_or_none(source)
    if not is_completed(record):
        raise RescoreError(f"{run_dir}: no completed run record ({RESULTS_FILENAME}) to rescore")
    cfg = rescore_config(record, overrides)
    if cfg.eval.suite == "none":
        raise RescoreError("eval=none: rescoring needs a suite to score on")
    method = methods.get(cfg.method.name)
    set_threads(cfg)
    cache_root = str(cfg.paths.cache)
    bed = backbones.bed(cfg.model, cache_root)
    backbone = backbones.load(cfg.model, bed)
    layers = list(record["routable_layers"])
    baseline = None if method.reference else dense_baseline(cfg, backbone, cache_root, bed)
    seed_everything(cfg.seed)
    prepared = method.prepare(cfg, backbone.model, backbone.tokenizer, layers, bed, float(cfg.alpha))
    check_intervention(cfg, prepared, layers)
    if prepared.trains:
        method.load(prepared, run_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    out_root = run_dir / "rescored"
    new = RunRecord(
        status="completed",
        method=record["method"],
        variant=record["variant"].split("@")[0] + intervention_of(cfg).suffix,
        backbone=record["backbone"],
        seed=record["seed"],
        alpha=record["alpha"],
        layer_set=record["layer_set"],
        memory_dim=record["memory_dim"],
        config_hash=config_hash(resolved),
        routable_layers=layers,
        bed=record.get("bed"),
        router=record.get("router"),
        router_params=record.get("router_params"),
        train=record.get("train"),
        calibration=record.get("calibration"),
        origin="rescored",
        rescored_from=str(source),
        config=resolved,
    )
    score(cfg, method, prepared, new, baseline, backbone, bed, layers, out_root, rank=0)
    new.wall_time_s = time.time() - start
    name = f"{cfg.eval.suite}-{suite_fingerprint(cfg.eval)}{intervention_of(cfg).suffix}"
    return new.write(out_root / name / RESULTS_FILENAME)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hero.rescore", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a finished run's directory (holding results.json)")
    ap.add_argument("overrides", nargs="*", help="eval=<suite> and eval.* / intervention.* / paths.* overrides")
    args = ap.parse_args(argv)
    try:
        path = rescore(args.run_dir, args.overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    record = read_record_or_none(path)
    retain = (record.get("retain") or {}).get("value")
    print(
        f"rescored {args.run_dir} on {record['eval_meta']['suite']}: Retain "
        f"{'-' if retain is None else f'{retain:.2f}'} → {path}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
