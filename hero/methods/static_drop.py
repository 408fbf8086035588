"""``method=static_drop``: the k routable FFNs of lowest Block Influence removed (``hero.baselines.static_drop``).

Block Influence is measured on held-out calibration text: the first ``method.calibration_samples``
conversations of the data's validation split.
"""

from __future__ import annotations

from functools import partial

import torch

from hero.baselines import static_drop
from hero.baselines.attach import attach_policy
from hero.data import collate, load_conversations, tokenize_conversation
from hero.methods.base import MethodConfigError, Prepared
from hero.methods.baseline import Baseline, no_regularizer

BI_BATCH = 8


class StaticDrop(Baseline):
    name = "static_drop"
    module = static_drop

    def check(self, cfg) -> None:
        k = cfg.method.k
        if k != "calibrated" and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
            raise MethodConfigError(
                f"method.k={k!r}: static_drop removes k ≥ 0 routable FFNs (an integer) or k=calibrated"
            )
        n = cfg.method.calibration_samples
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise MethodConfigError(f"method.calibration_samples={n!r}: must be a positive integer")

    def prepare(self, cfg, model, tokenizer, layers, bed, alpha) -> Prepared:
        value, calibrated = self.knob_value(cfg)
        if value > len(layers):
            raise MethodConfigError(
                f"method.k={value}: static_drop can remove at most the {len(layers)} routable "
                f"FFNs of layers={cfg.layers.name}"
            )
        influence = static_drop.block_influence(model, calibration_batches(cfg, tokenizer, bed), layers)
        order = static_drop.ranking(influence)
        removed = sorted(order[:value])
        blocks = [layers.index(layer) + 1 for layer in removed]
        model = attach_policy(
            model,
            layers,
            self.name,
            self.options(cfg, value),
            partial(static_drop.StaticPolicy, removed_blocks=blocks),
            adapter=False,
        )
        record = self.record(
            value,
            calibrated,
            k=value,
            block_influence={str(layer): bi for layer, bi in influence.items()},
            ranking=order,
            removed_layers=removed,
            calibration_samples=cfg.method.calibration_samples,
        )
        return Prepared(model, routed=True, regularizer=no_regularizer, record=record, calibrated=calibrated)


def calibration_batches(cfg, tokenizer, bed) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Held-out calibration text: the first ``method.calibration_samples`` conversations of the validation split."""
    conversations = load_conversations(cfg.data, bed, split="validation")[: cfg.method.calibration_samples]
    if not conversations:
        raise MethodConfigError(
            f"data={cfg.data.name} has no validation conversations for static_drop's Block Influence"
        )
    items = [tokenize_conversation(tokenizer, c, cfg.data.max_length) for c in conversations]
    batches = (collate(items[i : i + BI_BATCH], tokenizer.pad_token_id) for i in range(0, len(items), BI_BATCH))
    return [(b["input_ids"], b["attention_mask"]) for b in batches]
