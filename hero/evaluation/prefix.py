"""Evaluation reuses the frozen prefix's hidden states across runs, thresholds and seeds on a backbone.

lm-eval's HFLM scores every loglikelihood request (multiple choice, rolling perplexity) with ``model(input_ids)`` on
right-padded (B, T) batches that it builds from the requests alone: the same task, tokenizer and batch size give
the same batches for every model. For a routed model the layers below the first routable layer k are the frozen
backbone's (``hero.model.prefix.frozen_prefix_end``), so the hidden states entering layer k depend only on the
backbone's prefix weights and that exact batch of token ids, not on the router, its threshold or its seed.

``reuse_prefix(model, directory)`` patches ``model.forward`` for its block. A call with token ids alone (no mask,
no KV cache, no grad, eval mode: lm-eval's loglikelihood path) looks its states up by key — the prefix weights, k,
the rotary frequencies and attention implementation, the autocast state, torch's version, and the batch's ids and
shape — in this process's memory (up to ``MEMORY_BYTES``), then in ``<directory>/<weights key>/<batch key>.pt``.
On a hit only layers k… run (``layers_from``) on the states read back; on a miss the full forward runs and a
pre-hook on layer k keeps its input for the next time. Every other call (``generate`` with its cache, the routing
statistics' masked batches, training) runs the model as it is. Below lm-eval: the harness, its requests and its
outputs see nothing of it. Same batch, same kernels: the states read back are bitwise those the full forward
gives with the same thread count; written by a process with another one, equal up to float order.

Size: B × T × d × 4 bytes per batch in fp32 (SmolLM2-135M, d = 576: docs/speed/evaluation.md measures each
suite's); off for the GPU-scale suites (``eval.prefix_cache: false`` in ``conf/eval/paper7.yaml``).
"""

from __future__ import annotations

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


def batch_key(input_ids: torch.Tensor) -> str:
    """The exact (B, T) batch of ids and the autocast state it runs under."""
    device = input_ids.device.type
    autocast = torch.is_autocast_enabled(device) and str(torch.get_autocast_dtype(device))
    digest = hashlib.sha256(f"{tuple(input_ids.shape)}:{input_ids.dtype}:{autocast}".encode())
    digest.update(input_ids.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:24]


def _remember(key: str, states: torch.Tensor) -> None:
    _memory[key] = states
    _memory.move_to_end(key)
    while _memory and sum(t.numel() * t.element_size() for t in _memory.values()) > MEMORY_BYTES:
        _memory.popitem(last=False)


def _read(key: str, directory: Path | None, device: torch.device) -> torch.Tensor | None:
    if key in _memory:
        _memory.move_to_end(key)
        return _memory[key].to(device)
    if directory is not None:
        path = directory / f"{key.split('/')[-1]}.pt"
        if path.is_file():
            states = torch.load(path, map_location="cpu", weights_only=True)
            _remember(key, states)
            return states.to(device)
    return None


def _write(key: str, states: torch.Tensor, directory: Path | None) -> None:
    states = states.detach().cpu()
    _remember(key, states)
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.close(fd)
    torch.save(states, tmp)
    os.replace(tmp, directory / f"{key.split('/')[-1]}.pt")  # atomic: a reader sees all of a file or none


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

    def forward(input_ids=None, *args, **kwargs):
        if (
            args
            or kwargs
            or not isinstance(input_ids, torch.Tensor)
            or input_ids.dim() != 2
            or model.training
            or torch.is_grad_enabled()
        ):
            STATS["passed"] += 1
            return real(input_ids, *args, **kwargs)
        key = f"{wkey}/{batch_key(input_ids)}"
        states = _read(key, where, input_ids.device)
        if states is not None:
            STATS["hits"] += 1
            with layers_from(model, first):
                return real(inputs_embeds=states)
        STATS["misses"] += 1
        captured = []

        def grab(module, hook_args, hook_kwargs):
            captured.append((hook_args[0] if hook_args else hook_kwargs["hidden_states"]).detach().clone())

        handle = decoder.layers[first].register_forward_pre_hook(grab, with_kwargs=True)
        try:
            out = real(input_ids)
        finally:
            handle.remove()
        _write(key, captured[0], where)
        return out

    model.forward = forward
    try:
        yield True
    finally:
        if own is None:
            del model.forward  # the instance attribute goes; the class's forward is back
        else:
            model.forward = own
