"""Pretraining of the testbed backbone: a small Llama trained from scratch on the mixed corpus.

Plain PyTorch, nanoGPT style: AdamW (no weight decay on norms), linear warm-up then
cosine decay to ``min_lr_ratio``, gradient clipping, a fixed number of steps (not a
wall-clock budget, so that a build is reproducible), everything seeded.

Training rows are ``seq_len``-token windows cut at seeded random offsets from one
token stream per source (plays, facts, sums, chat-formatted SFT examples); the number
of rows from each source follows the recipe's mix exactly, in a seeded order.

Precision: fp32. bf16 autocast was measured on this project's 2-core CPU (AMD EPYC,
no AVX-512 BF16) at ~30x *slower* than fp32 for this model, so it is not used.
"""

from __future__ import annotations

import math
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hero.testbed.recipe import Recipe


def model_config(recipe: Recipe, tokenizer) -> LlamaConfig:
    """Llama architecture (RMSNorm, GQA attention, SwiGLU FFN) of the recipe's shape."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        max_position_embeddings=recipe.seq_len,
        tie_word_embeddings=recipe.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )


def tokenize_docs(tokenizer, docs: list[str]) -> torch.Tensor:
    """One flat LongTensor of the documents' tokens, each document followed by EOS."""
    ids: list[int] = []
    for doc in docs:
        ids += tokenizer(doc, add_special_tokens=False)["input_ids"]
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def make_rows(
    streams: dict[str, torch.Tensor], mix: dict[str, float], n_rows: int, seq_len: int, seed: int
) -> torch.Tensor:
    """``n_rows`` training rows of ``seq_len + 1`` tokens (inputs and shifted targets), mixed by ``mix``."""
    g = torch.Generator().manual_seed(seed)
    names = sorted(mix)
    counts = [int(round(mix[n] / sum(mix.values()) * n_rows)) for n in names]
    counts[names.index(max(names, key=mix.get))] += n_rows - sum(counts)
    source = torch.cat([torch.full((c,), i) for i, c in enumerate(counts)])[torch.randperm(n_rows, generator=g)]
    rows = torch.empty((n_rows, seq_len + 1), dtype=torch.long)
    for r, s in enumerate(source.tolist()):
        stream = streams[names[s]]
        if len(stream) <= seq_len + 1:
            raise ValueError(f"stream {names[s]!r} has {len(stream)} tokens, needs > {seq_len + 1}")
        start = int(torch.randint(0, len(stream) - seq_len - 1, (1,), generator=g))
        rows[r] = stream[start : start + seq_len + 1]
    return rows


def lr_at(step: int, recipe: Recipe) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio``."""
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    return recipe.lr * (recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(
    recipe: Recipe, tokenizer, streams: dict[str, torch.Tensor], log_every: int = 20
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train the backbone for ``recipe.steps`` steps; return it (eval mode) and the per-step losses."""
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(model_config(recipe, tokenizer))
    mix = {"plays": recipe.mix_plays, "facts": recipe.mix_facts, "arith": recipe.mix_arith, "chat": recipe.mix_chat}
    rows = make_rows(streams, mix, recipe.steps * recipe.batch_size, recipe.seq_len, recipe.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=recipe.lr,
        betas=(0.9, 0.95),
    )
    model.train()
    losses, t0 = [], time.time()
    for step in range(recipe.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe)
        batch = rows[step * recipe.batch_size : (step + 1) * recipe.batch_size]
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(
                f"[testbed] pretrain step {step + 1}/{recipe.steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)",
                flush=True,
            )
    model.eval()
    return model, losses
