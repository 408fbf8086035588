"""One run, end to end: validate → load backbone → attach → train → evaluate → record.

``run(cfg)`` is what ``train.py`` calls. Bad config values fail in ``validate``
before any model is loaded. A completed record with the same config hash makes a
relaunch a no-op (``force=true`` reruns). Checkpoints live under
``<paths.root>/checkpoints/<config_hash>/`` so that a relaunch or a requeued job
resumes where the last one stopped; ``results.json`` is written atomically into
the run directory and indexed under ``<paths.root>/index/<config_hash>.json``. The
dense baseline every evaluated run uses for Retain is also written once per backbone
× suite as a record under ``<paths.root>/baselines/`` (``write_baseline_record``).
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from hero import backbones
from hero.errors import ConfigError
from hero.data import SFTDataset, collate, load_conversations, tokenize_conversation
from hero.data.sft import check_path
from hero.evaluation import check_config as check_eval_config
from hero.evaluation import evaluate_suite, retain, routing_statistics, suite_fingerprint
from hero.evaluation.routing import wandb_gate_histograms
from hero.model import RouterConfig, attach, save_router
from hero.model.attach import LAYER_SETS, decoder_layers, resolve_layers
from hero.model.io import backbone_fingerprint
from hero.objectives import total_param_count
from hero.summary import format_summary
from hero.results import (RESULTS_FILENAME, SCHEMA_VERSION, config_hash, git_commit, now_iso, read_record, versions,
                          write_atomic)
from hero.tracking import check_config as check_logger_config
from hero.tracking import tracked_run
from hero.training import check_config as check_trainer_config
from hero.training import fit, remove_checkpoints, world

METHODS = ("hero", "dense", "lora", "drop_routable_ffn")
TRAINED = ("hero", "lora")


class PipelineConfigError(ConfigError):
    """The composed config cannot be run."""


def validate(cfg: DictConfig) -> None:
    """Every check that needs no model weights; raises with one line naming the bad value."""
    if cfg.method.name not in METHODS:
        raise PipelineConfigError(f"method={cfg.method.name!r}: allowed methods are {', '.join(METHODS)}")
    if not isinstance(cfg.seed, int):
        raise PipelineConfigError(f"seed={cfg.seed!r}: must be an integer")
    if cfg.alpha != "calibrated" and (not isinstance(cfg.alpha, (int, float)) or cfg.alpha < 0):
        raise PipelineConfigError(f"alpha={cfg.alpha!r}: must be a non-negative number or 'calibrated'")
    RouterConfig.from_dict(OmegaConf.to_container(cfg.router, resolve=True))
    if cfg.layers.name not in (*LAYER_SETS, "explicit"):
        raise PipelineConfigError(f"layers={cfg.layers.name!r}: allowed are {', '.join(LAYER_SETS)}, explicit")
    if cfg.layers.name == "explicit" and not OmegaConf.is_list(cfg.layers.indices):
        raise PipelineConfigError(f"layers.indices={cfg.layers.indices!r}: layers=explicit needs a list such as [4,5,6,7]")
    backbones.check(cfg.model)
    check_path(cfg.data)
    if not isinstance(cfg.data.max_length, int) or cfg.data.max_length < 2:
        raise PipelineConfigError(f"data.max_length={cfg.data.max_length!r}: must be an integer ≥ 2")
    check_trainer_config(cfg.trainer)
    check_eval_config(cfg.eval)
    check_logger_config(cfg.logger)


def layer_spec(cfg: DictConfig):
    return list(cfg.layers.indices) if cfg.layers.name == "explicit" else cfg.layers.name


def resolve_alpha(cfg: DictConfig) -> float:
    """α as a number; ``alpha=calibrated`` reads the calibration file for this variant and target."""
    if cfg.alpha != "calibrated":
        return float(cfg.alpha)
    from hero.calibration import calibrated_alpha

    return calibrated_alpha(cfg)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float | None:
    """Run one job; returns the objective (``cfg.objective``, a dotted path into the record)."""
    start = time.time()
    validate(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    print(OmegaConf.to_yaml(cfg, resolve=True), flush=True)
    alpha = resolve_alpha(cfg)
    resolved["alpha"] = alpha
    chash = config_hash(resolved)
    root = Path(cfg.paths.root)
    run_dir = Path(run_dir or _hydra_run_dir() or root / "runs" / chash)
    done = completed_record(root, chash)
    if done is not None and not cfg.force:
        print(f"skipping: a completed run with config hash {chash} exists at {done} (force=true reruns)", flush=True)
        discard_run_dir(run_dir)
        return objective(read_record(done), cfg.objective)
    cache_root = str(cfg.paths.cache)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _init_distributed_if_needed()
    rank, _ = world()
    if cfg.trainer.num_threads:
        torch.set_num_threads(int(cfg.trainer.num_threads))
    bed = backbones.testbed(cfg.model, cache_root)
    layers = resolve_layers(layer_spec(cfg), backbones.num_layers(cfg.model, bed))
    backbone = backbones.load(cfg.model, bed, device=device)
    if rank == 0:
        write_atomic(root / "index" / f"{chash}.json", {"status": "running", "run_dir": str(run_dir), "updated": now_iso()})
    with tracked_run(cfg, resolved, str(run_dir), run_id=f"{chash}", enabled=rank == 0) as tracker:
        try:
            record = _execute(cfg, backbone, layers, alpha, chash, root, run_dir, cache_root, bed, tracker, rank)
        except Exception as err:
            if rank == 0:
                _write_failed(cfg, resolved, chash, root, run_dir, start, err)
            raise
        record.update(config=resolved, config_hash=chash, git_commit=git_commit(), versions=versions(),
                      wall_time_s=time.time() - start, created=now_iso(), wandb=tracker.info)
        if rank == 0:
            path = write_atomic(run_dir / RESULTS_FILENAME, record)
            write_atomic(root / "index" / f"{chash}.json", {"status": "completed", "record": str(path),
                                                             "run_dir": str(run_dir), "updated": now_iso()})
            tracker.summary(_flat_summary(record))
            print(format_summary(record, str(path)), flush=True)
    remove_checkpoints(root / "checkpoints" / chash)
    return objective(record, cfg.objective)


def _execute(cfg, backbone, layers, alpha, chash, root, run_dir, cache_root, bed, tracker, rank) -> dict:
    method = cfg.method.name
    model, tokenizer = backbone.model, backbone.tokenizer
    baseline = dense_baseline(cfg, backbone, cache_root, bed) if cfg.eval.suite != "none" and method != "dense" else None
    seed_everything(cfg.seed)
    summary = None
    if method == "hero":
        model = attach(model, layers, config=RouterConfig.from_dict(OmegaConf.to_container(cfg.router, resolve=True)))
    elif method == "lora":
        model = _with_lora(model, cfg.method)
    if method in TRAINED:
        conversations = load_conversations(cfg.data, bed)
        dataset = SFTDataset(conversations, tokenizer, cfg.data.max_length, cfg.data.assistant_only_loss)
        summary = fit(model, dataset, cfg.trainer, alpha, cfg.seed, root / "checkpoints" / chash,
                      on_log=lambda m: tracker.log({f"train/{k}": v for k, v in m.items() if k != "step"}, step=m["step"]),
                      routed=method == "hero")
        if method == "hero" and rank == 0:
            save_router(model, Path(run_dir) / "router")
    if method == "drop_routable_ffn":
        from hero.testbed import drop_routable_ffn

        with drop_routable_ffn(model, layers) as dropped:
            scores, meta = evaluate_suite(dropped, tokenizer, cfg.eval, bed)
    else:
        scores, meta = evaluate_suite(model, tokenizer, cfg.eval, bed)
    if method == "dense" and cfg.eval.suite != "none":
        _store_baseline(cfg, backbone, scores, cache_root)
    if baseline is not None and rank == 0:
        write_baseline_record(cfg, baseline, meta, layers, root)
    record = {
        "schema_version": SCHEMA_VERSION, "status": "completed", "method": method, "variant": cfg.variant,
        "ablation": cfg.variant, "backbone": cfg.model.name, "seed": cfg.seed, "alpha": alpha,
        "layer_set": cfg.layers.name, "routable_layers": layers,
        "router": OmegaConf.to_container(cfg.router, resolve=True), "memory_dim": cfg.router.memory_dim,
        "eval": scores, "eval_meta": meta, "train": summary.as_record() if summary else None, "error": None,
    }
    if method == "dense" and cfg.eval.suite != "none":
        record["baseline_key"] = _baseline_path(cfg, backbone, cache_root).stem
    record["router_params"] = getattr(model, "hero_param_counts", None)
    record["retain"] = _retain(cfg, scores, meta, baseline)
    record["skip"], record["rho"] = _routing(cfg, model, tokenizer, layers, method, bed)
    if cfg.alpha == "calibrated":
        from hero.calibration import transfer_report

        record["calibration"] = transfer_report(cfg, record["skip"]["param_rate"])
    tracker.log({f"eval/{task}/{metric}": v for task, ms in scores.items() for metric, v in ms.items()})
    tracker.log_routing(record["skip"], record["rho"])
    if tracker.run is not None and record["skip"].get("gate_histogram"):
        tracker.log(wandb_gate_histograms(record["skip"]))
    return record


def _routing(cfg, model, tokenizer, layers, method, bed) -> tuple[dict, dict]:
    """Routing statistics on evaluation data (the testbed's typed sequences or the validation SFT data)."""
    if method != "hero":
        return fixed_routing(model, layers, ffn_executed=method != "drop_routable_ffn"), {}
    if bed is not None:
        from hero.testbed import TOKEN_TYPES, token_type_batches

        return routing_statistics(model, token_type_batches(bed, tokenizer, batch_size=cfg.eval.batch_size), TOKEN_TYPES)
    conversations = load_conversations(cfg.data, bed, split="validation")[:64]
    items = [tokenize_conversation(tokenizer, c, cfg.data.max_length) for c in conversations]
    batches = [(b["input_ids"], b["attention_mask"]) for b in
               (collate(items[i: i + 8], tokenizer.pad_token_id) for i in range(0, len(items), 8))]
    return routing_statistics(model, batches)


def fixed_routing(model, layers: list[int], ffn_executed: bool) -> dict:
    """The skip section of a model that runs every routable FFN (dense, LoRA) or none (drop control)."""
    blocks = decoder_layers(model)
    skipped = 0.0 if ffn_executed else sum(p.numel() for i in layers for p in blocks[i].mlp.parameters())
    return {"param_rate": skipped / total_param_count(model),
            "per_layer_ffn_rate": {str(layer): float(ffn_executed) for layer in layers}}


def _retain(cfg, scores, meta, baseline) -> dict | None:
    if cfg.eval.suite == "none" or cfg.method.name == "dense":
        return None
    value = retain(scores, baseline["eval"], meta["primary_metric"], baseline_name=cfg.eval.baseline)
    value["baseline_source"] = baseline["source"]
    return value


def _baseline_path(cfg, backbone, cache_root) -> Path:
    fingerprint = backbone_fingerprint(backbone.model)["weights_sha256"]
    return Path(cache_root) / "baselines" / f"{cfg.model.name}-{fingerprint}-{cfg.eval.suite}-{suite_fingerprint(cfg.eval)}.json"


def dense_baseline(cfg, backbone, cache_root, bed) -> dict:
    """Dense scores of this backbone on this suite: cached per backbone × suite, computed once."""
    if cfg.eval.baseline != "dense":
        raise PipelineConfigError(f"eval.baseline={cfg.eval.baseline!r}: runs compute Retain against 'dense'; "
                                  "other baselines are chosen in analysis (python -m analysis.report --help)")
    path = _baseline_path(cfg, backbone, cache_root)
    if path.is_file():
        return {**read_record(path), "source": str(path)}
    scores, _ = evaluate_suite(backbone.model, backbone.tokenizer, cfg.eval, bed)
    return {**_store_baseline(cfg, backbone, scores, cache_root), "source": str(path)}


def write_baseline_record(cfg, baseline: dict, meta: dict, layers: list[int], root: Path) -> Path | None:
    """The dense baseline as a run record, once per backbone × suite: ``<root>/baselines/<key>/results.json``.

    Every evaluated run computes (or reads from the cache) the dense scores of its backbone on its suite;
    this record makes them visible to analysis like any run, so Retain tables need no separate
    ``method=dense`` run. ``key`` is the cache file's name (backbone weights × suite settings); the record
    takes the seed, layer set and memory dim of the run that wrote it, ``origin: baseline_cache``, and the
    ``baseline_key`` that a ``method=dense`` run of the same backbone and suite also carries (analysis keeps
    that run and notes this record as superseded).
    """
    key = Path(baseline["source"]).stem
    path = root / "baselines" / key / RESULTS_FILENAME
    if path.is_file():
        return None
    name = cfg.eval.baseline
    record = {
        "schema_version": SCHEMA_VERSION, "status": "completed", "method": name, "variant": name, "ablation": name,
        "backbone": cfg.model.name, "seed": cfg.seed, "alpha": 0.0, "layer_set": cfg.layers.name,
        "routable_layers": layers, "router": None, "memory_dim": cfg.router.memory_dim, "eval": baseline["eval"],
        "eval_meta": meta, "train": None, "error": None, "retain": None, "rho": {},
        "skip": {"param_rate": 0.0, "per_layer_ffn_rate": {str(layer): 1.0 for layer in layers}},
        "origin": "baseline_cache", "baseline_key": key, "baseline_source": baseline["source"],
        "config_hash": hashlib.sha256(key.encode()).hexdigest()[:16], "git_commit": git_commit(),
        "versions": versions(), "wall_time_s": 0.0, "created": now_iso(), "wandb": None}
    return write_atomic(path, record)


def _store_baseline(cfg, backbone, scores, cache_root) -> dict:
    payload = {"backbone": cfg.model.name, "suite": cfg.eval.suite, "limit": cfg.eval.limit, "eval": scores}
    write_atomic(_baseline_path(cfg, backbone, cache_root), payload)
    return payload


def _with_lora(model, method_cfg):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=method_cfg.r, lora_alpha=method_cfg.lora_alpha, lora_dropout=method_cfg.dropout,
                        target_modules=list(method_cfg.target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def completed_record(root: Path, chash: str) -> Path | None:
    """The record of a completed run with this config hash, if one exists on disk."""
    index = root / "index" / f"{chash}.json"
    if not index.is_file():
        return None
    entry = read_record(index)
    record = Path(entry.get("record", ""))
    if entry.get("status") == "completed" and record.is_file() and read_record(record).get("status") == "completed":
        return record
    return None


def objective(record: dict, dotted: str | None) -> float | None:
    """The value at ``dotted`` in the record (``objective: null`` returns nothing, e.g. for method=dense)."""
    if dotted is None:
        return None
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise PipelineConfigError(f"objective={dotted!r}: the record has no such field")
        value = value[key]
    return float(value)


def _write_failed(cfg, resolved, chash, root, run_dir, start, err) -> None:
    record = {"schema_version": SCHEMA_VERSION, "status": "failed", "method": cfg.method.name, "variant": cfg.variant,
              "ablation": cfg.variant, "backbone": cfg.model.name, "seed": cfg.seed, "alpha": resolved.get("alpha"),
              "layer_set": cfg.layers.name, "memory_dim": cfg.router.memory_dim, "config": resolved,
              "config_hash": chash, "git_commit": git_commit(), "versions": versions(),
              "wall_time_s": time.time() - start, "created": now_iso(),
              "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
    path = write_atomic(Path(run_dir) / RESULTS_FILENAME, record)
    write_atomic(root / "index" / f"{chash}.json", {"status": "failed", "record": str(path), "run_dir": str(run_dir),
                                                     "updated": now_iso()})


def _flat_summary(record: dict) -> dict:
    out = {"skip/param_rate": record["skip"]["param_rate"]}
    if record.get("retain"):
        out["retain"] = record["retain"]["value"]
    if record.get("train"):
        out.update({f"train/{k}": v for k, v in record["train"].items()})
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
        from hero.launch import init_distributed

        init_distributed()
