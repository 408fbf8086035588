"""What Table 1's baselines share as ``method=`` options: a cost knob and the record's ``baseline`` section.

Each baseline's cost is reported like HeRo's: the realized parameter skip rate (HERO_SPEC §7)
measured by the same ``SkipMeter`` on the same routing data; its knob is calibrated like α
(``method.<knob>=calibrated`` reads the calibration file):

    method        knob            trains                              definition
    skipgpt_rt    target_ratio    the per-layer routers (backbone     hero.baselines.skipgpt
                                  frozen), LM + sparsity loss
    static_drop   k               nothing                             hero.baselines.static_drop
    random_skip   p               the adapters (adapter=true), LM     hero.baselines.random_skip
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch
from omegaconf import OmegaConf

from hero.calibration_file import knob_value
from hero.evaluation.routing import routing_statistics
from hero.methods.base import Method, MethodConfigError, Prepared


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


class Baseline(Method):
    """A Table 1 baseline: ``knob`` (``hero.knobs``) is its cost knob under ``method.``, ``module`` its
    definition."""

    module: ClassVar[ModuleType]

    def knob_value(self, cfg) -> tuple[float | int, bool]:
        """(the cost knob's value, whether it came from the calibration file: ``method.<knob>=calibrated``)."""
        return knob_value(cfg, self.knob)

    def options(self, cfg, value) -> dict:
        """The method's options as the routed model reports them (``model.hero_config``), knob resolved."""
        options = {k: v for k, v in OmegaConf.to_container(cfg.method, resolve=True).items() if k != "name"}
        return {**options, self.knob.name: value}

    def record(self, value, calibrated: bool, **extra) -> dict:
        """The record's ``baseline`` section: definition, deviations from the source, knob and its settings."""
        return {
            "method": self.name,
            "source": self.module.SOURCE,
            "deviations": list(self.module.DEVIATIONS),
            "knob": {"name": self.knob.name, "value": value, "calibrated": calibrated},
            **extra,
        }

    def statistics(self, prepared: Prepared, batches, classes) -> tuple[dict, dict]:
        """Baselines have no forget factor ρ: only the skip section."""
        return routing_statistics(prepared.model, batches(), classes)[0], {}
