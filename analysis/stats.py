"""Seed statistics: n, mean ± std and a t confidence interval per group; paired differences.

A group is one configuration (``analysis.load.KEYS``: backbone, method, variant, α,
memory dim, layer set) and its members are seeds. The interval is the two-sided
Student-t interval mean ± t_{(1+level)/2, n-1} · std / √n (std with ddof = 1); it is
null for a single seed. Paired differences compare two groups on the seeds they
share (run minus reference, seed by seed), which removes seed-to-seed variation
common to both.
"""

from __future__ import annotations

import math
from functools import lru_cache

import polars as pl

from analysis.load import KEYS


@lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| ≤ t) = ``level`` for Student's t with integer ``df`` ≥ 1.

    Exact: the closed-form CDF for integer degrees of freedom (Abramowitz & Stegun
    26.7.3-4) inverted by bisection.
    """
    if df < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need df >= 1 and 0 < level < 1, got df={df}, level={level}")
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < level:
        hi *= 2.0
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_central(mid, df) < level else (lo, mid)
    return 0.5 * (lo + hi)


def _t_central(t: float, df: int) -> float:
    """P(|T| ≤ t), A&S 26.7.3 (odd df) and 26.7.4 (even df)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        total, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return 2.0 / math.pi * (theta + s * total) if df > 1 else 2.0 * theta / math.pi
    total, term = 0.0, 1.0
    for k in range(1, df // 2 + 1):
        total += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return s * total


def summarize(runs: pl.DataFrame | pl.LazyFrame, metrics: list[str], keys=KEYS, level: float = 0.95) -> pl.DataFrame:
    """One row per group of ``keys``: ``n``, ``seeds`` and ``<m>.mean/.std/.ci_lo/.ci_hi`` for each metric.

    ``n`` counts the runs of the group; each metric is averaged over the runs that have it. Keys the
    frame lacks (e.g. ``knob`` in a hand-built frame) are left out of the grouping.
    """
    keys = _present(runs, keys)
    aggs = [pl.len().alias("n"), pl.col("seed").sort().alias("seeds")]
    for m in metrics:
        aggs += [
            pl.col(m).mean().alias(f"{m}.mean"),
            pl.col(m).std().alias(f"{m}.std"),
            pl.col(m).count().alias(f"{m}.count"),
        ]
    out = runs.lazy().group_by(list(keys)).agg(aggs).sort(list(keys), nulls_last=True).collect()
    counts = {c for m in metrics for c in out[f"{m}.count"].unique().to_list()}
    half = {n: t_quantile(level, n - 1) / math.sqrt(n) for n in counts if n and n > 1}
    cols = []
    for m in metrics:
        hw = pl.col(f"{m}.std") * pl.col(f"{m}.count").replace_strict(half, default=None, return_dtype=pl.Float64)
        cols += [(pl.col(f"{m}.mean") - hw).alias(f"{m}.ci_lo"), (pl.col(f"{m}.mean") + hw).alias(f"{m}.ci_hi")]
    return out.with_columns(cols).drop([f"{m}.count" for m in metrics])


def paired_differences(
    runs: pl.DataFrame,
    reference: pl.DataFrame,
    metrics: list[str],
    keys=KEYS,
    level: float = 0.95,
    on: tuple[str, ...] = ("backbone", "seed"),
) -> pl.DataFrame:
    """Per group of ``runs``: statistics of (run − reference run of the same ``on`` columns) over shared seeds.

    ``reference`` holds the runs of one reference group per backbone (per value of ``on`` without the seed).
    ``n`` is the number of shared seeds; groups with none get ``n = 0`` and null statistics.
    """
    keys = _present(runs, keys)
    ref = reference.select(*on, *(pl.col(m).alias(f"{m}.ref") for m in metrics))
    diffs = runs.join(ref, on=list(on), how="inner").with_columns(
        (pl.col(m) - pl.col(f"{m}.ref")).alias(m) for m in metrics
    )
    stats = summarize(diffs.select(*keys, "seed", *metrics), metrics, keys, level)
    groups = runs.select(keys).unique()
    return (
        groups.join(stats, on=list(keys), how="left", nulls_equal=True)
        .with_columns(pl.col("n").fill_null(0))
        .sort(list(keys), nulls_last=True)
    )


def _present(frame: pl.DataFrame | pl.LazyFrame, keys) -> list[str]:
    names = frame.collect_schema().names()
    return [k for k in keys if k in names]
