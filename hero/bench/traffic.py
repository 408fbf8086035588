"""Bytes-moved model of a dense and a HeRo-routed Llama-family forward pass (the memory-bound ideal).

A KV-cached decode step multiplies a few rows by every weight matrix, so its time
follows the bytes it reads, not its FLOPs: a weight matrix is read once per pass
if any row uses it, however many rows do. Counted per pass (a prefill, or one
decode step), in elements of the given sizes:

    attention weights   d·(H·h) [q] + 2·d·(K·h) [k, v] + (H·h)·d [o]    every layer
    FFN weights         3·d·f                 layers whose FFN at least one row executes
    LM head             V·d                   if any logits are computed
    embedding rows      d per token
    KV cache            2·K·h per cached or new position of each sequence, read once,
                        and 2·K·h per new position written
    adapter weights     2·d·r                 routable blocks in which at least one row skips
    router weights      all router parameters, once per routable block (fp32)
    router state        per row and routable block: S and ζ read and written, h̄_{j−1} and
                        δ_{j−1} read: 2·(d_m² + d_m) + 2·d (fp32)

Norm weights and activations are left out on both sides. Ideal speedup = dense bytes
/ routed bytes of the same run. At batch 1 a skipped block saves its FFN weights and
this ideal nearly equals the FLOP ideal; in a batch, a block saves them only when
every row skips, so the bytes ideal is lower (the FLOP ideal still bounds a
compute-bound pass, where rows are cheap to drop but weights are reused).
"""

from __future__ import annotations

from hero.model.flops import Shape


def attention_weights(s: Shape) -> int:
    q = s.heads * s.head_dim
    kv = s.kv_heads * s.head_dim
    return s.hidden * q + 2 * s.hidden * kv + q * s.hidden


def ffn_weights(s: Shape) -> int:
    return 3 * s.hidden * s.intermediate


def kv_elements(s: Shape, read: int, written: int) -> int:
    """Per layer: ``read`` cached-or-new positions read and ``written`` new positions stored (summed over sequences)."""
    return 2 * s.kv_heads * s.head_dim * (read + written)


def router_state_elements(s: Shape, memory_dim: int) -> int:
    """Per row and routable block: the carry the router reads and writes (see the module docstring)."""
    return 2 * (memory_dim * memory_dim + memory_dim) + 2 * s.hidden


def dense_bytes(s: Shape, tokens: int, kv_read: int, logits: int, elem: int) -> float:
    """A pass over ``tokens`` new tokens whose sequences read ``kv_read`` cached-or-new positions in total."""
    weights = s.layers * (attention_weights(s) + ffn_weights(s)) + (s.vocab * s.hidden if logits else 0)
    activations = tokens * s.hidden + s.layers * kv_elements(s, kv_read, tokens)
    return (weights + activations) * elem


def routed_bytes(
    s: Shape,
    tokens: int,
    kv_read: int,
    logits: int,
    elem: int,
    *,
    num_routable: int,
    ffn_blocks: float,
    adapter_blocks: float,
    adapter_dim: int,
    adapter_elem: int,
    router_params: int,
    memory_dim: int,
) -> float:
    """The same pass routed: ``ffn_blocks`` / ``adapter_blocks`` of the ``num_routable`` blocks read FFN / adapter weights.

    Both counts may be averages over passes (fractional).
    """
    total = dense_bytes(s, tokens, kv_read, logits, elem)
    total -= (num_routable - ffn_blocks) * ffn_weights(s) * elem
    total += adapter_blocks * 2 * s.hidden * adapter_dim * adapter_elem
    total += num_routable * (router_params + tokens * router_state_elements(s, memory_dim)) * 4
    return total


def breakdown(
    s: Shape,
    tokens: int,
    kv_read: int,
    logits: int,
    elem: int,
    *,
    num_routable: int,
    ffn_blocks: float,
    adapter_blocks: float,
    adapter_dim: int,
    adapter_elem: int,
    router_params: int,
    memory_dim: int,
) -> dict:
    """Dense and routed bytes with the parts that differ, and the ideal speedup."""
    dense = dense_bytes(s, tokens, kv_read, logits, elem)
    routed = routed_bytes(
        s,
        tokens,
        kv_read,
        logits,
        elem,
        num_routable=num_routable,
        ffn_blocks=ffn_blocks,
        adapter_blocks=adapter_blocks,
        adapter_dim=adapter_dim,
        adapter_elem=adapter_elem,
        router_params=router_params,
        memory_dim=memory_dim,
    )
    return {
        "dense": dense,
        "routed": routed,
        "ffn_saved": (num_routable - ffn_blocks) * ffn_weights(s) * elem,
        "adapter": adapter_blocks * 2 * s.hidden * adapter_dim * adapter_elem,
        "router": num_routable * (router_params + tokens * router_state_elements(s, memory_dim)) * 4,
        "ffn_blocks": ffn_blocks,
        "adapter_blocks": adapter_blocks,
        "ideal_speedup": dense / routed,
    }
