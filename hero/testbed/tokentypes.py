"""Per-token-type labels on evaluation sequences, for routing statistics by token type.

``<data_dir>/token_types.jsonl`` holds evaluation sequences as lists of typed text
segments ``{"segments": [[text, type], ...]}``: held-out play chunks (all ``plain``),
fact documents in held-out phrasings (value = ``fact_answer``, the rest of the
sentence = ``fact_other``), and held-out sums (operand digits and the ``+``/``=``
signs = ``arith_operand``, result digits = ``arith_answer``, newlines ``plain``).

A token gets the type of the segment holding its last character. Labels are on the
token itself: ``token_type[t]`` is the type of token ``t``. Its prediction is made at
position ``t - 1``, so the FFN that must *compute* an answer token runs on the token
before it; shift by one when relating FFN execution to the answer it produces.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from hero.jsonl import read_jsonl
from hero.testbed.corpus import ATTRIBUTES, HELDOUT_TEMPLATES

TOKEN_TYPES = ("plain", "fact_answer", "fact_other", "arith_answer", "arith_operand")
_INDEX = {name: i for i, name in enumerate(TOKEN_TYPES)}


def make_token_type_sequences(
    entities: list[dict[str, str]],
    pairs: list[tuple[int, int]],
    ppl_items: list[dict],
    rng: random.Random,
    n_each: int = 24,
) -> list[dict]:
    """``n_each`` sequences of each kind (plays, facts, sums) as typed segments."""
    seqs = [{"segments": [[it["text"], "plain"]]} for it in ppl_items[:n_each]]
    for _ in range(n_each):
        segments = []
        for k in range(6):
            e, a = rng.choice(entities), rng.choice(tuple(ATTRIBUTES))
            sentence = rng.choice(HELDOUT_TEMPLATES[a]).format(e=e["name"], v=e[a])
            cut = sentence.rindex(" " + e[a])
            lead = " " if k else ""
            segments += [[lead + sentence[:cut], "fact_other"], [" " + e[a], "fact_answer"], [".", "fact_other"]]
        seqs.append({"segments": segments})
    for _ in range(n_each):
        segments = []
        for a, b in rng.sample(pairs, 10):
            segments += [[f"{a}+{b}=", "arith_operand"], [str(a + b), "arith_answer"], ["\n", "plain"]]
        seqs.append({"segments": segments})
    return seqs


def label_tokens(tokenizer, segments: list[list[str]]) -> tuple[list[int], list[int]]:
    """Token ids of the joined segments and each token's type index."""
    text = "".join(s for s, _ in segments)
    char_type = []
    for s, t in segments:
        char_type += [_INDEX[t]] * len(s)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return enc["input_ids"], [char_type[end - 1] for _, end in enc["offset_mapping"]]


def token_type_batches(
    testbed, tokenizer, batch_size: int = 16
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield (input_ids, attention_mask, token_type) LongTensors; token_type is -1 on padding."""
    records = read_jsonl(Path(testbed.data_dir) / "token_types.jsonl")
    yield from labelled_batches(
        [label_tokens(tokenizer, r["segments"]) for r in records], tokenizer.pad_token_id, batch_size
    )


def labelled_batches(
    labelled: list[tuple[list[int], list[int]]], pad_id: int, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(token ids, label per token) sequences as right-padded (input_ids, attention_mask, label) batches; label -1 on padding."""
    for b in range(0, len(labelled), batch_size):
        chunk = labelled[b : b + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        types = torch.full((len(chunk), width), -1, dtype=torch.long)
        for r, (seq, typ) in enumerate(chunk):
            ids[r, : len(seq)] = torch.tensor(seq)
            mask[r, : len(seq)] = 1
            types[r, : len(seq)] = torch.tensor(typ)
        yield ids, mask, types


@torch.no_grad()
def token_type_losses(model, tokenizer, testbed, batch_size: int = 16) -> dict[str, float]:
    """Mean next-token loss (nats) per type of the predicted token, over the token-type sequences."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums = torch.zeros(len(TOKEN_TYPES), dtype=torch.float64)
    counts = torch.zeros(len(TOKEN_TYPES), dtype=torch.float64)
    try:
        for ids, mask, types in token_type_batches(testbed, tokenizer, batch_size):
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float().cpu()
            nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
            target_type = types[:, 1:]
            valid = target_type >= 0
            sums.index_add_(0, target_type[valid], nll[valid].double())
            counts.index_add_(0, target_type[valid], torch.ones_like(nll[valid], dtype=torch.float64))
    finally:
        model.train(was_training)
    return {name: float(sums[i] / counts[i]) for i, name in enumerate(TOKEN_TYPES) if counts[i] > 0}
