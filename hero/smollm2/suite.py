"""The SmolLM2 bed's suite (``eval=smollm2``) in lm-evaluation-harness form: the SmolLM2 bed's tasks as local lm-eval tasks.

Task definitions: ``lm_eval/hero_smollm2_<task>.yaml`` next to this module; their data are the task files
the bed wrote once (``hero.smollm2.tasks``), reached through the TaskManager's metadata
(``custom_dataset: !function hero.smollm2.suite.load_dataset``), and the TaskManager
indexes only that folder, so the suite runs offline. Every primary metric is bounded and
higher is better:

| task | request | primary | other metrics |
|---|---|---|---|
| ``knowledge`` | multiple_choice | ``acc`` (chance 0.25) | |
| ``answer`` | generate_until, chat, greedy | ``acc`` (answer contains the gold answer) | |
| ``heldout_ppl`` | loglikelihood_rolling | ``inv_ppl`` = exp(−token NLL) | ``loss``, ``ppl`` |
| ``agree_text``, ``agree_chat`` | multiple_choice over dense top-k | ``agree`` (dense = 1) | ``kl`` (dense = 0) |
"""

from __future__ import annotations

import math
from pathlib import Path

from hero.evaluation.harness import local_task_manager, local_task_rows
from hero.smollm2.knowledge import contains_answer

TASK_DIR = Path(__file__).with_name("lm_eval")
DATA_KEY = "hero_smollm2_data"


def lm_eval_task(task: str) -> str:
    return f"hero_smollm2_{task}"


def task_manager(data_dir: str | Path):
    """A TaskManager that knows only the smollm2 tasks, reading their data from ``data_dir``."""
    return local_task_manager(TASK_DIR, DATA_KEY, data_dir)


def load_dataset(task: str, hero_smollm2_data: str | None = None, **_):
    """lm-eval ``custom_dataset``: the rows of ``task`` as the ``test`` split."""
    return local_task_rows(task, hero_smollm2_data, lm_eval_task(task), DATA_KEY, "hero.smollm2.suite.task_manager")


def process_answer(doc: dict, results: list[str]) -> dict:
    return {"acc": float(contains_answer(results[0], doc["aliases"]))}


def process_text(doc: dict, results: list[float]) -> dict:
    scored = (results[0], doc["n_tokens"])
    return {"loss": scored, "ppl": scored, "inv_ppl": scored}


def coarse_kl(dense_logp: list[float], logq: list[float]) -> float:
    """KL(p ‖ q) over the bins {each top-k token, the rest}: a lower bound on the full KL (data processing)."""
    p = [math.exp(v) for v in dense_logp]
    q = [math.exp(v) for v in logq]
    p_rest, q_rest = max(1.0 - sum(p), 1e-12), max(1.0 - sum(q), 1e-12)
    return sum(pi * (lp - lq) for pi, lp, lq in zip(p, dense_logp, logq)) + p_rest * math.log(p_rest / q_rest)


def process_agreement(doc: dict, results: list[tuple[float, bool]]) -> dict:
    """Choice 0 is the dense top-1 token: its ``greedy`` flag says whether the model's argmax is the same token."""
    return {"agree": float(results[0][1]), "kl": coarse_kl(doc["dense_logp"], [ll for ll, _ in results])}
