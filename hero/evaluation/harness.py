"""lm-evaluation-harness in process: our model instance behind lm-eval's HFLM (HERO_SPEC §7).

The routed model is the backbone's own ``LlamaForCausalLM`` with routed decoder layers,
so ``HFLM(pretrained=<model instance>, tokenizer=<tokenizer>)`` runs every request type
through the routed forward: ``loglikelihood`` and ``multiple_choice`` (right-padded
batches, causal attention), ``loglikelihood_rolling``, and ``generate_until`` (HF
``generate`` with the KV cache, which routing keeps complete because attention always
runs). The same wrapper serves the dense backbone and the LoRA (PEFT) model.

Each task of a suite is one harness call with its own few-shot count, chat template
setting, generation overrides and limit (lm-eval applies chat template and limit per
call, not per task). Metric keys follow lm-eval's ``<metric>,<filter>`` with ``,none`` dropped:
``acc``, ``acc_norm``, ``acc_stderr``, ``exact_match,strict-match``.

lm-eval is pinned (``LM_EVAL_VERSION``, also in pyproject.toml) because scores drift
between releases; a different installed version is an error, and the version used is
recorded in ``eval_meta.lm_eval``. Like the lm-eval CLI, each task reseeds Python, NumPy
and torch (seeds 0, 1234, 1234) and seeds the few-shot sampler with 1234.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from importlib.metadata import version
from pathlib import Path

from hero.errors import ConfigError

LM_EVAL_VERSION = "0.4.13"
SAMPLE_SEED = 1234  # a task's ``sample``: sorted(random.Random(SAMPLE_SEED).sample(range(n_docs), sample))


class EvaluationError(ConfigError):
    """The evaluation config names something that cannot be evaluated."""


def lm_eval_version() -> str:
    """The installed lm-eval version; an error unless it is the pinned one."""
    installed = version("lm_eval")
    if installed != LM_EVAL_VERSION:
        raise EvaluationError(
            f"lm-eval {installed} is installed, HeRo Lab pins {LM_EVAL_VERSION} (scores drift "
            f"between versions): pip install 'lm-eval[hf]=={LM_EVAL_VERSION}'"
        )
    return installed


def local_task_manager(task_dir: Path, data_key: str, data_dir: str | Path):
    """A TaskManager that knows only the task YAMLs of ``task_dir``; they read their rows from ``data_dir``,
    passed as TaskManager metadata under ``data_key`` (the keyword their ``custom_dataset`` function takes)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(task_dir), include_defaults=False, metadata={data_key: str(data_dir)})


def local_task_rows(task: str, data_dir: str | None, lm_eval_task: str, data_key: str, manager: str):
    """lm-eval ``custom_dataset`` of a local task: ``<data_dir>/<task>.jsonl`` as the ``test`` split."""
    from datasets import Dataset, DatasetDict

    from hero.jsonl import read_jsonl

    if data_dir is None:
        raise EvaluationError(f"{lm_eval_task} reads its data from TaskManager metadata {data_key!r}: use {manager}")
    return DatasetDict({"test": Dataset.from_list(read_jsonl(Path(data_dir) / f"{task}.jsonl"))})


def continuation_lengths(requests, max_length: int) -> tuple[dict[tuple[int, ...], int], int]:
    """({model input row: the longest continuation scored on it}, the most trailing 0 tokens of any row) for
    lm-eval's loglikelihood ``requests`` ((strings), context ids, continuation ids): the row is what HFLM feeds
    the model, ``(context + continuation)[-(max_length + 1):][:-1]``, before it right-pads the batch with 0."""
    lengths: dict[tuple[int, ...], int] = {}
    zero_tail = 0
    for _, context, continuation in requests:
        row = tuple((context + continuation)[-(max_length + 1) :][:-1])
        lengths[row] = max(lengths.get(row, 0), len(continuation))
        zero_tail = max(zero_tail, len(row) - len(_stripped(row)))
    return lengths, zero_tail


def _stripped(row: tuple[int, ...]) -> tuple[int, ...]:
    """``row`` without its trailing 0 tokens (what right-padding with 0 cannot be told apart from)."""
    end = len(row)
    while end and row[end - 1] == 0:
        end -= 1
    return row[:end]


def logits_to_keep(batch, lengths: dict[tuple[int, ...], int], zero_tail: int) -> int | None:
    """How many final positions of the right-padded (B, P) ``batch`` lm-eval reads logits at: every row's
    continuation lies in positions ≥ s, s the smallest (row length − continuation length) over the rows, so the
    LM head and lm-eval's log-softmax need only positions s…P−1 (P − s of them). None: every position (s = 0, as
    in rolling perplexity), or a row that is none of the requests (then nothing is assumed)."""
    width = batch.shape[1]
    start = width
    for row in batch.tolist():
        end = len(_stripped(tuple(row)))
        starts = [
            end + pad - lengths[key]
            for pad in range(min(zero_tail, width - end) + 1)
            if (key := tuple(row[: end + pad])) in lengths
        ]
        if not starts:
            return None
        start = min(start, *starts)
    return width - start if start > 0 else None


def harness_model(model, tokenizer, batch_size: int, labelled_logits: bool = True):
    """lm-eval's HFLM around the model instance (no copy, no reload), without its progress bars: a run's terminal
    shows the project's own lines (``hero.logs``), and a bar per task and request type is several dozen lines.

    ``labelled_logits`` (``eval.labelled_logits``): a loglikelihood batch computes the LM head only at the positions
    lm-eval reads (``logits_to_keep``). HFLM takes ``log_softmax`` over the whole (B, T, vocab) output and keeps each
    row's continuation; the context positions that every row of the batch has before its continuation are dropped
    before the head instead (HF's ``logits_to_keep``). The kept positions' values are the full output's, and
    lm-eval's slicing (``ctx_len = inplen + (T_out − T)``, its offset for virtual tokens) finds each continuation in
    the shorter output."""
    import torch
    from lm_eval.models.huggingface import HFLM

    class QuietHFLM(HFLM):
        _lengths: tuple[dict, int] | None = None

        def loglikelihood(self, requests, disable_tqdm: bool = True):
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = True):
            return super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)

        def generate_until(self, requests, disable_tqdm: bool = True):
            return super().generate_until(requests, disable_tqdm=disable_tqdm)

        def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
            self._lengths = continuation_lengths(requests, self.max_length) if labelled_logits else None
            try:
                return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
            finally:
                self._lengths = None

        def _model_call(self, inps, attn_mask=None, labels=None):
            keep = None
            if self._lengths is not None and attn_mask is None and labels is None:
                keep = logits_to_keep(inps, *self._lengths)
            if keep is None:
                return super()._model_call(inps, attn_mask, labels)
            precision = self.mixed_precision_dtype
            with torch.no_grad(), torch.autocast(self.device.type, dtype=precision, enabled=precision is not None):
                return self.model(inps, logits_to_keep=keep).logits

    return QuietHFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)


@contextmanager
def quiet_request_building() -> Iterator[None]:
    """lm-eval builds a task's requests under a progress bar it offers no switch for (``lm_eval.api.task``'s
    ``tqdm``); within this block that bar is off."""
    import lm_eval.api.task as task_module

    real = task_module.tqdm
    task_module.tqdm = partial(real, disable=True)
    try:
        yield
    finally:
        task_module.tqdm = real


def metric_values(task_result: dict) -> dict[str, float]:
    """lm-eval's per-task result entry as {metric: value}, numeric values only, ``,none`` dropped."""
    values = {}
    for key, value in task_result.items():
        name, comma, selector = key.partition(",")
        if comma and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[name if selector == "none" else key] = float(value)
    return values


def sample_indices(n_docs: int, n: int) -> list[int]:
    """The seeded subset of a task's ``sample``: ``n`` distinct doc indices (all when ``n ≥ n_docs``), sorted."""
    import random

    return sorted(random.Random(SAMPLE_SEED).sample(range(n_docs), min(n, n_docs)))


def evaluate_task(lm, manager, spec, items: list | None = None) -> tuple[dict[str, float], dict]:
    """(metrics, sample counts) of one task spec (``hero.evaluation.suites.TaskSpec``) through the harness.

    What ``simple_evaluate`` does for one task, minus its environment report (a pip
    subprocess per call): seeds, per-task few-shot count and generation overrides, then
    ``lm_eval.evaluator.evaluate``. ``items``: a list that receives the task's per-item rows (``item_rows``);
    asking for them changes no score (lm-eval logs the samples it scores).
    """
    import random

    import numpy as np
    import torch
    from lm_eval.defaults import DEFAULT_OTHER_SEED, DEFAULT_RANDOM_SEED
    from lm_eval.evaluator import evaluate

    random.seed(DEFAULT_RANDOM_SEED)
    np.random.seed(DEFAULT_OTHER_SEED)
    torch.manual_seed(DEFAULT_OTHER_SEED)
    loaded = manager.load([spec.lm_eval_task])
    task = loaded["tasks"][spec.lm_eval_task]
    task.set_config(key="num_fewshot", value=spec.num_fewshot)
    if spec.gen_kwargs and task.get_config("output_type") == "generate_until":
        task.set_config(key="generation_kwargs", value=dict(spec.gen_kwargs), update=True)
    task.set_fewshot_seed(seed=DEFAULT_OTHER_SEED)
    samples = None
    if spec.sample is not None:
        samples = {spec.lm_eval_task: sample_indices(len(task.eval_docs), spec.sample)}
    with quiet_request_building():
        out = evaluate(
            lm=lm,
            task_dict=loaded,
            limit=spec.limit,
            samples=samples,
            log_samples=items is not None,
            apply_chat_template=spec.chat_template,
            fewshot_as_multiturn=spec.fewshot_as_multiturn,
            confirm_run_unsafe_code=spec.unsafe_code,
        )
    metrics = metric_values(out["results"][spec.lm_eval_task])
    if spec.metric not in metrics:
        raise EvaluationError(
            f"eval.tasks.{spec.name}.metric={spec.metric!r}: lm-eval task {spec.lm_eval_task!r} "
            f"reports {sorted(metrics)}"
        )
    if items is not None:
        output_type = task.get_config("output_type")
        items.extend(item_rows(spec.name, output_type, out["samples"][spec.lm_eval_task], lm))
    return metrics, dict(out["n-samples"][spec.lm_eval_task])


def item_rows(task: str, output_type: str, samples: list[dict], lm) -> list[dict]:
    """One row per scored item, in item order: what paired comparisons and per-item measures need.

    Every row: ``task`` (the suite's task name), ``item`` (lm-eval's doc id), ``doc`` (the first 16 hex of lm-eval's
    doc hash: two records score the same item only if these agree), ``metrics`` (lm-eval's per-item values, e.g.
    ``acc`` 0/1; a token-weighted metric's (summed log-prob, token count) pair as a list). By output type:

    * ``multiple_choice``: ``ll`` (summed log-likelihood of each choice's continuation), ``tokens`` (its token count,
      as lm-eval split context and continuation), ``gold`` (index, or list of indices), ``pred`` (argmax of ``ll``);
    * ``loglikelihood``: ``ll`` and ``tokens`` of the one continuation, ``greedy`` (it is the greedy continuation);
    * ``loglikelihood_rolling``: ``ll`` (summed over the document) and ``tokens``;
    * ``generate_until``: ``text`` (the filtered generation).
    """
    rows = []
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        row = {"task": task, "item": sample["doc_id"], "doc": sample["doc_hash"][:16]}
        responses, arguments = sample["filtered_resps"], sample["arguments"]
        if output_type == "generate_until":
            row["text"] = responses[0] if isinstance(responses, list) else responses
        elif output_type == "loglikelihood_rolling":
            row["ll"] = float(responses[0] if isinstance(responses, list) else responses)
            row["tokens"] = len(lm.tok_encode(arguments[0][0]))
        else:
            lls = [float(r[0]) for r in responses]
            tokens = [len(lm._encode_pair(context, continuation)[1]) for context, continuation in arguments]
            if output_type == "multiple_choice":
                row |= {"ll": lls, "tokens": tokens, "gold": sample["target"], "pred": lls.index(max(lls))}
            else:
                row |= {"ll": lls[0], "tokens": tokens[0], "greedy": bool(responses[0][1])}
        row["metrics"] = {name: _item_value(sample[name]) for name in sample["metrics"] if name in sample}
        rows.append(row)
    return rows


def _item_value(value):
    """A per-item metric value as JSON: a number, or a (log-prob, count) pair as a list."""
    if isinstance(value, (tuple, list)):
        return [_item_value(v) for v in value]
    return value if isinstance(value, (bool, int, float, str)) or value is None else float(value)
