"""Evaluation: task suites, Retain against a named baseline, routing statistics on evaluation data."""
from hero.evaluation.retain import RetainError, retain
from hero.evaluation.suites import SUITES, EvaluationError, check_config, evaluate_suite
from hero.evaluation.routing import routing_statistics

__all__ = ["SUITES", "EvaluationError", "RetainError", "check_config", "evaluate_suite", "retain", "routing_statistics"]
