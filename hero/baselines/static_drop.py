"""ShortGPT-style static FFN removal ranked by Block Influence.

ShortGPT (Men et al., 2024, "ShortGPT: Layers in Large Language Models are More Redundant Than
You Expect") scores each layer by its Block Influence BI = 1 − E_t[cos(x_t, y_t)], the input
and output of the layer, and removes the least influential layers for every token. Here the
unit is the FFN of each routable layer, so x is the residual before the FFN and y after it:

    BI_l = 1 − mean_t cos(h̄_{l,t}, h̄_{l,t} + FFN_l(LN_ffn(h̄_{l,t})))

averaged over the real (non-padding) tokens of held-out calibration text (the validation split
of the training data), measured on the dense backbone. The k routable FFNs with the lowest BI
(ties: the shallower layer first) are removed — skipped by every token, no adapter, nothing
trained. k is the calibration knob; the record stores the BI values, the ranking and the
removed layers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from hero.baselines.attach import Policy, PolicyConfig, hard_decision
from hero.model.attach import decoder_layers

SOURCE = (
    "Men et al., 2024, ShortGPT: Layers in Large Language Models are More Redundant Than You Expect "
    "(Block Influence, static removal)"
)
DEVIATIONS = (
    "the removed unit is a routable layer's FFN, not the whole layer: attention always runs, as in HeRo",
    "Block Influence compares the residual before and after the FFN (not the layer's input and output)",
    "calibration text: the first method.calibration_samples conversations of the training data's validation split",
)


@torch.no_grad()
def block_influence(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], layers: Sequence[int]
) -> dict[int, float]:
    """BI_l for each of ``layers`` on the dense ``model`` over ``(input_ids, attention_mask)`` batches."""
    stack = decoder_layers(model)
    captured: dict[int, dict[str, torch.Tensor]] = {i: {} for i in layers}
    hooks = []
    for i in layers:
        hooks.append(
            stack[i].post_attention_layernorm.register_forward_pre_hook(
                lambda _m, args, i=i: captured[i].__setitem__("before", args[0])
            )
        )
        hooks.append(
            stack[i].mlp.register_forward_hook(lambda _m, _args, out, i=i: captured[i].__setitem__("ffn", out))
        )
    sums = {i: 0.0 for i in layers}
    tokens = 0
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for input_ids, attention_mask in batches:
            mask = attention_mask.to(device).bool()
            model(input_ids=input_ids.to(device), attention_mask=mask.long(), use_cache=False)
            for i in layers:
                before = captured[i]["before"].float()
                after = before + captured[i]["ffn"].float()
                cos = F.cosine_similarity(before, after, dim=-1)
                sums[i] += float(cos[mask].sum())
            tokens += int(mask.sum())
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    if tokens == 0:
        raise ValueError("block influence needs at least one real token of calibration text")
    return {i: 1.0 - sums[i] / tokens for i in layers}


def ranking(influence: dict[int, float]) -> list[int]:
    """Layers from least to most influential (lowest BI first; ties: the shallower layer first)."""
    return sorted(influence, key=lambda layer: (influence[layer], layer))


class StaticPolicy(Policy):
    """Block j's FFN is skipped by every token when its layer was removed, run by every token otherwise."""

    def __init__(self, hidden_size: int, num_routable: int, config: PolicyConfig, removed_blocks: Sequence[int]):
        super().__init__(hidden_size, num_routable, config)
        self.removed_blocks = frozenset(removed_blocks)

    def step(self, j: int, hbar: torch.Tensor, carry, rho: torch.Tensor):
        value = 0.0 if j in self.removed_blocks else 1.0
        return hard_decision(torch.full((hbar.shape[0],), value, device=hbar.device)), carry
