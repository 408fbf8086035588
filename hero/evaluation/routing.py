"""Routing statistics on evaluation data: where a variant spends its FFNs.

Realized parameter skip rate, per-layer FFN execution rate, the distribution of
per-token skip rates, learned ρ, and (on the testbed) the FFN execution rate per
token type — plain text, fact answers, other fact tokens, arithmetic answers, operands.
"""
from __future__ import annotations

import torch
from torch import nn

from hero.model import last_records
from hero.objectives import SkipMeter, learned_rho


@torch.no_grad()
def routing_statistics(model: nn.Module, batches, type_names: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    """(skip section of the record, learned ρ per layer) over ``batches``.

    ``batches`` yields ``(input_ids, attention_mask)`` or ``(input_ids, attention_mask, token_type)``;
    with token types (−1 = padding) the result has ``by_token_type`` {type: FFN execution rate}.
    """
    device = next(model.parameters()).device
    meter = SkipMeter(model)
    executed = torch.zeros(len(type_names or ()), dtype=torch.float64)
    counts = torch.zeros_like(executed)
    model.eval()
    for batch in batches:
        input_ids, attention_mask = batch[0].to(device), batch[1].to(device)
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        records = last_records(model)
        meter.update(records, attention_mask)
        if type_names is not None:
            token_type = batch[2]
            ffn = torch.stack([r.ffn_executed.cpu() for r in records]).double().mean(0)
            for index in range(len(type_names)):
                mask = token_type == index
                executed[index] += ffn[mask].sum()
                counts[index] += mask.sum()
    skip = meter.result()
    if type_names is not None:
        skip["by_token_type"] = {name: float(executed[i] / counts[i]) if counts[i] else None
                                 for i, name in enumerate(type_names)}
    return skip, learned_rho(model)
