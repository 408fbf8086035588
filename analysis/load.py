"""Find and load every run record (``results.json``) under the given directories.

Each record becomes one row of a polars LazyFrame, with the path it came from. The
records are parsed by polars' JSON reader in one pass; nested fields are flattened
to dotted columns (``skip.param_rate``, ``train.final_loss``,
``skip.per_layer_ffn_rate.12``, ``rho.12``, ``bench.decode_ms_per_token.b1_s512``),
lists stay lists (``skip.per_token.histogram.counts``). Fields this module does not
know about are kept the same way, so a newer schema loads without changes; a field
absent from a record is null in its row. The fully resolved ``config`` is dropped
(``config_hash`` identifies it) except ``config.router.checkpoint``, which links a
benchmark record to the trained run it measured, ``config.trainer.num_threads`` and
``config.calibration.target_skip``. If polars cannot combine the records (a corrupt
file, or one field with incompatible types across records) they are parsed one by
one instead: corrupt files are listed as unreadable, types are coerced.

Task scores: ``score.<task>`` is ``eval.<task>.<metric>`` for the task's primary
metric from ``eval_meta.primary_metric`` (HERO_SPEC §7); a task with no primary
metric and a single metric uses that one; a diagnostic task (listed in
``eval_meta.diagnostic_metric``) gets no score column. ``tasks`` maps each task to its metric.
``scored`` tells whether a run has any task score (a run evaluated with suite
``none``, e.g. a calibration trial, has none: it counts for skip statistics only).

Nothing is dropped silently: failed records (``status: failed``), run directories
that started but wrote no record (a ``.hydra/`` dir, no ``results.json``; a run
refused by validation removes its directory, see ``hero.pipeline``), unreadable or invalid records, and duplicate copies of the same
run (same ``config_hash``, e.g. a cluster copy next to the local one) are listed in
``Runs.problems`` with the reason; so is a second scored run of one group and seed (configs
that differ only outside ``KEYS``): statistics over seeds count each seed once. The dense baseline records the pipeline writes under
``<outputs>/baselines/`` (``origin: baseline_cache``) load like any run; one whose
``baseline_key`` (backbone weights × suite) a real ``method=dense`` run also carries is
left out with a note, so the same evaluation is not counted twice.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

RESULTS_FILENAME = "results.json"
"""Same as ``hero.results.RESULTS_FILENAME`` (a test checks it); not imported so that analysis does not load torch."""
KEYS = ("backbone", "method", "variant", "alpha", "memory_dim", "layer_set", "knob")
"""The group of a run: runs that differ only in ``seed`` share it (statistics are over seeds).

``knob`` is a baseline method's cost knob (``knob_name`` says which: SkipGPT-RT's target ratio,
static_drop's k, random_skip's p; ``hero.methods``); null for HeRo, dense and LoRA."""
REQUIRED = ("backbone", "method", "variant", "seed")
ALPHA_DIGITS = 9
"""α is grouped at this many significant digits (float noise of a calibrated α does not make a group)."""
DROPPED_FIELDS = ("config",)
KEPT_CONFIG_FIELDS = (("router", "checkpoint"), ("trainer", "num_threads"), ("calibration", "target_skip"))
"""Kept from the dropped config as ``config.<a>.<b>`` columns (the router a benchmark record measured; the
threads a run used, for its CPU time; the skip target a calibrated knob was read for, ``analysis.training_budget``)."""
LAYER_PREFIXES = {"per_layer_ffn_rate": "skip.per_layer_ffn_rate.", "rho": "rho."}
"""Per-layer maps, flattened to one column per layer: ``<prefix><layer>``."""
PRUNED_DIRS = {".hydra", "checkpoints", "wandb", ".git", "__pycache__", ".submitit", ".ipynb_checkpoints"}
CHECKPOINT_SUFFIXES = (".pt", ".ckpt", ".safetensors")
PROBLEM_SCHEMA = {
    "path": pl.String,
    "kind": pl.String,
    "reason": pl.String,
    "backbone": pl.String,
    "method": pl.String,
    "variant": pl.String,
    "alpha": pl.Float64,
    "seed": pl.Int64,
}


@dataclass
class Runs:
    """All runs found: completed records (lazy), the problems, and the scored tasks."""

    records: pl.LazyFrame
    problems: pl.DataFrame
    tasks: dict[str, str]
    n_found: int
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many run directories/records were found, completed, and of each problem kind."""
        out = {"found": self.n_found, "completed": self.records.select(pl.len()).collect().item()}
        for kind, n in self.problems.group_by("kind").len().iter_rows():
            out[kind] = n
        return out


def find_runs(paths) -> tuple[list[str], list[tuple[str, str]]]:
    """Walk ``paths`` (directories or ``results.json`` files) to any depth; return (record files, incomplete run dirs
    + reason).

    A directory holding a ``results.json`` is a finished run; one holding ``.hydra/`` but no record is an
    incomplete run (the reason names checkpoints found beside it). Neither is searched further (what lies below is
    the run's own output, e.g. router weights). A ``checkpoints/`` directory is never a run and is not searched:
    the pipeline keeps checkpoints under ``<outputs>/checkpoints/<config_hash>/``, next to the run directories.
    """
    records, incomplete = [], []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such results directory or file: {p}")
        if p.is_file():
            records.append(str(p))
            continue
        stack = [str(p)]
        while stack:
            d = stack.pop()
            record, hydra, signs, subdirs = None, False, [], []
            with os.scandir(d) as it:
                for e in it:
                    if e.name == RESULTS_FILENAME:
                        record = e.path
                    elif e.is_dir(follow_symlinks=False):
                        if e.name == ".hydra":
                            hydra = True
                        elif e.name == "checkpoints":
                            signs.append(e.name + "/")
                        elif e.name not in PRUNED_DIRS:
                            subdirs.append(e.path)
                    elif e.name.endswith(CHECKPOINT_SUFFIXES):
                        signs.append(e.name)
            if record is not None:
                records.append(record)
                continue
            if hydra:
                incomplete.append((d, _incomplete_reason(Path(d), [".hydra/", *sorted(signs)])))
                continue
            stack.extend(subdirs)
    return sorted(records), sorted(incomplete)


def _incomplete_reason(d: Path, signs: list[str]) -> str:
    reason = f"no {RESULTS_FILENAME}; has {', '.join(signs)}"
    overrides = d / ".hydra" / "overrides.yaml"
    if overrides.is_file():
        items = [ln[2:].strip() for ln in overrides.read_text().splitlines() if ln.startswith("- ")]
        reason += f"; overrides: {' '.join(items)}"
    return reason


def load_runs(paths) -> Runs:
    """Load every record under ``paths`` (see the module docstring for what is kept and listed)."""
    files, incomplete = find_runs(paths)
    problems = [_problem(d, "incomplete", reason) for d, reason in incomplete]
    blobs, names = [], []
    for path in files:
        try:
            with open(path, "rb") as f:
                blob = f.read().replace(b"\r", b"").replace(b"\n", b"")
        except OSError as e:
            problems.append(_problem(path, "unreadable", f"{type(e).__name__}: {e}"))
            continue
        if not blob.lstrip().startswith(b"{"):
            problems.append(_problem(path, "unreadable", "not a JSON object"))
            continue
        blobs.append(blob)
        names.append(path)
    frame, metrics, unreadable = _parse(blobs, names)
    problems += unreadable
    tasks, notes = {}, []
    if frame.height:
        frame, tasks, notes = _score(frame, metrics)
        frame, listed, superseded = _triage(frame)
        problems += listed
        notes += superseded + _training_file_notes(frame)
    else:
        frame = pl.DataFrame(schema={"path": pl.String})
    frame = _ensure_keys(frame)
    if "scored" not in frame.columns:
        frame = frame.with_columns(scored=pl.lit(False))
    unscored = frame.filter(~pl.col("scored")).height
    if unscored:
        notes.append(
            f"{unscored} completed runs have no task scores (e.g. eval suite 'none'): they count in the "
            "skip statistics (groups.csv) but not in tables, Retain or curves"
        )
    return Runs(
        records=frame.lazy(),
        problems=pl.DataFrame(problems, schema=PROBLEM_SCHEMA).sort("kind", "path"),
        tasks=tasks,
        n_found=len(files) + len(incomplete),
        notes=notes,
    )


def _training_file_notes(frame: pl.DataFrame) -> list[str]:
    """A note for each backbone whose completed records trained on more than one training file.

    A sampled bed (SmolLM2's) is rebuilt on every machine, and two machines have sampled different text under
    the same data hash (docs/studies/budget_smollm2); ``bed.train_sha256`` names the file a run trained on. Runs on different files
    are still compared (a claim must survive a rebuild), but a reader should know that seeds there differ in
    their data too.
    """
    if "bed.train_sha256" not in frame.columns:
        return []
    files = (
        frame.filter(pl.col("bed.train_sha256").is_not_null())
        .group_by("backbone", "bed.train_sha256")
        .len()
        .sort("backbone", "len", "bed.train_sha256", descending=[False, True, False])
    )
    notes = []
    for (backbone,), rows in files.group_by("backbone", maintain_order=True):
        if rows.height > 1:
            counts = ", ".join(f"{sha} ({n} runs)" for sha, n in rows.select("bed.train_sha256", "len").iter_rows())
            notes.append(
                f"{backbone}: the runs trained on {rows.height} different training files (bed.train_sha256: "
                f"{counts}); beds built on different machines, so their seeds may differ in data too"
            )
    return notes


def _parse(blobs: list[bytes], names: list[str]) -> tuple[pl.DataFrame, dict[str, list[str]], list[dict]]:
    """All records as one flat frame, the metrics of every task, and unreadable records.

    Polars' reader first; record by record (``_parse_each``) if it cannot combine them.
    """
    if not blobs:
        return pl.DataFrame(), {}, []
    try:
        df = pl.read_ndjson(b"\n".join(blobs), infer_schema_length=None)
    except pl.exceptions.PolarsError:
        return _parse_each(blobs, names)
    evals = df.schema.get("eval")
    metrics = (
        {f.name: [m.name for m in f.dtype.fields] for f in evals.fields if isinstance(f.dtype, pl.Struct)}
        if isinstance(evals, pl.Struct)
        else {}
    )
    return _flatten(_drop_config(df)).with_columns(path=pl.Series(names)), metrics, []


def _parse_each(blobs: list[bytes], names: list[str]) -> tuple[pl.DataFrame, dict[str, list[str]], list[dict]]:
    """The slow, tolerant path: parse records one by one, flatten in Python, build each column on its own
    (values of incompatible types in one column are kept as JSON text)."""
    rows, kept, problems, metrics = [], [], [], {}
    for blob, name in zip(blobs, names):
        try:
            rec = json.loads(blob)
        except json.JSONDecodeError as e:
            problems.append(_problem(name, "unreadable", f"JSONDecodeError: {e}"))
            continue
        row: dict = {}
        config = rec.get("config")
        for path in KEPT_CONFIG_FIELDS:
            value = config
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            row[".".join(("config", *path))] = value
        _flatten_dict({k: v for k, v in rec.items() if k not in DROPPED_FIELDS}, "", row)
        for task, values in (rec.get("eval") or {}).items():
            if isinstance(values, dict):
                known = metrics.setdefault(task, [])
                known += [m for m in values if m not in known]
        rows.append(row)
        kept.append(name)
    columns: dict[str, list] = {}
    for i, row in enumerate(rows):
        for key, value in row.items():
            columns.setdefault(key, [None] * len(rows))[i] = value
    series = []
    for key, values in columns.items():
        try:
            series.append(pl.Series(key, values, strict=False))
        except (pl.exceptions.PolarsError, TypeError, ValueError):
            series.append(pl.Series(key, [None if v is None else json.dumps(v) for v in values], dtype=pl.String))
    return pl.DataFrame(series).with_columns(path=pl.Series(kept, dtype=pl.String)), metrics, problems


def _flatten_dict(obj: dict, prefix: str, row: dict) -> None:
    for key, value in obj.items():
        if isinstance(value, dict):
            _flatten_dict(value, f"{prefix}{key}.", row)
        else:
            row[f"{prefix}{key}"] = value


def _drop_config(df: pl.DataFrame) -> pl.DataFrame:
    """Drop ``DROPPED_FIELDS``, keeping ``KEPT_CONFIG_FIELDS`` of the config as columns."""
    if "config" in df.columns and isinstance(df.schema["config"], pl.Struct):
        kept = []
        for path in KEPT_CONFIG_FIELDS:
            expr, dtype = pl.col("config"), df.schema["config"]
            for name in path:
                if not isinstance(dtype, pl.Struct) or name not in {f.name for f in dtype.fields}:
                    break
                expr, dtype = expr.struct.field(name), next(f.dtype for f in dtype.fields if f.name == name)
            else:
                kept.append(expr.alias(".".join(("config", *path))))
        df = df.with_columns(kept)
    return df.drop([c for c in DROPPED_FIELDS if c in df.columns])


def _score(df: pl.DataFrame, metrics: dict[str, list[str]]) -> tuple[pl.DataFrame, dict[str, str], list[str]]:
    """Add ``score.<task>`` from each task's primary metric; return the frame, task → metric, and notes."""
    tasks, notes, scores = {}, [], []
    for task, available in metrics.items():
        declared = f"eval_meta.primary_metric.{task}"
        diagnostic = f"eval_meta.diagnostic_metric.{task}"
        if diagnostic in df.columns and (declared not in df.columns or df[declared].null_count() == len(df)):
            continue  # a diagnostic task (eval.tasks.<task>.retain=false): recorded, not part of Retain
        names = Counter(df[declared].drop_nulls().cast(pl.String).to_list()) if declared in df.columns else Counter()
        if len(names) > 1:
            raise ValueError(
                f"task {task!r} is scored with different primary metrics across records "
                f"({dict(names)}); Retain would compare different metrics"
            )
        metric = next(iter(names)) if names else (available[0] if len(available) == 1 else None)
        if metric is None or metric not in available:
            notes.append(f"task {task!r}: no primary metric in eval_meta and metrics {available}; not scored")
            continue
        tasks[task] = metric
        scores.append(pl.col(f"eval.{task}.{metric}").cast(pl.Float64, strict=False).alias(f"score.{task}"))
    return df.with_columns(scores), dict(sorted(tasks.items())), notes


def _flatten(df: pl.DataFrame) -> pl.DataFrame:
    """Replace every struct column by one column per field, ``<column>.<field>``, recursively."""
    while True:
        structs = {c: t for c, t in df.schema.items() if isinstance(t, pl.Struct)}
        if not structs:
            return df
        df = df.with_columns(
            pl.col(c).struct.field(f.name).alias(f"{c}.{f.name}") for c, t in structs.items() for f in t.fields
        ).drop(list(structs))


def _triage(df: pl.DataFrame) -> tuple[pl.DataFrame, list[dict], list[str]]:
    """Split off failed, invalid and duplicate records (as problem rows); return the completed ones."""
    df = _ensure_keys(df)
    status = pl.col("status").fill_null("completed") if "status" in df.columns else pl.lit("completed")
    error = pl.col("error").cast(pl.String) if "error" in df.columns else pl.lit(None, pl.String)
    score_cols = [c for c in df.columns if c.startswith("score.")]
    scored = pl.any_horizontal(pl.col(c).is_not_null() for c in score_cols) if score_cols else pl.lit(False)
    required = (*REQUIRED, "skip.param_rate")
    missing = pl.concat_str(
        [pl.when(pl.col(k).is_null()).then(pl.lit(k + " ")) for k in required], ignore_nulls=True
    ).str.strip_chars()
    df = df.with_columns(_status=status, _error=error, _missing=missing, scored=scored).sort("path")
    failed = df.filter(pl.col("_status") != "completed")
    invalid = df.filter((pl.col("_status") == "completed") & (pl.col("_missing") != ""))
    good = df.filter((pl.col("_status") == "completed") & (pl.col("_missing") == ""))
    problems = [
        _problem(
            r["path"], "failed" if r["_status"] == "failed" else "invalid", r["_error"] or f"status {r['_status']!r}", r
        )
        for r in failed.iter_rows(named=True)
    ]
    problems += [_problem(r["path"], "invalid", f"missing {r['_missing']}", r) for r in invalid.iter_rows(named=True)]
    if "config_hash" in good.columns:
        dup = good.with_columns(first=pl.col("path").first().over("config_hash")).filter(
            pl.col("config_hash").is_not_null() & (pl.col("path") != pl.col("first"))
        )
        problems += [
            _problem(r["path"], "duplicate", f"same config_hash {r['config_hash']} as {r['first']}", r)
            for r in dup.iter_rows(named=True)
        ]
        good = good.filter(~pl.col("path").is_in(dup["path"].implode()))
    same = good.with_columns(first=pl.col("path").first().over([*KEYS, "seed", "scored"])).filter(
        pl.col("scored") & (pl.col("path") != pl.col("first"))
    )
    problems += [
        _problem(
            r["path"],
            "duplicate",
            f"same group and seed as {r['first']} (scored twice; the configs "
            "differ outside the grouping keys, e.g. calibration.target_skip)",
            r,
        )
        for r in same.iter_rows(named=True)
    ]
    good = good.filter(~pl.col("path").is_in(same["path"].implode()))
    good, notes = _supersede_baseline_records(good)
    return good.drop("_status", "_error", "_missing"), problems, notes


def _supersede_baseline_records(good: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Drop the pipeline's dense baseline records (``origin: baseline_cache``) whose ``baseline_key`` a real
    ``method=dense`` run also has: the same backbone × suite evaluated, kept once (a note says which)."""
    if "origin" not in good.columns or "baseline_key" not in good.columns:
        return good, []
    auto = pl.col("origin") == "baseline_cache"
    real = good.filter(~auto.fill_null(False) & pl.col("baseline_key").is_not_null())
    superseded = good.filter(auto.fill_null(False) & pl.col("baseline_key").is_in(real["baseline_key"].implode()))
    if superseded.height == 0:
        return good, []
    notes = [
        f"dense baseline record {r['path']} not used: a method=dense run evaluates the same backbone × suite "
        f"({r['baseline_key']})"
        for r in superseded.iter_rows(named=True)
    ]
    return good.filter(~pl.col("path").is_in(superseded["path"].implode())), notes


def _ensure_keys(df: pl.DataFrame) -> pl.DataFrame:
    casts = {
        "alpha": pl.Float64,
        "memory_dim": pl.Int64,
        "seed": pl.Int64,
        "skip.param_rate": pl.Float64,
        "knob": pl.Float64,
    }
    missing = [c for c in (*KEYS, "seed", "skip.param_rate") if c not in df.columns]
    df = df.with_columns(pl.lit(None, dtype=casts.get(c, pl.String)).alias(c) for c in missing)
    df = df.with_columns(
        *(pl.col(c).cast(t, strict=False) for c, t in casts.items()),
        *(pl.col(c).cast(pl.String) for c in KEYS if c not in casts),
    )
    # α found by search (10 ** log10 α, e.g. 0.0030000000000000005) groups with the same α typed by hand
    return df.with_columns(pl.col("alpha").round_sig_figs(ALPHA_DIGITS))


def layer_values(runs: pl.DataFrame, name: str) -> pl.DataFrame:
    """A per-layer map (``per_layer_ffn_rate`` or ``rho``) in long form: the run's columns + ``layer``, ``value``."""
    prefix = LAYER_PREFIXES[name]
    cols = [c for c in runs.columns if c.startswith(prefix) and c[len(prefix) :].lstrip("-").isdigit()]
    keep = [c for c in (*KEYS, "seed", "path") if c in runs.columns]
    if not cols:
        return pl.DataFrame(schema={**{c: runs.schema[c] for c in keep}, "layer": pl.Int64, "value": pl.Float64})
    return (
        runs.select(*keep, *cols)
        .unpivot(index=keep, on=cols, variable_name="layer", value_name="value")
        .drop_nulls("value")
        .with_columns(pl.col("layer").str.slice(len(prefix)).cast(pl.Int64), pl.col("value").cast(pl.Float64))
    )


def _problem(path, kind: str, reason: str, rec: dict | None = None) -> dict:
    rec = rec or {}
    out = {"path": str(path), "kind": kind, "reason": " ".join(str(reason).split())}
    for k in ("backbone", "method", "variant", "alpha", "seed"):
        out[k] = rec.get(k)
    return out
