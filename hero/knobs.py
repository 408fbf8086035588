"""The knob each method's cost is set by: α for HeRo, each Table 1 method's own cost knob.

One table, read by the methods (``method.<knob>=calibrated``), the calibration search
(``hero.calibration.search_space``), the record names of a study (``hero.dispatch.manifests``) and
``hero.calibration_file.resolved_config``, which a launcher calls for every job it plans. It is
plain data: importing it loads no model code, so a launcher stays a light process.

    method        knob           config key            type      record-name tag
    hero          alpha          alpha                 float     a
    random_skip   p              method.p              float     p
    static_drop   k              method.k              integer   k
    skipgpt_rt    target_ratio   method.target_ratio   float     r

Methods whose skip rate nothing moves (dense, LoRA, the drop control) have no knob.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    """name: the Optuna parameter and the record's ``knob_name``; key: the config key that sets it;
    tag: its label in a study record's name (``hero-full-a0.002-s42``).

    step: the calibration sampler's first step in x units; min_bracket: a bracket narrower than this
    (in x) that still misses the tolerance is a jump of the response, not a search to continue.
    """

    name: str
    key: str
    tag: str
    log: bool = False
    integer: bool = False
    step: float = 0.25
    min_bracket: float = 1e-3
    symbol: str = ""

    @property
    def label(self) -> str:
        return self.symbol or self.name

    def cast(self, value: float) -> float | int:
        """A value read from the calibration file as the config holds it (k is an integer)."""
        return int(round(value)) if self.integer else float(value)


ALPHA = Knob("alpha", "alpha", "a", log=True, step=1.0, symbol="α")
KNOBS = {
    "hero": ALPHA,
    "random_skip": Knob("p", "method.p", "p"),
    "static_drop": Knob("k", "method.k", "k", integer=True, step=1.0, min_bracket=1.5),
    "skipgpt_rt": Knob("target_ratio", "method.target_ratio", "r"),
}


@dataclass(frozen=True)
class KnobSetting:
    """A run's cost knob as the run uses it: its value and where it came from (``hero.spec.RunSpec.knob``).

    source: ``"given"`` (a number in the config) or ``"calibrated"`` (read from the calibration file);
    entry: the calibration file's entry it was read from (None when given).
    """

    knob: Knob
    value: float | int
    source: str
    entry: dict | None = None

    @property
    def calibrated(self) -> bool:
        return self.source == "calibrated"


def knob_of(method: str) -> Knob | None:
    """The knob of ``method``; None for methods whose skip rate nothing moves (dense, LoRA, drop control)."""
    return KNOBS.get(method)
