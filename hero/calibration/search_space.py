"""How calibration searches each method's knob (``hero.knobs``: α for HeRo, each Table 1 method's cost knob).

Every knob moves the realized parameter skip rate monotonically (up to training noise), so
``MonotoneSampler`` searches each the same way, in x = log10 α for HeRo and x = the value for
the Table 1 methods (an integer for ``static_drop``'s k):

    method        knob           config key            range                         first trial
    hero          alpha          alpha                 calibration.alpha_bounds, log the config's α
    skipgpt_rt    target_ratio   method.target_ratio   [0, 0.99]                     target / ceiling
    static_drop   k              method.k              0 … routable layers, integer  round(L_R · target / ceiling)
    random_skip   p              method.p              [0, 1]                        target / ceiling

(ceiling: the parameter share of the routable FFNs, the highest reachable skip rate.)
"""

from __future__ import annotations

import math

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from hero.knobs import ALPHA, Knob

LINEAR_BOUNDS = {"target_ratio": (0.0, 0.99), "p": (0.0, 1.0)}


def distribution(knob: Knob, low: float, high: float) -> BaseDistribution:
    """The Optuna distribution the knob's trials are drawn from."""
    if knob.integer:
        return IntDistribution(int(low), int(high))
    return FloatDistribution(low, high, log=knob.log)


def bounds(knob: Knob, alpha_bounds, num_routable: int) -> tuple[float, float]:
    if knob is ALPHA:
        lo, hi = (float(b) for b in alpha_bounds)
        return lo, hi
    if knob.integer:
        return 0, num_routable
    return LINEAR_BOUNDS[knob.name]


def start(knob: Knob, configured, target: float, ceiling: float, num_routable: int, low: float, high: float):
    """The first trial's value: the configured α for HeRo; the cost knob's expected value for a Table 1 method."""
    if knob is ALPHA:
        if isinstance(configured, (int, float)) and configured > 0:
            return float(configured)
        return 10 ** ((math.log10(low) + math.log10(high)) / 2)
    share = target / ceiling
    if knob.integer:
        return min(max(round(share * num_routable), 0), num_routable)
    return min(max(share, low), high)


def to_x(value: float, distribution: BaseDistribution) -> float:
    """The sampler's coordinate: log10 of a log-scale value, the value itself otherwise."""
    return math.log10(value) if getattr(distribution, "log", False) else float(value)


def from_x(x: float, distribution: BaseDistribution):
    if isinstance(distribution, IntDistribution):
        return int(round(x))
    return 10.0**x if distribution.log else float(x)
