"""Evaluation reuses the frozen prefix's hidden states across runs, thresholds and seeds on a backbone.

lm-eval's HFLM scores every loglikelihood request (multiple choice, rolling perplexity) with ``model(input_ids)`` on
right-padded (B, T) batches that it builds from the requests alone: the same task, tokenizer and batch size give
the same batches for every model. For a routed model the layers below the first routable layer k are the frozen
backbone's (``hero.model.prefix.frozen_prefix_end``), so the hidden states entering layer k depend only on the
backbone's prefix weights and that exact batch of token ids, not on the router, its threshold or its seed.

``reuse_prefix(model, directory)`` patches ``model.forward`` for its block. A call with token ids alone (no mask,
no KV cache, no grad, eval mode; ``logits_to_keep`` may be given: lm-eval's loglikelihood path) looks its states up
by key — the prefix weights, k, the rotary frequencies and attention implementation, the autocast state, torch's
version, and the batch's ids and shape — in this process's memory (up to ``MEMORY_BYTES``), then in
``<directory>/<weights key>/<batch key>.pt``.
On a hit only layers k… run (``layers_from``) on the states read back; on a miss the full forward runs and a
pre-hook on layer k keeps its input for the next time. Generation (``generate_until``: HF ``generate``, left-padded,
KV cache) gets the same for its prefill, the call with an empty ``DynamicCache``: keyed also by its mask, positions
and flags, it keeps the states entering layer k and the keys and values layers 0…k−1 put into the cache, and on a
hit puts those into the cache after layers k… ran (the decoder builds its mask from the cache's length first, which
must be 0 then). The decode steps that follow run the whole model: their tokens are the router's. Every other call
(the routing statistics' masked batches, training) runs the model as it is. Below lm-eval: the harness, its requests and its
outputs see nothing of it. Same batch, same kernels: the states read back are bitwise those the full forward
gives with the same thread count; written by a process with another one, equal up to float order.

Size: B × T × d × 4 bytes per batch in fp32, and for a prefill k × 2 × B × T × d_kv × 4 more (SmolLM2-135M,
d = 576, d_kv = 192: docs/speed/evaluation.md measures each suite's); off for the GPU-scale suites
(``eval.prefix_cache: false`` in ``conf/eval/paper7.yaml``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from hero.model.prefix import causal_lm_parts, frozen_prefix_end, layers_from, prefix_weights_digest

MEMORY_BYTES = 512 * 2**20  # states kept in this process (least recently used dropped first)
_memory: OrderedDict[str, torch.Tensor] = OrderedDict()
STATS = {"hits": 0, "misses": 0, "passed": 0}  # calls since the process started (the eval bench reads them)


def weights_key(model: nn.Module, first: int) -> str:
    """What the states entering layer ``first`` depend on besides the tokens: the prefix's weights and k, the
    rotary frequencies (a buffer outside the state dict), the attention implementation, torch's version."""
    decoder, _ = causal_lm_parts(model)
    rotary = getattr(decoder, "rotary_emb", None)
    inv_freq = getattr(rotary, "inv_freq", None)
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    digest = prefix_weights_digest(model, first, f"eval:{first}:{attention}:{torch.__version__}")
    if inv_freq is not None:
        digest.update(inv_freq.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def batch_key(input_ids: torch.Tensor, kwargs: dict | None = None) -> str:
    """The exact (B, T) batch of ids, the autocast state it runs under and, for generate's prefill, its other
    arguments (attention mask, positions, cache positions, flags; the empty cache itself left out)."""
    device = input_ids.device.type
    autocast = torch.is_autocast_enabled(device) and str(torch.get_autocast_dtype(device))
    digest = hashlib.sha256(f"{tuple(input_ids.shape)}:{input_ids.dtype}:{autocast}".encode())
    digest.update(input_ids.detach().cpu().contiguous().numpy().tobytes())
    for name, value in sorted((kwargs or {}).items()):
        if name in ("cache", "past_key_values"):
            continue
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{tuple(value.shape)}:{value.dtype}".encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:24]


Stored = torch.Tensor | list[torch.Tensor]  # a loglikelihood batch's states; generate's: states, then (K, V) per layer


def _nbytes(value: Stored) -> int:
    return sum(t.numel() * t.element_size() for t in (value if isinstance(value, list) else [value]))


def _to(value: Stored, device) -> Stored:
    return [t.to(device) for t in value] if isinstance(value, list) else value.to(device)


def _remember(key: str, value: Stored) -> None:
    _memory[key] = value
    _memory.move_to_end(key)
    while _memory and sum(_nbytes(v) for v in _memory.values()) > MEMORY_BYTES:
        _memory.popitem(last=False)


def _read(key: str, directory: Path | None, device: torch.device) -> Stored | None:
    if key in _memory:
        _memory.move_to_end(key)
        return _to(_memory[key], device)
    if directory is not None:
        path = directory / f"{key.split('/')[-1]}.pt"
        if path.is_file():
            value = torch.load(path, map_location="cpu", weights_only=True)
            _remember(key, value)
            return _to(value, device)
    return None


def _write(key: str, value: Stored, directory: Path | None) -> None:
    value = [t.detach().cpu() for t in value] if isinstance(value, list) else value.detach().cpu()
    _remember(key, value)
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.close(fd)
    torch.save(value, tmp)
    os.replace(tmp, directory / f"{key.split('/')[-1]}.pt")  # atomic: a reader sees all of a file or none


def _empty_dynamic_cache(cache) -> bool:
    """A ``DynamicCache`` of plain ``DynamicLayer``s holding nothing yet: generate's prefill."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return (
        type(cache) is DynamicCache
        and all(type(layer) is DynamicLayer for layer in cache.layers)
        and cache.get_seq_length() == 0
    )


@contextmanager
def reuse_prefix(model: nn.Module, directory: str | os.PathLike | None) -> Iterator[bool]:
    """Within the block, ``model(input_ids)`` in eval mode runs layers k… on the cached states entering layer k
    (module docstring); yields whether the model has a frozen prefix to reuse (False: nothing is patched).
    ``directory`` None: in this process's memory only."""
    try:
        first = frozen_prefix_end(model)
    except ValueError:  # dense (no routable layer), LoRA (trains below it)
        yield False
        return
    decoder, _ = causal_lm_parts(model)
    wkey = weights_key(model, first)
    where = Path(directory) / wkey if directory is not None else None
    real = model.forward
    own = model.__dict__.get("forward")  # an instance forward already there (a wrapper's), put back after

    def capture(call):
        """Run ``call`` with a pre-hook on layer k; returns (its output, the states entering layer k)."""
        captured = []

        def grab(module, hook_args, hook_kwargs):
            captured.append((hook_args[0] if hook_args else hook_kwargs["hidden_states"]).detach().clone())

        handle = decoder.layers[first].register_forward_pre_hook(grab, with_kwargs=True)
        try:
            out = call()
        finally:
            handle.remove()
        return out, captured[0]

    @functools.wraps(real)  # generate reads the signature (logits_to_keep, cache_position) through __wrapped__
    def forward(input_ids=None, *args, **kwargs):
        eligible = isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and not args
        eligible = eligible and not model.training and not torch.is_grad_enabled()
        if eligible and set(kwargs) <= {"logits_to_keep"}:  # lm-eval's loglikelihood batch (hero.evaluation.harness)
            key = f"{wkey}/{batch_key(input_ids)}"
            states = _read(key, where, input_ids.device)
            if states is not None:
                STATS["hits"] += 1
                with layers_from(model, first):
                    return real(inputs_embeds=states, **kwargs)
            STATS["misses"] += 1
            out, states = capture(lambda: real(input_ids, **kwargs))
            _write(key, states, where)
            return out
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers 5 names it cache
        if eligible and _empty_dynamic_cache(cache) and "inputs_embeds" not in kwargs:  # generate's prefill
            key = f"{wkey}/{batch_key(input_ids, kwargs)}"
            stored = _read(key, where, input_ids.device)
            if stored is not None:
                STATS["hits"] += 1
                with layers_from(model, first):
                    out = real(inputs_embeds=stored[0], **kwargs)
                for i in range(first):  # the prefix layers' keys and values, as their attention would have cached
                    cache.layers[i].update(stored[1 + 2 * i], stored[2 + 2 * i])
                return out
            STATS["misses"] += 1
            out, states = capture(lambda: real(input_ids, **kwargs))
            kv = [t for i in range(first) for t in (cache.layers[i].keys, cache.layers[i].values)]
            _write(key, [states, *kv], where)
            return out
        STATS["passed"] += 1
        return real(input_ids, *args, **kwargs)

    model.forward = forward
    try:
        yield True
    finally:
        if own is None:
            del model.forward  # the instance attribute goes; the class's forward is back
        else:
            model.forward = own
