"""Self-sampled SFT: chat responses that the dense backbone itself samples for the project's prompts.

Why the dense model's own samples at temperature 1 (not greedy, not written answers):
the dense model is then the minimiser of the expected LM loss on the responses (for
samples drawn from p, E[−∇ log p(x)] = 0), so a model trained without skip pressure
(``method=lora``, HeRo at α = 0) has nothing to learn but sampling noise and stays at
dense quality, and Retain measures the cost of routing rather than the gain (or loss) of
fine-tuning on another distribution. Greedy responses would sharpen the model (mode
seeking); written answers move it towards the data's own distribution. Train on the
responses only (``data.assistant_only_loss: true``): the prompts are the project's text.
"""
from __future__ import annotations

import torch


@torch.no_grad()
def respond(model, tokenizer, prompts: list[str], max_new_tokens: int, sample: bool, seed: int,
            batch_size: int = 32, desc: str = "responses", stop_ids: list[int] | None = None) -> list[str]:
    """The model's answer to each prompt in a chat turn: sampled at temperature 1 (``sample``) or greedy.

    Generation stops at the tokenizer's end of sequence, or at any of ``stop_ids`` (e.g. a
    chat template's end-of-turn token) when given.
    """
    from tqdm import tqdm

    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    if stop_ids:
        kwargs["eos_token_id"] = list(stop_ids)
    answers = []
    for start in tqdm(range(0, len(prompts), batch_size), desc=desc, mininterval=5):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts[start: start + batch_size]]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **kwargs)
        answers += [tokenizer.decode(row[batch["input_ids"].shape[1]:], skip_special_tokens=True).strip() for row in out]
    tokenizer.padding_side = "right"
    return answers


def conversations(prompts: list[str], answers: list[str]) -> list[dict]:
    """One-turn chat records; a prompt whose response is empty is dropped."""
    return [{"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]}
            for p, a in zip(prompts, answers) if a]
