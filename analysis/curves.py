"""Quality–cost curves: quality against the realized skip rate, one curve per variant.

A curve is the set of groups that differ only in α, or in a baseline's cost knob
(``CURVE_KEYS`` fixed): each point
is the mean over seeds of the realized parameter skip rate (HERO_SPEC §7, in %) and
of a quality metric (Retain against a named baseline, the average score, or one
task's score), with the seed std as error bars.

Variants are compared at MATCHED skip, not at matched α: each curve gets a monotone
fit (quality non-increasing in skip: pool-adjacent-violators) that is interpolated
linearly between its points. The fit runs over every run of the curve (each seed at
its own realized skip) when the runs are given, else over the seed means (weights =
seeds): seeds of one α scatter in skip (±1–2 pp on the testbed at a calibrated α), so
even a variant run at a single α is compared at a matched skip level inside its seeds'
range, by interpolation along its own curve. A curve
is only evaluated inside its own skip range — never extrapolated. The area between
a curve and the reference curve is the integral of (curve − reference) over their
common skip interval (exact for the piecewise-linear fits); ``mean_gap`` is that
area divided by the interval's width, in the metric's units. ``skip_adjusted`` takes each
run of a curve at its own realized skip: its residual from the reference fit there, summarised
over runs with a t interval (the reference fit's own error is not in the interval; the
reference runs' residual std from their own fit is reported beside it as that scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from analysis.reference import BaselineError, selector_expr
from analysis.stats import summarize, t_quantile

CURVE_KEYS = ("backbone", "method", "variant", "memory_dim", "layer_set")


@dataclass(frozen=True)
class Curve:
    """One variant's curve for one metric: seed-mean points sorted by skip, and the monotone fit."""

    key: dict
    metric: str
    skip: np.ndarray
    quality: np.ndarray
    weight: np.ndarray
    run_skip: np.ndarray | None = None
    run_quality: np.ndarray | None = None

    @property
    def label(self) -> str:
        k = self.key
        return f"{k['method']}/{k['variant']} d_m={k['memory_dim']} {k['layer_set']}"

    @cached_property
    def fit(self) -> tuple[np.ndarray, np.ndarray]:
        if self.run_skip is not None:
            return monotone_fit(self.run_skip, self.run_quality, np.ones(len(self.run_skip)))
        return monotone_fit(self.skip, self.quality, self.weight)

    @property
    def interpolable(self) -> bool:
        return len(self.fit[0]) >= 2

    def at(self, skip: np.ndarray) -> np.ndarray:
        """The fitted quality at ``skip`` (%), NaN outside the curve's skip range."""
        x, y = self.fit
        skip = np.asarray(skip, dtype=float)
        out = np.interp(skip, x, y)
        return np.where((skip >= x[0] - 1e-12) & (skip <= x[-1] + 1e-12), out, np.nan)


def monotone_fit(x, y, w) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares fit of y non-increasing in x (pool adjacent violators); equal x are pooled first."""
    x, y, w = (np.asarray(a, dtype=float) for a in (x, y, w))
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y, w = x[keep], y[keep], w[keep]
    xs, inv = np.unique(x, return_inverse=True)
    ws = np.bincount(inv, weights=w)
    ys = np.bincount(inv, weights=w * y) / ws
    blocks = []  # [value, weight, count]
    for v, wt in zip(ys, ws):
        blocks.append([v, wt, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return xs, np.repeat([b[0] for b in blocks], [b[2] for b in blocks])


def curve_points(runs: pl.DataFrame, metrics: list[str], level: float = 0.95) -> pl.DataFrame:
    """Seed statistics of ``skip`` (%) and ``metrics`` per group, sorted along each curve by mean skip."""
    runs = runs.with_columns((pl.col("skip.param_rate") * 100.0).alias("skip"))
    return summarize(runs, ["skip", *metrics], level=level).sort([*CURVE_KEYS, "skip.mean"], nulls_last=True)


def curves(points: pl.DataFrame, metric: str, runs: pl.DataFrame | None = None) -> list[Curve]:
    """The curves of ``metric`` in ``curve_points`` output (groups with a null mean are left out).

    With ``runs`` (the per-run rows ``curve_points`` summarised), each curve is fitted over its runs.
    """
    out = []
    usable = points.filter(pl.col(f"{metric}.mean").is_not_null() & pl.col("skip.mean").is_not_null())
    if runs is not None:
        runs = runs.with_columns((pl.col("skip.param_rate") * 100.0).alias("_skip")).filter(
            pl.col(metric).is_not_null() & pl.col("_skip").is_not_null()
        )
    for key, part in usable.group_by(list(CURVE_KEYS), maintain_order=True):
        run_skip = run_quality = None
        if runs is not None:
            mine = runs.filter(*(pl.col(k).is_null() if v is None else pl.col(k) == v for k, v in zip(CURVE_KEYS, key)))
            run_skip, run_quality = mine["_skip"].to_numpy(), mine[metric].to_numpy()
        out.append(
            Curve(
                dict(zip(CURVE_KEYS, key)),
                metric,
                part["skip.mean"].to_numpy(),
                part[f"{metric}.mean"].to_numpy(),
                part["n"].to_numpy().astype(float),
                run_skip,
                run_quality,
            )
        )
    return out


def reference_curves(all_curves: list[Curve], selector: str, option: str = "--curve-reference") -> dict[str, Curve]:
    """The one curve per backbone that ``selector`` picks; ``BaselineError`` if none or several."""
    keys = pl.DataFrame(
        [c.key for c in all_curves],
        schema={
            "backbone": pl.String,
            "method": pl.String,
            "variant": pl.String,
            "memory_dim": pl.Int64,
            "layer_set": pl.String,
        },
        orient="row",
    )
    picked = keys.with_row_index().filter(selector_expr(selector, keys.schema, option))["index"].to_list()
    out = {}
    for backbone in sorted({c.key["backbone"] for c in all_curves}):
        mine = [all_curves[i] for i in picked if all_curves[i].key["backbone"] == backbone]
        if len(mine) != 1:
            names = "; ".join(c.label for c in (mine or [c for c in all_curves if c.key["backbone"] == backbone]))
            raise BaselineError(
                f"{option} {selector!r} selects {len(mine)} curves of backbone {backbone!r} "
                f"(need 1); {'matching' if mine else 'available'}: {names}"
            )
        out[backbone] = mine[0]
    return out


def matched_skip(
    all_curves: list[Curve], references: dict[str, Curve], levels: list[float] | None = None
) -> pl.DataFrame:
    """Each interpolable curve vs its backbone's reference at matched skip levels (%).

    ``levels`` defaults to the reference curve's own points (its seed-mean skip rates). Rows outside a
    curve's range have null quality and ``in_range`` false.
    """
    rows = []
    for c in all_curves:
        ref = references.get(c.key["backbone"])
        if ref is None or c is ref or not c.interpolable or not ref.interpolable:
            continue
        at = np.asarray(levels if levels is not None else np.unique(ref.skip), dtype=float)
        q, qr = c.at(at), ref.at(at)
        for s, v, vr in zip(at, q, qr):
            ok = not (np.isnan(v) or np.isnan(vr))
            rows.append(
                {
                    **c.key,
                    "reference": ref.label,
                    "metric": c.metric,
                    "skip": float(s),
                    "in_range": ok,
                    "quality": float(v) if ok else None,
                    "reference_quality": float(vr) if ok else None,
                    "difference": float(v - vr) if ok else None,
                }
            )
    return _frame(
        rows,
        {
            "reference": pl.String,
            "metric": pl.String,
            "skip": pl.Float64,
            "in_range": pl.Boolean,
            "quality": pl.Float64,
            "reference_quality": pl.Float64,
            "difference": pl.Float64,
        },
    )


def area_between(all_curves: list[Curve], references: dict[str, Curve]) -> pl.DataFrame:
    """∫ (curve − reference) d(skip %) over the common skip interval, and its mean gap; null if no overlap."""
    rows = []
    for c in all_curves:
        ref = references.get(c.key["backbone"])
        if ref is None or c is ref or not c.interpolable or not ref.interpolable:
            continue
        (xa, _), (xb, _) = c.fit, ref.fit
        lo, hi = max(xa[0], xb[0]), min(xa[-1], xb[-1])
        area = gap = None
        if hi > lo:
            grid = np.unique(np.concatenate([[lo, hi], xa[(xa > lo) & (xa < hi)], xb[(xb > lo) & (xb < hi)]]))
            diff = c.at(grid) - ref.at(grid)
            area = float(np.sum((diff[1:] + diff[:-1]) * np.diff(grid)) / 2.0)
            gap = area / (hi - lo)
        rows.append(
            {
                **c.key,
                "reference": ref.label,
                "metric": c.metric,
                "skip_lo": float(lo),
                "skip_hi": float(hi),
                "area": area,
                "mean_gap": gap,
            }
        )
    return _frame(
        rows,
        {
            "reference": pl.String,
            "metric": pl.String,
            "skip_lo": pl.Float64,
            "skip_hi": pl.Float64,
            "area": pl.Float64,
            "mean_gap": pl.Float64,
        },
    )


def skip_adjusted(all_curves: list[Curve], references: dict[str, Curve], level: float = 0.95) -> pl.DataFrame:
    """Per curve: mean ± std over its runs of (run quality − reference fit at the run's own skip), with a t
    interval at ``level``; runs outside the reference's skip range are counted in ``n_outside``.
    ``reference_resid_std``: std of the reference runs around their own fit."""
    rows = []
    for c in all_curves:
        ref = references.get(c.key["backbone"])
        if ref is None or c is ref or c.run_skip is None or ref.run_skip is None or not ref.interpolable:
            continue
        resid = np.asarray(c.run_quality, dtype=float) - ref.at(c.run_skip)
        inside = resid[~np.isnan(resid)]
        own = np.asarray(ref.run_quality, dtype=float) - ref.at(ref.run_skip)
        n = len(inside)
        mean = float(inside.mean()) if n else None
        std = float(inside.std(ddof=1)) if n > 1 else None
        half = t_quantile(level, n - 1) * std / np.sqrt(n) if std is not None else None
        rows.append(
            {
                **c.key,
                "reference": ref.label,
                "metric": c.metric,
                "n": n,
                "n_outside": len(resid) - n,
                "mean": mean,
                "std": std,
                "ci_lo": None if half is None else mean - half,
                "ci_hi": None if half is None else mean + half,
                "reference_resid_std": float(own.std(ddof=1)) if len(own) > 1 else None,
            }
        )
    return _frame(
        rows,
        {
            "reference": pl.String,
            "metric": pl.String,
            "n": pl.Int64,
            "n_outside": pl.Int64,
            "mean": pl.Float64,
            "std": pl.Float64,
            "ci_lo": pl.Float64,
            "ci_hi": pl.Float64,
            "reference_resid_std": pl.Float64,
        },
    )


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    full = {
        "backbone": pl.String,
        "method": pl.String,
        "variant": pl.String,
        "memory_dim": pl.Int64,
        "layer_set": pl.String,
        **schema,
    }
    return pl.DataFrame(rows, schema=full)
