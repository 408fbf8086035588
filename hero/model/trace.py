"""``routing_trace``: the public window into every routing decision of one forward pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from hero.model.attach import routed_blocks
from hero.model.block import BlockRecord, GateOverride
from hero.model.config import HeRoConfigError

TRACE_FIELDS = (
    "h_bar",
    "x_path",
    "history_logit",
    "local_logit",
    "gate",
    "p_hist",
    "m_hist",
    "memory_read",
    "nu",
    "ffn_executed",
    "h_out",
    "u",
    "rho",
    "layer",
)


@torch.no_grad()
def routing_trace(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[dict]:
    """Run one forward pass and return one record per routable block, in depth order.

    Each record holds tensors shaped (B, T, ...): ``h_bar`` (h̄_j, eq 1), ``x_path``
    (B, T, 6) (eq 4), ``history_logit`` a_j and ``local_logit`` b_j (eq 14, 16),
    ``gate`` g_j, ``p_hist``, ``m_hist`` (eq 14–15), ``memory_read`` c_j (eq 11),
    ``nu`` ν_j (eq 13), ``ffn_executed`` (bool, g ≥ τ), ``u`` (LN_ffn(h̄)), ``h_out``
    (h_j, eq 3); plus ``rho`` (ρ_j, scalar) and the 0-based backbone ``layer``. Router variants
    add their own per-token fields (``Decision.extras``), e.g. ``write_order`` (B, T, L) of the
    shuffled-history control (hero.model.controls).
    """
    blocks = routed_blocks(model)
    ctx = blocks[0].context
    ctx.trace = True
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        records = ctx.records
    finally:
        ctx.trace = False
    return [_as_dict(record, block) for record, block in zip(records, blocks)]


def _as_dict(record: BlockRecord, block) -> dict:
    out = dict(record.trace)
    out.update(gate=record.gate, ffn_executed=record.ffn_executed, layer=record.layer, rho=block.rho.detach())
    return out


def last_records(model: nn.Module) -> list[BlockRecord]:
    """Gates and executed branches of every routable block in the model's last forward pass."""
    return routed_blocks(model)[0].context.records


OVERRIDE_GATES = ("router", "forced", "one")


@contextmanager
def forced_routing(model: nn.Module, policy: GateOverride, gate: str = "router") -> Iterator[None]:
    """Replace ``gate ≥ τ`` by ``policy(j, gate) -> bool mask`` inside the block (benchmarks, controls).

    The policy chooses which rows run the FFN; ``gate`` chooses the g that eq 3 then scales the two
    branches by (h̄ + g·FFN(u) on executed rows, h̄ + (1 − g)·Adapter(u) on skipped ones):

      "router"  g as the router computed it, on every row (the default, and what timing benchmarks
                want). A row forced to execute with g < τ is scaled by less than τ = 0.5, and a row
                forced to skip with g ≥ τ gets less than half the adapter: a quality diagnostic
                built on this mixes the routing change with a scaling change.
      "forced"  rows where the policy overrides the router take the hard gate: g = 1 on rows forced
                to execute (g < τ), g = 0 on rows forced to skip (g ≥ τ: the full adapter). Rows where
                the policy agrees with the router keep their g.
      "one"     g = 1 on every executed row (the FFN output unscaled, as in the dense model); skipped
                rows keep (1 − g)·Adapter(u).

    The routing records (``last_records``, ``routing_trace``) keep the router's own gate either way.
    """
    if gate not in OVERRIDE_GATES:
        raise HeRoConfigError(f"forced_routing gate={gate!r}: allowed values are {', '.join(OVERRIDE_GATES)}")
    ctx = routed_blocks(model)[0].context
    previous = ctx.override, ctx.override_gate
    ctx.override, ctx.override_gate = policy, gate
    try:
        yield
    finally:
        ctx.override, ctx.override_gate = previous
