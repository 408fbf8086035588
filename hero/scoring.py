"""Score a prepared model: the suite, Retain against the dense baseline, routing statistics, both cost axes.

``score`` fills a run record the same way for a training run (``hero.pipeline``) and for a rescoring
(``hero.rescore``), for every method: the suite's scores (``hero.evaluation``), Retain and chance-normalised Retain
against the dense baseline of the same backbone × suite, the method's ``statistics`` on the routing data (the
parameter skip and the per-layer FFN execution rates), and the net compute skip with its breakdown, which the
method's own ``compute_cost`` (router and adapter FLOPs) enters (``hero.model.flops.net_compute``).

The dense baseline every evaluated run uses for Retain is computed once per backbone × suite and cached under
``<paths.cache>/baselines/<key>.json`` (``dense_baseline``); it is also written once as a run record under
``<paths.root>/baselines/<key>/`` (``write_baseline_record``), so analysis reads it like any run.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from hero.data import collate, load_conversations, tokenize_conversation
from hero.evaluation import CHANCE, evaluate_suite, suite_fingerprint
from hero.methods import Prepared
from hero.model.flops import Shape, net_compute
from hero.model.intervention import apply_intervention
from hero.model.io import backbone_fingerprint
from hero.records import RunRecord
from hero.results import ITEMS_FILENAME, RESULTS_FILENAME, read_record, write_atomic, write_items
from hero.spec import Loaded, RunSpec, SpecError
from hero.statistics import RetainError, chance_normalised, retain


def score(spec: RunSpec, loaded: Loaded, prepared: Prepared, record: RunRecord, baseline: dict | None) -> None:
    """Fill the record's scores, per-item outputs, Retain, method card, routing statistics and net compute.

    ``baseline``: the dense baseline's scores (``dense_baseline``), None for the dense method itself and when the
    run is not evaluated. The run's evaluation-only intervention (``hero.model.intervention``) applies from here
    on: after training, to the scores and the routing statistics alike. With ``eval.thresholds`` the run is also
    scored at each of those evaluation thresholds (``score_curve``): ``record.curve``.
    """
    if spec.method.routes:
        apply_intervention(prepared.model, spec.intervention)
    if prepared.card is not None:
        record.method_card, record.knob = prepared.card, prepared.card["knob"]["value"]
        record.knob_name = prepared.card["knob"]["name"]
    point, items = _score_point(spec, loaded, prepared, baseline)
    record.eval, record.eval_meta, record.retain, record.retain_chance = (
        point["eval"],
        point["eval_meta"],
        point["retain"],
        point["retain_chance"],
    )
    record.skip, record.rho = point["skip"], point["rho"]
    if spec.method.reference and spec.evaluates:
        _store_baseline(spec, loaded.backbone, record.eval, items)
        record.baseline_key = _baseline_path(spec, loaded.backbone).stem
    if spec.eval.get("thresholds"):
        record.curve = score_curve(spec, loaded, prepared, baseline, items)
    record.items = items if spec.evaluates else None


def score_curve(spec: RunSpec, loaded: Loaded, prepared: Prepared, baseline: dict | None, items: list) -> list[dict]:
    """The run scored at each evaluation threshold of ``eval.thresholds``: one training, its own Retain–cost curve.

    Each point: ``threshold``, the suite's scores, Retain, and the skip section on both cost axes (``param_rate``,
    ``net_compute_rate``, per-layer FFN execution rates); its per-item rows join ``items`` with ``threshold`` set.
    The trained threshold is restored afterwards. Analysis matches two runs at exactly one skip by mixing the two
    thresholds that bracket it (``analysis.matched``).
    """
    method, trained = spec.method, spec.method.threshold_of(prepared)
    points = []
    try:
        for threshold in spec.eval.thresholds:
            method.set_threshold(prepared, float(threshold))
            point, rows = _score_point(spec, loaded, prepared, baseline)
            items.extend(row | {"threshold": float(threshold)} for row in rows)
            points.append({"threshold": float(threshold)} | {k: point[k] for k in ("eval", "retain", "skip")})
    finally:
        method.set_threshold(prepared, trained)
    return points


def _score_point(spec: RunSpec, loaded: Loaded, prepared: Prepared, baseline: dict | None) -> tuple[dict, list]:
    """Scores, Retain, routing statistics and net compute of the prepared model as it is routed now."""
    backbone, bed, items = loaded.backbone, loaded.bed, []
    scores, meta = evaluate_suite(prepared.model, backbone.tokenizer, spec.eval, bed, items)
    skip, rho = spec.method.statistics(
        prepared, lambda: _routing_batches(spec, backbone.tokenizer, bed), bed.token_classes if bed else None
    )
    shape = Shape.from_config(backbone.model.config)
    router, adapter = spec.method.compute_cost(spec.resolved, shape, len(loaded.layers))
    skip.update(net_compute(shape, skip["per_layer_ffn_rate"], router, adapter, spec.data.max_length))
    point = {
        "eval": scores,
        "eval_meta": meta,
        "retain": _retain(spec, scores, meta, baseline),
        "retain_chance": _retain_chance(spec, scores, meta, baseline),
        "skip": skip,
        "rho": rho,
    }
    return point, items


def _routing_batches(spec: RunSpec, tokenizer, bed):
    """Routing data: the bed's token-classed held-out sequences, or 64 validation conversations of the data."""
    if bed is not None:
        return bed.token_class_batches(tokenizer, batch_size=spec.eval.batch_size)
    conversations = load_conversations(spec.data, bed, split="validation")[:64]
    items = [tokenize_conversation(tokenizer, c, spec.data.max_length) for c in conversations]
    return [
        (b["input_ids"], b["attention_mask"])
        for b in (collate(items[i : i + 8], tokenizer.pad_token_id) for i in range(0, len(items), 8))
    ]


def _retain(spec: RunSpec, scores, meta, baseline) -> dict | None:
    if baseline is None:
        return None
    try:
        value = retain(scores, baseline["eval"], meta["primary_metric"], baseline_name=spec.eval.baseline)
    except RetainError as err:  # e.g. a baseline at 0 on a task: the scores are still recorded
        print(f"warning: no Retain for this run: {err}", flush=True)
        return {
            "value": None,
            "baseline": spec.eval.baseline,
            "tasks": sorted(meta["primary_metric"]),
            "metrics": dict(sorted(meta["primary_metric"].items())),
            "error": str(err),
            "baseline_source": baseline["source"],
        }
    value["baseline_source"] = baseline["source"]
    return value


def _retain_chance(spec: RunSpec, scores, meta, baseline) -> dict | None:
    """Chance-normalised Retain over the suite's tasks with a known chance level (None: no such task)."""
    if baseline is None:
        return None
    tasks = meta.get("tasks", {})
    chance = {t: CHANCE[s["lm_eval_task"]] for t, s in tasks.items() if s["lm_eval_task"] in CHANCE}
    try:
        return chance_normalised(scores, baseline["eval"], meta["primary_metric"], chance, spec.eval.baseline)
    except RetainError as err:
        print(f"warning: no chance-normalised Retain for this run: {err}", flush=True)
        return None


def _baseline_path(spec: RunSpec, backbone) -> Path:
    fingerprint = backbone_fingerprint(backbone.model)["weights_sha256"]
    suite = f"{spec.eval.suite}-{suite_fingerprint(spec.eval)}"
    return Path(spec.cache) / "baselines" / f"{spec.model.name}-{fingerprint}-{suite}.json"


def dense_baseline(spec: RunSpec, loaded: Loaded) -> dict | None:
    """Dense scores of this backbone on this suite, cached per backbone × suite and computed once; None for a run
    that is not evaluated and for the dense method (it is its own baseline)."""
    if not spec.evaluates or spec.method.reference:
        return None
    if spec.eval.baseline != "dense":
        raise SpecError(
            f"eval.baseline={spec.eval.baseline!r}: runs compute Retain against 'dense'; "
            "other baselines are chosen in analysis (python -m analysis.report --help)"
        )
    path = _baseline_path(spec, loaded.backbone)
    if path.is_file() and _items_path(path).is_file():
        return {**read_record(path), "source": str(path)}
    items = []
    scores, _ = evaluate_suite(loaded.backbone.model, loaded.backbone.tokenizer, spec.eval, loaded.bed, items)
    if path.is_file():  # cached before baselines kept their items: the items are added, the scores stay as cached
        write_items(_items_path(path), items)
        return {**read_record(path), "source": str(path)}
    return {**_store_baseline(spec, loaded.backbone, scores, items), "source": str(path)}


def _items_path(baseline_path: Path) -> Path:
    """The dense baseline's per-item rows beside its cache file: ``<key>.items.jsonl.gz``."""
    return baseline_path.with_name(baseline_path.stem + "." + ITEMS_FILENAME)


def write_baseline_record(spec: RunSpec, loaded: Loaded, baseline: dict, meta: dict, root: Path) -> Path | None:
    """The dense baseline as a run record, once per backbone × suite: ``<root>/baselines/<key>/results.json``.

    Every evaluated run computes (or reads from the cache) the dense scores of its backbone on its suite;
    this record makes them visible to analysis like any run, so Retain tables need no separate
    ``method=dense`` run. ``key`` is the cache file's name (backbone weights × suite settings); the record
    takes the seed, layer set and memory dim of the run that wrote it, ``origin: baseline_cache``, and the
    ``baseline_key`` that a ``method=dense`` run of the same backbone and suite also carries (analysis keeps
    that run and notes this record as superseded). Like every record, it carries its net compute skip: 0.
    """
    key = Path(baseline["source"]).stem
    path = root / "baselines" / key / RESULTS_FILENAME
    if path.is_file():
        return None
    name, layers = spec.eval.baseline, loaded.layers
    rates = {str(layer): 1.0 for layer in layers}
    skip = {"param_rate": 0.0, "per_layer_ffn_rate": rates}
    shape = Shape.from_config(loaded.backbone.model.config)
    skip.update(net_compute(shape, rates, [0] * len(layers), None, spec.data.max_length))
    record = RunRecord(
        status="completed",
        method=name,
        variant=name,
        backbone=spec.model.name,
        seed=spec.seed,
        alpha=0.0,
        layer_set=spec.layer_set,
        memory_dim=spec.memory_dim,
        config_hash=hashlib.sha256(key.encode()).hexdigest()[:16],
        routable_layers=layers,
        eval=baseline["eval"],
        eval_meta=meta,
        rho={},
        skip=skip,
        origin="baseline_cache",
        baseline_key=key,
        baseline_source=baseline["source"],
    )
    items = _items_path(Path(baseline["source"]))
    if items.is_file():  # the cache's items as they are, before the record (a record never names items it lacks)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(items, path.parent / ITEMS_FILENAME)
    return record.write(path)


def _store_baseline(spec: RunSpec, backbone, scores, items: list) -> dict:
    payload = {"backbone": spec.model.name, "suite": spec.eval.suite, "limit": spec.eval.limit, "eval": scores}
    path = _baseline_path(spec, backbone)
    write_items(_items_path(path), items)
    write_atomic(path, payload)
    return payload
