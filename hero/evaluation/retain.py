"""Retain (HERO_SPEC §7): per task score / baseline score, mean of the ratios × 100.

Not the ratio of mean scores. The baseline is always named and stored with the
value and the task list; a missing baseline score is an error, never a fallback.
"""

from __future__ import annotations

from hero.errors import ConfigError


class RetainError(ConfigError):
    """Retain cannot be computed against the named baseline."""


def retain(
    scores: dict[str, dict[str, float]],
    baseline: dict[str, dict[str, float]],
    primary: dict[str, str],
    baseline_name: str,
) -> dict:
    """``{"value", "baseline", "tasks", "per_task"}`` over the tasks of ``primary`` (task → metric)."""
    ratios = {}
    for task, metric in sorted(primary.items()):
        if task not in baseline or metric not in baseline[task]:
            raise RetainError(f"baseline {baseline_name!r} has no {task}.{metric}; it has {sorted(baseline)}")
        if task not in scores or metric not in scores[task]:
            raise RetainError(f"run has no {task}.{metric} to compare with baseline {baseline_name!r}")
        reference = baseline[task][metric]
        if reference == 0:
            raise RetainError(f"baseline {baseline_name!r} scores 0 on {task}.{metric}: Retain is undefined")
        ratios[task] = scores[task][metric] / reference
    if not ratios:
        raise RetainError("no tasks to compute Retain over")
    return {
        "value": 100.0 * sum(ratios.values()) / len(ratios),
        "baseline": baseline_name,
        "tasks": sorted(ratios),
        "metrics": dict(sorted(primary.items())),
        "per_task": {task: 100.0 * r for task, r in ratios.items()},
    }
