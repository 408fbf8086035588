"""The SmolLM2 suite's task files, built once per bed from the held-out plays, the questions and the dense model.

* ``knowledge``: the project's common-knowledge questions (``hero.smollm2.knowledge``) as
  4-way multiple choice, ``acc``; chance 0.25.
* ``answer``: the same questions asked in a chat turn and answered by greedy generation
  (``generate`` with the KV cache); ``acc`` = the answer contains the gold answer.
* ``heldout_ppl``: chunks of the held-out plays scored with ``loglikelihood_rolling``;
  ``inv_ppl`` = exp(−mean token NLL), bounded by 1; chance (uniform) 1/vocab.
* ``agree_text``, ``agree_chat``: next-token agreement with the dense model at positions of
  held-out text and of held-out chat (evaluation prompts with the dense model's greedy
  answers). Each position is a multiple-choice item whose choices are the dense model's
  top-k next tokens, dense top-1 first: lm-eval scores all choices from one forward of the
  shared context and reports per choice (log q, greedy), so ``agree`` = the routed model's
  argmax over the whole vocabulary is the dense top-1, and ``kl`` = KL(p_dense ‖ q) between
  the two distributions coarsened to {top-k tokens, rest} — a lower bound on the full KL
  that is exact as the top-k mass → 1 (the mean dense top-k mass is in the manifest).
  A position is kept only when lm-eval's tokenisation of the context and of context +
  choice reproduces the token ids the dense model saw (and the context has no trailing
  whitespace, which lm-eval would move into the continuation).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch

from hero.smollm2 import knowledge


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def text_chunks(tokenizer, plays: dict[str, str], n_chunks: int, chunk_tokens: int, seed: int) -> list[dict]:
    """``n_chunks`` runs of whole lines of about ``chunk_tokens`` tokens, spread over the plays (seeded)."""
    rng = random.Random(seed)
    rows = []
    names = sorted(plays)
    for i in range(n_chunks):
        name = names[i % len(names)]
        lines = plays[name].split("\n")
        start = rng.randrange(len(lines) - 200)
        text, n = "", 0
        for line in lines[start:]:
            if n >= chunk_tokens:
                break
            text += line + "\n"
            n = len(_encode(tokenizer, text))
        rows.append({"text": text.strip("\n"), "play": name})
    return rows


def knowledge_rows(seed: int) -> list[dict]:
    return knowledge.multiple_choice(seed)


def answer_rows() -> list[dict]:
    return [
        {"question": q["question"], "aliases": list(knowledge.aliases(q["answer"])), "category": q["category"]}
        for q in knowledge.questions()
    ]


def ppl_rows(tokenizer, chunks: list[dict]) -> list[dict]:
    return [{**c, "n_tokens": len(_encode(tokenizer, c["text"]))} for c in chunks]


def _positions(tokenizer, ids: list[int], start: int, n: int, rng: random.Random) -> list[int]:
    """Up to ``n`` positions t ≥ ``start`` whose prefix ids[:t] lm-eval re-encodes exactly (checked per choice later)."""
    candidates = list(range(max(start, 1), len(ids)))
    rng.shuffle(candidates)
    out = []
    for t in candidates:
        context = tokenizer.decode(ids[:t])
        if context == context.rstrip() and _encode(tokenizer, context) == ids[:t]:
            out.append(t)
        if len(out) == n:
            break
    return sorted(out)


@torch.no_grad()
def agreement_rows(
    model, tokenizer, texts: list[tuple[str, int]], per_text: int, top_k: int, seed: int
) -> tuple[list[dict], float]:
    """(items, mean dense top-k mass): dense top-k next tokens at positions of ``texts`` (see the module docstring).

    ``texts`` holds (text, first token index that may be predicted), e.g. the start of the answer in a chat.
    """
    rng = random.Random(seed)
    rows, mass = [], []
    for text, start in texts:
        ids = _encode(tokenizer, text)
        positions = _positions(tokenizer, ids, start, per_text, rng)
        if not positions:
            continue
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        for t in positions:
            context = tokenizer.decode(ids[:t])
            top = torch.topk(logp[t - 1], top_k)
            choices, dense_logp = [], []
            for token, lp in zip(top.indices.tolist(), top.values.tolist()):
                piece = tokenizer.decode([token])
                if _encode(tokenizer, context + piece) == ids[:t] + [token]:
                    choices.append(piece)
                    dense_logp.append(lp)
                elif not choices:
                    break
            if not choices:
                continue
            mass.append(sum(math.exp(lp) for lp in dense_logp))
            rows.append({"context": context, "choices": choices, "dense_logp": dense_logp, "gold": 0})
    return rows, sum(mass) / max(len(mass), 1)


def chat_texts(tokenizer, prompts: list[str], answers: list[str]) -> list[tuple[str, int]]:
    """Each evaluation chat as templated text with the index of its first answer token."""
    out = []
    for p, a in zip(prompts, answers):
        turn = [{"role": "user", "content": p}]
        head = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        text = tokenizer.apply_chat_template(turn + [{"role": "assistant", "content": a}], tokenize=False)
        out.append((text, len(_encode(tokenizer, head))))
    return out
