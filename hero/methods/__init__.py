"""The ``method=`` options, one module each, all behind one interface (``hero.methods.base.Method``).

    hero               the HeRo router and adapters (the paper's method)
    dense              the frozen backbone: the Retain baseline
    lora               LoRA fine-tune, no skipping (trained no-skip reference)
    drop_routable_ffn  every routable FFN removed (the floor)
    skipgpt_rt         SkipGPT's routers, backbone frozen (Table 1)
    static_drop        the k lowest-Block-Influence FFNs removed (Table 1)
    random_skip        Bernoulli(p) FFN skip per token, adapters optional (Table 1)

A method's module holds all of it: its definition (router, policy, loss), its options and their checks, how it
is attached and trained, and what it costs (``compute_cost``). Table 1's methods share ``table1.py``; every
routing policy plugs into HeRo's routed block through ``hero.model.policy``. Adding a method is one module with a
``Method`` subclass, registered below, and ``conf/method/<name>.yaml``.
"""

from __future__ import annotations

from hero.methods.base import Method, MethodConfigError, Prepared
from hero.methods.dense import Dense
from hero.methods.drop_routable_ffn import DropRoutableFFN
from hero.methods.hero import HeRo
from hero.methods.lora import LoRA
from hero.methods.random_skip import RandomSkip
from hero.methods.skipgpt_rt import SkipGPTRT
from hero.methods.static_drop import StaticDrop

METHODS: dict[str, Method] = {
    m.name: m for m in (HeRo(), Dense(), LoRA(), DropRoutableFFN(), SkipGPTRT(), StaticDrop(), RandomSkip())
}


def get(name: str) -> Method:
    """The method registered as ``name``; one line naming the allowed ones otherwise."""
    if name not in METHODS:
        raise MethodConfigError(f"method={name!r}: allowed methods are {', '.join(METHODS)}")
    return METHODS[name]


__all__ = ["METHODS", "Method", "MethodConfigError", "Prepared", "get"]
