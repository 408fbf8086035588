"""Routing statistics on evaluation data: where a variant spends its FFNs.

Realized parameter skip rate, routable-FFN execution rate (overall and per layer), the mean
gate per layer over all tokens and over executed tokens only, the distribution of per-token
skip rates (HERO_SPEC §7, ``hero.objectives.SkipMeter``, whose docstring says what each
statistic averages over), a histogram of the gate g per layer over all tokens
(``gate_histogram``), learned ρ, and the FFN execution rate per token type or class
(``by_token_type``). Padding is excluded everywhere.
"""

from __future__ import annotations

import torch
from torch import nn

from hero.model import last_records
from hero.objectives import HISTOGRAM_BINS, SkipMeter, learned_rho


class GateHistogram:
    """Per routable layer, counts of the gate g ∈ [0, 1] over all non-padding tokens, skipped ones included.

    For HeRo, whose FFN runs iff g ≥ τ, the bins at or above τ hold the executed tokens.
    """

    def __init__(self, bins: int = HISTOGRAM_BINS):
        self.bins = bins
        self.counts: dict[int, torch.Tensor] = {}

    def update(self, records, valid: torch.Tensor) -> None:
        valid = valid.bool().cpu()
        for record in records:
            gates = record.gate.detach().float().cpu()[valid]
            counts = torch.histc(gates, bins=self.bins, min=0.0, max=1.0).to(torch.int64)
            self.counts[record.layer] = self.counts.get(record.layer, torch.zeros_like(counts)) + counts

    def result(self) -> dict:
        """``{layer: {"edges", "counts"}}`` (string layer keys, as elsewhere in the record)."""
        edges = torch.linspace(0.0, 1.0, self.bins + 1).tolist()
        return {str(layer): {"edges": edges, "counts": c.tolist()} for layer, c in sorted(self.counts.items())}


def wandb_gate_histograms(skip: dict) -> dict:
    """W&B payload of the gate histograms: ``routing/gate/layer_<l>``."""
    import wandb

    return {
        f"routing/gate/layer_{layer}": wandb.Histogram(np_histogram=(h["counts"], h["edges"]))
        for layer, h in skip.get("gate_histogram", {}).items()
        if sum(h["counts"])
    }


@torch.no_grad()
def routing_statistics(model: nn.Module, batches, type_names: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    """(skip section of the record, learned ρ per layer) over ``batches``.

    ``batches`` yields ``(input_ids, attention_mask)`` or ``(input_ids, attention_mask, token_type)``;
    with token types (−1 = padding) the result has ``by_token_type`` {type: FFN execution rate}.
    """
    device = next(model.parameters()).device
    meter = SkipMeter(model)
    gates = GateHistogram()
    executed = torch.zeros(len(type_names or ()), dtype=torch.float64)
    counts = torch.zeros_like(executed)
    model.eval()
    for batch in batches:
        input_ids, attention_mask = batch[0].to(device), batch[1].to(device)
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        records = last_records(model)
        meter.update(records, attention_mask)
        gates.update(records, attention_mask)
        if type_names is not None:
            token_type = batch[2]
            ffn = torch.stack([r.ffn_executed.cpu() for r in records]).double().mean(0)
            for index in range(len(type_names)):
                mask = token_type == index
                executed[index] += ffn[mask].sum()
                counts[index] += mask.sum()
    skip = meter.result()
    skip["gate_histogram"] = gates.result()
    if type_names is not None:
        skip["by_token_type"] = {
            name: float(executed[i] / counts[i]) if counts[i] else None for i, name in enumerate(type_names)
        }
    return skip, learned_rho(model)
