"""``method=dense``: the frozen backbone as it is — the Retain baseline every other run is scored against."""

from __future__ import annotations

from hero.methods.base import Method, Prepared, fixed_routing


class Dense(Method):
    name = "dense"
    reference = True

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        return Prepared(model, fixed_skip=fixed_routing(model, layers, ffn_executed=True))
