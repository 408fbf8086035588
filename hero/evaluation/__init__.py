"""Evaluation (HERO_SPEC §7): lm-evaluation-harness suites, Retain against a named baseline, routing statistics."""

from hero.evaluation.harness import LM_EVAL_VERSION, EvaluationError
from hero.evaluation.retain import CHANCE, RetainError, chance_normalised, retain
from hero.evaluation.routing import routing_statistics
from hero.evaluation.suites import SUITES, TaskSpec, check_config, evaluate_suite, suite_fingerprint, task_specs

__all__ = [
    "CHANCE",
    "LM_EVAL_VERSION",
    "SUITES",
    "EvaluationError",
    "RetainError",
    "TaskSpec",
    "chance_normalised",
    "check_config",
    "evaluate_suite",
    "retain",
    "routing_statistics",
    "suite_fingerprint",
    "task_specs",
]
