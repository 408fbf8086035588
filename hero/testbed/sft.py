"""SFT data of the testbed in the chat ``messages`` format.

The HeRo router is trained on instruction data with the backbone's chat template; on
the testbed that data is derived from the same three sources as the pretraining
corpus, so the answers need the same FFN computation:

* fact questions ("Where does X live?") answered with a sentence stating the fact;
* sums ("What is 23 + 45?") answered with the ``23+45=68`` line;
* play continuation: a few lines of a play, the next lines as the answer.

Training examples use the training question phrasings, training arithmetic pairs and
training plays; validation examples use other question phrasings, held-out pairs and
the held-out plays. Each record is ``{"messages": [{"role": "user", ...},
{"role": "assistant", ...}]}``.

Those are the *written* responses (``data.responses: written``). The default training data
(``data.responses: sampled``) keeps the prompts and replaces each response by one the
dense backbone samples at temperature 1 (``hero.data.sampled`` says why): built once per
testbed by ``ensure_sampled`` into ``<testbed>/data/sampled-v<SAMPLED_VERSION>/``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from hero.testbed.corpus import ATTRIBUTES, HELDOUT_TEMPLATES, TRAIN_TEMPLATES, arith_line

TRAIN_QUESTIONS = {
    "home": ("Where does {e} live?", "Which town is {e} from?"),
    "trade": ("What is the trade of {e}?", "What does {e} do for a living?"),
    "pet": ("What animal does {e} keep?", "Which pet belongs to {e}?"),
}
VAL_QUESTIONS = {
    "home": ("Tell me where {e} lives.",),
    "trade": ("Name the trade of {e}.",),
    "pet": ("Name the pet of {e}.",),
}
MIX = (("fact", 0.4), ("arith", 0.3), ("continue", 0.3))
SAMPLED_VERSION = 2  # bump when the sampling below changes what it writes (2: cut samples marked "truncated")
SAMPLED_MAX_NEW_TOKENS = 64  # the longest written response (two play lines) is ~40 tokens


def play_excerpt(text: str, rng: random.Random, n_context: int = 4, n_answer: int = 2) -> tuple[str, str]:
    """A random run of ``n_context`` non-empty lines of ``text`` and the ``n_answer`` lines after it."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    i = rng.randrange(len(lines) - n_context - n_answer)
    return "\n".join(lines[i : i + n_context]), "\n".join(lines[i + n_context : i + n_context + n_answer])


def _message(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


def make_sft(
    n: int,
    entities: list[dict[str, str]],
    pairs: list[tuple[int, int]],
    plays: dict[str, str],
    rng: random.Random,
    split: str,
) -> list[dict]:
    """``n`` chat records for ``split`` ("train" or "val") drawn from the given sources."""
    questions = TRAIN_QUESTIONS if split == "train" else VAL_QUESTIONS
    templates = TRAIN_TEMPLATES if split == "train" else HELDOUT_TEMPLATES
    kinds, weights = zip(*MIX)
    texts = [plays[k] for k in sorted(plays)]
    records = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        if kind == "fact":
            e, a = rng.choice(entities), rng.choice(tuple(ATTRIBUTES))
            records.append(
                _message(
                    rng.choice(questions[a]).format(e=e["name"]), rng.choice(templates[a]).format(e=e["name"], v=e[a])
                )
            )
        elif kind == "arith":
            a, b = rng.choice(pairs)
            records.append(_message(f"What is {a} + {b}?", arith_line(a, b)))
        else:
            context, answer = play_excerpt(rng.choice(texts), rng)
            records.append(_message(f"Continue the play:\n{context}", answer))
    return records


def ensure_sampled(bed) -> Path:
    """The directory of the testbed's self-sampled SFT files (``sft_train.jsonl``, ``sft_val.jsonl``), built once.

    Each split keeps the written file's prompts in order; the responses are the dense
    backbone's samples at temperature 1, ended by the chat template's ``<|end|>`` (seeded
    from the recipe seed, one seed per split). A prompt whose sample is empty is dropped; a
    sample that reaches ``SAMPLED_MAX_NEW_TOKENS`` is kept cut there and marked ``"truncated"``
    (most play continuations: the backbone rarely ends a play turn), so training leaves its
    ``<|end|>``, which the backbone never sampled there, out of the labels.
    """
    from hero.data.sampled import conversations, respond
    from hero.jsonl import read_jsonl, write_jsonl
    from hero.once import built_once

    directory = bed.data_dir / f"sampled-v{SAMPLED_VERSION}"

    def build(tmp: Path) -> None:
        model, tokenizer = bed.load_backbone(), bed.load_tokenizer()
        stop = [tokenizer.convert_tokens_to_ids("<|end|>"), tokenizer.eos_token_id]
        seed = bed.manifest["recipe"]["seed"]
        counts = {}
        for offset, split in enumerate(("train", "val")):
            prompts = [row["messages"][0]["content"] for row in read_jsonl(bed.data_dir / f"sft_{split}.jsonl")]
            answers, truncated = respond(
                model,
                tokenizer,
                prompts,
                SAMPLED_MAX_NEW_TOKENS,
                sample=True,
                seed=seed + 10 + offset,
                desc=f"sampling {split} responses",
                stop_ids=stop,
            )
            rows = conversations(prompts, answers, truncated)
            write_jsonl(tmp / f"sft_{split}.jsonl", rows)
            counts[split] = {
                "prompts": len(prompts),
                "rows": len(rows),
                "truncated": sum(1 for r in rows if r["messages"][1].get("truncated")),
            }
        (tmp / "sampled.json").write_text(
            json.dumps(
                {"version": SAMPLED_VERSION, "seed": seed, "counts": counts, "max_new_tokens": SAMPLED_MAX_NEW_TOKENS},
                indent=1,
            )
        )

    built_once(directory, "sampled.json", build, "self-sampled SFT responses", "testbed")
    return directory
