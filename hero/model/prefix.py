"""The frozen prefix of a routed model: the embeddings and decoder layers below the first routable layer k.

Nothing there trains for a routed method (LoRA trains every layer: it has none), so the hidden states entering layer
k depend only on the backbone's prefix weights and the input tokens. Training (``hero.update``, ``trainer.prefix_cache``)
and evaluation (``hero.evaluation.prefix``) compute them once and run layers k… on them (``layers_from``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


def causal_lm_parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(decoder, LM head) of a HF causal LM, through a peft wrapper if there is one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return decoder, base.get_output_embeddings()


@contextmanager
def layers_from(model: nn.Module, first: int) -> Iterator[None]:
    """Inside the block the decoder holds only layers ``first``… (fed with ``inputs_embeds``)."""
    decoder, _ = causal_lm_parts(model)
    layers = decoder.layers
    decoder.layers = nn.ModuleList(list(layers)[first:])
    try:
        yield
    finally:
        decoder.layers = layers


def frozen_prefix_end(model: nn.Module) -> int:
    """Index of the first routable decoder layer, when nothing below it trains; a ``ValueError`` otherwise."""
    from hero.model.block import RoutedDecoderLayer

    decoder, _ = causal_lm_parts(model)
    layers = list(decoder.layers)
    first = next((i for i, layer in enumerate(layers) if isinstance(layer, RoutedDecoderLayer)), None)
    if first is None:
        raise ValueError("the model has no routable layer, so there is no frozen prefix to cache")
    below = [decoder.embed_tokens, *layers[:first]]
    trained = [n for module in below for n, p in module.named_parameters() if p.requires_grad]
    if trained:
        raise ValueError(f"parameters below the first routable layer {first} train ({trained[0]}, ...)")
    return first


def prefix_weights_digest(model: nn.Module, first: int, head: str):
    """A sha256 (``hashlib`` object) of ``head`` (the caller's own settings, ``first`` among them), then of what
    layers 0…``first``−1 compute with: every tensor of their state dicts and the embeddings', by name and bytes.
    Callers add what else their states depend on (the tokens)."""
    decoder, _ = causal_lm_parts(model)
    digest = hashlib.sha256(head.encode())
    for module in (decoder.embed_tokens, *list(decoder.layers)[:first]):
        for name, tensor in sorted(module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return digest
