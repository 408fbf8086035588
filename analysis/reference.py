"""The dense reference of Retain: which runs are the NAMED baseline (HERO_SPEC §7), and each run's Retain against it.

For one run: Retain = 100 · mean over the task set of (run score / baseline score),
``hero.statistics.retain_value`` (the definition the run records use). It is the mean of
per-task ratios, not the ratio of mean scores. The baseline
score of a task is the mean over the baseline group's seeds, so the baseline's own
Retain averages to exactly 100 over its seeds. A table reports Retain as mean ± std
over each group's seeds.

The baseline is chosen by a *selector*, ``key=value[,key=value…]`` over run fields
(``method=dense``; ``variant=full,alpha=0.001``; ``memory_dim=64``), and must pick
exactly one group (``analysis.load.KEYS``) per backbone among the candidate runs.
No match or several matches is a ``BaselineError`` naming the selector and the
groups that exist; there is no fallback. The task set is the tasks the baseline
scores (optionally restricted by the caller); a run that lacks a task of the set
gets no Retain rather than one over fewer tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from analysis.load import ALPHA_DIGITS, KEYS
from hero.statistics import retain_value

MAX_LISTED = 8


class BaselineError(ValueError):
    """A baseline selector that does not pick exactly one group per backbone."""


@dataclass(frozen=True)
class Baseline:
    """The resolved baseline of one backbone: which group, its task set and per-task mean scores."""

    selector: str
    option: str
    backbone: str
    group: dict
    tasks: tuple[str, ...]
    scores: dict[str, float]
    seeds: tuple[int, ...]

    @property
    def label(self) -> str:
        return group_label(self.group)

    def describe(self, metrics: dict[str, str]) -> str:
        """One line naming the baseline and its task set, as printed with every Retain."""
        tasks = ", ".join(f"{t} ({metrics.get(t, '?')})" for t in self.tasks)
        return (
            f"Retain baseline ({self.option} {self.selector!r}) for {self.backbone}: {self.label}, "
            f"n={len(self.seeds)} seeds; task set ({len(self.tasks)}): {tasks}"
        )


def group_label(group: dict, with_backbone: bool = True) -> str:
    """``tiny hero/full α=0.001 d_m=64 second_half`` (the backbone optional)."""
    parts = [group.get("backbone")] if with_backbone else []
    parts += [
        f"{group.get('method')}/{group.get('variant')}",
        f"α={_fmt(group.get('alpha'))}",
        f"d_m={_fmt(group.get('memory_dim'))}",
        str(group.get("layer_set")),
    ]
    if group.get("knob") is not None:
        parts.append(f"knob={_fmt(group.get('knob'))}")
    return " ".join(map(str, parts))


def _fmt(v) -> str:
    """Floats at the precision groups are told apart by (``ALPHA_DIGITS``), so a listed α can be typed back."""
    return f"{v:.{ALPHA_DIGITS}g}" if isinstance(v, float) else str(v)


def parse_selector(text: str) -> dict[str, str]:
    """``"variant=full,alpha=0.001"`` → ``{"variant": "full", "alpha": "0.001"}``."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise BaselineError(f"bad selector {text!r}: expected key=value[,key=value...]")
        out[key.strip()] = value.strip()
    if not out:
        raise BaselineError(f"empty selector {text!r}: expected key=value[,key=value...]")
    return out


def selector_expr(text: str, schema: pl.Schema, option: str = "selector") -> pl.Expr:
    """A filter expression for ``text``; floats compare with a relative tolerance of 1e-9."""
    expr = pl.lit(True)
    for key, value in parse_selector(text).items():
        if key not in schema:
            raise BaselineError(f"{option} {text!r}: unknown field {key!r}; fields: {', '.join(KEYS)}, seed, ...")
        dtype = schema[key]
        try:
            if dtype.is_float():
                v = float(value)
                cond = (pl.col(key) - v).abs() <= 1e-9 * max(abs(v), 1e-300)
            elif dtype.is_integer():
                cond = pl.col(key) == int(value)
            elif dtype == pl.Boolean:
                cond = pl.col(key) == (value.lower() in ("1", "true", "yes"))
            else:
                cond = pl.col(key).cast(pl.String) == value
        except ValueError:
            raise BaselineError(f"{option} {text!r}: {value!r} is not a valid {dtype} for {key!r}") from None
        expr = expr & cond.fill_null(False)
    return expr


def resolve_baselines(
    runs: pl.DataFrame, selector: str, option: str, metrics: dict[str, str], tasks: list[str] | None = None
) -> dict[str, Baseline]:
    """The baseline of every backbone in ``runs`` (candidates: the runs with task scores); see the module docstring.

    ``metrics`` maps task → primary metric; ``tasks`` restricts the task set.
    """
    if "scored" in runs.columns:
        runs = runs.filter(pl.col("scored"))
    chosen = runs.filter(selector_expr(selector, runs.schema, option))
    out = {}
    for backbone in sorted(runs["backbone"].unique().to_list()):
        here = chosen.filter(pl.col("backbone") == backbone)
        groups = here.select(KEYS).unique().sort(list(KEYS), nulls_last=True)
        if groups.height != 1:
            what = "selects no runs" if groups.height == 0 else f"selects {groups.height} groups"
            candidates = groups if groups.height else runs.filter(pl.col("backbone") == backbone).select(KEYS).unique()
            candidates = candidates.sort(list(KEYS), nulls_last=True).to_dicts()
            listed = [group_label(g, with_backbone=False) for g in candidates]
            more = f" … ({len(listed) - MAX_LISTED} more)" if len(listed) > MAX_LISTED else ""
            raise BaselineError(
                f"{option} {selector!r} {what} of backbone {backbone!r}; "
                f"{'matching' if groups.height else 'available'} groups: "
                f"{'; '.join(listed[:MAX_LISTED])}{more}"
            )
        scores = {}
        for task in metrics:
            col = here[f"score.{task}"] if f"score.{task}" in here.columns else None
            if col is not None and col.null_count() == 0:
                scores[task] = float(col.mean())
        if tasks is not None:
            lacking = [t for t in tasks if t not in scores]
            if lacking:
                raise BaselineError(
                    f"{option} {selector!r}: baseline of {backbone!r} has no score for "
                    f"{', '.join(lacking)} in every seed; it scores {', '.join(scores) or 'nothing'}"
                )
            scores = {t: scores[t] for t in tasks}
        if not scores:
            raise BaselineError(f"{option} {selector!r}: baseline of {backbone!r} scores no task in every seed")
        zero = [t for t, v in scores.items() if v == 0 or math.isnan(v)]
        if zero:
            raise BaselineError(
                f"{option} {selector!r}: baseline of {backbone!r} scores 0 on {', '.join(zero)}; "
                "Retain is undefined there (restrict the task set)"
            )
        out[backbone] = Baseline(
            selector=selector,
            option=option,
            backbone=backbone,
            group=groups.row(0, named=True),
            tasks=tuple(scores),
            scores=scores,
            seeds=tuple(sorted(here["seed"].to_list())),
        )
    return out


def with_retain(runs: pl.DataFrame, baselines: dict[str, Baseline], column: str = "retain") -> pl.DataFrame:
    """Add ``column``: each run's Retain (×100) against its backbone's baseline; null if a task is missing."""
    parts = []
    for backbone, base in baselines.items():
        ratios = {t: pl.col(f"score.{t}") / base.scores[t] for t in base.tasks}
        retain = retain_value(ratios, total=pl.sum_horizontal)  # the record's formula (hero.statistics)
        missing = pl.any_horizontal(r.is_null() for r in ratios.values())
        parts.append(
            runs.filter(pl.col("backbone") == backbone).with_columns(
                pl.when(missing).then(None).otherwise(retain).alias(column)
            )
        )
    others = runs.filter(~pl.col("backbone").is_in(list(baselines)))
    others = others.with_columns(pl.lit(None, pl.Float64).alias(column))
    return pl.concat([*parts, others], how="vertical_relaxed")
