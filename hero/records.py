"""The run record as a type: ``RunRecord``'s fields are the schema of every ``results.json``.

Every run — training, evaluation-only baseline, calibration trial, rescoring, failure — is one
``RunRecord`` built in one place and written atomically (``write``); analysis reads the JSON.
Fields (schema version 1; a field marked *optional* is left out of the JSON when it is None):

    schema_version  int        1
    status          str        "completed" | "failed"
    method          str        a ``method=`` option (``hero.methods``), or "dense" for a baseline record
    variant         str        ablation / control name ("full", "no_memory_read", ...); for baselines the method
    backbone        str        model name from ``conf/model`` ("tiny", "smollm2_135m", "llama3_1_8b", ...)
    seed            int
    alpha           float      skip-loss weight α actually used (0.0 for a dense baseline record)
    layer_set       str        "second_half" | "from_9" | "all" | "explicit"
    memory_dim      int
    routable_layers list[int]  0-based backbone layer indices (None on a failed run)
    bed             dict       the bed the run trained and was scored on (``hero.bed.Bed.provenance``);
                               None on a hub backbone
    router          dict       resolved router options (position_state, aux_state, history_branch, ...)
    router_params   dict       HeRo only: trainable router + η parameter count of this variant and of full
                               HeRo with the same sizes, adapters excluded (``hero.model.controls.build_router``)
    eval            dict       {task: {metric: value}}
    eval_meta       dict       suite, primary metric per task, lm_eval version, limit, fingerprint, times
    retain          dict       value (x100), baseline (named), tasks, metrics, baseline_source
                               (``hero.statistics.retain``)
    retain_chance   dict       optional: chance-normalised Retain (x100), (score − chance) / (baseline − chance) per
                               task and averaged, over tasks with a known chance level (the paper suites;
                               ``hero.statistics.chance_normalised``): value, baseline, tasks, chance,
                               per_task, undefined
    train           dict       final_loss, final_lm_loss, final_skip_loss, steps, tokens, train_param_skip, trajectory
                               (per window of trainer.log_every updates: mean loss terms and training-batch
                               parameter skip, hero.training.trajectory) (None: untrained)
    skip            dict       param_rate (share of backbone parameters skipped, per token, 0-1),
                               ffn_execution_rate (share of routable FFN calls that ran), per_layer_ffn_rate,
                               per_layer_mean_gate (g over all tokens), per_layer_executed_gate (g over
                               executed tokens only), per_token, ... (``hero.objectives.SkipMeter``);
                               net_compute_rate (FFN FLOPs saved minus router and adapter FLOPs, over the
                               backbone's FLOPs per token; the method's ``compute_cost``) and its breakdown
                               ``compute`` (``hero.model.flops.net_compute``); every method's record carries
                               both, 0 where nothing is skipped or paid (records before it: routed methods
                               only, older ones neither)
    rho             dict       {layer: learned ρ} (HeRo; {} otherwise)
    error           str        one-line reason when status == "failed", else None
    method_card     dict       optional: a Table 1 method's definition: source, deviations, knob, settings (records
                               written before it was named so call it ``baseline``)
    knob, knob_name            optional: a Table 1 method's cost knob value and name
    calibration     dict       optional, a calibrated knob: target, value, calibrated_skip, realized_skip,
                               deviation, tolerance, within_tolerance, study, trial_steps, file
    baseline_key    str        optional: dense runs and baseline records: the baseline cache file's name
                               (backbone weights x suite settings)
    curve           list       optional: the run scored at each of ``eval.thresholds`` (``hero.scoring.score_curve``):
                               [{threshold, eval, retain, skip}]; its per-item rows carry ``threshold``
    origin          str        optional: "baseline_cache" (the dense record the pipeline writes once per
                               backbone x suite) or "rescored" (``python -m hero.rescore``)
    baseline_source str        optional, baseline records: the cache file the scores came from
    rescored_from   str        optional, rescored records: the record of the run whose trained state was scored
    trained_by      str        optional: the record of the finished run whose trained state this run loaded instead
                               of training (same training config, ``hero.results.training_hash``); ``train`` is copied
                               from it, ``wall_time_s`` counts this run's own time (loading and scoring)
    items           list       not in the JSON: the per-item rows of every scored task (``hero.evaluation.harness.
                               item_rows``), written by ``write`` to ``items.jsonl.gz`` beside the record; records
                               written before per-item outputs have no such file
    bench, bench_meta, device  optional, benchmark records (``hero.bench.records``): timings and the machine
    config          dict       the fully resolved Hydra config
    config_hash     str        hash of the config minus run-local keys (``hero.results.config_hash``)
    git_commit      str
    versions        dict       python, torch, transformers, lm_eval, peft, hero
    wall_time_s     float
    created         str        ISO-8601 UTC
    wandb           dict       run_id, mode, dir (None without W&B)

Records written before this type existed also carry ``ablation`` (the same value as ``variant``);
``from_dict`` reads them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from hero.results import ITEMS_FILENAME, SCHEMA_VERSION, git_commit, now_iso, versions, write_atomic, write_items

OPTIONAL = (
    "retain_chance",
    "method_card",
    "knob",
    "knob_name",
    "calibration",
    "baseline_key",
    "origin",
    "baseline_source",
    "rescored_from",
    "trained_by",
    "bench",
    "bench_meta",
    "device",
    "curve",
)


@dataclass
class RunRecord:
    status: str
    method: str
    variant: str
    backbone: str
    seed: int
    alpha: float | None
    layer_set: str
    memory_dim: int | None
    config_hash: str
    routable_layers: list[int] | None = None
    bed: dict | None = None
    router: dict | None = None
    router_params: dict | None = None
    eval: dict | None = None
    eval_meta: dict | None = None
    retain: dict | None = None
    retain_chance: dict | None = None
    train: dict | None = None
    skip: dict | None = None
    rho: dict | None = None
    error: str | None = None
    method_card: dict | None = None
    knob: float | int | None = None
    knob_name: str | None = None
    calibration: dict | None = None
    baseline_key: str | None = None
    origin: str | None = None
    baseline_source: str | None = None
    rescored_from: str | None = None
    trained_by: str | None = None
    bench: dict | None = None
    bench_meta: dict | None = None
    device: dict | str | None = None
    curve: list[dict] | None = None
    config: dict | None = None
    git_commit: str = field(default_factory=git_commit)
    versions: dict = field(default_factory=versions)
    wall_time_s: float = 0.0
    created: str = field(default_factory=now_iso)
    wandb: dict | None = None
    schema_version: int = SCHEMA_VERSION
    items: list[dict] | None = field(default=None, repr=False, compare=False)  # not in the JSON: see ``write``

    def to_dict(self) -> dict:
        """The JSON object: ``schema_version`` first, optional fields only when set."""
        out = {"schema_version": self.schema_version}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name not in ("schema_version", "items") and not (f.name in OPTIONAL and value is None):
                out[f.name] = value
        return out

    def write(self, path: str | Path) -> Path:
        """Write atomically (``hero.results.write_atomic``): a reader never sees half a record. The per-item rows
        (``items``, when scored) go first to ``items.jsonl.gz`` beside it, so a record never names items it lacks."""
        if self.items is not None:
            write_items(Path(path).parent / ITEMS_FILENAME, self.items)
        return write_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> RunRecord:
        """A record read back; fields the type does not know (or an old record's ``ablation``) are refused
        unless they are the old alias, so a typo in a writer cannot pass silently."""
        known = {f.name for f in dataclasses.fields(cls)}
        data = dict(data)
        alias = data.pop("ablation", None)
        data.setdefault("variant", alias)
        if "baseline" in data:  # the method card's name before "baseline" meant only the dense Retain reference
            data["method_card"] = data.pop("baseline")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"not run-record fields: {unknown}")
        return cls(**data)
