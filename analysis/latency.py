"""Quality against measured latency: benchmark records linked to the runs whose quality they stand for.

A benchmark record (``hero.bench``) carries figures under ``bench.<figure>.<shape>``
(``prefill_tokens_per_s``, ``decode_ms_per_token``, …) and usually no task scores.
Its quality (Retain, task scores) is taken from, in this order:

1. the record itself, when it has task scores;
2. the scored run whose run directory holds the benchmarked router checkpoint
   (``config.router.checkpoint``; paths are compared as written, so a benchmark of a
   checkpoint copied elsewhere is not linked);
3. for a method without a router (dense, lora, drop_routable_ffn): the scored runs
   of the same backbone and method, when they form exactly one group.

Otherwise the quality is null. ``quality_source`` says which of these was used and
``quality_runs`` how many runs were averaged, so every point can be traced.
"""

from __future__ import annotations

import os

import polars as pl

from analysis.load import KEYS
from analysis.reference import group_label

CHECKPOINT = "config.router.checkpoint"
PLOTTED_FIGURES = ("prefill_tokens_per_s", "decode_ms_per_token")
"""The benchmark figures drawn against quality (every figure is in ``latency.csv``)."""


def bench_columns(runs: pl.DataFrame) -> list[str]:
    return [c for c in runs.columns if c.startswith("bench.") and runs[c].dtype.is_numeric()]


def latency_table(runs: pl.DataFrame, metrics: list[str]) -> pl.DataFrame:
    """One row per benchmark record: its keys, realized skip (%), every figure and the linked quality ``metrics``.

    ``runs`` are all completed records with ``metrics`` already computed (null where
    not scored). Empty (no rows) when no record carries benchmark figures.
    """
    figures = bench_columns(runs)
    if not figures:
        return pl.DataFrame()
    benched = runs.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in figures))
    scored = runs.filter(pl.col("scored")).with_columns(
        run_dir=pl.col("path").map_elements(os.path.dirname, return_dtype=pl.String)
    )
    rows = []
    for rec in benched.iter_rows(named=True):
        source, linked = _linked(rec, scored)
        quality = {m: linked[m].mean() if linked.height else None for m in metrics}
        rows.append(
            {
                **{k: rec[k] for k in (*KEYS, "seed", "path")},
                "skip": rec["skip.param_rate"] * 100.0,
                **{c: rec[c] for c in figures},
                **quality,
                "quality_source": source,
                "quality_runs": linked.height,
            }
        )
    schema = {
        **{k: runs.schema[k] for k in (*KEYS, "seed", "path")},
        "skip": pl.Float64,
        **dict.fromkeys([*figures, *metrics], pl.Float64),
        "quality_source": pl.String,
        "quality_runs": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


def _linked(rec: dict, scored: pl.DataFrame) -> tuple[str, pl.DataFrame]:
    if rec.get("scored"):
        return "itself", scored.filter(pl.col("path") == rec["path"])
    checkpoint = rec.get(CHECKPOINT)
    if checkpoint:
        owner = scored.filter(
            pl.lit(str(checkpoint)).str.starts_with(pl.col("run_dir") + os.sep) | (pl.col("run_dir") == str(checkpoint))
        )
        if owner.height == 1:
            return f"trained run {owner['path'][0]}", owner
        return f"no scored run holds checkpoint {checkpoint}", scored.clear()
    if rec["method"] != "hero":
        same = scored.filter((pl.col("backbone") == rec["backbone"]) & (pl.col("method") == rec["method"]))
        groups = same.select(KEYS).unique()
        if groups.height == 1:
            return f"group {group_label(groups.row(0, named=True))}", same
        return f"{groups.height} scored groups of {rec['backbone']}/{rec['method']}: ambiguous", scored.clear()
    return "no checkpoint to link", scored.clear()
