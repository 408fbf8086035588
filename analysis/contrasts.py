"""Several variants against one reference, paired by seed and by item, on each yardstick and on both cost axes: the
table a study's answer is read from.

    python -m analysis.contrasts --b variant=full --a variant=no_position_state --a variant=no_history \\
        --yardstick ours=docs/studies/table3_smollm2/records --yardstick public=docs/studies/table3_smollm2/public_records \\
        [--off-point 3] [--out contrasts.md]

Each cell is ``analysis.paired``'s difference D = Retain(A) − Retain(B), in Retain points against the dense baseline
of the yardstick's records, over the seeds A and B share there. Per seed both runs are read at B's trained skip on
the axis (parameter skip, or net compute skip), or, where A's curve does not reach it, at the nearest skip both curves
reach (``paired.pairs_at_b`` with ``nearest``): matched by construction, never extrapolated. The half-width is the
95 % interval of D from the study's own seeds and items (t at Satterthwaite's degrees of freedom); with one shared
seed there is none. A seed whose skip read lies more than ``--off-point`` percentage points from either run's trained
skip is *off-point* (its pair is read where neither router was trained): the cell names it, and D is given again
over the other seeds.

With ``--resolve X`` a design follows, from the same records: per yardstick and axis the contrasts' seed variances
pooled (``pooled``), the half-width a study of ``--seeds`` seeds per variant would reach, and the fewest seeds per
variant for ±X — the checkpoint's question, answered from the study's own runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from analysis.items import ItemsError
from analysis.matched import matches, read_records
from analysis.paired import Components, compare, dense_values, pairs_at_b, with_items
from analysis.reference import BaselineError, parse_selector

AXIS_NAMES = {"param": "parameter", "compute": "net compute"}


def _interval(result: dict) -> float:
    """95 % half-width of D, NaN with one shared seed."""
    comp = result["components"]
    return float("nan") if math.isnan(comp.seed_var) else comp.half_width(comp.seeds, seed_df=comp.seed_df)


def cell(runs: list[tuple[Path, dict]], root: str, want_a: dict, want_b: dict, axis: str, off_point: float) -> dict:
    """One contrast over ``runs`` (a yardstick's records with items, ``paired.with_items``): D, its half-width and
    bootstrap interval, the per-seed pairs and skip read, the off-point seeds and D without them. ``{"missing": why}``
    where the yardstick has no pair to read."""
    try:
        a, b, reads = pairs_at_b(runs, want_a, want_b, axis, nearest=True)
    except ItemsError as err:  # a seed's two curves share no skip: shown in its cell, the other cells still read
        return {"missing": str(err)}
    if not a:
        return {"missing": "no shared seed scored"}
    dense = dense_values(a[0], [root])
    result = compare(a, b, dense)
    off = sorted(s for s, (x, tb, ta) in reads.items() if max(abs(x - tb), abs(x - ta)) > off_point / 100)
    out = {
        "seeds": result["seeds"],
        "per_seed": dict(zip(result["seeds"], result["per_seed"], strict=True)),
        "read": {s: reads[s][0] for s in result["seeds"]},
        "difference": result["difference"],
        "half_width": _interval(result),
        "bootstrap": (result["bootstrap"]["lo"], result["bootstrap"]["hi"]),
        "off": off,
        "components": result["components"],
    }
    kept = [s for s in result["seeds"] if s not in off]
    if off and kept:
        rest = compare([r for r in a if r.seed in kept], [r for r in b if r.seed in kept], dense)
        out["without_off"] = (rest["difference"], _interval(rest))
    return out


def _pm(d: float, hw: float) -> str:
    return f"{d:+.2f}" + ("" if math.isnan(hw) else f" ± {hw:.2f}")


def table(cells: list[tuple[str, str, str, dict]], reference: str, off_point: float) -> str:
    lines = [
        f"**Paired differences to {reference}** (D = Retain(variant) − Retain({reference}), Retain points; "
        "95 % interval from the shared seeds and items, none with one seed; per seed both runs read at the "
        f"reference's trained skip on the axis, or at the nearest skip both curves reach; off-point: read > {off_point:g} pp "
        "from either run's trained skip)",
        "",
        "| variant | yardstick | axis | seeds | D ± 95 % | bootstrap 95 % | per seed: D (skip read %) | off-point | D without off-point |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, yardstick, axis, c in cells:
        head = f"| {variant} | {yardstick} | {AXIS_NAMES[axis]} |"
        if "missing" in c:
            lines.append(f"{head} – | {c['missing']} | | | | |")
            continue
        seeds = ", ".join(map(str, c["seeds"]))
        per = ", ".join(f"{s}: {c['per_seed'][s]:+.2f} ({100 * c['read'][s]:.2f})" for s in c["seeds"])
        boot = f"[{c['bootstrap'][0]:+.2f}, {c['bootstrap'][1]:+.2f}]"
        off = ", ".join(map(str, c["off"])) or "none"
        rest = _pm(*c["without_off"]) if "without_off" in c else "–"
        lines.append(f"{head} {seeds} | {_pm(c['difference'], c['half_width'])} | {boot} | {per} | {off} | {rest} |")
    return "\n".join(lines) + "\n"


def pooled(comps: list[Components]) -> Components | None:
    """One set of components for contrasts that share a reference, a yardstick and a design: the seed variances of
    their differences pooled by degrees of freedom (seeds − 1 each), the item and seed × item variances averaged per
    task. None without a contrast of ≥ 2 seeds."""
    usable = [c for c in comps if not math.isnan(c.seed_var)]  # NaN: one seed, no seed variance measured
    if not usable:
        return None
    df = sum(c.seeds - 1 for c in usable)

    def mean(field: str) -> dict[str, float]:
        return {t: sum(getattr(c, field)[t] for c in usable) / len(usable) for t in usable[0].tasks}

    return replace(
        usable[0],
        c=mean("c"),
        item_var=mean("item_var"),
        inter_var=mean("inter_var"),
        seed_var=sum((c.seeds - 1) * c.seed_var for c in usable) / df,
        seed_df=df,
        seed_source=f"pooled over {len(usable)} contrasts",
    )


def resolution(cells: list[tuple[str, str, str, dict]], target: float, seeds: int, max_seeds: int = 60) -> str:
    """Per yardstick and axis, from the contrasts' pooled components: the 95 % half-width a study of ``seeds`` seeds
    per variant would reach (estimating its own seed variance: t with seeds − 1 degrees of freedom), and the fewest
    seeds per variant that reach ``target``."""
    lines = [
        "",
        f"**Design from these records** (the contrasts' seed variances pooled per yardstick and axis; a study of S "
        f"seeds per variant, every variant on the same seeds and items): the 95 % half-width of one paired difference "
        f"at {seeds} seeds, and the seeds per variant for ±{target:g}",
        "",
        f"| yardstick | axis | contrasts (seeds each) | seed variance of D (df) | item + seed×item at {seeds} seeds "
        f"| ± at {seeds} seeds | seeds for ±{target:g} |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Components]] = {}
    for _, yardstick, axis, c in cells:
        groups.setdefault((yardstick, axis), []).append(c.get("components"))
    for (yardstick, axis), comps in groups.items():
        comps = [c for c in comps if c is not None]
        comp = pooled(comps)
        head = f"| {yardstick} | {AXIS_NAMES[axis]} | {', '.join(str(c.seeds) for c in comps) or '–'} |"
        if comp is None:
            lines.append(f"{head} – | | | needs a contrast with ≥ 2 seeds |")
            continue
        _, item, inter = comp.variance(seeds)
        found = next((n for n in range(2, max_seeds + 1) if comp.half_width(n) <= target), None)
        lines.append(
            f"{head} {comp.seed_var:.2f} ({comp.seed_df}) | {item + inter:.2f} | ±{comp.half_width(seeds):.2f} "
            f"| {found or f'> {max_seeds}'} |"
        )
    return "\n".join(lines) + "\n"


def _yardstick(text: str) -> tuple[str, str]:
    name, eq, root = text.partition("=")
    if not eq or not name or not Path(root).is_dir():
        raise ItemsError(f"--yardstick {text!r}: expected NAME=DIR with DIR a directory of records")
    return name, root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.contrasts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--b", required=True, help="the reference group, e.g. variant=full")
    parser.add_argument("--a", action="append", required=True, help="a variant group (repeat), e.g. variant=no_history")
    parser.add_argument(
        "--yardstick", action="append", required=True, help="NAME=DIR: records scored on one suite (repeat)"
    )
    parser.add_argument("--axis", choices=("param", "compute"), action="append", help="default: both")
    parser.add_argument("--off-point", type=float, default=3.0, help="pp from a trained skip (default 3)")
    parser.add_argument("--resolve", type=float, help="design: seeds per variant for a ±RESOLVE half-width")
    parser.add_argument("--seeds", type=int, default=5, help="design: the half-width at this many seeds (default 5)")
    parser.add_argument("--out", help="also write the table here (markdown)")
    args = parser.parse_args(argv)
    try:
        want_b, wants = parse_selector(args.b), [(a, parse_selector(a)) for a in args.a]
        yardsticks = [_yardstick(y) for y in args.yardstick]
        if args.off_point <= 0:
            raise ItemsError(f"--off-point {args.off_point:g}: must be > 0 percentage points")
        if args.resolve is not None and args.resolve <= 0 or args.seeds < 2:
            raise ItemsError(f"--resolve {args.resolve} --seeds {args.seeds}: need a half-width > 0 and ≥ 2 seeds")
        found = {name: read_records([root]) for name, root in yardsticks}
        for text, want in [(args.b, want_b), *wants]:
            if not any(matches(r, want) for records in found.values() for _, r in records):
                raise ItemsError(f"{text!r} matches no record under {', '.join(root for _, root in yardsticks)}")
        cells = []
        for name, root in yardsticks:
            runs = with_items(found[name])
            for _, want in wants:
                label = ",".join(want.values())
                for axis in args.axis or ("param", "compute"):
                    cells.append((label, name, axis, cell(runs, root, want, want_b, axis, args.off_point)))
    except (ItemsError, BaselineError, OSError, KeyError) as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 2
    text = table(cells, ",".join(want_b.values()), args.off_point)
    if args.resolve is not None:
        text += resolution(cells, args.resolve, args.seeds)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
