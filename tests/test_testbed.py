"""Tests of the embedded testbed (hero.testbed).

Fast tests use ``TINY_RECIPE`` built into a temporary cache root (seconds). Tests marked
``testbed`` use the full cached backbone (built on first use, ~10 min once per machine).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import compose_train

from hero.evaluation import LM_EVAL_VERSION, evaluate_suite, suite_fingerprint
from hero.jsonl import read_jsonl
from hero.model import decoder_layers
from hero.model.drop import drop_routable_ffn
from hero.once import built_once, resolve_cache_root
from hero.testbed import (
    CHANCE,
    CHANCE_MARGIN,
    RECIPE,
    RETAIN_TASKS,
    TASK_PRIMARY_METRIC,
    TASKS,
    TINY_RECIPE,
    TOKEN_TYPES,
    ensure_testbed,
    evaluate,
    recipe_hash,
    retain,
    token_type_batches,
)
from hero.testbed.build import build_corpus, build_tokenizer_and_streams
from hero.testbed.suite import scored_from
from hero.testbed.tasks import score_sequences

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("hero_cache")
    return root, ensure_testbed(root, TINY_RECIPE)


def test_corpus_and_tokenizer_are_deterministic():
    a_tok, a_streams = build_tokenizer_and_streams(TINY_RECIPE, build_corpus(TINY_RECIPE))
    b_tok, b_streams = build_tokenizer_and_streams(TINY_RECIPE, build_corpus(TINY_RECIPE))
    assert a_tok.backend_tokenizer.to_str() == b_tok.backend_tokenizer.to_str()
    assert a_streams.keys() == b_streams.keys()
    for name in a_streams:
        assert torch.equal(a_streams[name], b_streams[name]), name


def test_tokenizer_splits_digits_and_has_chat_template(tiny):
    tok = tiny[1].load_tokenizer()
    ids = tok("12+345=357", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == list("12+345=357")
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}], tokenize=False
    )
    assert text == "<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n"


def test_cache_layout_and_files(tiny):
    root, tb = tiny
    assert tb.root == root / "testbed" / recipe_hash(TINY_RECIPE)
    assert (tb.backbone_dir / "config.json").exists() and (tb.backbone_dir / "tokenizer.json").exists()
    for name in ("sft_train.jsonl", "sft_val.jsonl", "heldout_plays.txt", "token_types.jsonl"):
        assert (tb.data_dir / name).exists(), name
    for task in TASKS:
        assert (tb.data_dir / "tasks" / f"{task}.jsonl").exists(), task
    for line in open(tb.data_dir / "sft_train.jsonl"):
        roles = [m["role"] for m in json.loads(line)["messages"]]
        assert roles == ["user", "assistant"]
    assert set(TASK_PRIMARY_METRIC) == set(CHANCE) == set(TASKS) >= set(RETAIN_TASKS)


def test_sampled_responses_are_the_dense_backbones_samples_for_the_written_prompts(tiny):
    from hero.data.sampled import respond
    from hero.testbed.sft import SAMPLED_MAX_NEW_TOKENS, ensure_sampled

    _, tb = tiny
    directory = ensure_sampled(tb)
    stamp = (directory / "sampled.json").stat().st_mtime_ns
    assert ensure_sampled(tb) == directory and (directory / "sampled.json").stat().st_mtime_ns == stamp
    for split in ("train", "val"):
        written = [json.loads(line)["messages"] for line in open(tb.data_dir / f"sft_{split}.jsonl")]
        sampled = [json.loads(line)["messages"] for line in open(directory / f"sft_{split}.jsonl")]
        prompts = [m[0]["content"] for m in written]
        assert [m[0]["content"] for m in sampled] == [p for p in prompts if p in {m[0]["content"] for m in sampled}]
        assert len(sampled) >= 0.9 * len(written)
        assert [m[1]["content"] for m in sampled] != [m[1]["content"] for m in written][: len(sampled)]
    tok = tb.load_tokenizer()
    stop = [tok.convert_tokens_to_ids("<|end|>"), tok.eos_token_id]
    first = [json.loads(line)["messages"] for line in open(tb.data_dir / "sft_train.jsonl")][:32]
    again, cut = respond(
        tb.load_backbone(),
        tok,
        [m[0]["content"] for m in first],
        SAMPLED_MAX_NEW_TOKENS,
        sample=True,
        seed=TINY_RECIPE.seed + 10,
        stop_ids=stop,
    )
    rows = [json.loads(line)["messages"] for line in open(directory / "sft_train.jsonl")]
    assert [a for a in again if a][:10] == [m[1]["content"] for m in rows][:10]
    assert [bool(c) for a, c in zip(again, cut) if a][:10] == [m[1].get("truncated", False) for m in rows][:10]
    n_cut = sum(1 for m in rows if m[1].get("truncated"))
    assert 0 < n_cut < len(rows)  # play continuations reach the budget, short answers end on <|end|>


def test_recipe_change_triggers_rebuild_and_same_recipe_reuses(tiny):
    root, tb = tiny
    stamp = (tb.root / "manifest.json").stat().st_mtime_ns
    again = ensure_testbed(root, TINY_RECIPE)
    assert (again.root / "manifest.json").stat().st_mtime_ns == stamp
    changed = dataclasses.replace(TINY_RECIPE, seed=TINY_RECIPE.seed + 1)
    other = ensure_testbed(root, changed)
    assert other.recipe_hash != tb.recipe_hash == recipe_hash(TINY_RECIPE)
    assert other.root != tb.root and (other.root / "manifest.json").exists()
    assert other.manifest["recipe"]["seed"] == TINY_RECIPE.seed + 1


def test_concurrent_callers_build_once(tmp_path):
    code = (
        "import sys; from hero.testbed import ensure_testbed, TINY_RECIPE; "
        "print('ROOT', ensure_testbed(sys.argv[1], TINY_RECIPE).root)"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(o.count("[testbed] building") for o in outs) == 1
    assert len({o.split("ROOT")[-1].strip() for o in outs}) == 1


def test_one_cache_root_for_every_cache(tmp_path, monkeypatch):
    """The argument (``paths.cache``), else ``$HERO_CACHE``, else ``~/.cache/hero``; an empty value is unset."""
    monkeypatch.setenv("HERO_CACHE", str(tmp_path / "env"))
    assert resolve_cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_cache_root() == resolve_cache_root("") == tmp_path / "env"
    monkeypatch.setenv("HERO_CACHE", "")
    assert resolve_cache_root(None) == Path.home() / ".cache" / "hero"


def test_rebuild_builds_anew_unless_a_build_finished_while_waiting(tmp_path, capsys):
    """``ensure_testbed(rebuild=True)``'s rule, in ``hero.once.built_once`` (no testbed built: a stub build)."""
    directory, builds = tmp_path / "testbed" / "key", []

    def build(tmp):
        builds.append(tmp)
        (tmp / "manifest.json").write_text("{}")

    built_once(directory, "manifest.json", build, "key", "testbed", note="minutes, once per recipe")
    built_once(directory, "manifest.json", build, "key", "testbed")
    assert len(builds) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"[testbed] building key into {directory} (minutes, once per recipe)"
    )
    built_once(directory, "manifest.json", build, "key", "testbed", rebuild=True)
    assert len(builds) == 2
    # Another process holds the lock and finishes a build while this one waits: that build is reused.
    with open(tmp_path / "testbed" / "key.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(
            target=built_once, args=(directory, "manifest.json", build, "key", "testbed", "once", True)
        )
        waiter.start()
        time.sleep(0.5)
        (directory / "manifest.json").write_text("{}")
    waiter.join(timeout=30)
    assert not waiter.is_alive() and len(builds) == 2


def test_drop_routable_ffn_zeroes_and_restores(tiny):
    model = tiny[1].load_backbone()
    layers = decoder_layers(model)
    original = [layer.mlp for layer in layers]
    x = torch.randn(1, 3, model.config.hidden_size)
    with drop_routable_ffn(model) as dropped:
        n = len(layers)
        assert all(layers[i].mlp is original[i] for i in range(n // 2))
        assert all(torch.count_nonzero(dropped.model.layers[i].mlp(x)) == 0 for i in range(n // 2, n))
    assert all(layer.mlp is mlp for layer, mlp in zip(layers, original))


def test_token_type_batches_label_every_type(tiny):
    tb = tiny[1]
    tok = tb.load_tokenizer()
    seen = set()
    for ids, mask, types in token_type_batches(tb, tok, batch_size=8):
        assert ids.shape == mask.shape == types.shape and ids.dtype == types.dtype == torch.long
        assert torch.equal(types < 0, mask == 0)
        seen |= set(types[types >= 0].tolist())
    assert seen == set(range(len(TOKEN_TYPES)))


def test_evaluate_runs_on_tiny(tiny):
    tb = tiny[1]
    scores = evaluate(tb.load_backbone(), tb.load_tokenizer(), tb, batch_size=8)
    for task, metric in TASK_PRIMARY_METRIC.items():
        assert 0.0 <= scores[task][metric] <= 1.0
    ones = {task: {metric: 0.5} for task, metric in TASK_PRIMARY_METRIC.items()}
    assert retain(ones, ones) == pytest.approx(100.0)
    assert retain({**ones, RETAIN_TASKS[0]: {TASK_PRIMARY_METRIC[RETAIN_TASKS[0]]: 0.25}}, ones) == pytest.approx(
        100.0 - 50.0 / len(RETAIN_TASKS)
    )
    assert retain(ones, {**ones, RETAIN_TASKS[0]: {TASK_PRIMARY_METRIC[RETAIN_TASKS[0]]: 0.0}}) is None


def _testbed_scores(model, tokenizer, bed) -> dict:
    """``hero.testbed.evaluate``, with heldout_ppl scored from ``scored_from`` (1 unless a chunk starts with
    whitespace) by the testbed's own ``score_sequences``."""
    own = evaluate(model, tokenizer, bed)
    rows = read_jsonl(bed.data_dir / "tasks" / "heldout_ppl.jsonl")
    seqs = [tokenizer(r["text"], add_special_tokens=False)["input_ids"] for r in rows]
    scored = score_sequences(model, seqs, [scored_from(tokenizer, r["text"]) for r in rows], 32, tokenizer.pad_token_id)
    loss = -sum(s for s, _, _ in scored) / sum(n for _, n, _ in scored)
    own["heldout_ppl"] = {"loss": loss, "ppl": math.exp(loss), "inv_ppl": math.exp(-loss)}
    return own


def _assert_same_scores(harness: dict, own: dict) -> None:
    assert set(harness) == set(own) == set(TASKS)
    for task, metrics in own.items():
        for metric, value in metrics.items():
            assert harness[task][metric] == pytest.approx(value, rel=1e-4, abs=1e-7), (task, metric)


def test_heldout_chunks_are_scored_from_the_second_token_unless_they_start_with_whitespace(tiny):
    tokenizer = tiny[1].load_tokenizer()
    assert scored_from(tokenizer, "MACBETH. So foul a day") == 1
    first = tokenizer.decode(tokenizer("\n\nSo foul", add_special_tokens=False)["input_ids"][:1])
    k = scored_from(tokenizer, "\n\nSo foul")
    assert first.isspace() and k >= 2
    head = tokenizer.decode(tokenizer("\n\nSo foul", add_special_tokens=False)["input_ids"][:k])
    assert head == head.rstrip() and "\n\nSo foul".startswith(head)


def test_tiny_suite_runs_through_harness_and_reproduces_testbed_scores(tiny):
    bed = tiny[1]
    model, tokenizer = bed.load_backbone(), bed.load_tokenizer()
    eval_cfg = compose_train(["eval=tiny"]).eval
    scores, meta = evaluate_suite(model, tokenizer, eval_cfg, bed)
    _assert_same_scores(scores, _testbed_scores(model, tokenizer, bed))
    assert meta["primary_metric"] == {task: TASK_PRIMARY_METRIC[task] for task in RETAIN_TASKS}
    assert meta["diagnostic_metric"] == {t: m for t, m in TASK_PRIMARY_METRIC.items() if t not in RETAIN_TASKS}
    assert meta["lm_eval"] == LM_EVAL_VERSION and meta["fingerprint"] == suite_fingerprint(eval_cfg)
    assert meta["tasks"]["fact_recall"]["lm_eval_task"] == "hero_tiny_fact_recall"
    assert all(t["n_samples"]["effective"] > 0 for t in meta["tasks"].values())


# ---------------------------------------------------------------- full testbed
@pytest.fixture(scope="module")
def full():
    tb = ensure_testbed(recipe=RECIPE)
    return tb, tb.load_backbone(), tb.load_tokenizer()


@pytest.fixture(scope="module")
def dense_scores(full):
    tb, model, tok = full
    return evaluate(model, tok, tb)


@pytest.mark.testbed
def test_backbone_loads_offline_and_reproduces_recorded_scores(full, dense_scores):
    tb = full[0]
    code = (
        "import sys; from transformers import AutoModelForCausalLM, AutoTokenizer; "
        "AutoModelForCausalLM.from_pretrained(sys.argv[1]); AutoTokenizer.from_pretrained(sys.argv[1])"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", code, str(tb.backbone_dir)], check=True, env=env)
    assert dense_scores["heldout_ppl"]["loss"] == pytest.approx(tb.manifest["heldout_loss"], abs=1e-4)
    for task, metric in TASK_PRIMARY_METRIC.items():
        assert dense_scores[task][metric] == pytest.approx(tb.manifest["dense"][task][metric], rel=1e-3)


@pytest.mark.testbed
def test_tiny_suite_reproduces_testbed_scores_on_full_testbed(full):
    bed, model, tokenizer = full
    scores, _ = evaluate_suite(model, tokenizer, compose_train(["eval=tiny"]).eval, bed)
    _assert_same_scores(scores, _testbed_scores(model, tokenizer, bed))


@pytest.mark.testbed
def test_dense_backbone_is_well_above_chance_on_every_retain_task(full, dense_scores):
    """Held on all six audited builds (docs/testbed/README.md, docs/testbed_audit): Retain can carry a ratio."""
    for task in RETAIN_TASKS:
        metric = TASK_PRIMARY_METRIC[task]
        assert dense_scores[task][metric] >= CHANCE_MARGIN * CHANCE[task], task


@pytest.mark.testbed
def test_drop_routable_ffn_loses_ten_retain_points(full, dense_scores):
    """Held on all six audited builds: the routable FFNs carry what the Retain tasks measure."""
    tb, model, tok = full
    with drop_routable_ffn(model, tb.manifest["routable_layers"]):
        dropped = evaluate(model, tok, tb)
    assert retain(dropped, dense_scores) <= 90.0
    assert evaluate(model, tok, tb)["heldout_ppl"]["loss"] == pytest.approx(dense_scores["heldout_ppl"]["loss"])
