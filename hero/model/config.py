"""Router options (HERO_SPEC §2–§4, ablation switches §8), validated at construction."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from hero.errors import ConfigError


class HeRoConfigError(ConfigError):
    """A router option has a value HeRo cannot run with."""


@dataclass(frozen=True)
class RouterConfig:
    """Every knob of the router and adapters.

    Defaults are the paper's main setting (HERO_SPEC §2–§4): 48-dim content code,
    16-dim path code, 64-dim memory, heads of width 256, T_hist = 0.9, τ_exec = 0.5,
    ρ initialised at 0.98. ``adapter_dim=None`` scales the paper's 896 at d = 4096
    to the backbone's width (d · 7/32).

    Ablation switches (HERO_SPEC §8):
      position_state  False drops r, q_rem, d, γ from the path encoder input.
      aux_state       False drops the whole path encoder: s = z^h.
      history_branch  False drops the history head and memory: g = σ(b).
      memory_read     False keeps history head and path state, reads c = 0.
    Controls beyond the paper (HERO_SPEC §9; implemented in ``hero.model.controls``):
      forget             "learned" (ρ = σ(η)) or "zero" (ρ = 0: recent state only).
      local_head_hidden  width of f_ψ (default head_hidden); "matched" (history branch off
                         only) widens it until the router has full HeRo's parameter count.
      history_control    "none"; "shuffled" accumulates the memory in a random permutation
                         of the routable depth order; "random" replaces the read c_j by noise
                         with the running mean and variance of real reads.
    Training variants beyond the paper (default: the paper's rule, and then absent from the config hash):
      layer_gate_bias    True adds a learned bias β_j per routable block to the gate logit,
                         g_j = σ(a_j + b_j + β_j), β_j = 0 at init: the router, shared across layers,
                         otherwise sees layer identity only through r_j and q_rem_j (eq 4).
      straight_through   True trains with both branches (``hero.model.block.both_branches``): the FFN and
                         the adapter run on every row and the threshold m = 1[g ≥ τ] passes a
                         straight-through gradient (∂m/∂g = 1), so a skipped token's gate learns what
                         its FFN was worth; the forward values are eq 3's. Inference stays single-branch.
    """

    position_state: bool = True
    aux_state: bool = True
    history_branch: bool = True
    memory_read: bool = True
    memory_dim: int = 64
    content_dim: int = 48
    path_dim: int = 16
    content_hidden: int = 256
    path_hidden: int = 32
    head_hidden: int = 256
    local_head_hidden: int | str | None = None
    T_hist: float = 0.9
    tau: float = 0.5
    adapter_dim: int | None = None
    rho_init: float = 0.98
    forget: str = "learned"
    history_control: str = "none"
    gate_bias_init: float = 3.0
    layer_gate_bias: bool = False
    straight_through: bool = False
    eps: float = 1e-6

    def __post_init__(self) -> None:
        positive_ints = ("memory_dim", "content_dim", "path_dim", "content_hidden", "path_hidden", "head_hidden")
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise HeRoConfigError(f"router.{name}={value!r}: must be a positive integer")
        for name in ("adapter_dim", "local_head_hidden"):
            value = getattr(self, name)
            if name == "local_head_hidden" and value == "matched":
                continue
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                allowed = ", 'matched'" if name == "local_head_hidden" else ""
                raise HeRoConfigError(f"router.{name}={value!r}: must be a positive integer{allowed} or null")
        if self.local_head_hidden == "matched" and self.history_branch:
            raise HeRoConfigError(
                "router.local_head_hidden='matched' matches full HeRo's parameter count with "
                "the history branch off; it needs router.history_branch=false"
            )
        for name in (
            "position_state",
            "aux_state",
            "history_branch",
            "memory_read",
            "layer_gate_bias",
            "straight_through",
        ):
            if not isinstance(getattr(self, name), bool):
                raise HeRoConfigError(f"router.{name}={getattr(self, name)!r}: must be true or false")
        if not 0.0 < self.tau < 1.0:
            raise HeRoConfigError(f"router.tau={self.tau!r}: must lie in the open interval (0, 1)")
        if not (isinstance(self.T_hist, (int, float)) and self.T_hist > 0 and math.isfinite(self.T_hist)):
            raise HeRoConfigError(f"router.T_hist={self.T_hist!r}: must be a positive finite number")
        if not 0.0 < self.rho_init < 1.0:
            raise HeRoConfigError(f"router.rho_init={self.rho_init!r}: must lie in the open interval (0, 1)")
        if self.forget not in ("learned", "zero"):
            raise HeRoConfigError(f"router.forget={self.forget!r}: allowed values are 'learned', 'zero'")
        if self.history_control not in ("none", "shuffled", "random"):
            raise HeRoConfigError(
                f"router.history_control={self.history_control!r}: allowed values are 'none', 'shuffled', 'random'"
            )
        if self.history_control != "none" and not (self.history_branch and self.memory_read):
            raise HeRoConfigError(
                f"router.history_control={self.history_control!r} changes the memory read; "
                "it needs router.history_branch=true and router.memory_read=true"
            )
        if not self.eps > 0:
            raise HeRoConfigError(f"router.eps={self.eps!r}: must be positive")

    @property
    def state_dim(self) -> int:
        """Width of s_j = [z^h ; z^a] (eq 9); z^h alone without the path encoder."""
        return self.content_dim + (self.path_dim if self.aux_state else 0)

    @property
    def carried_memory_dim(self) -> int:
        """d_m of the memory S, ζ the router carries across blocks (eq 12): 0 when it never reads it."""
        return self.memory_dim if self.history_branch and self.memory_read else 0

    @property
    def path_features(self) -> tuple[int, ...]:
        """Indices of x_path (eq 4) the path encoder reads: all six, or p_hist/m_hist only."""
        return (0, 1, 2, 3, 4, 5) if self.position_state else (4, 5)

    def resolved_adapter_dim(self, hidden_size: int) -> int:
        return self.adapter_dim or max(1, round(hidden_size * 7 / 32))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, options: dict) -> RouterConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise HeRoConfigError(f"unknown router option(s) {unknown}; allowed: {sorted(known)}")
        return cls(**options)
