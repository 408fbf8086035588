"""Building a testbed from nothing: corpus -> tokenizer -> token streams -> data files -> backbone -> manifest.

``build(recipe, out_dir)`` writes a complete testbed directory:

    backbone/           HF save_pretrained dir: LlamaForCausalLM + tokenizer (with chat template)
    data/sft_train.jsonl, data/sft_val.jsonl      chat ``messages`` records (see ``sft``)
    data/tasks/<task>.jsonl                       the tiny suite (see ``tasks``)
    data/token_types.jsonl                        typed evaluation sequences (see ``tokentypes``)
    data/heldout_plays.txt                        full text of the held-out plays
    manifest.json       recipe, hash, timings, held-out loss, unigram ppl, dense and
                        drop_routable_ffn scores, Retain of the control, per-type losses

Everything is a function of the recipe: text generation uses ``random.Random`` seeded
from ``recipe.seed``, training uses seeded torch generators. The build runs on
``$HERO_TESTBED_THREADS`` CPU threads (default 2); the thread count is not part of the
recipe (it changes float summation order only).
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import transformers

from hero.jsonl import write_jsonl
from hero.model.drop import drop_routable_ffn
from hero.testbed import corpus as C
from hero.testbed.pretrain import pretrain, tokenize_docs
from hero.testbed.recipe import Recipe, recipe_dict, recipe_hash
from hero.testbed.sft import make_sft
from hero.testbed.tasks import (
    evaluate,
    make_arith_task,
    make_arith_units,
    make_cloze_task,
    make_fact_select,
    make_fact_tasks,
    make_ppl_task,
    retain,
)
from hero.testbed.tokenizer import train_tokenizer
from hero.testbed.tokentypes import make_token_type_sequences, token_type_losses

_TOKENS_PER_FACT_DOC = 75
_TOKENS_PER_ARITH_DOC = 90


@dataclass
class Corpus:
    """All generated and loaded text of one recipe."""

    train_plays: dict[str, str]
    heldout_plays: dict[str, str]
    entities: list[dict[str, str]]
    train_pairs: list[tuple[int, int]]
    heldout_pairs: list[tuple[int, int]]
    fact_docs: list[str]
    arith_docs: list[str]
    sft_train: list[dict]
    sft_val: list[dict]


def build_corpus(recipe: Recipe) -> Corpus:
    """Load the plays and generate facts, sums and SFT records, sized to the pretraining budget."""
    train_plays, heldout_plays = C.load_plays(recipe)
    entities = C.make_entities(recipe)
    train_pairs, heldout_pairs = C.arith_pairs(recipe)
    rng = random.Random(recipe.seed + 2)
    n_tokens = recipe.steps * recipe.batch_size * recipe.seq_len
    n_fact = max(20, math.ceil(1.2 * n_tokens * recipe.mix_facts / _TOKENS_PER_FACT_DOC))
    n_arith = max(20, math.ceil(1.2 * n_tokens * recipe.mix_arith / _TOKENS_PER_ARITH_DOC))
    return Corpus(
        train_plays=train_plays,
        heldout_plays=heldout_plays,
        entities=entities,
        train_pairs=train_pairs,
        heldout_pairs=heldout_pairs,
        fact_docs=C.fact_text(n_fact, entities, rng),
        arith_docs=C.arith_text(n_arith, train_pairs, rng),
        sft_train=make_sft(recipe.n_sft_train, entities, train_pairs, train_plays, rng, "train"),
        sft_val=make_sft(recipe.n_sft_val, entities, heldout_pairs, heldout_plays, rng, "val"),
    )


def build_tokenizer_and_streams(recipe: Recipe, corpus: Corpus):
    """Train the tokenizer on the training text and tokenize each pretraining source into one stream."""
    plays = [corpus.train_plays[k] for k in sorted(corpus.train_plays)]
    tokenizer = train_tokenizer([*plays, *corpus.fact_docs, *corpus.arith_docs], recipe.vocab_size)
    chat = [tokenizer.apply_chat_template(r["messages"], tokenize=False) for r in corpus.sft_train]
    streams = {
        "plays": tokenize_docs(tokenizer, plays),
        "facts": tokenize_docs(tokenizer, corpus.fact_docs),
        "arith": tokenize_docs(tokenizer, corpus.arith_docs),
        "chat": tokenize_docs(tokenizer, chat),
    }
    return tokenizer, streams


def write_data(recipe: Recipe, corpus: Corpus, tokenizer, data_dir: Path) -> None:
    """Write the SFT files, the tiny-suite task files, the token-type sequences and the held-out text."""
    rng = random.Random(recipe.seed + 3)
    write_jsonl(data_dir / "sft_train.jsonl", corpus.sft_train)
    write_jsonl(data_dir / "sft_val.jsonl", corpus.sft_val)
    recall, answer = make_fact_tasks(corpus.entities, rng)
    ppl_items = make_ppl_task(corpus.heldout_plays, tokenizer, recipe.heldout_eval_tokens, recipe.seq_len)
    tasks = {
        "fact_recall": recall,
        "fact_answer": answer,
        "arithmetic": make_arith_task(corpus.heldout_pairs, recipe.n_arith_eval, rng),
        "play_cloze": make_cloze_task(corpus.heldout_plays, recipe.n_cloze_eval, rng),
        "heldout_ppl": ppl_items,
    }
    # Tasks added later draw from their own generator, so the files above stay as they were.
    later = random.Random(recipe.seed + 4)
    tasks["fact_select"] = make_fact_select(corpus.entities)
    tasks["arith_units"] = make_arith_units(corpus.heldout_pairs, recipe.n_arith_eval, later)
    for name, items in tasks.items():
        write_jsonl(data_dir / "tasks" / f"{name}.jsonl", items)
    write_jsonl(
        data_dir / "token_types.jsonl", make_token_type_sequences(corpus.entities, corpus.heldout_pairs, ppl_items, rng)
    )
    (data_dir / "heldout_plays.txt").write_text(
        "".join(corpus.heldout_plays[k] + "\n" for k in sorted(corpus.heldout_plays)), encoding="utf-8"
    )


def unigram_ppl(train_stream: torch.Tensor, eval_items: list[dict], tokenizer) -> float:
    """Perplexity of an add-one unigram model of ``train_stream`` on the tokens ``heldout_ppl`` scores."""
    counts = Counter(train_stream.tolist())
    total, vocab = sum(counts.values()), len(tokenizer)
    nll, n = 0.0, 0
    for it in eval_items:
        for t in tokenizer(it["text"], add_special_tokens=False)["input_ids"][1:]:
            nll -= math.log((counts[t] + 1) / (total + vocab))
            n += 1
    return math.exp(nll / n)


def build(recipe: Recipe, out_dir: Path) -> dict:
    """Build the whole testbed of ``recipe`` into ``out_dir``; return its manifest."""
    t0 = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("HERO_TESTBED_THREADS", "2")))
    try:
        corpus = build_corpus(recipe)
        tokenizer, streams = build_tokenizer_and_streams(recipe, corpus)
        data_dir = out_dir / "data"
        write_data(recipe, corpus, tokenizer, data_dir)
        t_data = time.time() - t0
        model, losses = pretrain(recipe, tokenizer, streams)
        t_pretrain = time.time() - t0 - t_data
        backbone_dir = out_dir / "backbone"
        model.save_pretrained(backbone_dir)
        tokenizer.save_pretrained(backbone_dir)
        dirs = SimpleNamespace(data_dir=data_dir)
        dense = evaluate(model, tokenizer, dirs)
        dense_types = token_type_losses(model, tokenizer, dirs)
        with drop_routable_ffn(model, recipe.routable_layers):
            drop = evaluate(model, tokenizer, dirs)
            drop_types = token_type_losses(model, tokenizer, dirs)
        with open(data_dir / "tasks" / "heldout_ppl.jsonl", encoding="utf-8") as f:
            ppl_items = [json.loads(line) for line in f]
        manifest = {
            "recipe": recipe_dict(recipe),
            "recipe_hash": recipe_hash(recipe),
            "routable_layers": list(recipe.routable_layers),
            "n_params": sum(p.numel() for p in model.parameters()),
            "train_tokens": recipe.steps * recipe.batch_size * recipe.seq_len,
            "stream_tokens": {k: len(v) for k, v in streams.items()},
            "final_train_loss": sum(losses[-10:]) / len(losses[-10:]),
            "heldout_loss": dense["heldout_ppl"]["loss"],
            "heldout_ppl": dense["heldout_ppl"]["ppl"],
            "unigram_ppl": unigram_ppl(streams["plays"], ppl_items, tokenizer),
            "dense": dense,
            "drop_routable_ffn": drop,
            "drop_routable_ffn_retain": retain(drop, dense),
            "token_type_losses": {"dense": dense_types, "drop_routable_ffn": drop_types},
            "build_time_s": {"data": t_data, "pretrain": t_pretrain, "total": time.time() - t0},
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "python": platform.python_version(),
            },
        }
        (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        return manifest
    finally:
        torch.set_num_threads(threads)
