"""Task suites selected by ``eval=``: ``tiny`` (the embedded testbed) and ``none``.

Each suite returns ``(scores, meta)``: scores as {task: {metric: value}} and meta
with the suite name, the primary (higher-is-better) metric per task, and the limit.
"""
from __future__ import annotations

from torch import nn

from hero.errors import ConfigError

SUITES = ("tiny", "none")


class EvaluationError(ConfigError):
    """The evaluation config names something that cannot be evaluated."""


def check_config(eval_cfg) -> None:
    if eval_cfg.suite not in SUITES:
        raise EvaluationError(f"eval.suite={eval_cfg.suite!r}: allowed suites are {', '.join(SUITES)}")
    if eval_cfg.limit is not None and (not isinstance(eval_cfg.limit, int) or eval_cfg.limit <= 0):
        raise EvaluationError(f"eval.limit={eval_cfg.limit!r}: must be a positive integer or null")


def evaluate_suite(model: nn.Module, tokenizer, eval_cfg, bed=None) -> tuple[dict, dict]:
    """Scores of ``model`` on the suite; ``bed`` is the embedded testbed the ``tiny`` suite reads."""
    if eval_cfg.suite == "none":
        return {}, {"suite": "none", "primary_metric": {}}
    from hero.testbed import TASK_PRIMARY_METRIC, evaluate

    if bed is None:
        raise EvaluationError("eval=tiny scores the embedded testbed's tasks: use it with model=tiny")
    scores = evaluate(model, tokenizer, bed, batch_size=eval_cfg.batch_size)
    return scores, {"suite": "tiny", "primary_metric": dict(TASK_PRIMARY_METRIC), "limit": eval_cfg.limit}
