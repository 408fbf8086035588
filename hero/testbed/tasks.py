"""The ``tiny`` task suite: task files written at build time and the testbed's own scorer.

Files: ``<data_dir>/tasks/<task>.jsonl``, one JSON object per line. All continuations
(``choices``, ``target``) carry their own leading space where the text has one, so an
lm-eval local task (``dataset_path: json``, ``dataset_kwargs: {data_files: ...}``)
must set ``target_delimiter: ""``. No BOS is prepended (lm-eval's HF default).

=============  ================================================  =========================
task           fields                                            lm-eval form
=============  ================================================  =========================
fact_recall    query, choices (4 values), gold (int),            multiple_choice, metric acc
               entity, attribute
fact_select    query, choices (16 values), gold (int),           multiple_choice, metric acc
               entity, attribute
arith_units    query ("23+45=6"), choices (10 digits), gold, a, b multiple_choice, metric acc
fact_answer    context, target, entity, attribute                loglikelihood, metrics acc,
                                                                 perplexity
arithmetic     context ("23+45="), target ("68"), a, b           loglikelihood, metrics acc,
                                                                 perplexity
play_cloze     query, choices (4 words), gold (int), play        multiple_choice, metric acc
heldout_ppl    text, play                                        loglikelihood_rolling
=============  ================================================  =========================

* ``fact_recall``: every (entity, attribute) asked in a *held-out* phrasing
  ("In truth, Zaigra lives in"); the three distractors are other values of the same attribute.
  Chosen by summed log-likelihood of the continuation. Chance 0.25.
* ``fact_answer``: both held-out phrasings of every fact, scored on the answer tokens
  only. ``answer_prob`` = exp(mean over items of the summed answer log-probability) =
  the geometric-mean probability of the whole answer = 1 / lm-eval ``perplexity`` of a
  loglikelihood task. ``acc`` = every answer token is the greedy argmax (lm-eval
  ``acc``). Chance of ``answer_prob``: 1/16 (uniform over the attribute's 16 values).
* ``arithmetic``: held-out (a, b) pairs, never in pretraining. Same metrics as
  ``fact_answer``; chance of ``answer_prob``: 1/199 (uniform over the possible sums).
* ``play_cloze``: the last word of a line of a held-out play, after the two preceding
  lines; distractors are last words of other lines of the same play. Chance 0.25.
* ``heldout_ppl``: contiguous chunks of the held-out plays (whole lines, at most
  ``recipe.seq_len`` tokens). ``ppl`` = exp(mean next-token NLL over all scored tokens;
  the first token of each chunk is not scored), lower is better; ``inv_ppl`` = 1/ppl
  (geometric-mean token probability), higher is better; ``loss`` = mean NLL. lm-eval's
  rolling perplexities are per word/byte and prepend an EOT token, so they differ
  in scale. Chance of ``inv_ppl``: 1/vocab_size of ``RECIPE`` (uniform next-token guess); the build
  also records the unigram perplexity in the manifest.

* ``fact_select``: the ``fact_answer`` questions as multiple choice among all 16 values of
  the attribute (fixed order); acc, chance 1/16.
* ``arith_units``: a held-out sum cut before the units digit of its result, the ten digits
  as choices; acc, chance 0.1.

Every metric other than ``ppl`` and ``loss`` is higher-is-better. ``TASK_PRIMARY_METRIC``
names each task's primary metric; Retain (score / baseline score per task, mean × 100) is
computed over ``RETAIN_TASKS`` only: ``fact_select`` and ``heldout_ppl``, the bounded
metrics that are far above chance and respond to removing the routable FFNs on every
build audited by ``hero.audit`` (``docs/testbed/README.md``, ``docs/testbed_audit``). The others are
diagnostics: near chance (``fact_answer``, ``arithmetic``, ``arith_units``, whose ratios
to dense swing by more than ×2 between builds of one recipe) or unmoved by the routable
FFNs (``fact_recall``, ``play_cloze``).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import torch
import torch.nn.functional as F

from hero.jsonl import read_jsonl
from hero.testbed.corpus import ATTRIBUTES, HELDOUT_TEMPLATES, arith_line, facts_of
from hero.testbed.recipe import RECIPE

TASKS = ("fact_recall", "fact_select", "fact_answer", "arithmetic", "arith_units", "play_cloze", "heldout_ppl")
TASK_PRIMARY_METRIC: dict[str, str] = {
    "fact_recall": "acc",
    "fact_select": "acc",
    "fact_answer": "answer_prob",
    "arithmetic": "answer_prob",
    "arith_units": "acc",
    "play_cloze": "acc",
    "heldout_ppl": "inv_ppl",
}
RETAIN_TASKS = ("fact_select", "heldout_ppl")
CHANCE_MARGIN = 2.0  # every Retain task's dense score is at least this multiple of its chance level
CHANCE: dict[str, float] = {
    "fact_recall": 0.25,
    "fact_select": 1 / 16,
    "fact_answer": 1 / 16,
    "arithmetic": 1 / 199,
    "arith_units": 0.1,
    "play_cloze": 0.25,
    "heldout_ppl": 1 / RECIPE.vocab_size,
}


def _prefix(template: str, value: str, entity: str) -> str:
    """The template filled in, cut just before `` value`` (templates end with the value)."""
    text = template.format(e=entity, v=value)
    return text[: text.rindex(" " + value)]


def make_fact_tasks(entities: list[dict[str, str]], rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(fact_recall, fact_answer) items over every fact, in held-out phrasings."""
    recall, answer = [], []
    for fact in facts_of(entities):
        templates = HELDOUT_TEMPLATES[fact.attribute]
        for template in templates:
            answer.append(
                {
                    "context": _prefix(template, fact.value, fact.entity),
                    "target": " " + fact.value,
                    "entity": fact.entity,
                    "attribute": fact.attribute,
                }
            )
        others = [v for v in ATTRIBUTES[fact.attribute] if v != fact.value]
        choices = [fact.value, *rng.sample(others, 3)]
        rng.shuffle(choices)
        recall.append(
            {
                "query": _prefix(rng.choice(templates), fact.value, fact.entity),
                "choices": [" " + c for c in choices],
                "gold": choices.index(fact.value),
                "entity": fact.entity,
                "attribute": fact.attribute,
            }
        )
    return recall, answer


def make_fact_select(entities: list[dict[str, str]]) -> list[dict]:
    """Every fact in each of its held-out phrasings, with all 16 values of the attribute as choices (fixed order)."""
    items = []
    for fact in facts_of(entities):
        values = list(ATTRIBUTES[fact.attribute])
        for template in HELDOUT_TEMPLATES[fact.attribute]:
            items.append(
                {
                    "query": _prefix(template, fact.value, fact.entity),
                    "choices": [" " + v for v in values],
                    "gold": values.index(fact.value),
                    "entity": fact.entity,
                    "attribute": fact.attribute,
                }
            )
    return items


def make_arith_units(pairs: list[tuple[int, int]], n: int, rng: random.Random) -> list[dict]:
    """``n`` held-out sums cut before the units digit of the result; the ten digits as choices."""
    items = []
    for a, b in rng.sample(pairs, min(n, len(pairs))):
        line = arith_line(a, b)
        items.append(
            {"query": line[:-1], "choices": [str(d) for d in range(10)], "gold": int(line[-1]), "a": a, "b": b}
        )
    return items


def make_arith_task(pairs: list[tuple[int, int]], n: int, rng: random.Random) -> list[dict]:
    """``n`` held-out sums as (context, target) items."""
    items = []
    for a, b in rng.sample(pairs, min(n, len(pairs))):
        line = arith_line(a, b)
        cut = line.index("=") + 1
        items.append({"context": line[:cut], "target": line[cut:], "a": a, "b": b})
    return items


def make_cloze_task(heldout: dict[str, str], n: int, rng: random.Random) -> list[dict]:
    """``n`` last-word cloze items from the held-out plays (verse/prose lines of >= 4 words)."""
    items = []
    names = sorted(heldout)
    per_play = {}
    for name in names:
        lines = [ln.strip() for ln in heldout[name].splitlines() if ln.strip()]
        ok = [i for i, ln in enumerate(lines) if i >= 2 and len(ln.split()) >= 4 and ln.split()[-1].isalpha()]
        per_play[name] = (lines, ok, sorted({lines[i].split()[-1] for i in ok}))
    while len(items) < n:
        name = names[len(items) % len(names)]
        lines, ok, words = per_play[name]
        i = rng.choice(ok)
        *head, gold = lines[i].split()
        distractors = rng.sample([w for w in words if w.lower() != gold.lower()], 3)
        choices = [gold, *distractors]
        rng.shuffle(choices)
        items.append(
            {
                "query": "\n".join(lines[i - 2 : i] + [" ".join(head)]),
                "choices": [" " + c for c in choices],
                "gold": choices.index(gold),
                "play": name,
            }
        )
    return items


def make_ppl_task(heldout: dict[str, str], tokenizer, max_tokens: int, seq_len: int) -> list[dict]:
    """Chunks of whole lines of the held-out plays, each at most ``seq_len`` tokens, ``max_tokens`` in all."""
    items, total = [], 0
    names = sorted(heldout)
    line_lists = {name: heldout[name].splitlines(keepends=True) for name in names}
    pos = dict.fromkeys(names, 0)
    while total < max_tokens:
        name = names[len(items) % len(names)]
        lines, chunk, n_tok = line_lists[name], "", 0
        while pos[name] < len(lines):
            n_line = len(tokenizer(lines[pos[name]])["input_ids"])
            if n_tok + n_line > seq_len and chunk:
                break
            chunk, n_tok = chunk + lines[pos[name]], n_tok + n_line
            pos[name] += 1
        if not chunk:
            break
        items.append({"text": chunk, "play": name})
        total += n_tok
    return items


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def score_sequences(
    model, sequences: list[list[int]], starts: list[int], batch_size: int, pad_id: int
) -> list[tuple[float, int, bool]]:
    """For each token sequence, (summed log-prob, token count, all-greedy) of its tokens from ``start`` on.

    Sequences are scored in length-sorted batches, right-padded, with only
    ``model(input_ids=..., attention_mask=...)`` called, so wrapped models work too.
    """
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out: list[tuple[float, int, bool]] = [(0.0, 0, True)] * len(sequences)
    device = _device(model)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        width = max(len(sequences[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, : len(sequences[i])] = torch.tensor(sequences[i])
            mask[r, : len(sequences[i])] = 1
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logp = F.log_softmax(logits[:, :-1], dim=-1)
        target = ids[:, 1:].to(device)
        tok_logp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
        greedy = (logp.argmax(-1) == target).cpu()
        for r, i in enumerate(idx):
            s, n = starts[i], len(sequences[i])
            out[i] = (float(tok_logp[r, s - 1 : n - 1].sum()), n - s, bool(greedy[r, s - 1 : n - 1].all()))
    return out


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], int]:
    """Token ids of context+continuation and the index of the first continuation token (lm-eval's split)."""
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    n_ctx = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    return whole, n_ctx


def _multiple_choice(model, tokenizer, items, batch_size) -> dict[str, float]:
    seqs, starts = [], []
    for it in items:
        for c in it["choices"]:
            s, n = encode_pair(tokenizer, it["query"], c)
            seqs.append(s)
            starts.append(n)
    scores = score_sequences(model, seqs, starts, batch_size, tokenizer.pad_token_id)
    correct, k = 0, 0
    for it in items:
        lls = [scores[k + j][0] for j in range(len(it["choices"]))]
        correct += int(max(range(len(lls)), key=lls.__getitem__) == it["gold"])
        k += len(it["choices"])
    return {"acc": correct / len(items)}


def _answer(model, tokenizer, items, batch_size) -> dict[str, float]:
    pairs = [encode_pair(tokenizer, it["context"], it["target"]) for it in items]
    scores = score_sequences(model, [p[0] for p in pairs], [p[1] for p in pairs], batch_size, tokenizer.pad_token_id)
    mean_ll = sum(s[0] for s in scores) / len(scores)
    return {
        "answer_prob": math.exp(mean_ll),
        "acc": sum(s[2] for s in scores) / len(scores),
        "answer_token_loss": -sum(s[0] for s in scores) / sum(s[1] for s in scores),
    }


def _perplexity(model, tokenizer, items, batch_size) -> dict[str, float]:
    seqs = [tokenizer(it["text"], add_special_tokens=False)["input_ids"] for it in items]
    scores = score_sequences(model, seqs, [1] * len(seqs), batch_size, tokenizer.pad_token_id)
    loss = -sum(s[0] for s in scores) / sum(s[1] for s in scores)
    return {"loss": loss, "ppl": math.exp(loss), "inv_ppl": math.exp(-loss)}


_SCORERS = {
    "fact_recall": _multiple_choice,
    "fact_select": _multiple_choice,
    "arith_units": _multiple_choice,
    "fact_answer": _answer,
    "arithmetic": _answer,
    "play_cloze": _multiple_choice,
    "heldout_ppl": _perplexity,
}


def evaluate(model, tokenizer, testbed, batch_size: int = 32) -> dict[str, dict[str, float]]:
    """Score ``model`` on the whole tiny suite: task -> metric -> value (see the module docstring)."""
    was_training = model.training
    model.eval()
    try:
        return {
            task: _SCORERS[task](
                model, tokenizer, read_jsonl(Path(testbed.data_dir) / "tasks" / f"{task}.jsonl"), batch_size
            )
            for task in TASKS
        }
    finally:
        model.train(was_training)


def retain(scores: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]]) -> float | None:
    """Retain (%) of ``scores`` against ``baseline`` on the primary metrics of ``RETAIN_TASKS`` (HERO_SPEC §7).

    None where a baseline score is 0 (a model at the floor of a task, e.g. the micro recipe's).
    """
    from hero.statistics import RetainError
    from hero.statistics import retain as retain_against

    try:
        return retain_against(
            scores, baseline, {t: TASK_PRIMARY_METRIC[t] for t in RETAIN_TASKS}, baseline_name="baseline"
        )["value"]
    except RetainError:
        return None
