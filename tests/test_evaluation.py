"""Evaluation (HERO_SPEC §7): lm-eval suites, the harness on routed models, Retain, routing statistics.

Offline: the tiny suite runs through lm-evaluation-harness on the micro testbed (seconds);
paper7/extended9 are checked against lm-eval's own task configs without loading any data. That the
harness reproduces the testbed's own scores is tested beside the testbed (tests/test_testbed.py).
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from conftest import compose_train

from hero.evaluation import (
    LM_EVAL_VERSION,
    EvaluationError,
    RetainError,
    check_config,
    evaluate_suite,
    retain,
    routing_statistics,
    suite_fingerprint,
    task_specs,
)
from hero.evaluation.harness import (
    continuation_lengths,
    harness_model,
    lm_eval_version,
    logits_to_keep,
    metric_values,
)
from hero.model import attach, last_records
from hero.testbed import TINY_RECIPE, ensure_testbed

# HERO_SPEC §7, written out independently of conf/eval: (lm-eval task, few-shot, primary metric, chat template).
PAPER7 = {
    "arc_easy": ("arc_easy", 25, "acc", False),
    "arc_challenge": ("arc_challenge", 25, "acc", False),
    "hellaswag": ("hellaswag", 5, "acc_norm", False),
    "winogrande": ("winogrande", 5, "acc", False),
    "openbookqa": ("openbookqa", 0, "acc_norm", False),
    "piqa": ("piqa", 0, "acc", False),
    "boolq": ("boolq", 0, "acc", False),
}
EXTENDED9 = {
    **PAPER7,
    "gsm8k": ("gsm8k_cot_llama", 8, "exact_match,strict-match", True),
    "humaneval": ("humaneval_instruct", 0, "pass_at_k,create_test", True),
}


@pytest.fixture(scope="module")
def micro(micro_cache):
    bed = ensure_testbed(micro_cache, TINY_RECIPE)
    return bed, bed.load_backbone(), bed.load_tokenizer()


def test_tiny_suite_limit_and_overrides_reach_the_harness(micro):
    bed, model, tokenizer = micro
    eval_cfg = compose_train(["eval=tiny", "eval.limit=3", "+eval.tasks.play_cloze.limit=2"]).eval
    _, meta = evaluate_suite(model, tokenizer, eval_cfg, bed)
    assert meta["tasks"]["fact_recall"]["n_samples"]["effective"] == 3
    assert meta["tasks"]["play_cloze"]["n_samples"]["effective"] == 2


def _routed(model, seed=0):
    """The micro backbone with a randomized router and adapters, so gates spread over [0, 1] and both branches run."""
    routed = attach(model, "second_half")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in routed.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator))
    return routed.eval()


def _own_loglikelihood(model, tokenizer, context: str, continuation: str) -> tuple[float, torch.Tensor]:
    """(log-likelihood of the continuation, FFN executed per routable layer and token) from one unpadded forward."""
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    n_ctx = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([whole])).logits[0].double(), -1)
    executed = torch.cat([r.ffn_executed.flatten() for r in last_records(model)])
    return float(sum(logp[t - 1, whole[t]] for t in range(n_ctx, len(whole)))), executed


def test_routed_model_through_harness_matches_own_forward(micro):
    from lm_eval.api.instance import Instance

    bed, _, tokenizer = micro
    model = _routed(bed.load_backbone())
    rng = random.Random(0)
    words = ["Zaigra", " resides", " in", " the", " king", " of", " Scotland", "23+45=", "68", " lord"]
    pairs = [
        ("".join(rng.choices(words, k=rng.randint(2, 9))), "".join(rng.choices(words, k=rng.randint(1, 4))))
        for _ in range(24)
    ]
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i) for i, pair in enumerate(pairs)]
    harness = [ll for ll, _ in harness_model(model, tokenizer, batch_size=8).loglikelihood(requests)]
    own, executed = zip(*(_own_loglikelihood(model, tokenizer, *pair) for pair in pairs))
    executed = torch.cat(executed)
    assert 0 < int(executed.sum()) < executed.numel(), "both branches must run for the check to mean anything"
    assert max(abs(a - b) for a, b in zip(harness, own)) < 1e-4


def test_logits_to_keep_is_the_batchs_smallest_continuation_start():
    """Kills: the last continuation kept for a row that carries two (not the longest), a row ending in the padding
    id 0 not found, a cut where lm-eval reads every position (rolling: a continuation from position 0) or where a
    row is not one of the requests."""
    requests = [
        ((None, None), [1, 2], [3, 4, 5, 6]),
        ((None, None), [1, 2, 3, 4], [5, 6]),
        ((None, None), [7, 8, 9], [0, 3]),
        ((None, None), [9], [4, 4]),
    ]
    lengths, zero_tail = continuation_lengths(requests, max_length=64)
    assert lengths[(1, 2, 3, 4, 5)] == 4 and zero_tail == 1
    batch = torch.tensor([[1, 2, 3, 4, 5, 0], [7, 8, 9, 0, 0, 0]])
    assert logits_to_keep(batch, lengths, zero_tail) == 5  # positions 1…5: row 1's four continuation tokens
    assert logits_to_keep(batch[1:], lengths, zero_tail) == 4  # row 2 alone: positions 2…5
    assert logits_to_keep(torch.tensor([[9, 4, 0]]), lengths, zero_tail) is None
    assert logits_to_keep(torch.tensor([[1, 2, 3, 0, 0, 0]]), lengths, zero_tail) is None


def test_harness_computes_the_head_only_where_lm_eval_reads_it_with_the_full_outputs_values(micro):
    """Kills: the head cut at a row's own start instead of the batch's smallest (a longer continuation sliced
    short), a row's shorter continuation kept when one input row carries two (``min`` for ``max``), a row ending
    in token 0 (the padding id) not found, the cut never made."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    bed, _, tokenizer = micro
    model = _routed(bed.load_backbone(), seed=2)
    pad = tokenizer.convert_ids_to_tokens(0)
    rng = random.Random(1)
    words = ["Zaigra", " resides", " in", " the", " king", " of", " Scotland", "23+45=", "68", " lord"]
    pairs = [
        ("".join(rng.choices(words, k=rng.randint(3, 9))), "".join(rng.choices(words, k=rng.randint(1, 4))))
        for _ in range(20)
    ]
    pairs += [("Zaigra resides", " in the king of"), ("Zaigra resides in the", " king of")]  # one row, two lengths
    pairs += [("The king of", f" Scotland{pad} the"), ("The king", f" of Scotland{pad} the")]  # rows ending in 0
    assert continuation_lengths([(None, [5], tokenizer(f"{pad} the", add_special_tokens=False)["input_ids"])], 99)[1]
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i) for i, pair in enumerate(pairs)]
    positions = []
    handle = model.lm_head.register_forward_pre_hook(lambda module, args: positions.append(args[0].shape[1]))
    try:
        cut = harness_model(model, tokenizer, batch_size=8).loglikelihood(requests)
        widths, positions[:] = list(positions), []
        full = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8).loglikelihood(requests, disable_tqdm=True)
    finally:
        handle.remove()
    assert sum(widths) < sum(positions), (widths, positions)  # the head ran at fewer positions
    assert [g for _, g in cut] == [g for _, g in full]
    assert cut == full  # bitwise: the head on fewer rows, each row the same dot products


def test_routed_generation_through_harness_uses_kv_cache_and_matches_uncached_greedy(micro):
    from lm_eval.api.instance import Instance

    bed, _, tokenizer = micro
    model = _routed(bed.load_backbone(), seed=1)
    prompts = ["Zaigra resides in", "12+34=", "The king of"]
    requests = [
        Instance(
            request_type="generate_until",
            doc={},
            idx=i,
            arguments=(p, {"until": ["<|never|>"], "max_gen_toks": 6, "do_sample": False}),
        )
        for i, p in enumerate(prompts)
    ]
    harness = harness_model(model, tokenizer, batch_size=1).generate_until(requests)
    for prompt, text in zip(prompts, harness):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            for _ in range(6):
                ids.append(int(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
        n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        assert text == tokenizer.decode(ids[n_prompt:]), prompt


def test_paper_suites_resolve_to_lm_eval_tasks_fewshot_and_metrics():
    """Task names, few-shot counts, metrics and chat template against lm-eval's own task YAMLs; no data loaded."""
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    index = TaskManager().task_index
    for suite, expected in (("paper7", PAPER7), ("extended9", EXTENDED9)):
        eval_cfg = compose_train([f"eval={suite}"]).eval
        check_config(eval_cfg)
        specs = {s.name: s for s in task_specs(eval_cfg)}
        assert list(specs) == list(expected), suite
        for name, (task, shots, metric, chat) in expected.items():
            spec = specs[name]
            assert (spec.lm_eval_task, spec.num_fewshot, spec.metric, spec.chat_template) == (task, shots, metric, chat)
            assert spec.fewshot_as_multiturn == chat and spec.limit is None
            config = load_yaml(index[task].yaml_path, resolve_func=False, recursive=True)
            metric_name, _, selector = metric.partition(",")
            declared = [str(m["metric"]).rsplit(".", 1)[-1] for m in config["metric_list"]]
            assert metric_name in declared, (name, declared)
            if selector:
                assert selector in [f["name"] for f in config["filter_list"]], name
            expected_type = "generate_until" if chat else "multiple_choice"
            assert config["output_type"] == expected_type, name
    gsm8k, humaneval = (specs[name] for name in ("gsm8k", "humaneval"))
    assert gsm8k.gen_kwargs == {"max_gen_toks": 1024, "do_sample": False}
    assert humaneval.gen_kwargs["do_sample"] is False and humaneval.unsafe_code
    humaneval_metric = load_yaml(index["humaneval_instruct"].yaml_path, resolve_func=False, recursive=True)[
        "metric_list"
    ]
    assert humaneval_metric[0]["k"] == [1]


def test_overrides_change_specs_and_baseline_fingerprint():
    base = compose_train(["eval=paper7"]).eval
    changed = compose_train(["eval=paper7", "eval.tasks.hellaswag.num_fewshot=10", "eval.limit=50"]).eval
    spec = {s.name: s for s in task_specs(changed)}
    assert spec["hellaswag"].num_fewshot == 10 and spec["boolq"].limit == 50
    assert suite_fingerprint(base) != suite_fingerprint(changed)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.suite=paper9"], "allowed suites"),
        (["eval.limit=0"], "positive integer"),
        (["+eval.tasks.piqa.shots=3"], "unknown ['shots']"),
        (["eval.tasks.piqa.num_fewshot=-1"], "integer ≥ 0"),
        (["~eval.tasks.piqa.metric"], "missing ['metric']"),
        (["eval.tasks.piqa=3"], "must be a mapping"),
    ],
)
def test_bad_eval_config_fails_with_one_clear_line(overrides, message):
    with pytest.raises(EvaluationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_config(compose_train(["eval=paper7", *overrides]).eval)


def test_installed_lm_eval_must_be_the_pinned_version(monkeypatch):
    assert lm_eval_version() == LM_EVAL_VERSION
    monkeypatch.setattr("hero.evaluation.harness.version", lambda _: "0.4.99")
    with pytest.raises(EvaluationError, match="pins 0.4.13"):
        lm_eval_version()


def test_metric_keys_follow_lm_eval_with_none_filter_dropped():
    entry = {
        "alias": "gsm8k",
        "exact_match,strict-match": 0.5,
        "exact_match_stderr,strict-match": 0.1,
        "acc,none": 0.7,
        "acc_stderr,none": "N/A",
        "samples": 3,
    }
    assert metric_values(entry) == {"exact_match,strict-match": 0.5, "exact_match_stderr,strict-match": 0.1, "acc": 0.7}


def test_retain_is_mean_of_ratios_not_ratio_of_means():
    baseline = {"a": {"acc": 0.8}, "b": {"acc_norm": 0.2}}
    scores = {"a": {"acc": 0.4}, "b": {"acc_norm": 0.3}}
    out = retain(scores, baseline, {"a": "acc", "b": "acc_norm"}, baseline_name="dense")
    assert out["value"] == pytest.approx(100 * (0.5 + 1.5) / 2)  # 100.0
    assert out["value"] != pytest.approx(100 * (0.4 + 0.3) / (0.8 + 0.2))  # 70.0
    assert out["baseline"] == "dense" and out["tasks"] == ["a", "b"] and out["metrics"] == {"a": "acc", "b": "acc_norm"}
    assert out["per_task"] == pytest.approx({"a": 50.0, "b": 150.0})


def test_missing_baseline_task_is_an_error_never_a_fallback():
    with pytest.raises(RetainError, match="baseline 'dense' has no b.acc"):
        retain({"a": {"acc": 0.4}, "b": {"acc": 0.3}}, {"a": {"acc": 0.8}}, {"a": "acc", "b": "acc"}, "dense")
    with pytest.raises(RetainError, match="scores 0"):
        retain({"a": {"acc": 0.4}}, {"a": {"acc": 0.0}}, {"a": "acc"}, "dense")


def test_routing_statistics_include_gate_histograms(micro):
    bed, _, tokenizer = micro
    model = _routed(bed.load_backbone(), seed=2)
    ids = torch.randint(10, 300, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    skip, rho = routing_statistics(model, [(ids, mask)])
    histograms = skip["gate_histogram"]
    assert set(histograms) == set(skip["per_layer_ffn_rate"]) == set(rho)
    for layer, h in histograms.items():
        assert len(h["edges"]) == len(h["counts"]) + 1 and h["edges"][0] == 0.0 and h["edges"][-1] == 1.0
        assert sum(h["counts"]) == int(mask.sum()) == skip["tokens"]
        above = sum(c for c, lo in zip(h["counts"], h["edges"]) if lo >= 0.5)
        assert math.isclose(above / skip["tokens"], skip["per_layer_ffn_rate"][layer])
        executed_gate = skip["per_layer_executed_gate"][layer]  # HeRo executes iff g ≥ τ = 0.5
        assert (executed_gate is None) if above == 0 else 0.5 <= executed_gate <= 1.0
    rates = skip["per_layer_ffn_rate"].values()
    assert math.isclose(skip["ffn_execution_rate"], sum(rates) / len(rates))  # every layer sees the same tokens


def test_by_token_type_rates_are_a_hand_count_over_a_forced_routing():
    """``by_token_type``: per type, the mean over its tokens (padding, type −1, excluded) of the share of routable
    layers whose FFN ran, accumulated over batches; a type without tokens is None."""
    from conftest import SMALL, small_llama

    from hero.model import forced_routing

    model = attach(small_llama(), "second_half")  # 3 routable blocks
    # per batch and routable block j: which (row, position) runs the FFN
    runs = [
        {
            1: [[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]],
            2: [[1, 0, 0, 1, 1], [0, 1, 1, 1, 0]],
            3: [[0, 0, 0, 1, 1], [1, 1, 0, 1, 1]],
        },
        {1: [[1, 0, 1, 1]], 2: [[1, 0, 1, 1]], 3: [[1, 1, 0, 0]]},
    ]
    types = [torch.tensor([[0, 1, 1, 2, 0], [-1, -1, 0, 2, 1]]), torch.tensor([[2, 2, 0, -1]])]
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, SMALL["vocab_size"], t.shape, generator=gen), (t >= 0).long(), t) for t in types]
    forwards = []

    def policy(j, gate):
        if j == 1:
            forwards.append(len(forwards))
        return torch.tensor(runs[forwards[-1]][j], dtype=torch.bool).reshape(gate.shape)

    with forced_routing(model, policy):
        skip, _ = routing_statistics(model, batches, ("a", "b", "c", "unused"))
    assert len(forwards) == 2
    # shares of the 3 layers per token, by hand; batch 1 row 0: 2/3 1/3 0 2/3 1, row 1 (2 padded): 2/3 2/3 1/3;
    # batch 2: 1 1/3 2/3 (last padded)
    # a: 2/3, 1, 2/3, 2/3 → 3/4;  b: 1/3, 0, 1/3 → 2/9;  c: 2/3, 2/3, 1, 1/3 → 2/3
    rates = skip["by_token_type"]
    assert list(rates) == ["a", "b", "c", "unused"] and rates["unused"] is None
    assert [rates[k] for k in "abc"] == pytest.approx([3 / 4, 2 / 9, 2 / 3], rel=1e-12)
    assert skip["tokens"] == 11  # non-padding tokens
