"""Evaluation reuses the frozen prefix's hidden states (hero/evaluation/prefix.py) and can leave the diagnostics out.

The reuse sits below lm-eval: the same suite scored with it, from states computed by this run or read back from
disk by another router on the same backbone, gives the scores of the plain forward; calls that are not lm-eval's
loglikelihood batches (generation with its KV cache, masked batches, training) run the model as it is.
"""

from __future__ import annotations

import pytest
import torch
from conftest import compose_train, trained_looking

from hero.evaluation import evaluate_suite, suite_fingerprint
from hero.evaluation import prefix as eval_prefix
from hero.model.attach import attach
from hero.testbed import TINY_RECIPE, ensure_testbed


@pytest.fixture(scope="module")
def micro(micro_cache):
    bed = ensure_testbed(micro_cache, TINY_RECIPE)
    return bed, bed.load_tokenizer()


def _routed(bed, seed: int):
    """The micro backbone with a random router and adapters (seeded), both branches taken."""
    model = attach(bed.load_backbone(), "second_half")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator))
    return model.eval()


def _scores(model, tokenizer, bed, *overrides):
    cfg = compose_train(["eval=tiny", "eval.limit=6", *overrides]).eval
    scores, _ = evaluate_suite(model, tokenizer, cfg, bed)
    return scores


def test_reused_prefix_states_give_the_plain_scores_across_routers(micro, tmp_path, monkeypatch):
    """Kills: states keyed without the batch (another batch's states), without the prefix weights, a hit path that
    runs the whole decoder again on the states (layers below k twice), reuse that leaves the forward patched."""
    bed, tokenizer = micro
    cache = [f"eval.prefix_cache_dir={tmp_path / 'eval_prefix'}"]
    monkeypatch.setattr(eval_prefix, "_memory", type(eval_prefix._memory)())
    for seed in (1, 2):
        model = _routed(bed, seed)
        plain = _scores(model, tokenizer, bed, "eval.prefix_cache=false")
        before = dict(eval_prefix.STATS)
        eval_prefix._memory.clear()  # the second router reads the first one's states from disk
        reused = _scores(model, tokenizer, bed, *cache)
        hits = eval_prefix.STATS["hits"] - before["hits"]
        misses = eval_prefix.STATS["misses"] - before["misses"]
        assert reused == plain, seed
        if seed == 1:
            assert hits == 0 and misses > 0, (hits, misses)
        else:
            assert hits > 0 and misses == 0, (hits, misses)
        assert "forward" not in model.__dict__
    files = list((tmp_path / "eval_prefix").glob("*/*.pt"))
    assert files and len({f.parent for f in files}) == 1  # one backbone, one weights key


def test_other_prefix_weights_do_not_read_the_states(micro, tmp_path, monkeypatch):
    """Another backbone (other weights below layer k) computes its own states. Kills: a key without the weights."""
    bed, tokenizer = micro
    monkeypatch.setattr(eval_prefix, "_memory", type(eval_prefix._memory)())
    a = _routed(bed, 1)
    b = _routed(bed, 1)
    with torch.no_grad():
        b.model.layers[0].mlp.down_proj.weight.mul_(1.5)
    assert eval_prefix.weights_key(a, 2) != eval_prefix.weights_key(b, 2)
    cache = f"eval.prefix_cache_dir={tmp_path / 'p'}"
    _scores(a, tokenizer, bed, cache)
    assert _scores(b, tokenizer, bed, cache) == _scores(b, tokenizer, bed, "eval.prefix_cache=false")


def test_calls_other_than_lm_evals_batches_pass_through(tmp_path, monkeypatch):
    """A masked forward, a forward with grad, a forward in training mode and generation run the model as it is."""
    monkeypatch.setattr(eval_prefix, "_memory", type(eval_prefix._memory)())
    model = trained_looking().eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).logits
    with eval_prefix.reuse_prefix(model, tmp_path) as active:
        assert active
        before = dict(eval_prefix.STATS)
        with torch.no_grad():
            first = model(ids).logits
            again = model(ids).logits
            masked = model(ids, attention_mask=torch.ones_like(ids)).logits
            generated = model.generate(ids, max_new_tokens=3, do_sample=False)
        assert eval_prefix.STATS["misses"] - before["misses"] == 1
        assert eval_prefix.STATS["hits"] - before["hits"] == 1
        assert eval_prefix.STATS["passed"] - before["passed"] >= 4  # masked + generate's steps
    assert torch.equal(first, want) and torch.equal(again, want) and torch.allclose(masked, want)
    with torch.no_grad():
        assert torch.equal(generated, model.generate(ids, max_new_tokens=3, do_sample=False))


def test_a_model_without_a_frozen_prefix_is_not_patched(tmp_path):
    from conftest import small_llama

    model = small_llama()
    with eval_prefix.reuse_prefix(model, tmp_path) as active:
        assert not active and "forward" not in model.__dict__


def test_diagnostics_off_scores_retain_tasks_only_with_the_same_fingerprint(micro):
    """Kills: the fingerprint over the scored tasks only (a run without the diagnostics would not pair with the dense
    baseline and the records that have them), the switch scoring the diagnostics anyway."""
    bed, tokenizer = micro
    on = compose_train(["eval=tiny", "eval.limit=3", "+eval.diagnostics=true"]).eval
    off = compose_train(["eval=tiny", "eval.limit=3", "+eval.diagnostics=false"]).eval
    assert suite_fingerprint(on) == suite_fingerprint(off)
    model = _routed(bed, 1)
    scores, meta = evaluate_suite(model, tokenizer, off, bed)
    retain_tasks = {name for name, task in on.tasks.items() if task.get("retain", True)}
    assert set(scores) == retain_tasks == set(meta["primary_metric"]) and meta["diagnostics"] is False
    assert not meta["diagnostic_metric"]
    assert compose_train(["experiment=smollm2_cpu"]).eval.diagnostics is False
    assert compose_train(["eval=paper7_cpu"]).eval.diagnostics is False
