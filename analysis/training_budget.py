"""Retain against training budget: each method's quality and realized skip per number of updates (issue 37).

A point is the runs of one (backbone, method, skip level, updates): the skip level is the target a
run's knob was calibrated to (``config.calibration.target_skip``, one calibration per budget); a run
with a fixed knob (the no-skip controls, dense) is its own level, named by its α or knob. Updates
are ``train.steps`` (0 for an untrained run). Statistics over seeds (mean, sample std, t interval);
the gap between two methods is paired by seed at each (level, updates), so it answers "does the gap
close with budget" with its own seed spread rather than the two groups' spreads added.

Inputs are ``analysis.reference.with_retain``'s scored runs (``retain`` against the named baseline,
``skip.param_rate``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.stats import paired_differences, summarize

TARGET = "config.calibration.target_skip"
POINT_KEYS = ("backbone", "method", "level", "updates")


def _level() -> pl.Expr:
    """The calibrated target in % (``6 %``), else the fixed knob the run had (``α 0``, ``knob 0.2``)."""
    fixed = (
        pl.when(pl.col("knob").is_not_null())
        .then(pl.format("knob {}", pl.col("knob").cast(pl.String)))
        .otherwise(pl.format("α {}", pl.col("alpha").cast(pl.String)))
    )
    target = pl.col(TARGET).cast(pl.Float64)
    return pl.when(target.is_not_null()).then(pl.format("{} %", (target * 100).round(2))).otherwise(fixed)


def budget_runs(scored: pl.DataFrame) -> pl.DataFrame:
    """One row per run: ``POINT_KEYS``, seed, retain, skip (parameter skip in %)."""
    frame = scored if TARGET in scored.columns else scored.with_columns(pl.lit(None, pl.Float64).alias(TARGET))
    steps = pl.col("train.steps") if "train.steps" in frame.columns else pl.lit(None, pl.Int64)
    return frame.select(
        "backbone",
        "method",
        _level().alias("level"),
        steps.fill_null(0).cast(pl.Int64).alias("updates"),
        "seed",
        "retain",
        (pl.col("skip.param_rate") * 100.0).alias("skip"),
    )


def has_budgets(scored: pl.DataFrame) -> bool:
    """Whether the runs span two or more training lengths (of trained runs): the table is written only then."""
    runs = budget_runs(scored).filter(pl.col("updates") > 0)
    return runs["updates"].n_unique() > 1


def budget_points(runs: pl.DataFrame, level: float = 0.95) -> pl.DataFrame:
    """Seed statistics of Retain and skip per (backbone, method, level, updates) of ``budget_runs``."""
    return summarize(runs, ["retain", "skip"], keys=POINT_KEYS, level=level)


def paired_gaps(runs: pl.DataFrame, method: str, other: str, level: float = 0.95) -> pl.DataFrame:
    """``method`` − ``other`` by seed at each (backbone, level, updates) both ran (of ``budget_runs``)."""
    keys = ("backbone", "level", "updates")
    gaps = paired_differences(
        runs.filter(pl.col("method") == method),
        runs.filter(pl.col("method") == other),
        ["retain", "skip"],
        keys=keys,
        level=level,
        on=(*keys, "seed"),
    )
    return gaps.filter(pl.col("n") > 0)


def _pm(mean, std, digits: int = 2) -> str:
    if mean is None:
        return "–"
    return f"{mean:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


def budget_markdown(points: pl.DataFrame, gaps: pl.DataFrame, method: str, other: str) -> str:
    """Retain ± seed std (parameter skip %) per method and level, one column per budget; then the paired gaps."""
    budgets = sorted(points["updates"].unique().to_list())
    lines = [
        "**Retain against training budget** (mean ± seed std over the seeds shown; parameter skip % in brackets).",
        "",
        "| backbone | method | skip level | " + " | ".join(f"{u} updates" for u in budgets) + " |",
        "|---|---|---|" + "---|" * len(budgets),
    ]
    for (backbone, m, lvl), part in points.group_by(["backbone", "method", "level"], maintain_order=True):
        cells = []
        for u in budgets:
            row = part.filter(pl.col("updates") == u).to_dicts()
            if not row:
                cells.append("")
                continue
            r = row[0]
            seeds = ",".join(str(s) for s in r["seeds"])
            cells.append(
                f"{_pm(r['retain.mean'], r['retain.std'])} ({_pm(r['skip.mean'], r['skip.std'])} %; s {seeds})"
            )
        lines.append(f"| {backbone} | {m} | {lvl} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"**{method} − {other}, paired by seed** (Retain points and skip pp; mean ± std, t interval).",
        "",
        "| backbone | skip level | updates | n | Retain gap | interval | skip gap (pp) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in gaps.to_dicts():
        ci = "–" if r["retain.ci_lo"] is None else f"[{r['retain.ci_lo']:+.2f}, {r['retain.ci_hi']:+.2f}]"
        lines.append(
            f"| {r['backbone']} | {r['level']} | {r['updates']} | {r['n']} | {_pm(r['retain.mean'], r['retain.std'])}"
            f" | {ci} | {_pm(r['skip.mean'], r['skip.std'])} |"
        )
    return "\n".join(lines) + "\n"


def write(scored: pl.DataFrame, out: Path, plots: bool = True, method: str = "hero", other: str = "skipgpt_rt"):
    """``training_budget.{csv,md}`` and (``plots``) ``retain_vs_updates.png``; returns the paths written."""
    from analysis.plots import retain_vs_updates

    runs = budget_runs(scored)
    points = budget_points(runs)
    gaps = paired_gaps(runs, method, other)
    csv = out / "training_budget.csv"
    points.with_columns(pl.col("seeds").cast(pl.List(pl.String)).list.join(" ")).write_csv(csv)
    md = out / "training_budget.md"
    md.write_text(budget_markdown(points, gaps, method, other))
    plot = retain_vs_updates(points, out / "retain_vs_updates.png") if plots else None
    return [csv, md, *([plot] if plot else [])]
