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
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from hero.data import collate, load_conversations, tokenize_conversation
from hero.methods.base import MethodConfigError, Prepared
from hero.methods.table1 import Table1Method, no_regularizer
from hero.model.attach import decoder_layers
from hero.model.policy import Policy, PolicyConfig, attach_policy, hard_decision

BI_BATCH = 8

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


class StaticDrop(Table1Method):
    """``method=static_drop``: the k routable FFNs of lowest Block Influence removed for every token.

    Block Influence is measured on held-out calibration text: the first ``method.calibration_samples``
    conversations of the data's validation split.
    """

    name = "static_drop"
    source = SOURCE
    deviations = DEVIATIONS

    def check(self, method) -> None:
        k = method.k
        if k != "calibrated" and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
            raise MethodConfigError(
                f"method.k={k!r}: static_drop removes k ≥ 0 routable FFNs (an integer) or k=calibrated"
            )
        n = method.calibration_samples
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise MethodConfigError(f"method.calibration_samples={n!r}: must be a positive integer")

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        k = spec.knob.value
        if k > len(layers):
            raise MethodConfigError(
                f"method.k={k}: static_drop can remove at most the {len(layers)} routable FFNs of layers={spec.layer_set}"
            )
        samples = spec.options["calibration_samples"]
        influence = block_influence(model, calibration_batches(spec.data, samples, tokenizer, bed), layers)
        order = ranking(influence)
        removed = sorted(order[:k])
        blocks = [layers.index(layer) + 1 for layer in removed]
        factory = partial(StaticPolicy, removed_blocks=blocks)
        model = attach_policy(model, layers, self.name, self.policy_options(spec), factory, adapter=False)
        card = self.card(
            spec,
            k=k,
            block_influence={str(layer): bi for layer, bi in influence.items()},
            ranking=order,
            removed_layers=removed,
            calibration_samples=samples,
        )
        return Prepared(model, regularizer=no_regularizer, card=card)


def calibration_batches(data_cfg, samples: int, tokenizer, bed) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Held-out calibration text: the first ``samples`` conversations of the data's validation split."""
    conversations = load_conversations(data_cfg, bed, split="validation")[:samples]
    if not conversations:
        raise MethodConfigError(
            f"data={data_cfg.name} has no validation conversations for static_drop's Block Influence"
        )
    items = [tokenize_conversation(tokenizer, c, data_cfg.max_length) for c in conversations]
    batches = (collate(items[i : i + BI_BATCH], tokenizer.pad_token_id) for i in range(0, len(items), BI_BATCH))
    return [(b["input_ids"], b["attention_mask"]) for b in batches]
