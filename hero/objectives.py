"""The skip objective (eq 17–18) and the realized parameter skip rate (HERO_SPEC §7)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hero import statistics
from hero.model.attach import is_hero_parameter, routed_blocks
from hero.model.block import BlockRecord

HISTOGRAM_BINS = 20
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def prediction_positions(attention_mask: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
    """Bool (B, T): position t predicts token t+1, and that target is real (not padding, not ignored).

    These are the B(T−1) "valid prediction positions" over which eq 18 averages.
    """
    target_ok = attention_mask[:, 1:].bool()
    if labels is not None:
        target_ok = target_ok & (labels[:, 1:] != -100)
    valid = torch.zeros_like(attention_mask, dtype=torch.bool)
    valid[:, :-1] = target_ok & attention_mask[:, :-1].bool()
    return valid


def skip_loss(gates: Sequence[torch.Tensor], valid: torch.Tensor) -> torch.Tensor:
    """L_skip = 1/|valid| Σ_{b,t valid} (Σ_j g_{b,j,t})² (eq 18).

    Sum over routable depth FIRST, then square, then average over valid
    prediction positions: the square couples the decisions of all layers.
    """
    depth_sum = torch.stack([g.float() for g in gates], dim=0).sum(dim=0)
    weights = valid.to(depth_sum.dtype)
    return (depth_sum.pow(2) * weights).sum() / weights.sum().clamp_min(1.0)


def total_param_count(model: nn.Module) -> int:
    """Parameters of the backbone alone (router, adapters and η excluded)."""
    hero = {id(p) for name, p in model.named_parameters() if is_hero_parameter(name)}
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in hero or id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def ffn_param_counts(model: nn.Module) -> dict[int, int]:
    """Backbone layer index → parameter count of that layer's frozen FFN, for routable layers."""
    return {block.layer: sum(p.numel() for p in block.base_layer.mlp.parameters()) for block in routed_blocks(model)}


def per_token_param_skip(records: Sequence[BlockRecord], ffn_params: dict[int, int], total_params: int) -> torch.Tensor:
    """(B, T): per token, parameters of the FFNs it bypassed / total backbone parameters."""
    skipped = sum((~r.ffn_executed).to(torch.float64) * ffn_params[r.layer] for r in records)
    return skipped / total_params


class SkipMeter:
    """Accumulates realized routing statistics over batches, excluding padding.

    The sums are accumulated here; the rates and means are ``hero.statistics``'s (shared with ``analysis``).

    Each statistic names what it averages over, because two of them are easily read as the other:

    ``param_rate``             mean over non-padding tokens of the per-token parameter skip rate (HERO_SPEC §7),
                               never the target: a share of the backbone's *parameters*
    ``ffn_execution_rate``     share of routable (token, layer) FFN calls that ran: a share of *FFN executions*
    ``per_layer_ffn_rate``     per routable layer, share of non-padding tokens whose FFN ran
    ``per_layer_mean_gate``    per routable layer, mean of g over ALL non-padding tokens, skipped ones included
    ``per_layer_executed_gate`` per routable layer, mean of g over the tokens whose FFN ran (the scale eq 3
                               applies to an executed FFN's output); null for a layer that executed none
    """

    def __init__(self, model: nn.Module):
        self.ffn_params = ffn_param_counts(model)
        self.total_params = total_param_count(model)
        self.layers = sorted(self.ffn_params)
        self.reset()

    def reset(self) -> None:
        """Forget the accumulated batches; the parameter counts of the model are kept."""
        self.tokens = 0
        self.ffn_counts = torch.zeros(len(self.layers), dtype=torch.float64)
        self.gate_sums = torch.zeros(len(self.layers), dtype=torch.float64)
        self.executed_gate_sums = torch.zeros(len(self.layers), dtype=torch.float64)
        self.per_token: list[torch.Tensor] = []

    def update(self, records: Sequence[BlockRecord], valid: torch.Tensor) -> None:
        valid = valid.bool().cpu()
        rates = per_token_param_skip(records, self.ffn_params, self.total_params).detach().cpu()
        self.per_token.append(rates[valid])
        self.tokens += int(valid.sum())
        for i, record in enumerate(records):
            executed = record.ffn_executed.detach().cpu()[valid]
            gate = record.gate.detach().float().cpu()[valid]
            self.ffn_counts[i] += executed.sum()
            self.gate_sums[i] += gate.sum()
            self.executed_gate_sums[i] += gate[executed].sum()

    @property
    def param_rate(self) -> float:
        return float(torch.cat(self.per_token).mean()) if self.tokens else float("nan")

    def result(self) -> dict:
        """The ``skip`` section of the run record."""
        per_token = torch.cat(self.per_token) if self.per_token else torch.zeros(0, dtype=torch.float64)
        ceiling = sum(self.ffn_params.values()) / self.total_params
        counts = (
            torch.histc(per_token.float(), bins=HISTOGRAM_BINS, min=0.0, max=ceiling)
            if self.tokens
            else torch.zeros(HISTOGRAM_BINS)
        )
        edges = torch.linspace(0.0, ceiling, HISTOGRAM_BINS + 1)
        quantiles = torch.quantile(per_token, torch.tensor(QUANTILES, dtype=torch.float64)) if self.tokens else None
        layers = [str(layer) for layer in self.layers]
        executed = dict(zip(layers, self.ffn_counts.tolist()))
        return {
            "param_rate": self.param_rate,
            "ffn_execution_rate": statistics.ffn_execution_rate(list(executed.values()), self.tokens),
            "max_param_rate": ceiling,
            "tokens": self.tokens,
            "per_layer_ffn_rate": statistics.layer_ffn_rates(executed, self.tokens),
            "per_layer_mean_gate": statistics.layer_mean_gates(dict(zip(layers, self.gate_sums.tolist())), self.tokens),
            "per_layer_executed_gate": statistics.layer_executed_gates(
                dict(zip(layers, self.executed_gate_sums.tolist())), executed
            ),
            "per_token": {
                "quantiles": {str(q): float(v) for q, v in zip(QUANTILES, quantiles)} if quantiles is not None else {},
                "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
            },
        }


def learned_rho(model: nn.Module) -> dict[str, float]:
    """Backbone layer index → learned forget factor ρ_j = σ(η_j)."""
    return {str(block.layer): float(block.rho.detach()) for block in routed_blocks(model)}
