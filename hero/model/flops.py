"""FLOP model of a dense and a HeRo-routed Llama-family forward pass (per token and per run).

Counted (1 multiply-add = 2 FLOPs), per decoder layer and token attending ``c`` keys:

    attention projections  2·d·(H·h) [q] + 2·2·d·(K·h) [k, v] + 2·(H·h)·d [o]
    attention core         2·2·H·h·c            (q·kᵀ over c keys, then the weighted sum of v)
    SwiGLU FFN             2·3·d·f              (gate, up, down)
    LM head                2·d·V                per position whose logits are computed

with d the width, H / K query / key-value heads of size h, f the FFN width, V the
vocabulary. Routed layers (eq 3) replace the FFN of a skipped token by the adapter,
2·2·d·r (eq 2), and every token pays the router at every routable block (eq 4–16):

    path features    6·d                         (δ, ‖δ‖, ⟨δ, δ_prev⟩, norms)
    local head f_ψ   2·(d·w_ψ + w_ψ)
    content encoder  2·(d·w_h + w_h·48)          (eq 5)
    path encoder     2·(p·w_p + w_p·16)          (eq 9)
    q, k, v          2·s·3·d_m                   (eq 10)
    memory read      2·d_m² + 2·d_m  and  ν: 2·s·d_m + 2·d_m²     (eq 11, 13; blocks j > 1)
    memory write     2·d_m² + 2·d_m              (eq 12; blocks j < L_R)
    history head f_θ 2·((s + d_m + 1)·w_θ + w_θ) (eq 14)

Norms, rotary embeddings, activations and residual additions are left out on both
sides (they are the same for dense and routed, apart from the router's own few
element-wise passes, which the 6·d term stands for). Ideal speedup = dense FLOPs /
routed FLOPs of the same run, with the realized number of skipped (token, layer) pairs.

Each method states what its router and adapters cost (``compute_cost`` in ``hero.methods``); SkipGPT-RT's
router, RMS normalisation and Linear(d, 2) per layer, is ``skipgpt_router_flops``.

**Net compute skip** (``net_compute``): the paper's parameter skip charges neither the router nor
the adapter. Per token, with the per-layer FFN execution rates e_ℓ of a run,

    backbone      = L·(attention projections + FFN) + attention core at c̄ keys + LM head
    ffn_saved     = Σ_ℓ routable (1 − e_ℓ)·FFN
    adapter       = Σ_ℓ routable (1 − e_ℓ)·Adapter          (0 for a method without adapters)
    router        = Σ_j router_j                              (every token, every routable block)
    net_compute_rate = (ffn_saved − router − adapter) / backbone

c̄ = (T + 1)/2 is the mean number of keys a token attends in a causal sequence of the stated
context length T (the run's ``data.max_length``); one LM-head row per token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hero.model.config import RouterConfig


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, config) -> Shape:
        """From a transformers config (LlamaConfig and friends)."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            config.hidden_size,
            config.num_hidden_layers,
            heads,
            getattr(config, "num_key_value_heads", heads) or heads,
            head_dim,
            config.intermediate_size,
            config.vocab_size,
        )


def attention_proj_flops(s: Shape) -> int:
    """Per token and layer: q, k, v, o projections."""
    q = s.heads * s.head_dim
    kv = s.kv_heads * s.head_dim
    return 2 * s.hidden * q + 2 * 2 * s.hidden * kv + 2 * q * s.hidden


def attention_core_flops(s: Shape, context: int) -> int:
    """Per layer, summed over tokens: ``context`` is the total number of (query, key) pairs."""
    return 2 * 2 * s.heads * s.head_dim * context


def ffn_flops(s: Shape) -> int:
    return 2 * 3 * s.hidden * s.intermediate


def adapter_flops(s: Shape, adapter_dim: int) -> int:
    return 2 * 2 * s.hidden * adapter_dim


def lm_head_flops(s: Shape) -> int:
    return 2 * s.hidden * s.vocab


def router_flops(s: Shape, config: RouterConfig, j: int, num_routable: int) -> int:
    """Per token at routable block j (1-based) of ``num_routable``."""
    c, d = config, s.hidden
    local = c.local_head_hidden if isinstance(c.local_head_hidden, int) else c.head_hidden
    total = 6 * d + 2 * (d * local + local)
    if not c.history_branch:
        return total
    m, st = c.memory_dim, c.state_dim
    total += 2 * (d * c.content_hidden + c.content_hidden * c.content_dim)
    if c.aux_state:
        total += 2 * (len(c.path_features) * c.path_hidden + c.path_hidden * c.path_dim)
    total += 2 * st * 3 * m
    if c.memory_read and j > 1:
        total += 2 * m * m + 2 * m + 2 * st * m + 2 * m * m
    if c.memory_read and j < num_routable:
        total += 2 * m * m + 2 * m
    total += 2 * ((st + m + 1) * c.head_hidden + c.head_hidden)
    return total


def causal_context(seq: int, past: int = 0) -> int:
    """Total (query, key) pairs of ``seq`` new tokens after ``past`` cached ones, causal."""
    return seq * past + seq * (seq + 1) // 2


def dense_flops(s: Shape, tokens: int, context: int, logits: int) -> int:
    """A forward pass of ``tokens`` tokens with ``context`` (query, key) pairs per layer, ``logits`` LM-head rows."""
    per_layer = tokens * (attention_proj_flops(s) + ffn_flops(s)) + attention_core_flops(s, context)
    return s.layers * per_layer + logits * lm_head_flops(s)


def routed_flops(
    s: Shape, config: RouterConfig, adapter_dim: int, tokens: int, context: int, logits: int, skipped: Sequence[int]
) -> int:
    """The same pass routed: ``skipped[j-1]`` tokens take the adapter instead of the FFN at routable block j."""
    num_routable = len(skipped)
    total = dense_flops(s, tokens, context, logits)
    for j, n_skip in enumerate(skipped, start=1):
        total += n_skip * (adapter_flops(s, adapter_dim) - ffn_flops(s))
        total += tokens * router_flops(s, config, j, num_routable)
    return total


def breakdown(
    s: Shape, config: RouterConfig, adapter_dim: int, tokens: int, context: int, logits: int, skipped: Sequence[int]
) -> dict:
    """Dense and routed FLOPs with the parts that differ, and the ideal speedup."""
    dense = dense_flops(s, tokens, context, logits)
    routed = routed_flops(s, config, adapter_dim, tokens, context, logits, skipped)
    num_routable = len(skipped)
    return {
        "dense": dense,
        "routed": routed,
        "ffn_saved": sum(skipped) * ffn_flops(s),
        "adapter": sum(skipped) * adapter_flops(s, adapter_dim),
        "router": tokens * sum(router_flops(s, config, j, num_routable) for j in range(1, num_routable + 1)),
        "ideal_speedup": dense / routed,
    }


def skipgpt_router_flops(s: Shape, hidden: int | None = None) -> int:
    """Per token and routable block: SkipGPT-RT's router, RMS normalisation (≈ 3·d) and Linear(d, 2) with bias;
    with ``hidden`` the official Linear(d, hidden) + ReLU + Linear(hidden, 2)."""
    d = s.hidden
    if hidden is None:
        return 3 * d + 2 * d * 2 + 2
    return 3 * d + 2 * d * hidden + hidden + 2 * hidden * 2 + 2


def backbone_flops_per_token(s: Shape, context_length: int) -> dict:
    """Dense FLOPs per token by part, attention core at the mean causal context of ``context_length``."""
    keys = (context_length + 1) / 2
    parts = {
        "attention_proj": s.layers * attention_proj_flops(s),
        "attention_core": s.layers * 2 * 2 * s.heads * s.head_dim * keys,
        "ffn": s.layers * ffn_flops(s),
        "lm_head": lm_head_flops(s),
    }
    return {**parts, "total": sum(parts.values()), "mean_keys": keys}


def net_compute(
    s: Shape,
    per_layer_ffn_rate: Mapping[str, float],
    router_per_block: Sequence[float],
    adapter_dim: int | None,
    context_length: int,
) -> dict:
    """The ``skip.compute`` section of a record and its ``net_compute_rate`` (module docstring), per token.

    ``per_layer_ffn_rate``: {layer: execution rate} of the routable layers (the record's); ``router_per_block``:
    router FLOPs per token at each routable block; ``adapter_dim``: the adapters' bottleneck, None without.
    """
    backbone = backbone_flops_per_token(s, context_length)
    skipped = sum(1.0 - float(rate) for rate in per_layer_ffn_rate.values())
    ffn_saved = skipped * ffn_flops(s)
    adapter = skipped * adapter_flops(s, adapter_dim) if adapter_dim else 0.0
    router = float(sum(router_per_block))
    return {
        "net_compute_rate": (ffn_saved - router - adapter) / backbone["total"],
        "compute": {
            "unit": "FLOPs per token (1 multiply-add = 2)",
            "context_length": context_length,
            "shape": dataclasses.asdict(s),
            "backbone": backbone,
            "ffn_saved": ffn_saved,
            "router": router,
            "adapter": adapter,
            "router_share": router / backbone["total"],
            "adapter_share": adapter / backbone["total"],
            "ffn_saved_share": ffn_saved / backbone["total"],
        },
    }
