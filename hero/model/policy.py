"""The plug between a routing policy (a Table 1 method's, ``hero.methods``) and HeRo's routed block.

A policy is attached like HeRo (``hero.attach``): every routable layer is wrapped in a
``RoutedDecoderLayer`` (the block of ``hero/model/block.py``: frozen attention, then one
branch per token, the rows split by index so a skipped token never enters the FFN), the
policy is registered as ``model.hero_router`` and every backbone parameter is frozen. The
policy plays the router's part through the same small interface the block calls:

    policy.step(j, h̄_flat, carry, ρ) -> (Decision, carry)   the gate of block j, per token
    policy.initial_carry(h̄_flat) / policy.unpack_carry(())   state across blocks (none here)
    policy.num_routable, policy.hidden_size, policy.config.tau

Gates of a policy are hard: 1.0 runs the FFN (g·FFN(u) = FFN(u)), 0.0 takes the skip
branch ((1 − g)·Adapter(u)); without an adapter (``adapter=False``) the skip branch is
``ZeroAdapter``: the token keeps its residual h̄, as when the FFN is removed. A policy with
``dense_straight_through = True`` (SkipGPT's router) runs the FFN on every row while the
gradient is needed, because its straight-through estimator differentiates the hard gate
through FFN(u) of skipped tokens too; without gradient (evaluation, generation) it is
single-branch like every other policy. The per-layer η of the block is frozen: policies
have no memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from hero.model.attach import decoder_layers, resolve_layers
from hero.model.block import RoutedDecoderLayer, RoutingContext
from hero.model.config import HeRoConfigError, RouterConfig
from hero.model.router import Decision


@dataclass(frozen=True)
class PolicyConfig:
    """What a saved or inspected policy-routed model reports as ``model.hero_config``."""

    method: str
    options: tuple
    adapter: bool
    adapter_dim: int
    tau: float = 0.5

    def to_dict(self) -> dict:
        return {"method": self.method, **dict(self.options), "adapter": self.adapter, "adapter_dim": self.adapter_dim}


class NoCarry:
    """The carry of a memoryless policy: nothing crosses from block j to j+1."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return ()


class ZeroAdapter(nn.Module):
    """The skip branch without an adapter: adds nothing, so a skipped token keeps h̄ (eq 3 with no adapter)."""

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(u)


def hard_decision(gate: torch.Tensor, logit: torch.Tensor | None = None, extras: dict | None = None) -> Decision:
    """A ``Decision`` for a policy: the gate, its logit (or NaN), and NaN / empty history fields.

    HeRo's history fields (a, p_hist, m_hist, x_path, c, ν; eq 4–15) do not exist for a policy;
    the trace shows them as NaN (per token) or with width 0, never as made-up numbers.
    """
    n = gate.shape[0]
    nan = torch.full((n,), float("nan"), device=gate.device)
    empty = gate.new_zeros((n, 0))
    return Decision(
        gate=gate,
        history_logit=nan,
        local_logit=logit if logit is not None else nan,
        p_hist=nan,
        m_hist=nan,
        x_path=empty,
        memory_read=empty,
        nu=nan,
        extras=extras or {},
    )


class Policy(nn.Module):
    """Base of the routing policies: the carry-less part of the router interface."""

    dense_straight_through = False

    def __init__(self, hidden_size: int, num_routable: int, config: PolicyConfig):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_routable = num_routable
        self.config = config

    def initial_carry(self, hbar: torch.Tensor) -> NoCarry:
        return NoCarry()

    def unpack_carry(self, tensors: tuple[torch.Tensor, ...]) -> NoCarry:
        return NoCarry()


class PolicyDecoderLayer(RoutedDecoderLayer):
    """``RoutedDecoderLayer`` for a routing policy; differs only for a dense straight-through policy in training."""

    def _branches(
        self, hbar: torch.Tensor, u: torch.Tensor, gate: torch.Tensor, executed: torch.Tensor
    ) -> torch.Tensor:
        if self.router.dense_straight_through and torch.is_grad_enabled() and self.training:
            # SkipGPT's ST estimator: out = g·FFN(u) for every token, g ∈ {0, 1} in value, so skipped
            # tokens add 0 but their gate still receives ∂L/∂g = ⟨∂L/∂h, FFN(u)⟩.
            return hbar + (gate.unsqueeze(-1) * self.base_layer.mlp(u)).to(hbar.dtype)
        return super()._branches(hbar, u, gate, executed)


def attach_policy(
    model: nn.Module,
    layers: str | Sequence[int],
    method: str,
    options: dict,
    factory,
    adapter: bool,
    adapter_dim: int | None = None,
) -> nn.Module:
    """Wrap the routable layers of ``model`` in place and register the policy as ``model.hero_router``.

    ``factory(hidden_size, num_routable, config)`` builds the policy. Trainable afterwards: the
    policy's own parameters and, with ``adapter=True``, the per-layer adapters (d_r = 7d/32 by
    default, as HeRo's).
    """
    if hasattr(model, "hero_router"):
        raise HeRoConfigError(f"{type(model).__name__} already has a router attached; call hero.detach first")
    module_list = decoder_layers(model)
    routable = resolve_layers(layers, len(module_list))
    hidden_size = model.config.hidden_size
    adapter_dim = adapter_dim or RouterConfig().resolved_adapter_dim(hidden_size)
    config = PolicyConfig(method, tuple(sorted(options.items())), adapter, adapter_dim)
    for param in model.parameters():
        param.requires_grad_(False)
    reference = next(model.parameters())
    policy = factory(hidden_size, len(routable), config).to(reference.device)
    context = RoutingContext()
    for j, index in enumerate(routable, start=1):
        block = PolicyDecoderLayer(
            module_list[index], policy, context, j, index, adapter_dim, rho_init=0.5, forget="learned"
        )
        block.eta.requires_grad_(False)
        if not adapter:
            block.adapter = ZeroAdapter()
        module_list[index] = block.to(reference.device)
    model.add_module("hero_router", policy)
    model.hero_config = config
    model.hero_context = context
    model.hero_layers = routable
    model.hero_param_counts = {
        "router": sum(p.numel() for p in policy.parameters() if p.requires_grad),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "counted": "router: the policy's parameters; trainable: policy + adapters",
    }
    return model
