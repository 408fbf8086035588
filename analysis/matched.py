"""Matched cost by construction: one trained run read at exactly a given skip, on either cost axis, through its curve.

A run scored at several evaluation thresholds (``eval.thresholds``, ``hero.scoring.score_curve``) has points
(threshold → scores, parameter skip, net compute skip); its trained threshold is one more. For a target skip x on
``axis`` (``param``: ``skip.param_rate``; ``compute``: ``skip.net_compute_rate``), the two points whose skips bracket
x, p_lo ≤ x ≤ p_hi, are mixed with weight w = (p_hi − x) / (p_hi − p_lo) on the lower one: each item's score is
w·s_lo + (1 − w)·s_hi and each task value w·v_lo + (1 − w)·v_hi. This is exactly what a router that uses the lower
point's threshold with probability w would score and skip in expectation, so the skip is x by construction, on the
chosen axis; the other axis is mixed the same way and reported. A target outside the curve is refused, naming the
range the run reaches: no extrapolation.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.items import ItemsError, task_values

AXES = {"param": "param_rate", "compute": "net_compute_rate"}


def points(record: dict) -> list[dict]:
    """The run's operating points: {threshold (None: trained), param, compute}, sorted by threshold."""
    out = [
        {"threshold": None, "param": record["skip"]["param_rate"], "compute": record["skip"].get("net_compute_rate")}
    ]
    for p in record.get("curve") or []:
        out.append(
            {"threshold": p["threshold"], "param": p["skip"]["param_rate"], "compute": p["skip"]["net_compute_rate"]}
        )
    return out


def at_skip(record: dict, items: pl.DataFrame, target: float, axis: str, path: Path | str = "run"):
    """(items, task values, param skip, compute skip) of the run mixed to skip ``target`` on ``axis``."""
    if axis not in AXES:
        raise ItemsError(f"axis {axis!r}: allowed are {', '.join(AXES)}")
    pts = sorted((p for p in points(record) if p[axis] is not None), key=lambda p: p[axis])
    if len(pts) < 2 or not pts[0][axis] <= target <= pts[-1][axis]:
        span = f"[{pts[0][axis]:.4f}, {pts[-1][axis]:.4f}]" if pts else "nothing"
        raise ItemsError(
            f"{path}: {axis} skip {target} is outside the run's curve {span} (score it at more eval.thresholds)"
        )
    lo, hi = next((a, b) for a, b in zip(pts, pts[1:], strict=False) if a[axis] <= target <= b[axis])
    w = 1.0 if hi[axis] == lo[axis] else (hi[axis] - target) / (hi[axis] - lo[axis])

    def at(point):
        t = point["threshold"]
        return items.filter(pl.col("threshold").is_null() if t is None else pl.col("threshold") == t)

    a, b = at(lo), at(hi)
    keys = ["task", "item", "doc"]
    mixed = a.join(b.select(*keys, pl.col("score").alias("score_hi")), on=keys, how="inner").with_columns(
        (w * pl.col("score") + (1 - w) * pl.col("score_hi")).alias("score"), pl.lit(None, pl.Float64).alias("threshold")
    )
    va, vb = task_values(a), task_values(b)
    values = {t: w * va[t] + (1 - w) * vb[t] for t in va}
    other = "compute" if axis == "param" else "param"
    skips = {axis: target, other: w * lo[other] + (1 - w) * hi[other]}
    return mixed.drop("score_hi"), values, skips["param"], skips["compute"]
