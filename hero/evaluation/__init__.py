"""Evaluation (HERO_SPEC §7): lm-evaluation-harness suites, Retain against a named baseline, routing statistics.

Retain and chance-normalised Retain are defined in ``hero.statistics`` (torch-free, shared with ``analysis``);
they are re-exported here with ``CHANCE``, the chance levels of the paper's tasks (``hero.evaluation.paper``).
"""

from hero.evaluation.harness import LM_EVAL_VERSION, EvaluationError
from hero.evaluation.paper import CHANCE
from hero.evaluation.routing import routing_statistics
from hero.evaluation.suites import SUITES, TaskSpec, check_config, evaluate_suite, suite_fingerprint, task_specs
from hero.statistics import RetainError, chance_normalised, retain

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
