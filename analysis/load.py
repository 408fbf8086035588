"""Find and load every run record (``results.json``) under the given directories.

Each record becomes one row of a polars LazyFrame, with the path it came from.
Nested fields are flattened to dotted columns (``skip.param_rate``,
``train.final_loss``, ``bench.decode_ms_per_token.b1_s512``); fields this module does
not know about are kept the same way, so a newer schema loads without changes.
The maps keyed by layer (``skip.per_layer_ffn_rate``, ``rho``) become
``list[struct{layer, value}]`` columns, and the per-token histogram/quantiles list
columns. The fully resolved ``config`` is not loaded (``config_hash`` identifies it).

Task scores: ``score.<task>`` is ``eval.<task>.<metric>`` for the task's primary
metric from ``eval_meta.primary_metric`` (HERO_SPEC §7); a task with no primary
metric and a single metric uses that one. ``tasks`` maps each task to its metric.

Nothing is dropped silently: failed records (``status: failed``), run directories
that started but wrote no record (a ``.hydra/`` dir or checkpoints, no
``results.json``), unreadable or invalid records, and duplicate copies of the same
run (same ``config_hash``, e.g. a cluster copy next to the local one) are listed in
``Runs.problems`` with the reason.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

RESULTS_FILENAME = "results.json"
"""Same as ``hero.results.RESULTS_FILENAME`` (a test checks it); not imported so that analysis does not load torch."""
KEYS = ("backbone", "method", "variant", "alpha", "memory_dim", "layer_set")
"""The group of a run: runs that differ only in ``seed`` share it (statistics are over seeds)."""
REQUIRED = ("backbone", "method", "variant", "seed")
LAYER_MAPS = {("skip", "per_layer_ffn_rate"): "per_layer_ffn_rate", ("rho",): "rho"}
SKIPPED_FIELDS = {"config", "eval", "eval_meta"}
PRUNED_DIRS = {".hydra", "checkpoints", "wandb", ".git", "__pycache__", ".submitit", ".ipynb_checkpoints"}
CHECKPOINT_SUFFIXES = (".pt", ".ckpt", ".safetensors")
PROBLEM_SCHEMA = {"path": pl.String, "kind": pl.String, "reason": pl.String, "backbone": pl.String,
                  "method": pl.String, "variant": pl.String, "alpha": pl.Float64, "seed": pl.Int64}


@dataclass
class Runs:
    """All runs found: completed records (lazy), the problems, and the scored tasks."""

    records: pl.LazyFrame
    problems: pl.DataFrame
    tasks: dict[str, str]
    n_found: int
    notes: list[str] = field(default_factory=list)

    @property
    def score_columns(self) -> list[str]:
        return [f"score.{t}" for t in self.tasks]

    def counts(self) -> dict[str, int]:
        """How many run directories/records were found, completed, and of each problem kind."""
        out = {"found": self.n_found, "completed": self.records.select(pl.len()).collect().item()}
        for kind, n in self.problems.group_by("kind").len().iter_rows():
            out[kind] = n
        return out


def find_runs(paths) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Walk ``paths`` (directories or ``results.json`` files); return (record files, incomplete run dirs + reason)."""
    records, incomplete = [], []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such results directory or file: {p}")
        if p.is_file():
            records.append(p)
            continue
        stack = [p]
        while stack:
            d = stack.pop()
            names, subdirs = set(), []
            with os.scandir(d) as it:
                for e in it:
                    names.add(e.name)
                    if e.is_dir(follow_symlinks=False) and e.name not in PRUNED_DIRS:
                        subdirs.append(Path(e.path))
            if RESULTS_FILENAME in names:
                records.append(d / RESULTS_FILENAME)
            else:
                reason = _started_run(d, names)
                if reason:
                    incomplete.append((d, reason))
            stack.extend(sorted(subdirs, reverse=True))
    return sorted(records), sorted(incomplete)


def _started_run(d: Path, names: set[str]) -> str | None:
    signs = [n + "/" for n in (".hydra", "checkpoints") if n in names]
    signs += sorted(n for n in names if n.endswith(CHECKPOINT_SUFFIXES))
    if not signs:
        return None
    reason = f"no {RESULTS_FILENAME}; has {', '.join(signs)}"
    overrides = d / ".hydra" / "overrides.yaml"
    if overrides.is_file():
        items = [ln[2:].strip() for ln in overrides.read_text().splitlines() if ln.startswith("- ")]
        reason += f"; overrides: {' '.join(items)}"
    return reason


def load_runs(paths) -> Runs:
    """Load every record under ``paths`` (see the module docstring for what is kept and listed)."""
    files, incomplete = find_runs(paths)
    rows, problems, primary, notes = [], [], {}, []
    seen_hash: dict[str, str] = {}
    for path in files:
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            problems.append(_problem(path, "unreadable", f"{type(e).__name__}: {e}", {}))
            continue
        if not isinstance(rec, dict):
            problems.append(_problem(path, "unreadable", "top level is not a JSON object", {}))
            continue
        status = rec.get("status", "completed")
        if status != "completed":
            problems.append(_problem(path, status if status == "failed" else "invalid",
                                     rec.get("error") or f"status {status!r}", rec))
            continue
        missing = [k for k in REQUIRED if rec.get(k) is None]
        if (rec.get("skip") or {}).get("param_rate") is None:
            missing.append("skip.param_rate")
        if not rec.get("eval"):
            missing.append("eval")
        if missing:
            problems.append(_problem(path, "invalid", f"missing {', '.join(missing)}", rec))
            continue
        h = rec.get("config_hash")
        if h is not None and h in seen_hash:
            problems.append(_problem(path, "duplicate", f"same config_hash {h} as {seen_hash[h]}", rec))
            continue
        if h is not None:
            seen_hash[h] = str(path)
        row = _flatten_record(rec, path, primary, notes)
        rows.append(row)
    problems.extend(_problem(d, "incomplete", reason, {}) for d, reason in incomplete)
    frame = _frame(rows)
    return Runs(records=frame.lazy(), problems=pl.DataFrame(problems, schema=PROBLEM_SCHEMA),
                tasks=dict(sorted(primary.items())), n_found=len(files) + len(incomplete), notes=sorted(set(notes)))


def _problem(path: Path, kind: str, reason: str, rec: dict) -> dict:
    out = {"path": str(path), "kind": kind, "reason": " ".join(str(reason).split())}
    for k in ("backbone", "method", "variant", "alpha", "seed"):
        out[k] = rec.get(k)
    return out


def _flatten_record(rec: dict, path: Path, primary: dict[str, str], notes: list[str]) -> dict:
    row = {"path": str(path), "run_dir": str(path.parent)}
    _flatten(rec, (), row)
    declared = (rec.get("eval_meta") or {}).get("primary_metric") or {}
    for task, metrics in rec["eval"].items():
        if not isinstance(metrics, dict):
            continue
        for metric, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[f"eval.{task}.{metric}"] = float(value)
        metric = declared.get(task) or (next(iter(metrics)) if len(metrics) == 1 else None)
        if metric is None:
            notes.append(f"task {task!r} has no primary metric in eval_meta and several metrics; not scored")
            continue
        if primary.setdefault(task, metric) != metric:
            raise ValueError(f"task {task!r} is scored with {primary[task]!r} in some records and {metric!r} in "
                             f"{path}; Retain would compare different metrics")
        value = metrics.get(metric)
        row[f"score.{task}"] = float(value) if value is not None else None
    return row


def _flatten(obj: dict, prefix: tuple, row: dict) -> None:
    for key, value in obj.items():
        here = (*prefix, str(key))
        if not prefix and key in SKIPPED_FIELDS:
            continue
        if here in LAYER_MAPS:
            if isinstance(value, dict):
                row[LAYER_MAPS[here]] = sorted(({"layer": int(k), "value": float(v)} for k, v in value.items()),
                                               key=lambda d: d["layer"])
        elif here == ("skip", "per_token") and isinstance(value, dict):
            hist = value.get("histogram") or {}
            row["per_token_edges"] = [float(v) for v in hist.get("edges", [])] or None
            row["per_token_counts"] = [float(v) for v in hist.get("counts", [])] or None
            row["per_token_quantiles"] = sorted(({"q": float(k), "value": float(v)} for k, v in
                                                 (value.get("quantiles") or {}).items()), key=lambda d: d["q"]) or None
        elif isinstance(value, dict):
            _flatten(value, here, row)
        elif value is not None:
            row[".".join(here)] = value


def _frame(rows: list[dict]) -> pl.DataFrame:
    if rows:
        try:
            df = pl.from_dicts(rows, infer_schema_length=None)
        except (pl.exceptions.PolarsError, TypeError, ValueError):
            df = pl.from_dicts(rows, infer_schema_length=None, strict=False)
    else:
        df = pl.DataFrame({"path": [], "run_dir": []}, schema={"path": pl.String, "run_dir": pl.String})
    casts = {"alpha": pl.Float64, "memory_dim": pl.Int64, "seed": pl.Int64, "skip.param_rate": pl.Float64}
    for col in (*KEYS, "seed", "skip.param_rate"):
        if col not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=casts.get(col, pl.String)).alias(col))
    return df.with_columns(*(pl.col(c).cast(t, strict=False) for c, t in casts.items()),
                           *(pl.col(c).cast(pl.String) for c in KEYS if c not in casts))
