"""Retain (HERO_SPEC §7): per task score / baseline score, mean of the ratios × 100.

Not the ratio of mean scores. The baseline is always named and stored with the
value and the task list; a missing baseline score is an error, never a fallback.

``chance_normalised`` is the same ratio with each task's chance level subtracted from run and
baseline, (score − chance) / (baseline − chance), for suites whose tasks have a known chance
level (``CHANCE``: the paper's multiple-choice tasks): Retain on PIQA is 50 % at a coin flip.
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


# Chance (or majority) level of each lm-eval task's primary metric, by lm-eval task name. Uniform guessing over
# the answer options, except BoolQ (binary, unbalanced: predicting the majority class "yes" scores 2,033 / 3,270
# on the validation split). ARC mixes 3-, 4- and 5-option items; 0.25 is the nominal level (the mean of
# 1 / n_options over the test split is 0.2502 on ARC-Easy and on ARC-Challenge, tests/test_paper.py).
# Source: the rows themselves (hero.evaluation.paper; counted in tests/test_paper.py).
CHANCE = {
    "arc_easy": 0.25,
    "arc_challenge": 0.25,
    "hellaswag": 0.25,
    "openbookqa": 0.25,
    "winogrande": 0.5,
    "piqa": 0.5,
    "boolq": 2033 / 3270,
}


def chance_normalised(
    scores: dict[str, dict[str, float]],
    baseline: dict[str, dict[str, float]],
    primary: dict[str, str],
    chance: dict[str, float],
    baseline_name: str,
) -> dict | None:
    """Chance-normalised Retain: per task (score − chance) / (baseline − chance) × 100, and their mean.

    Over the tasks of ``primary`` that have a chance level in ``chance`` (task → level); None when none
    has one (a suite of the project's own tasks). A task whose baseline is at or below chance has no
    normalised value (listed under ``undefined``, left out of the mean): it cannot lose what it never had.
    0 means "fell to chance", 100 "kept everything the baseline had above chance"; unlike Retain it does
    not reward a multiple-choice task for the share of its score a coin would get.
    """
    tasks = sorted(task for task in primary if task in chance)
    if not tasks:
        return None
    per_task, undefined = {}, []
    for task in tasks:
        metric = primary[task]
        if task not in baseline or metric not in baseline[task]:
            raise RetainError(f"baseline {baseline_name!r} has no {task}.{metric}; it has {sorted(baseline)}")
        if task not in scores or metric not in scores[task]:
            raise RetainError(f"run has no {task}.{metric} to compare with baseline {baseline_name!r}")
        margin = baseline[task][metric] - chance[task]
        if margin <= 0:
            undefined.append(task)
            continue
        per_task[task] = 100.0 * (scores[task][metric] - chance[task]) / margin
    return {
        "value": sum(per_task.values()) / len(per_task) if per_task else None,
        "baseline": baseline_name,
        "tasks": sorted(per_task),
        "chance": {task: chance[task] for task in tasks},
        "per_task": per_task,
        "undefined": undefined,
    }
