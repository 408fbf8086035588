"""What a study can resolve: every paired comparison's interval half-width, and the seeds a
difference of a given size would need.

A comparison is a paired difference in Retain: a table row against its table's baseline over
their shared seeds (``Table.paired``), or a group's runs against the reference curve at each
run's own skip (``analysis.curves.skip_adjusted``; its n counts runs, which may differ in knob
and share seeds). It is *resolved* at ``level`` when its t interval excludes 0. Its half-width
t_{(1+level)/2, n-1} · std / √n is the protocol's resolution for that comparison: a true
difference of that size lands, on average, just at the interval's edge. ``seeds_needed``
inverts it: the fewest seeds whose half-width at a given std is at most a given difference.
Comparisons of one seed (no std) say nothing about resolution and are left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from analysis.stats import t_quantile
from analysis.tables import Table

LABELS = ("backbone", "method", "variant", "alpha", "memory_dim", "layer_set", "knob")
SCHEMA = {
    "source": pl.String,
    "against": pl.String,
    "backbone": pl.String,
    "method": pl.String,
    "variant": pl.String,
    "alpha": pl.Float64,
    "memory_dim": pl.Int64,
    "layer_set": pl.String,
    "knob": pl.Float64,
    "n": pl.Int64,
    "mean": pl.Float64,
    "std": pl.Float64,
    "half_width": pl.Float64,
    "ci_lo": pl.Float64,
    "ci_hi": pl.Float64,
    "resolved": pl.Boolean,
}
RESOLVE_POINTS = (1.0, 2.0, 5.0)


def comparisons(tables: Sequence[Table], adjusted: pl.DataFrame | None) -> pl.DataFrame:
    """One row per paired Retain comparison of two or more seeds: the tables' rows against their
    baselines, then (``adjusted``, the ``skip_adjusted`` frame) groups against the reference curve."""
    rows: list[dict] = []
    for table in tables:
        base = {b: x.label for b, x in table.baselines.items()}
        for r in table.paired.filter(table.is_baseline().not_() & (pl.col("n") >= 2)).to_dicts():
            rows.append(
                {
                    "source": table.spec.stem,
                    "against": base.get(r["backbone"]),
                    **{k: r.get(k) for k in LABELS},
                    "n": r["n"],
                    "mean": r["retain.mean"],
                    "std": r["retain.std"],
                    "ci_lo": r["retain.ci_lo"],
                    "ci_hi": r["retain.ci_hi"],
                }
            )
    if adjusted is not None:
        for r in adjusted.filter((pl.col("metric") == "retain") & (pl.col("n") >= 2)).to_dicts():
            rows.append(
                {
                    "source": "skip_adjusted",
                    "against": f"{r['reference']} curve at the run's own skip",
                    **{k: r.get(k) for k in LABELS},
                    "n": r["n"],
                    "mean": r["mean"],
                    "std": r["std"],
                    "ci_lo": r["ci_lo"],
                    "ci_hi": r["ci_hi"],
                }
            )
    for r in rows:
        r["half_width"] = None if r["ci_hi"] is None else (r["ci_hi"] - r["ci_lo"]) / 2.0
        r["resolved"] = None if r["ci_hi"] is None else bool(r["ci_lo"] > 0.0 or r["ci_hi"] < 0.0)
    return pl.DataFrame(rows, schema=SCHEMA)


def seeds_needed(std: float, difference: float, level: float = 0.95, max_n: int = 1000) -> int | None:
    """The fewest seeds n ≥ 2 with t_{(1+level)/2, n-1} · std / √n ≤ ``difference`` (None beyond ``max_n``)."""
    if std <= 0.0:
        return 2
    for n in range(2, max_n + 1):
        if t_quantile(level, n - 1) * std / math.sqrt(n) <= difference:
            return n
    return None


def resolution_markdown(found: pl.DataFrame, level: float = 0.95) -> str:
    """Per source: the median half-width and std, what was resolved, the seeds 1 / 2 / 5 points need."""
    pct = f"{100 * level:g} %"
    lines = [
        f"**What this study resolves** (paired Retain differences, {pct} t intervals; a comparison is "
        "resolved when its interval excludes 0, and its half-width is the smallest difference its seeds "
        "resolve).",
        "",
    ]
    if found.height == 0:
        return "\n".join(lines + ["No paired comparison has two or more shared seeds."]) + "\n"
    for source in found["source"].unique(maintain_order=True).to_list():
        part = found.filter(pl.col("source") == source)
        hw, sd = part["half_width"], part["std"]
        unit = "runs" if source == "skip_adjusted" else "seeds"
        counts = "/".join(str(n) for n in sorted(part["n"].unique().to_list()))
        need = [seeds_needed(float(sd.median()), d, level) for d in RESOLVE_POINTS]
        chance = len(part) * (1.0 - level)
        lines += [
            f"- **{source}** (against {part['against'][0]}): {len(part)} comparison{'s' if len(part) != 1 else ''} of {counts} {unit}; "
            f"half-width median {hw.median():.2f} (range {hw.min():.2f}–{hw.max():.2f}), "
            f"std median {sd.median():.2f}. At that std, resolving "
            + ", ".join(
                f"{d:g} point{'s' if d != 1 else ''} takes {n or '> 1000'} {unit}" for d, n in zip(RESOLVE_POINTS, need)
            )
            + f". By chance alone about {chance:.1f} of {len(part)} intervals exclude 0."
        ]
        hits = part.filter(pl.col("resolved"))
        lines += [
            f"  - resolved: {_name(r)} {r['mean']:+.2f} [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]" for r in hits.to_dicts()
        ] or ["  - resolved: none"]
    lines += [
        "",
        "| source | method/variant | α | knob | n | Δ Retain | std | half-width | resolved |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in found.to_dicts():
        lines.append(
            f"| {r['source']} | {r['method']}/{r['variant']} | {_num(r['alpha'])} | {_num(r['knob'])} | "
            f"{r['n']} | {_num(r['mean'], '+.2f')} | {_num(r['std'], '.2f')} | "
            f"{_num(r['half_width'], '.2f')} | {'yes' if r['resolved'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def _name(r: dict) -> str:
    """``no_history (α 0.004814)``, ``random_skip (knob 0.712)``, ``random_skip_no_adapter``."""
    if r["method"] == "hero" and r.get("alpha"):
        return f"{r['variant']} (α {_num(r['alpha'])})"
    return r["variant"] + (f" (knob {_num(r['knob'])})" if r.get("knob") is not None else "")


def _num(v: float | None, fmt: str = ".4g") -> str:
    return "–" if v is None else format(v, fmt)
