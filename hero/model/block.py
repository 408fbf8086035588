"""A routable decoder layer: frozen attention, then FFN *or* adapter per token (eq 1–3).

The wrapper keeps the backbone's own decoder layer as ``base_layer`` (peft style)
and calls its ``input_layernorm``, ``self_attn``, ``post_attention_layernorm`` and
``mlp``; every keyword argument (masks, rotary embeddings, KV cache) goes to the
backbone's attention untouched.

The router state crosses layers through a ``RoutingContext`` shared by the blocks
of one model. Under gradient checkpointing the carry is an explicit input and
output of the checkpointed function, so the recomputation in backward sees the
same carry as the forward did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hero.model.adapter import Adapter
from hero.model.router import Carry, Router

if TYPE_CHECKING:
    from hero.model.intervention import Intervention

GateOverride = Callable[[int, torch.Tensor], torch.Tensor]


class ZeroBranch(nn.Module):
    """A skip branch that adds nothing: the skipped token keeps h̄ (the FFN sublayer becomes the identity)."""

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(u)


ZERO_BRANCH = ZeroBranch()


@dataclass
class BlockRecord:
    """What one routable block did in the last forward pass, shaped (B, T)."""

    layer: int
    gate: torch.Tensor
    ffn_executed: torch.Tensor
    trace: dict | None = None


@dataclass
class RoutingContext:
    """Per-model scratch space of one forward pass; not a module, never saved.

    carry      the router state left by the previous routable block
    records    one BlockRecord per routable block, in depth order (reset at block 1)
    trace      when True, blocks also keep every intermediate of HERO_SPEC eq 1–16
    override   optional policy (j, gate) -> bool mask that replaces ``gate ≥ τ``
               (benchmarks force an FFN-skip fraction with it; ``hero.model.trace.forced_routing``)
    override_gate
               the gate the branches are scaled by under ``override``: "router" (g as computed),
               "forced" (1 on rows forced to execute with g < τ, 0 on rows forced to skip with g ≥ τ),
               "one" (1 on every executed row)
    intervention
               an evaluation-only ``hero.model.intervention.Intervention`` (forced layers, unscaled
               FFNs, identity skip branch), or None
    """

    carry: Carry | None = None
    records: list[BlockRecord] = field(default_factory=list)
    trace: bool = False
    override: GateOverride | None = None
    override_gate: str = "router"
    intervention: Intervention | None = None


class RoutedDecoderLayer(nn.Module):
    """Routable block j of layer ``layer``: eq 1 (attention), eq 3 (one branch per token)."""

    def __init__(
        self,
        base_layer: nn.Module,
        router: Router,
        context: RoutingContext,
        j: int,
        layer: int,
        adapter_dim: int,
        rho_init: float,
        forget: str,
    ):
        super().__init__()
        self.base_layer = base_layer
        self.j = j
        self.layer = layer
        self.forget = forget
        hidden = router.hidden_size
        self.adapter = Adapter(hidden, adapter_dim)
        # ρ_j = σ(η_j), η_j initialised so that ρ ≈ rho_init (eq 12).
        self.eta = nn.Parameter(torch.logit(torch.tensor(float(rho_init))))
        # Shared objects, held outside the module tree so they are neither duplicated
        # in the state dict nor registered once per layer.
        self.__dict__["router"] = router
        self.__dict__["context"] = context

    @property
    def rho(self) -> torch.Tensor:
        if self.forget == "zero":
            return torch.zeros_like(self.eta)
        return torch.sigmoid(self.eta)

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:
        ctx = self.context
        if self.j == 1:
            ctx.records = []
            carry = None
        else:
            carry = ctx.carry
            if carry is None:
                raise RuntimeError(
                    f"routable block {self.j} (layer {self.layer}) ran before block 1 in this forward pass"
                )
        use_checkpoint = self.base_layer.gradient_checkpointing and self.training and torch.is_grad_enabled()
        if use_checkpoint:
            kwargs["use_cache"] = False
            kwargs.pop("cache", None)
            kwargs.pop("past_key_values", None)
            carry_in = carry.tensors() if carry is not None else ()
            out = checkpoint(self._block, hidden_states, kwargs, *carry_in, use_reentrant=False)
        else:
            out = self._block(hidden_states, kwargs, *(carry.tensors() if carry is not None else ()))
        h_out, decision, executed, new_carry, extras = out
        ctx.carry = None if self.j == self.router.num_routable else new_carry
        shape = hidden_states.shape[:-1]
        trace = None
        if ctx.trace:
            trace = {
                name: getattr(decision, name).reshape(*shape, *getattr(decision, name).shape[1:])
                for name in ("history_logit", "local_logit", "p_hist", "m_hist", "x_path", "memory_read", "nu")
            }
            trace.update({name: value.reshape(*shape, *value.shape[1:]) for name, value in extras.items()})
            trace["h_out"] = h_out
        ctx.records.append(BlockRecord(self.layer, decision.gate.reshape(shape), executed.reshape(shape), trace))
        return h_out

    def _block(self, hidden_states: torch.Tensor, kwargs: dict, *carry_tensors: torch.Tensor):
        base = self.base_layer
        residual = hidden_states
        attn_out, _ = base.self_attn(hidden_states=base.input_layernorm(hidden_states), **kwargs)
        hbar = residual + attn_out
        shape = hbar.shape
        hbar_flat = hbar.reshape(-1, shape[-1])
        carry = self.router.unpack_carry(carry_tensors) if carry_tensors else self.router.initial_carry(hbar_flat)
        if carry_tensors and not torch.is_grad_enabled():
            # Inference: the previous block's carry is dead after this step, so the router may
            # update its memory in place (Router.write) instead of allocating a new (N, d_m, d_m).
            carry.donated = True
        decision, new_carry = self.router.step(self.j, hbar_flat, carry, self.rho)
        executed = self._executed(decision.gate)
        u = base.post_attention_layernorm(hbar_flat)
        h_out = self._branches(hbar_flat, u, self._applied_gate(decision.gate, executed), executed).reshape(shape)
        extras = {"h_bar": hbar_flat, "u": u, **decision.extras} if self.context.trace else {}
        return h_out, decision, executed, new_carry, extras

    def _branches(
        self, hbar: torch.Tensor, u: torch.Tensor, gate: torch.Tensor, executed: torch.Tensor
    ) -> torch.Tensor:
        """Eq 3 on the flattened rows (``single_branch``); a routing policy's block may run another rule in training.

        With ``router.straight_through`` HeRo trains through ``both_branches`` (same values, gradient for skipped
        rows through their FFN); evaluation and generation stay single-branch.
        """
        config = getattr(self.router, "config", None)
        if getattr(config, "straight_through", False) and self.training and torch.is_grad_enabled():
            return both_branches(hbar, u, gate, executed, self.base_layer.mlp, self._skip_branch())
        return single_branch(hbar, u, gate, executed, self.base_layer.mlp, self._skip_branch())

    def _skip_branch(self) -> nn.Module:
        """The adapter, or a zero map when an intervention makes the skip branch the identity on h̄."""
        intervention = self.context.intervention
        if intervention is not None and intervention.identity_adapter:
            return ZERO_BRANCH
        return self.adapter

    def _executed(self, gate: torch.Tensor) -> torch.Tensor:
        """The rows whose FFN runs: g ≥ τ, or the override's mask; every row in a force-executed layer."""
        ctx = self.context
        if ctx.override is not None:
            executed = ctx.override(self.j, gate).to(torch.bool)
        else:
            executed = gate >= self.router.config.tau
        if ctx.intervention is not None and self.layer in ctx.intervention.force_execute:
            executed = torch.ones_like(executed)
        return executed

    def _applied_gate(self, gate: torch.Tensor, executed: torch.Tensor) -> torch.Tensor:
        """The g that eq 3 scales the branches by: the router's gate unless an override or intervention sets it.

        The record (``BlockRecord.gate``, the routing statistics) keeps the router's own gate.
        """
        ctx = self.context
        intervention = ctx.intervention
        if intervention is not None and (intervention.unscaled or self.layer in intervention.force_execute):
            return torch.where(executed, torch.ones_like(gate), gate)
        if ctx.override is not None and ctx.override_gate != "router":
            one = torch.ones_like(gate)
            if ctx.override_gate == "one":
                return torch.where(executed, one, gate)
            natural = gate >= self.router.config.tau
            gate = torch.where(executed & ~natural, one, gate)
            return torch.where(~executed & natural, torch.zeros_like(gate), gate)
        return gate


def single_branch(
    hbar: torch.Tensor, u: torch.Tensor, gate: torch.Tensor, executed: torch.Tensor, ffn: nn.Module, adapter: nn.Module
) -> torch.Tensor:
    """h = h̄ + g·FFN(u) on rows with ``executed``, h̄ + (1 − g)·Adapter(u) on the others (eq 3).

    Only the selected rows enter each branch (index gather / scatter), so a skipped token costs
    the adapter, not the FFN. The threshold carries no gradient; the scaling by g or 1 − g
    carries it to the router. Any routing method that sends each row through exactly one of two
    row-wise modules can call this with its own ``executed`` mask.

    hbar, u: (N, d) flattened tokens; gate: (N,) float; executed: (N,) bool. Returns (N, d) in
    hbar's dtype. Without autograd ``single_branch_inference`` computes the same values.
    """
    if not torch.is_grad_enabled():
        return single_branch_inference(hbar, u, gate, executed, ffn, adapter)
    g = gate.unsqueeze(-1)
    n_ffn = int(executed.sum())
    if n_ffn == u.shape[0]:
        return hbar + (g * ffn(u)).to(hbar.dtype)
    if n_ffn == 0:
        return hbar + ((1.0 - g) * adapter(u)).to(hbar.dtype)
    ffn_rows = executed.nonzero().squeeze(-1)
    adapter_rows = (~executed).nonzero().squeeze(-1)
    ffn_out = g[ffn_rows] * ffn(u.index_select(0, ffn_rows))
    adapter_out = (1.0 - g[adapter_rows]) * adapter(u.index_select(0, adapter_rows))
    update = u.new_zeros(u.shape)
    update = update.index_copy(0, ffn_rows, ffn_out.to(u.dtype))
    update = update.index_copy(0, adapter_rows, adapter_out.to(u.dtype))
    return hbar + update.to(hbar.dtype)


def both_branches(
    hbar: torch.Tensor, u: torch.Tensor, gate: torch.Tensor, executed: torch.Tensor, ffn: nn.Module, adapter: nn.Module
) -> torch.Tensor:
    """Eq 3 in value, both branches on every row, a straight-through threshold (training variant, beyond the paper).

        m_st = m + g − sg(g),  m = 1[executed] ∈ {0, 1}
        h    = h̄ + m_st · g · FFN(u) + (1 − m_st) · (1 − g) · Adapter(u)

    m_st equals m in value, so h is ``single_branch``'s; its gradient ∂m_st/∂g = 1 gives every row's gate
    ∂L/∂g = ⟨∂L/∂h, g·FFN(u) − (1 − g)·Adapter(u)⟩ + m·⟨∂L/∂h, FFN(u)⟩ − (1 − m)·⟨∂L/∂h, Adapter(u)⟩: a skipped
    token learns what its FFN was worth (with the paper's rule it sees only −Adapter(u), zero at init). Costs
    the FFN on every row in training. hbar, u: (N, d); gate: (N,); executed: (N,) bool.
    """
    g = gate.unsqueeze(-1)
    m = executed.to(g.dtype).unsqueeze(-1)
    m_st = m + (g - g.detach())
    update = m_st * g * ffn(u) + (1.0 - m_st) * (1.0 - g) * adapter(u)
    return hbar + update.to(hbar.dtype)


# BLAS (MKL, both its AVX-512 and AVX2 kernels) multiplies fewer than 4 rows as one matrix-vector
# product per row, reading the weights once per row: 3 rows of the d = 1024 FFN cost more than 16.
GEMM_MIN_ROWS = 4


def single_branch_inference(
    hbar: torch.Tensor, u: torch.Tensor, gate: torch.Tensor, executed: torch.Tensor, ffn: nn.Module, adapter: nn.Module
) -> torch.Tensor:
    """``single_branch`` without autograd: the same values in one gather and one scatter.

    One stable sort puts the FFN rows first and the adapter rows after them, each in ascending
    order; u and g are gathered once in that order, each branch reads its contiguous slice, and
    ``index_add`` scatters both branches' rows onto h̄ in one pass (one addition per element, as
    h̄ + update). The gate scaling is applied in place to each branch's fresh output (computed in
    fp32 and rounded to the output dtype, as ``(g · x).to(dtype)`` does). A branch that no row
    takes is not called. When 2 or 3 of at least 4 rows take the FFN, the FFN gather is padded
    with adapter rows up to ``GEMM_MIN_ROWS`` (their FFN outputs are dropped), so the product
    runs the blocked kernel instead of one weight pass per row.
    """
    n = u.shape[0]
    g = gate.unsqueeze(-1)
    n_ffn = int(executed.sum())
    if n_ffn == n:
        return hbar + ffn(u).mul_(g).to(hbar.dtype)
    if n_ffn == 0:
        return hbar + adapter(u).mul_(1.0 - g).to(hbar.dtype)
    _, order = torch.sort(executed, descending=True, stable=True)
    rows = u.index_select(0, order)
    g = g.index_select(0, order)
    gemm_rows = GEMM_MIN_ROWS if 1 < n_ffn < GEMM_MIN_ROWS <= n else n_ffn
    ffn_out = ffn(rows[:gemm_rows])[:n_ffn].mul_(g[:n_ffn])
    adapter_out = adapter(rows[n_ffn:]).mul_(1.0 - g[n_ffn:])
    update = torch.cat([ffn_out.to(hbar.dtype), adapter_out.to(hbar.dtype)])
    return hbar.index_add(0, order, update)
