"""Table 1's baselines on HeRo's routed block: SkipGPT-RT router tuning, static FFN removal, random routing.

    attach.py       the plug into HeRo's routed block (policy interface, no-adapter skip branch)
    skipgpt.py      SkipGPT-RT: per-layer linear router, straight-through Gumbel, sparsity loss
    static_drop.py  ShortGPT-style removal of the k lowest-Block-Influence FFNs
    random_skip.py  each token's FFN skipped with probability p (seeded), adapters optional

Their ``method=`` options (checks, cost knob, prepared model, record section) are in ``hero.methods``.
"""
