"""The knob each method is calibrated by: α for HeRo, each baseline's own cost knob.

Every knob moves the realized parameter skip rate monotonically (up to training noise), so
``MonotoneSampler`` searches each the same way, in x = log10 α for HeRo and x = the value for
the baselines (an integer for ``static_drop``'s k):

    method        knob           config key            range                         first trial
    hero          alpha          alpha                 calibration.alpha_bounds, log the config's α
    skipgpt_rt    target_ratio   method.target_ratio   [0, 0.99]                     target / ceiling
    static_drop   k              method.k              0 … routable layers, integer  round(L_R · target / ceiling)
    random_skip   p              method.p              [0, 1]                        target / ceiling

(ceiling: the parameter share of the routable FFNs, the highest reachable skip rate.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution


@dataclass(frozen=True)
class Knob:
    """name: the Optuna parameter and the record's ``knob_name``; key: the config key a trial sets.

    step: the sampler's first step in x units; min_bracket: a bracket narrower than this (in x)
    that still misses the tolerance is a jump of the response, not a search to continue.
    """

    name: str
    key: str
    log: bool = False
    integer: bool = False
    step: float = 0.25
    min_bracket: float = 1e-3
    symbol: str = ""

    @property
    def label(self) -> str:
        return self.symbol or self.name

    def distribution(self, low: float, high: float) -> BaseDistribution:
        if self.integer:
            return IntDistribution(int(low), int(high))
        return FloatDistribution(low, high, log=self.log)


ALPHA = Knob("alpha", "alpha", log=True, step=1.0, symbol="α")
KNOBS = {
    "hero": ALPHA,
    "skipgpt_rt": Knob("target_ratio", "method.target_ratio"),
    "static_drop": Knob("k", "method.k", integer=True, step=1.0, min_bracket=1.5),
    "random_skip": Knob("p", "method.p"),
}
LINEAR_BOUNDS = {"target_ratio": (0.0, 0.99), "p": (0.0, 1.0)}


def knob_of(method: str) -> Knob | None:
    """The knob of ``method``; None for methods whose skip rate nothing moves (dense, LoRA, drop control)."""
    return KNOBS.get(method)


def bounds(knob: Knob, alpha_bounds, num_routable: int) -> tuple[float, float]:
    if knob is ALPHA:
        lo, hi = (float(b) for b in alpha_bounds)
        return lo, hi
    if knob.integer:
        return 0, num_routable
    return LINEAR_BOUNDS[knob.name]


def start(knob: Knob, configured, target: float, ceiling: float, num_routable: int, low: float, high: float):
    """The first trial's value: the configured α for HeRo; the cost knob's expected value for a baseline."""
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
