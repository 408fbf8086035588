"""The statistics a run record stores, each defined once; ``hero`` writes them and ``analysis`` recomputes them.

Torch-free and importing nothing of ``hero`` but ``hero.errors``, so ``analysis`` (which must import without
torch) uses the same definitions as the training pipeline:

Retain (HERO_SPEC §7)
    per task score / baseline score, mean of the ratios × 100 (``retain_value``); not the ratio of mean
    scores. ``retain`` applies it to one run's scores against a named baseline's (the record's ``retain``);
    ``analysis.reference.with_retain`` to a polars frame of runs, through the same ``retain_value``.
Chance-normalised Retain
    per task (score − chance) / (baseline − chance) × 100 and their mean (``chance_normalised``).
Routing rates (``hero.objectives.SkipMeter``; ``analysis.gates`` for records that predate a statistic)
    ``layer_ffn_rates``: per routable layer, share of non-padding tokens whose FFN ran;
    ``ffn_execution_rate``: share of routable (token, layer) FFN calls that ran;
    ``layer_mean_gates``: per layer, mean of g over ALL non-padding tokens, skipped ones included;
    ``layer_executed_gates``: per layer, mean of g over the tokens whose FFN ran (None where none ran).

Each is computed in plain Python floats in a fixed order (``SkipMeter``'s sums are float64 tensors turned into
floats), so a routing rate is the same to the bit whether ``hero`` or ``analysis`` computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from hero.errors import ConfigError

T = TypeVar("T")


class RetainError(ConfigError):
    """Retain cannot be computed against the named baseline."""


def retain_value(ratios: Mapping[str, T], total: Callable[[list[T]], T] = sum) -> T:
    """Retain from per-task ratios run / baseline (task → ratio): their mean × 100, summed in task-name order.

    The ratios may be floats (``retain``) or polars expressions (``analysis.reference.with_retain``, which passes
    ``total=pl.sum_horizontal``). The two agree to about 1e-15 relative, not always to the bit: polars divides a
    column by a number as a multiplication by its reciprocal (the committed study reports hold those values).
    """
    if not ratios:
        raise RetainError("no tasks to compute Retain over")
    return total([ratios[task] for task in sorted(ratios)]) / len(ratios) * 100.0


def retain(
    scores: dict[str, dict[str, float]],
    baseline: dict[str, dict[str, float]],
    primary: dict[str, str],
    baseline_name: str,
) -> dict:
    """``{"value", "baseline", "tasks", "metrics", "per_task"}`` over the tasks of ``primary`` (task → metric).

    The baseline is always named and stored with the value and the task list; a missing baseline score is an
    error (``RetainError``), never a fallback.
    """
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
    return {
        "value": retain_value(ratios),
        "baseline": baseline_name,
        "tasks": sorted(ratios),
        "metrics": dict(sorted(primary.items())),
        "per_task": {task: 100.0 * r for task, r in ratios.items()},
    }


def chance_normalised(
    scores: dict[str, dict[str, float]],
    baseline: dict[str, dict[str, float]],
    primary: dict[str, str],
    chance: dict[str, float],
    baseline_name: str,
) -> dict | None:
    """Chance-normalised Retain: per task (score − chance) / (baseline − chance) × 100, and their mean.

    Over the tasks of ``primary`` that have a chance level in ``chance`` (task → level, e.g.
    ``hero.evaluation.CHANCE`` by lm-eval task); None when none has one (a suite of the project's own
    tasks). A task whose baseline is at or below chance has no normalised value (listed under ``undefined``,
    left out of the mean): it cannot lose what it never had. 0 means "fell to chance", 100 "kept everything
    the baseline had above chance"; unlike Retain it does not reward a multiple-choice task for the share of
    its score a coin would get (Retain on PIQA is 50 % at a coin flip).
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


def layer_ffn_rates(executed: Mapping[str, float], tokens: int) -> dict[str, float]:
    """Per routable layer (layer → tokens whose FFN ran), the share of the ``tokens`` non-padding tokens."""
    n = max(tokens, 1)
    return {layer: float(count) / n for layer, count in executed.items()}


def layer_mean_gates(gate_sums: Mapping[str, float], tokens: int) -> dict[str, float]:
    """Per routable layer (layer → Σ g over ALL non-padding tokens), the mean gate, skipped tokens included."""
    n = max(tokens, 1)
    return {layer: float(total) / n for layer, total in gate_sums.items()}


def layer_executed_gates(
    executed_gate_sums: Mapping[str, float], executed: Mapping[str, float]
) -> dict[str, float | None]:
    """Per routable layer, Σ g over the tokens whose FFN ran / their number: the scale eq 3 applies to an
    executed FFN's output. None for a layer that executed no token."""
    return {
        layer: float(total) / float(executed[layer]) if executed[layer] else None
        for layer, total in executed_gate_sums.items()
    }


def ffn_execution_rate(executed: Sequence[float], tokens: float = 1) -> float:
    """Share of routable (token, layer) FFN calls that ran: Σ over layers of ``executed`` / (``tokens`` × layers).

    ``executed``: per routable layer, the tokens whose FFN ran out of ``tokens`` (``SkipMeter``), or the
    layer's execution rate with ``tokens`` = 1 (a record's ``per_layer_ffn_rate``: every layer sees the same
    tokens, so the mean of the rates is the same share). nan with no calls.
    """
    calls = tokens * len(executed)
    return float(sum(executed)) / calls if calls else float("nan")
