"""Evaluation-only interventions on a trained routed model: what a routing decision was worth, by measurement.

An ``Intervention`` changes how the routed blocks of a *trained* model compute eq 3, never how they
were trained; the pipeline applies it after training, before scoring (``conf/train.yaml``'s
``intervention:`` group, also accepted by ``python -m hero.rescore RUN_DIR intervention.unscaled=true``).
Every option is off by default, and at its default it stays out of the config hash
(``hero.results.DEFAULTED_KEYS``). Per routable block j (backbone layer ℓ), token t, with the router's
gate g and h̄, u as in eq 1–2:

    force_execute=[ℓ, ...]  those layers run the FFN on every token, unscaled: h = h̄ + FFN(u)
                            (g = 1); the other layers route as trained
    unscaled=true           every executed FFN runs with g = 1: h = h̄ + FFN(u), so only the
                            allocation (which FFNs run) differs from the dense model; skipped
                            tokens keep h̄ + (1 − g)·Adapter(u)
    identity_adapter=true   the skip branch adds nothing: a skipped token keeps h = h̄ (the FFN
                            sublayer becomes the identity on the residual stream, i.e. Adapter ≡ 0
                            in eq 3's (1 − g)·Adapter(u)); executed tokens are unchanged

They compose (e.g. ``unscaled`` with ``identity_adapter`` is "FFN unscaled or nothing"). The routing
statistics of the record count a forced layer's FFN as executed, and keep the router's own g in the
gate statistics (``per_layer_mean_gate``, ``gate_histogram``): those describe the router, not the
intervention. The record's ``variant`` gets the suffix ``Intervention.suffix`` (``full@unscaled``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn

from hero.model.config import HeRoConfigError

OPTIONS = ("force_execute", "unscaled", "identity_adapter")


@dataclass(frozen=True)
class Intervention:
    """Which evaluation-only changes to eq 3 apply (module docstring); all off: the model as trained."""

    force_execute: tuple[int, ...] = ()
    unscaled: bool = False
    identity_adapter: bool = False

    def __post_init__(self) -> None:
        for name in ("unscaled", "identity_adapter"):
            if not isinstance(getattr(self, name), bool):
                raise HeRoConfigError(f"intervention.{name}={getattr(self, name)!r}: must be true or false")
        layers = self.force_execute
        if not isinstance(layers, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers
        ):
            raise HeRoConfigError(
                f"intervention.force_execute={list(layers) if isinstance(layers, tuple) else layers!r}: "
                "must be a list of 0-based backbone layer indices, e.g. [29]"
            )

    @classmethod
    def from_config(cls, options: Mapping | None) -> Intervention:
        """From the config's ``intervention`` group (None or absent keys: off); unknown keys are refused."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise HeRoConfigError(f"unknown intervention option(s) {unknown}; allowed: {list(OPTIONS)}")
        layers = options.get("force_execute") or ()
        if isinstance(layers, Sequence) and not isinstance(layers, str):
            layers = tuple(layers)
        return cls(
            force_execute=layers,
            unscaled=options.get("unscaled", False),
            identity_adapter=options.get("identity_adapter", False),
        )

    @property
    def active(self) -> bool:
        return bool(self.force_execute) or self.unscaled or self.identity_adapter

    @property
    def suffix(self) -> str:
        """``@force29-unscaled-identity_adapter``-style tag for the record's variant; "" when inactive."""
        parts = [f"force{'+'.join(str(i) for i in self.force_execute)}"] if self.force_execute else []
        parts += [name for name in ("unscaled", "identity_adapter") if getattr(self, name)]
        return "@" + "-".join(parts) if parts else ""

    def check_layers(self, routable: Sequence[int]) -> None:
        """A forced layer must be routable (only a routed block has an FFN to force)."""
        outside = [i for i in self.force_execute if i not in routable]
        if outside:
            raise HeRoConfigError(
                f"intervention.force_execute={list(self.force_execute)}: layer(s) {outside} are not routable; "
                f"the routable layers are {list(routable)}"
            )


def _routing_context(model: nn.Module):
    """The ``RoutingContext`` the routed blocks of ``model`` share, which holds the intervention.

    Read from ``model.hero_context`` (set by ``hero.attach`` and ``hero.model.policy.attach_policy``) rather than
    from the blocks, so this module needs nothing from ``attach`` or ``block``: the block reads
    ``Intervention``, and an import back would close a circle.
    """
    if not hasattr(model, "hero_router"):
        raise HeRoConfigError(f"{type(model).__name__} has no HeRo attached; call hero.attach first")
    return model.hero_context


def apply_intervention(model: nn.Module, intervention: Intervention | None) -> None:
    """Set (or with None / an inactive one, clear) the intervention of every routed block of ``model``."""
    context = _routing_context(model)
    if intervention is not None and intervention.active:
        intervention.check_layers(model.hero_layers)
        context.intervention = intervention
    else:
        context.intervention = None


@contextmanager
def intervened(model: nn.Module, intervention: Intervention) -> Iterator[None]:
    """``apply_intervention`` for the duration of a ``with`` block; the previous state comes back after."""
    context = _routing_context(model)
    previous = context.intervention
    apply_intervention(model, intervention)
    try:
        yield
    finally:
        context.intervention = previous
