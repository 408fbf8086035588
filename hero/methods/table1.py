"""What Table 1's methods share as ``method=`` options: a cost knob and the record's ``method_card``.

Each Table 1 method's cost is reported like HeRo's: the realized parameter skip rate (HERO_SPEC §7)
measured by the same ``SkipMeter`` on the same routing data; its knob is calibrated like α
(``method.<knob>=calibrated`` reads the calibration file, once, in ``hero.spec``):

    method        knob            trains                                   definition
    skipgpt_rt    target_ratio    the per-layer routers (backbone frozen),  hero.methods.skipgpt_rt
                                  LM + sparsity loss
    static_drop   k               nothing                                  hero.methods.static_drop
    random_skip   p               the adapters (adapter=true), LM          hero.methods.random_skip
"""

from __future__ import annotations

from typing import ClassVar

import torch
from omegaconf import OmegaConf

from hero.evaluation.routing import routing_statistics
from hero.methods.base import Method, MethodConfigError, Prepared
from hero.results import DEFAULTED_KEYS


def check_number(
    method: str, key: str, value, low: float, high: float, closed_high: bool = False, knob: bool = False
) -> None:
    """``value`` is a number in [low, high) (or [low, high]); one line naming it otherwise."""
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and low <= value
        and (value <= high if closed_high else value < high)
    )
    if not ok:
        bracket = "]" if closed_high else ")"
        raise MethodConfigError(
            f"method.{key}={value!r}: {method} needs a number in [{low:g}, {high:g}{bracket}"
            + (" or 'calibrated'" if knob else "")
        )


def no_regularizer(gates, valid: torch.Tensor) -> torch.Tensor:
    """Random and static routing have nothing to regularise: the loss is L_LM alone."""
    return torch.zeros((), device=valid.device)


class Table1Method(Method):
    """A Table 1 method: ``knob`` (``hero.knobs``) is its cost knob under ``method.``; the module that defines it
    states its ``SOURCE`` and ``DEVIATIONS``."""

    routes = True
    source: ClassVar[str]
    deviations: ClassVar[tuple[str, ...]]
    added_options: ClassVar[tuple[str, ...]] = ()  # options that came after the first records (DEFAULTED_KEYS)

    def options(self, cfg) -> dict:
        """``cfg.method`` without its name (the knob as configured: a number or ``calibrated``), after ``check``.

        A config written before one of ``added_options`` existed (a committed record's, rescored) lacks it; it takes
        the value that reproduces the earlier behaviour (``hero.results.DEFAULTED_KEYS``), which the hash leaves out.
        """
        earlier = {name: DEFAULTED_KEYS[f"method.{name}"] for name in self.added_options}
        given = {k: v for k, v in OmegaConf.to_container(cfg.method, resolve=True).items() if k != "name"}
        options = {**earlier, **given}
        self.check(OmegaConf.create(options))
        return options

    def check(self, method) -> None:
        """Every option of the ``method`` config group; raises ``MethodConfigError`` naming the bad value."""

    def policy_options(self, spec) -> dict:
        """The method's options as the routed model reports them (``model.hero_config``), knob resolved."""
        return {**spec.options, self.knob.name: spec.knob.value}

    def card(self, spec, **extra) -> dict:
        """The record's ``method_card``: definition, deviations from the source, knob and its settings."""
        return {
            "method": self.name,
            "source": self.source,
            "deviations": list(self.deviations),
            "knob": {"name": self.knob.name, "value": spec.knob.value, "calibrated": spec.knob.calibrated},
            **extra,
        }

    def statistics(self, prepared: Prepared, batches, classes) -> tuple[dict, dict]:
        """Table 1's methods have no forget factor ρ: only the skip section."""
        return routing_statistics(prepared.model, batches(), classes)[0], {}
