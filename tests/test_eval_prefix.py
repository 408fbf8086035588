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


def test_loglikelihood_batches_and_generation_prefills_are_reused_exactly(tmp_path, monkeypatch):
    """A loglikelihood batch and a left-padded generate give bitwise the plain model's logits when their prefix is
    read back; a masked forward passes through. Kills: a prefill hit that leaves the prefix layers' keys and values
    out of the cache (decode steps attend to nothing there), a key without the mask (another padding's states), a
    wrapper that hides ``logits_to_keep`` from generate (the signature: functools.wraps)."""
    import inspect

    monkeypatch.setattr(eval_prefix, "_memory", type(eval_prefix._memory)())
    model = trained_looking().eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding, as HFLM pads a generation batch

    def generate(attention_mask):
        out = model.generate(
            ids,
            attention_mask=attention_mask,
            max_new_tokens=4,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
        )
        return out.sequences, torch.stack(out.logits)

    with torch.no_grad():
        want = model(ids).logits
        want_masked = model(ids, attention_mask=mask).logits
        want_gen, other_gen = generate(mask), generate(torch.ones_like(ids))
    with eval_prefix.reuse_prefix(model, tmp_path) as active:
        assert active and "logits_to_keep" in inspect.signature(model.forward).parameters
        before = dict(eval_prefix.STATS)
        with torch.no_grad():
            first, again = model(ids).logits, model(ids).logits
            masked = model(ids, attention_mask=mask).logits
            gen_miss, gen_hit = generate(mask), generate(mask)
            eval_prefix._memory.clear()
            gen_disk = generate(mask)
            gen_other = generate(torch.ones_like(ids))
        delta = {k: eval_prefix.STATS[k] - before[k] for k in before}
    assert delta["misses"] == 3 and delta["hits"] == 3  # batch, prefill, other mask's prefill; then reads
    assert torch.equal(first, want) and torch.equal(again, want) and torch.equal(masked, want_masked)
    for sequences, logits in (gen_miss, gen_hit, gen_disk):
        assert torch.equal(sequences, want_gen[0]) and torch.equal(logits, want_gen[1])
    assert torch.equal(gen_other[1], other_gen[1])
    assert "forward" not in model.__dict__


def test_a_model_without_a_frozen_prefix_is_not_patched(tmp_path):
    from conftest import small_llama

    model = small_llama()
    with eval_prefix.reuse_prefix(model, tmp_path) as active:
        assert not active and "forward" not in model.__dict__


def test_diagnostics_off_scores_retain_tasks_only_with_the_same_fingerprint(micro):
    """Kills: the fingerprint over the scored tasks only (a run without the diagnostics would not pair with the dense
    baseline and the records that have them), the switch scoring the diagnostics anyway."""
    bed, tokenizer = micro
    on = compose_train(["eval=tiny", "eval.limit=3", "eval.diagnostics=true", "eval.prefix_cache=false"]).eval
    off = compose_train(["eval=tiny", "eval.limit=3", "eval.diagnostics=false", "eval.prefix_cache=false"]).eval
    assert suite_fingerprint(on) == suite_fingerprint(off)
    model = _routed(bed, 1)
    scores, meta = evaluate_suite(model, tokenizer, off, bed)
    retain_tasks = {name for name, task in on.tasks.items() if task.get("retain", True)}
    assert set(scores) == retain_tasks == set(meta["primary_metric"]) and meta["diagnostics"] is False
    assert not meta["diagnostic_metric"]
    assert compose_train(["experiment=smollm2_cpu"]).eval.diagnostics is False
    assert compose_train(["eval=paper7_cpu"]).eval.diagnostics is False
