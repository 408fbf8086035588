"""The testbed's suite (``eval=tiny``) in lm-evaluation-harness form: its tasks as local lm-eval tasks.

HERO_SPEC §7 asks for every score to come from lm-evaluation-harness; on the testbed
that is ``eval=tiny``. The task definitions are the YAML files in ``lm_eval/`` next to
this module (``hero_tiny_<task>``, one per ``hero.testbed.TASKS``). Their data is
generated for each evaluation by ``write_task_data`` from the testbed's task files into a
temporary directory that reaches the tasks through the TaskManager's metadata
(``custom_dataset: !function hero.testbed.suite.load_dataset``): nothing is downloaded,
and the TaskManager indexes only that folder (``include_defaults=False``), so the whole
suite runs offline in seconds.

The harness reproduces ``hero.testbed.evaluate`` metric for metric:

* ``fact_recall``, ``play_cloze``: lm-eval ``multiple_choice``, ``acc`` (argmax of the
  summed continuation log-likelihood; ties go to the first choice in both).
* ``fact_answer``, ``arithmetic``: lm-eval ``loglikelihood``; per item the harness
  returns (summed answer log-prob, all tokens greedy). ``answer_prob`` = exp(mean
  log-prob) (= 1 / lm-eval ``perplexity``), ``acc`` = share of all-greedy answers,
  ``answer_token_loss`` = −Σ log-prob / Σ answer tokens, with the answer token count
  written into the data (lm-eval's context/continuation split, which the testbed uses).
* ``heldout_ppl``: lm-eval's ``loglikelihood_rolling`` scores the first token after an
  EOT prefix, the testbed does not; so each chunk becomes a ``loglikelihood`` item whose
  context is exactly its first token. ``loss``, ``ppl``, ``inv_ppl`` are token-weighted
  over all chunks, as in the testbed. One exception (``scored_from``): lm-eval moves a
  context's trailing whitespace into the continuation, so a chunk that starts with a
  whitespace token (a blank line) keeps its leading whitespace tokens and the next token
  as context; those few tokens are not scored (2 of ~16k tokens on the 4fc89f8d6849
  build), which moves ``loss`` by about 1e-4 relative. Everything else is exact.

Otherwise scores differ from the testbed's only by batching round-off (lm-eval right-pads
without an attention mask; causal attention and per-token routing make that exact up to
float summation order).
"""

from __future__ import annotations

import json
from pathlib import Path

from hero.evaluation.harness import EvaluationError, local_task_manager, local_task_rows
from hero.jsonl import read_jsonl

TASK_DIR = Path(__file__).with_name("lm_eval")
DATA_KEY = "hero_tiny_data"


def lm_eval_task(task: str) -> str:
    """The lm-eval name of a testbed task."""
    return f"hero_tiny_{task}"


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _answer_row(row: dict, tokenizer) -> dict:
    n_context = len(_encode(tokenizer, row["context"]))
    return {**row, "n_target_tokens": len(_encode(tokenizer, row["context"] + row["target"])) - n_context}


def scored_from(tokenizer, text: str) -> int:
    """Index of the first token of a heldout_ppl chunk that the harness scores: 1 (as the testbed) unless the
    chunk starts with whitespace tokens, which lm-eval cannot keep as a context; then the first k ≥ 1 whose
    prefix ends in a non-whitespace token and re-encodes to itself."""
    ids = _encode(tokenizer, text)
    for k in range(1, len(ids)):
        head = tokenizer.decode(ids[:k])
        if text.startswith(head) and head == head.rstrip() and _encode(tokenizer, head) == ids[:k]:
            return k
    raise EvaluationError(f"heldout_ppl chunk {text[:40]!r} has no token boundary lm-eval can use as a context")


def _text_row(row: dict, tokenizer) -> dict:
    ids = _encode(tokenizer, row["text"])
    k = scored_from(tokenizer, row["text"])
    head = tokenizer.decode(ids[:k])
    return {"context": head, "continuation": row["text"][len(head) :], "n_tokens": len(ids) - k, "play": row["play"]}


_ROWS = {"fact_answer": _answer_row, "arithmetic": _answer_row, "heldout_ppl": _text_row}


def write_task_data(testbed, tokenizer, out_dir: str | Path, tasks) -> None:
    """Write ``<out_dir>/<task>.jsonl`` for ``tasks`` from the testbed's task files (see the module docstring)."""
    out = Path(out_dir)
    for task in tasks:
        rows = read_jsonl(Path(testbed.data_dir) / "tasks" / f"{task}.jsonl")
        convert = _ROWS.get(task)
        with open(out / f"{task}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(convert(row, tokenizer) if convert else row, ensure_ascii=False) + "\n")


def task_manager(data_dir: str | Path):
    """A TaskManager that knows only the tiny tasks, reading their data from ``data_dir``."""
    return local_task_manager(TASK_DIR, DATA_KEY, data_dir)


def load_dataset(task: str, hero_tiny_data: str | None = None, **_):
    """lm-eval ``custom_dataset``: the generated rows of ``task`` as the ``test`` split."""
    return local_task_rows(task, hero_tiny_data, lm_eval_task(task), DATA_KEY, "hero.testbed.suite.task_manager")


def process_answer(doc: dict, results: list[tuple[float, bool]]) -> dict:
    log_prob, greedy = results[0]
    return {"answer_prob": log_prob, "acc": float(greedy), "answer_token_loss": (log_prob, doc["n_target_tokens"])}


def process_text(doc: dict, results: list[tuple[float, bool]]) -> dict:
    scored = (results[0][0], doc["n_tokens"])
    return {"loss": scored, "ppl": scored, "inv_ppl": scored}
