"""Token classes of the SmolLM2 bed's held-out sequences, for the FFN execution rate per class.

The sequences are the held-out play chunks the agreement task reads and the evaluation
chats (prompt + the dense model's greedy answer, chat template included). Each token gets
one class, checked in this order:

* ``answer_first``: the first token of an assistant answer;
* ``markup``: chat-template special tokens and the role line after ``<|im_start|>``;
* ``whitespace``, ``punctuation``, ``number``: tokens made only of such characters;
* ``function_word``: a word start (leading space, or first in its line) from a closed list of
  English function words, Shakespeare's included (thou, thee, thy, hath, ...);
* ``content_word``: any other word start;
* ``subword``: a continuation piece of a word (no leading space after a letter).
"""

from __future__ import annotations

import string
from pathlib import Path

from hero.jsonl import read_jsonl
from hero.testbed.tokentypes import labelled_batches

TOKEN_CLASSES = (
    "answer_first",
    "markup",
    "whitespace",
    "punctuation",
    "number",
    "function_word",
    "content_word",
    "subword",
)
FUNCTION_WORDS = frozenset(
    """a an the and or but nor so yet if then than as of to in on at by for from with without
into onto upon over under about after before between through during against among within is am are was were be been
being do does did doing have has had having will would shall should can could may might must i me my mine we us our
ours you your yours he him his she her hers it its they them their theirs this that these those who whom whose which
what where when why how not no all any some each every both either neither there here also only very just too
thou thee thy thine ye hath doth art shalt wilt dost hast o oh""".split()
)


def classify(pieces: list[str], answer_start: int | None = None, markup_end: set[int] | None = None) -> list[int]:
    """The class index of each token piece (decoded text of one token)."""
    out = []
    for i, piece in enumerate(pieces):
        word = piece.strip()
        prev = pieces[i - 1] if i else "\n"
        if i == answer_start:
            name = "answer_first"
        elif markup_end is not None and i in markup_end:
            name = "markup"
        elif not word:
            name = "whitespace"
        elif all(c in string.punctuation or not c.isalnum() for c in word):
            name = "punctuation"
        elif word.isdigit():
            name = "number"
        elif piece[0].isspace() or not prev or not prev[-1].isalpha():
            name = "function_word" if word.lower() in FUNCTION_WORDS else "content_word"
        else:
            name = "subword"
        out.append(TOKEN_CLASSES.index(name))
    return out


def _markup_positions(tokenizer, ids: list[int]) -> set[int]:
    """Indices of special tokens and of the role tokens and newline that follow ``<|im_start|>``."""
    special = set(tokenizer.all_special_ids)
    out, in_role = set(), False
    for i, token in enumerate(ids):
        if token in special:
            out.add(i)
            in_role = token == tokenizer.convert_tokens_to_ids("<|im_start|>")
        elif in_role:
            out.add(i)
            in_role = "\n" not in tokenizer.decode([token])
    return out


def typed_sequences(bed, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(token ids, class per token) of every held-out text chunk and evaluation chat."""
    from hero.smollm2.tasks import chat_texts

    out = []
    for row in read_jsonl(Path(bed.data_dir) / "heldout_text.jsonl"):
        ids = tokenizer(row["text"], add_special_tokens=False)["input_ids"]
        out.append((ids, classify([tokenizer.decode([t]) for t in ids])))
    chats = read_jsonl(Path(bed.data_dir) / "eval_chat.jsonl")
    for text, start in chat_texts(
        tokenizer, [c["messages"][0]["content"] for c in chats], [c["messages"][1]["content"] for c in chats]
    ):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        out.append((ids, classify([tokenizer.decode([t]) for t in ids], start, _markup_positions(tokenizer, ids))))
    return out


def token_class_batches(bed, tokenizer, batch_size: int = 16):
    """(input_ids, attention_mask, token class) batches, right-padded; class −1 marks padding."""
    return labelled_batches(typed_sequences(bed, tokenizer), tokenizer.pad_token_id, batch_size)
