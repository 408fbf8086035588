"""Self-sampled SFT: chat responses that the dense backbone itself samples for the project's prompts.

Why the dense model's own samples at temperature 1 (not greedy, not written answers):
the dense model is then the minimiser of the expected LM loss on the responses (for
samples drawn from p, E[−∇ log p(x)] = 0), so a model trained without skip pressure
(``method=lora``, HeRo at α = 0) has nothing to learn but sampling noise and stays at
dense quality, and Retain measures the cost of routing rather than the gain (or loss) of
fine-tuning on another distribution. Greedy responses would sharpen the model (mode
seeking); written answers move it towards the data's own distribution. Train on the
responses only (``data.assistant_only_loss: true``): the prompts are the project's text.

A sample cut at the token budget (no stop token within ``max_new_tokens``) is kept, marked
``"truncated": true``: its turn's closing tokens were never sampled, so training must not
teach them there (``hero.data.sft.tokenize_conversation`` leaves them out of the labels).
Trained as if the model had ended the turn at the cut, the 23 % of testbed samples that reach
the budget cost a no-skip LoRA up to 4.4 Retain points (1.8 without; ``docs/testbed_audit``).
"""

from __future__ import annotations

import torch


@torch.no_grad()
def respond(
    model,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    sample: bool,
    seed: int,
    batch_size: int = 32,
    desc: str = "responses",
    stop_ids: list[int] | None = None,
) -> tuple[list[str], list[bool]]:
    """The model's answer to each prompt in a chat turn: sampled at temperature 1 (``sample``) or greedy.

    Generation stops at the tokenizer's end of sequence, or at any of ``stop_ids`` (e.g. a
    chat template's end-of-turn token) when given. Returns the answers and, per answer,
    whether it was cut at ``max_new_tokens`` before any stop token.
    """
    from tqdm import tqdm

    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    if stop_ids:
        kwargs["eos_token_id"] = list(stop_ids)
    stops = set(stop_ids or [tokenizer.eos_token_id])
    answers, truncated = [], []
    for start in tqdm(range(0, len(prompts), batch_size), desc=desc, mininterval=5):
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts[start : start + batch_size]
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        out = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **kwargs)
        for row in out[:, batch["input_ids"].shape[1] :].tolist():
            answers.append(tokenizer.decode(row, skip_special_tokens=True).strip())
            truncated.append(len(row) == max_new_tokens and not stops.intersection(row))
    tokenizer.padding_side = "right"
    return answers, truncated


def conversations(prompts: list[str], answers: list[str], truncated: list[bool] | None = None) -> list[dict]:
    """One-turn chat records; a prompt whose response is empty is dropped; a cut response is marked."""
    cut = truncated or [False] * len(answers)
    return [
        {
            "messages": [
                {"role": "user", "content": p},
                {"role": "assistant", "content": a, **({"truncated": True} if t else {})},
            ]
        }
        for p, a, t in zip(prompts, answers, cut)
        if a
    ]
