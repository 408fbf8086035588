"""Aggregations that local lm-eval tasks share (``aggregation: !function hero.evaluation.metrics.<name>``).

Token-weighted perplexity metrics aggregate (summed log-prob, token count) items, so every
token of every chunk weighs the same whatever the chunk lengths.
"""

from __future__ import annotations

import math


def token_loss(scored: list[tuple[float, int]]) -> float:
    """Mean NLL per token over (summed log-prob, token count) items."""
    return -sum(s for s, _ in scored) / sum(n for _, n in scored)


def token_ppl(scored: list[tuple[float, int]]) -> float:
    return math.exp(token_loss(scored))


def token_inv_ppl(scored: list[tuple[float, int]]) -> float:
    return math.exp(-token_loss(scored))


def exp_mean(log_probs: list[float]) -> float:
    """exp(mean log-prob): the geometric-mean probability of a whole answer."""
    return math.exp(sum(log_probs) / len(log_probs))
