"""``method=drop_routable_ffn``: every routable FFN removed, nothing in its place — the floor to beat."""

from __future__ import annotations

from hero.methods.base import Method, Prepared, fixed_routing
from hero.model.attach import decoder_layers
from hero.model.drop import ZeroFFN


class DropRoutableFFN(Method):
    name = "drop_routable_ffn"

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        skip = fixed_routing(model, layers, ffn_executed=False)  # counted before the FFNs leave the model
        blocks = decoder_layers(model)
        for i in layers:
            blocks[i].mlp = ZeroFFN()
        return Prepared(model, fixed_skip=skip)
