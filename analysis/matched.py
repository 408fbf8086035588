"""Matched cost by construction: one trained run read at exactly a given skip, on either cost axis, through its curve.

A run scored at several evaluation thresholds (``eval.thresholds``, ``hero.scoring.score_curve``) has points
(threshold → scores, parameter skip, net compute skip); its trained threshold is one more. For a target skip x on
``axis`` (``param``: ``skip.param_rate``; ``compute``: ``skip.net_compute_rate``), the two points whose skips bracket
x, p_lo ≤ x ≤ p_hi, are mixed with weight w = (p_hi − x) / (p_hi − p_lo) on the lower one: each item's score is
w·s_lo + (1 − w)·s_hi, and each task value is computed from the mixed items. This is what a router that draws the
lower point's threshold with probability w *per document* would score and skip in expectation, so the skip is x by
construction, on the chosen axis; the other axis is mixed the same way and reported. A target outside the curve is
refused, naming the range the run reaches: no extrapolation.

For accuracy-like tasks the mixed value is w·v_lo + (1 − w)·v_hi. For a perplexity task it is not: the documents'
log-likelihoods mix linearly, so ``inv_ppl`` mixes geometrically, v_lo^w · v_hi^(1−w), below the linear mixture (a
draw per *run* of the whole suite). The difference is large when one point is catastrophic: bf16_smollm2's seed-42
routers on the public perplexity task differ by −11.58 Retain read linearly and by +0.25 read per document at 12 %
parameter skip, through a τ 0.95 point with Retain 0.19. The per-document reading is the one a router can realise,
and the one ``analysis.paired``'s variance and bootstrap are computed on. ``across_runs`` (records without items)
reads Retain linearly between points: exact for accuracy-like tasks, an upper bound for perplexity tasks.
"""

from __future__ import annotations

import json
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


def span(record: dict, axis: str) -> tuple[float, float]:
    """The lowest and highest skip on ``axis`` that the run's points reach."""
    skips = [p[axis] for p in points(record) if p[axis] is not None]
    return min(skips), max(skips)


def nearest_shared(a: dict, b: dict, target: float, axis: str) -> float:
    """``target`` if both runs' curves reach it, else the skip nearest it that both reach; ``ItemsError`` where the
    two curves share no skip."""
    (a_lo, a_hi), (b_lo, b_hi) = span(a, axis), span(b, axis)
    lo, hi = max(a_lo, b_lo), min(a_hi, b_hi)
    if lo > hi:
        raise ItemsError(
            f"seed {a.get('seed')}: the two curves share no {axis} skip ([{a_lo:.4f}, {a_hi:.4f}] and "
            f"[{b_lo:.4f}, {b_hi:.4f}])"
        )
    return min(max(target, lo), hi)


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
    values = task_values(mixed)
    other = "compute" if axis == "param" else "param"
    skips = {axis: target, other: w * lo[other] + (1 - w) * hi[other]}
    return mixed.drop("score_hi"), values, skips["param"], skips["compute"]


def retain_at(points: list[tuple[float, float]], target: float) -> tuple[float, tuple[float, float]]:
    """Retain at skip ``target`` read linearly between the two (skip, Retain) points that bracket it, and that
    bracket; ``ItemsError`` outside the points' range (no extrapolation)."""
    pts = sorted(points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= target <= x1:
            return (y0 if x1 == x0 else y0 + (target - x0) / (x1 - x0) * (y1 - y0)), (x0, x1)
    span = f"[{pts[0][0]:.4f}, {pts[-1][0]:.4f}]" if pts else "no points"
    raise ItemsError(f"skip {target:.4f} is outside the reference runs' range {span}")


def read_records(roots: list[str]) -> list[tuple[Path, dict]]:
    """(path, record) of every ``results.json`` given, or found under the given directories, read once."""
    paths = [p for r in roots for p in ([Path(r)] if Path(r).is_file() else sorted(Path(r).rglob("results.json")))]
    return [(p, json.loads(p.read_text())) for p in paths]


def field(record: dict, dotted: str):
    """``record``'s value at a dotted path (``calibration.target``), None where absent."""
    for part in dotted.split("."):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def matches(record: dict, selector: dict[str, str]) -> bool:
    """Whether every ``key=value`` of ``selector`` holds for ``record`` (values compared as text)."""
    return all(str(field(record, k)) == v for k, v in selector.items())


def across_runs(records: list[dict], a: dict, b: dict, axis: str) -> list[dict]:
    """Per seed of group ``a``: its skip on ``axis`` and Retain, and group ``b``'s Retain at that skip, same seed and
    suite. Where a ``b`` run of that seed has a curve (``eval.thresholds``) reaching the skip, ``b`` is read on that
    one trained router (``via: curve``, matched by construction); otherwise between ``b``'s separately trained runs
    (``via: runs``, interpolation). Each row names the two points that bracket it."""
    key = AXES[axis]

    def chosen(selector):
        return [r for r in records if matches(r, selector) and (r.get("retain") or {}).get("value") is not None]

    rows = []
    for run in sorted(chosen(a), key=lambda r: r["seed"]):
        refs = [
            r
            for r in chosen(b)
            if r["seed"] == run["seed"] and r["eval_meta"]["fingerprint"] == run["eval_meta"]["fingerprint"]
        ]
        target = run["skip"][key]
        row = {"seed": run["seed"], "skip": target, "retain_a": run["retain"]["value"]}
        curves = [_curve_points(r, key) for r in refs if r.get("curve")]
        candidates = [("curve", pts) for pts in curves] + [
            ("runs", [(r["skip"][key], r["retain"]["value"]) for r in refs])
        ]
        errors = []
        for via, points in candidates:
            try:
                value, bracket = retain_at(points, target)
            except ItemsError as err:
                errors.append(f"{via}: {err}")
                continue
            row |= {"retain_b": value, "bracket": bracket, "via": via, "difference": run["retain"]["value"] - value}
            break
        else:
            row |= {"retain_b": None, "error": "; ".join(errors)}
        rows.append(row)
    return rows


def _curve_points(record: dict, key: str) -> list[tuple[float, float]]:
    """(skip, Retain) of a run at its trained threshold and at each point of its curve."""
    points = [(record["skip"][key], record["retain"]["value"])]
    return points + [
        (p["skip"][key], p["retain"]["value"])
        for p in record["curve"]
        if (p.get("retain") or {}).get("value") is not None
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m analysis.matched RECORDS... --a variant=X --b variant=Y --axis compute``: A against B at A's own
    skip on the axis, paired by seed, B read between its runs of that seed."""
    import argparse
    import sys

    from analysis.reference import BaselineError, parse_selector
    from analysis.stats import t_quantile

    parser = argparse.ArgumentParser(prog="python -m analysis.matched", description=main.__doc__)
    parser.add_argument("records", nargs="+")
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--axis", choices=tuple(AXES), default="param")
    args = parser.parse_args(argv)
    records, seen = [], set()
    for _, rec in read_records(args.records):
        if rec.get("status") == "completed" and rec["config_hash"] not in seen:  # a run collected into two studies
            seen.add(rec["config_hash"])
            records.append(rec)
    try:
        rows = across_runs(records, parse_selector(args.a), parse_selector(args.b), args.axis)
    except BaselineError as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 2
    if not rows:
        print(f"ERROR: --a {args.a}: no completed record with Retain", file=sys.stderr)
        return 2
    print(f"A = {args.a} at its own {args.axis} skip; B = {args.b} at that skip, same seed (its curve, else its runs)")
    for r in rows:
        if r["retain_b"] is None:
            print(f"  seed {r['seed']}: skip {100 * r['skip']:.2f} %, Retain A {r['retain_a']:.2f}; B: {r['error']}")
        else:
            lo, hi = (100 * x for x in r["bracket"])
            where = "B's curve" if r["via"] == "curve" else "B's runs"
            print(
                f"  seed {r['seed']}: skip {100 * r['skip']:.2f} %, Retain A {r['retain_a']:.2f}, B {r['retain_b']:.2f} "
                f"(between {where} at {lo:.2f} and {hi:.2f} %), A − B {r['difference']:+.2f}"
            )
    diffs = [r["difference"] for r in rows if r["retain_b"] is not None]
    if len(diffs) > 1:
        mean = sum(diffs) / len(diffs)
        std = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5
        half = t_quantile(0.95, len(diffs) - 1) * std / len(diffs) ** 0.5
        print(
            f"A − B over {len(diffs)} seeds: {mean:+.2f} ± {std:.2f} (95 % t interval {mean - half:+.2f} to {mean + half:+.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
