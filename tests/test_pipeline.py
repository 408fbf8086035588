"""Training pipeline: config groups, tiny end-to-end runs, multirun, resume, W&B, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CONF, MICRO_RETAIN, REPO, compose_train, small_llama_config
from omegaconf import OmegaConf

from hero import wandb_offline
from hero.data import collate, load_conversations, tokenize_conversation
from hero.errors import ConfigError
from hero.pipeline import run
from hero.records import RunRecord
from hero.results import config_hash, training_hash

RECORD_FIELDS = (
    "method",
    "variant",
    "seed",
    "alpha",
    "router",
    "routable_layers",
    "skip",
    "eval",
    "eval_meta",
    "train",
    "retain",
    "rho",
    "config_hash",
    "git_commit",
    "versions",
    "wall_time_s",
    "config",
)


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["model", "data", "method", "ablation", "layers", "trainer", "eval", "logger"])
def test_every_group_option_composes(group):
    for option in group_options(group):
        extra = {"layers/explicit": ["layers.indices=[4,5]"], "data/jsonl": ["data.path=/x.jsonl"]}.get(
            f"{group}/{option}", []
        )
        cfg = compose_train([f"{group}={option}", *extra])
        if group == "ablation":
            assert cfg.variant == option
        elif group == "method":  # a method, or a preset of one named by its variant (skipgpt_rt_official)
            assert cfg.method.name == option or option.startswith(f"{cfg.method.name}_")
            assert cfg.variant == (option if option != "hero" else "full")
        elif group in ("model", "data", "layers", "logger"):
            assert cfg[group].name == option
        elif group == "eval":
            assert cfg.eval.suite == option


def test_ablation_switches_resolve_to_router_options():
    expected = {
        "full": {},
        "no_position_state": {"position_state": False},
        "no_aux_state": {"aux_state": False},
        "no_history": {"history_branch": False},
        "no_memory_read": {"memory_read": False},
    }
    for ablation, switched in expected.items():
        router = compose_train([f"ablation={ablation}"]).router
        for key in ("position_state", "aux_state", "history_branch", "memory_read"):
            assert router[key] == switched.get(key, True), (ablation, key)


def test_paper_recipe_values():
    cfg = compose_train(["trainer=paper", "data=tulu3", "model=llama3_1_8b", "layers=from_9", "alpha=1e-3"])
    t = cfg.trainer
    assert (t.lr, t.weight_decay, t.warmup_frac, t.grad_clip, t.global_batch, t.precision) == (
        1e-4,
        0.01,
        0.03,
        1.0,
        128,
        "bf16",
    )
    assert t.gradient_checkpointing and cfg.data.max_length == 2048 and cfg.alpha == 1e-3
    assert cfg.data.path == "allenai/tulu-3-sft-mixture" or os.environ.get("HERO_TULU3")


def _record(root: Path) -> dict:
    found = list(root.rglob("results.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def test_tiny_end_to_end_run_writes_valid_record(micro_overrides, micro_cache, tmp_path):
    objective = run(compose_train(micro_overrides + [MICRO_RETAIN]), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    for field in RECORD_FIELDS:
        assert field in record, field
    assert "ablation" not in record and RunRecord.from_dict(record).to_dict() == record
    assert (tmp_path / "run" / "router" / "hero_router.safetensors").is_file()
    assert record["status"] == "completed" and record["method"] == "hero" and record["seed"] == 42
    assert objective == pytest.approx(record["train"]["final_loss"])
    assert record["train"]["steps"] == 3
    assert 0.0 <= record["skip"]["param_rate"] <= record["skip"]["max_param_rate"] < 1.0
    assert set(record["skip"]["per_layer_ffn_rate"]) == {str(i) for i in record["routable_layers"]}
    assert record["retain"]["baseline"] == "dense" and record["retain"]["tasks"] == ["heldout_ppl"]
    assert record["retain"]["value"] > 0 and "fact_select" in record["eval_meta"]["diagnostic_metric"]
    assert set(record["skip"]["by_token_type"]) == {
        "plain",
        "fact_answer",
        "fact_other",
        "arith_answer",
        "arith_operand",
    }
    assert record["bed"]["name"] == "testbed"
    assert (micro_cache / "testbed" / record["bed"]["recipe_hash"] / "manifest.json").is_file()
    assert (tmp_path / "run" / "router" / "hero_router.safetensors").is_file()


def test_relaunch_skips_completed_run_and_force_reruns(micro_overrides, tmp_path, capsys):
    cfg = compose_train(micro_overrides + ["eval=none"])
    run(cfg, run_dir=tmp_path / "first")
    capsys.readouterr()
    run(cfg, run_dir=tmp_path / "second")
    assert "skipping: a completed run" in capsys.readouterr().out
    assert not (tmp_path / "second" / "results.json").exists()
    run(compose_train(micro_overrides + ["eval=none", "force=true"]), run_dir=tmp_path / "third")
    assert (tmp_path / "third" / "results.json").exists()


def test_same_seed_same_result(micro_overrides, tmp_path):
    a = run(compose_train(micro_overrides + ["eval=none", f"paths.root={tmp_path}/a"]), run_dir=tmp_path / "a")
    b = run(compose_train(micro_overrides + ["eval=none", f"paths.root={tmp_path}/b"]), run_dir=tmp_path / "b")
    c = run(
        compose_train(micro_overrides + ["eval=none", f"paths.root={tmp_path}/c", "seed=7"]), run_dir=tmp_path / "c"
    )
    assert a == b and a != c


def test_resume_after_crash_equals_uninterrupted_run(micro_overrides, tmp_path, monkeypatch):
    overrides = micro_overrides + [
        "trainer.max_steps=4",
        "trainer.checkpoint_every=2",
        "trainer.log_every=3",
        "eval=none",
    ]
    reference = run(compose_train(overrides + [f"paths.root={tmp_path}/ref"]), run_dir=tmp_path / "ref")
    import hero.training as training

    real_save = training.save_checkpoint

    def save_then_crash(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("killed right after the first checkpoint")

    monkeypatch.setattr(training, "save_checkpoint", save_then_crash)
    cfg = compose_train(overrides + [f"paths.root={tmp_path}/crash"])
    with pytest.raises(KeyboardInterrupt):
        run(cfg, run_dir=tmp_path / "crash-1")
    assert list((tmp_path / "crash" / "checkpoints").rglob("step-00000002.pt"))
    monkeypatch.setattr(training, "save_checkpoint", real_save)
    resumed = run(cfg, run_dir=tmp_path / "crash-2")
    a = json.loads((tmp_path / "ref" / "results.json").read_text())
    b = json.loads((tmp_path / "crash-2" / "results.json").read_text())
    assert resumed == reference
    assert a["train"] == b["train"] and a["skip"] == b["skip"] and a["rho"] == b["rho"]
    # the training curve spans the crash: the window of updates 1-3 holds two updates from before the resume
    assert [row["step"] for row in b["train"]["trajectory"]] == [3, 4]
    assert b["train"]["trajectory"][-1]["loss"] == b["train"]["final_loss"]


@pytest.mark.parametrize("method", ["hero", "skipgpt_rt"])
def test_a_run_that_differs_only_in_scoring_reuses_the_trained_state(micro_overrides, tmp_path, capsys, method):
    overrides = micro_overrides + [f"method={method}", MICRO_RETAIN]
    state = "router" if method == "hero" else "trained"
    run(compose_train(overrides + ["objective=skip.param_rate"]), run_dir=tmp_path / "first")
    capsys.readouterr()
    run(compose_train(overrides), run_dir=tmp_path / "second")
    assert "reusing the trained state of" in capsys.readouterr().out
    first, second = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("first", "second"))
    assert second["trained_by"] == str(tmp_path / "first" / "results.json") and "trained_by" not in first
    assert RunRecord.from_dict(second).to_dict() == second
    for key in ("train", "eval", "skip", "rho", "retain"):
        assert second[key] == first[key], key
    files = sorted(p.name for p in (tmp_path / "first" / state).iterdir())
    assert files and files == sorted(p.name for p in (tmp_path / "second" / state).iterdir())
    for name in files:
        assert (tmp_path / "second" / state / name).read_bytes() == (tmp_path / "first" / state / name).read_bytes()
    if method != "hero":
        return
    # what the reuse stands for: training again (reuse_trained=false) gives the same record
    run(compose_train(overrides + ["objective=train.final_lm_loss", "reuse_trained=false"]), run_dir=tmp_path / "off")
    trained = json.loads((tmp_path / "off" / "results.json").read_text())
    assert "trained_by" not in trained
    for key in ("train", "eval", "skip", "rho", "retain"):
        assert trained[key] == second[key], key


def test_the_training_hash_ignores_only_how_a_run_is_scored():
    cfg = OmegaConf.to_container(compose_train([]), resolve=True)
    base = training_hash(cfg)
    for key, value in (("eval", {"suite": "none"}), ("objective", "skip.param_rate"), ("reuse_trained", False)):
        assert training_hash({**cfg, key: value}) == base, key
    assert training_hash({**cfg, "calibration": {"target_skip": 0.06, "study": "s"}}) == base
    assert training_hash({**cfg, "intervention": {**cfg["intervention"], "unscaled": True}}) == base
    assert config_hash({**cfg, "objective": "skip.param_rate"}) != config_hash(cfg)
    for key, value in (("seed", 7), ("alpha", 0.5), ("variant", "other")):
        assert training_hash({**cfg, key: value}) != base, key
    assert training_hash({**cfg, "trainer": {**cfg["trainer"], "max_steps": 9}}) != base
    assert training_hash({**cfg, "router": {**cfg["router"], "memory_dim": 8}}) != base


def test_wandb_offline_logs_grouped_run_with_values(micro_overrides, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    overrides = [o for o in micro_overrides if o != "logger=none"] + ["logger=wandb", "eval=none", "seed=43"]
    run(compose_train(overrides), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    path = wandb_offline.run_file(tmp_path / "run")
    info = wandb_offline.run_info(path)
    assert info["group"] == "tiny-hero-full-a0.003-m64-second_half" and info["job_type"] == "full"
    assert {"ablation:full", "alpha:0.003", "memory_dim:64", "layers:second_half"} <= set(info["tags"])
    assert info["config"]["seed"] == 43 and info["exit_code"] == 0
    rows = wandb_offline.history(path)
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) == 3 and losses[-1] == pytest.approx(record["train"]["final_loss"])
    assert any("routing/ffn_rate/layer_1" in r for r in rows)


def _train_cli(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_multirun_three_seeds_writes_three_records(micro_cache, tmp_path):
    args = [
        "-m",
        "ablation=no_memory_read",
        "seed=42,43,44",
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path}",
        "trainer.max_steps=2",
        "trainer.global_batch=2",
        "trainer.micro_batch=2",
        "trainer.progress=false",
        "logger=none",
        "eval=none",
    ]
    proc = _train_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "multirun").rglob("results.json")]
    assert sorted(r["seed"] for r in records) == [42, 43, 44]
    assert all(r["router"] == records[0]["router"] and r["router"]["memory_read"] is False for r in records)
    assert len({r["config_hash"] for r in records}) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["alpha=-1"], "alpha=-1: must be a non-negative number"),
        (["router.memory_dim=0"], "router.memory_dim=0: must be a positive integer"),
        (["router.tau=1.5"], "router.tau=1.5: must lie in the open interval"),
        (["layers=explicit", "layers.indices=[1,99]"], "layer index 99 is outside the model: valid range is 0..1"),
        (["data=jsonl", "data.path=/nonexistent/sft.jsonl"], "data.path='/nonexistent/sft.jsonl': no such file"),
        (["trainer.global_batch=3"], "trainer.global_batch=3 is not a multiple of trainer.micro_batch=2"),
        (["model.dtype=float8"], "model.dtype='float8': allowed values are"),
        (["data.responses=greedy"], "data.responses='greedy': allowed values are sampled, written"),
        (["method=lora", "method.r=0"], "method.r=0: the LoRA rank must be a positive integer"),
    ],
)
def test_bad_values_fail_in_one_line_and_write_no_record(micro_cache, tmp_path, args, message):
    base = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path}",
        "logger=none",
        "trainer.micro_batch=2",
    ]
    proc = _train_cli(base + args, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: {proc.stderr.strip().splitlines()[-1][7:]}"
    assert message in proc.stderr
    assert not list(tmp_path.rglob("results.json"))
    assert not list(tmp_path.rglob(".hydra")), "a refused run leaves a run directory analysis would count"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval=paper7"], "eval=paper7 with model=tiny: the testbed bed's backbone is scored on eval=tiny, eval=none"),
        (["alpha=calibrated", "calibration.target_skip=0.2"], "alpha=calibrated: "),
        (["trainer.precision=fp16"], "trainer.precision='fp16': the training loop has no loss scaling (GradScaler)"),
    ],
)
def test_a_refused_run_prints_its_one_line_and_nothing_before_it(tmp_path, args, message):
    """Refused before any compute (the bed is not built) and before any output (no config dump)."""
    cache = tmp_path / "cache"
    proc = _train_cli([*args, f"paths.root={tmp_path / 'out'}", f"paths.cache={cache}", "logger=none"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == "" and proc.stderr.strip().splitlines()[-1].startswith(f"error: {message}")
    assert not cache.exists()


def test_a_beds_data_and_suite_run_only_on_its_own_backbone():
    from hero.spec import check

    with pytest.raises(ConfigError, match="data=tiny with model=llama3_1_8b: a bed's data and suite go with its own"):
        check(compose_train(["model=llama3_1_8b"]))
    with pytest.raises(ConfigError, match="eval=tiny with model=llama3_1_8b"):
        check(compose_train(["model=llama3_1_8b", "data=tulu3"]))
    check(compose_train(["model=llama3_1_8b", "data=tulu3", "eval=paper7"]))


@pytest.mark.parametrize(
    "model_path, message",
    [
        ("no-such-org/no-such-model", "model=llama3_1_8b: cannot load 'no-such-org/no-such-model' ("),
        ("/no/such/llama", "model.path='/no/such/llama': no such directory"),
    ],
)
def test_unreachable_hub_model_is_one_line_naming_the_fix(tmp_path, model_path, message):
    proc = _train_cli(
        ["model=llama3_1_8b", "data=tulu3", "eval=paper7", f"paths.root={tmp_path}", "logger=none"],
        tmp_path,
        {"HF_HUB_OFFLINE": "1", "HERO_LLAMA3_1_8B": model_path},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {message}") and "Traceback" not in proc.stderr
    if model_path.startswith("no-such"):
        assert last.endswith("model.path=/local/copy or export HERO_LLAMA3_1_8B=/local/copy")
    assert not list(tmp_path.rglob(".hydra"))


def test_relaunch_of_a_finished_config_leaves_no_second_run_directory(micro_cache, tmp_path):
    args = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path}",
        "logger=none",
        "eval=none",
        "trainer.max_steps=1",
        "trainer.global_batch=2",
        "trainer.micro_batch=2",
        "trainer.progress=false",
    ]
    for _ in range(2):
        proc = _train_cli(args, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipping: a completed run" in proc.stdout
    assert len(list(tmp_path.rglob(".hydra"))) == 1 and len(list(tmp_path.rglob("results.json"))) == 1


def test_the_terminal_shows_our_own_lines_and_the_log_file_the_libraries(micro_cache, tmp_path):
    """lm-eval's warnings ("Custom kwargs can be passed to `--metadata`", ...) go to <run dir>/train.log only."""
    args = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path}",
        "logger=none",
        "eval.limit=4",
        "trainer.max_steps=1",
        "trainer.global_batch=2",
        "trainer.micro_batch=2",
        "trainer.progress=false",
    ]
    assert _train_cli([*args, "seed=1"], tmp_path).returncode == 0  # builds the micro bed and its sampled data
    proc = _train_cli([*args, "seed=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    terminal = proc.stdout + proc.stderr
    assert "[lm_eval" not in terminal and "Custom kwargs" not in terminal and "HeRo run" in terminal
    # no library progress bar either (trainer.progress=false turns off our own): stderr stays empty
    assert "Running loglikelihood" not in terminal and "Loading weights" not in terminal and "it/s]" not in terminal
    (log,) = [p for p in tmp_path.rglob("train.log") if "-s2" in p.parent.name]
    assert "[lm_eval.api.task][WARNING] - hero_tiny_fact_recall: Custom kwargs can be passed" in log.read_text()


def test_unknown_group_option_fails_before_loading(tmp_path):
    proc = _train_cli(["ablation=no_such_thing", f"paths.root={tmp_path}"], tmp_path)
    assert proc.returncode != 0
    assert "no_such_thing" in proc.stderr and "Available options" in proc.stderr
    assert not list(tmp_path.rglob("results.json"))


def test_local_jsonl_in_tulu_format_loads_and_trains(micro_overrides, tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": f"What is {i}+{i}?"}, {"role": "assistant", "content": str(2 * i)}]}
        for i in range(8)
    ]
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for data in (["data=jsonl", f"data.path={path}"], ["data=tulu3", f"data.path={path}"]):
        cfg = compose_train(micro_overrides + data + ["eval=none", "trainer.max_steps=1", "force=true"])
        assert load_conversations(cfg.data)[3][1]["content"] == "6"
        run(cfg, run_dir=tmp_path / data[0])
        assert json.loads((tmp_path / data[0] / "results.json").read_text())["train"]["steps"] == 1


def test_bad_jsonl_rows_are_reported_with_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n" + json.dumps({"text": "x"}) + "\n"
    )
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: expected a non-empty 'messages' list"):
        load_conversations(compose_train(["data=jsonl", f"data.path={path}"]).data)


def test_chat_template_labels_all_tokens_or_assistant_only(micro_cache):
    from hero.testbed import TINY_RECIPE, ensure_testbed

    tokenizer = ensure_testbed(micro_cache, recipe=TINY_RECIPE).load_tokenizer()
    messages = [{"role": "user", "content": "Where does Zaigra live?"}, {"role": "assistant", "content": "In Velmor."}]
    full = tokenize_conversation(tokenizer, messages, max_length=512)
    assert full["labels"] == full["input_ids"]
    only = tokenize_conversation(tokenizer, messages, max_length=512, assistant_only=True)
    kept = [t for t, label in zip(only["input_ids"], only["labels"]) if label != -100]
    assert 0 < len(kept) < len(full["input_ids"])
    assert "Velmor" in tokenizer.decode(kept) and "Zaigra" not in tokenizer.decode(kept)
    assert len(tokenize_conversation(tokenizer, messages, max_length=5)["input_ids"]) == 5
    batch = collate([full, tokenize_conversation(tokenizer, messages[:1], 512)], tokenizer.pad_token_id)
    assert batch["attention_mask"].sum(1).tolist() == [len(full["input_ids"]), batch["attention_mask"][1].sum().item()]
    assert torch.all(batch["labels"][batch["attention_mask"] == 0] == -100)


def test_a_truncated_sample_trains_its_content_but_not_the_turn_end_it_never_sampled(micro_cache):
    from hero.testbed import TINY_RECIPE, ensure_testbed

    tokenizer = ensure_testbed(micro_cache, recipe=TINY_RECIPE).load_tokenizer()
    ended = [{"role": "user", "content": "Continue the scene."}, {"role": "assistant", "content": "Enter the king"}]
    cut = [ended[0], {**ended[1], "truncated": True}]
    end_id = tokenizer.convert_tokens_to_ids("<|end|>")
    for assistant_only in (True, False):
        whole = tokenize_conversation(tokenizer, ended, 512, assistant_only)
        part = tokenize_conversation(tokenizer, cut, 512, assistant_only)
        assert part["input_ids"] == whole["input_ids"]
        trained = [t for t, label in zip(part["input_ids"], part["labels"]) if label != -100]
        assert "Enter the king" in tokenizer.decode(trained)
        assert whole["labels"][-2] == end_id and part["labels"][-2:] == [-100, -100]
        assert part["labels"][:-2] == whole["labels"][:-2]


def test_the_truncated_mark_survives_loading(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "so", "truncated": True}]}
        )
        + "\n"
    )
    loaded = load_conversations(compose_train(["data=jsonl", f"data.path={path}"]).data)
    assert loaded == [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "so", "truncated": True}]]


@pytest.mark.parametrize("method", ["lora", "drop_routable_ffn"])
def test_reference_methods_run_end_to_end(micro_overrides, tmp_path, method):
    run(compose_train(micro_overrides + [f"method={method}"]), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["method"] == record["variant"] == method and record["alpha"] == 0.0
    assert record["retain"]["baseline"] == "dense"
    if method == "lora":
        assert record["train"]["steps"] == 3 and record["skip"]["param_rate"] == 0.0
        assert record["config"]["method"]["r"] == 8  # model.lora_r of the testbed
    else:
        assert record["train"] is None
        assert set(record["skip"]["per_layer_ffn_rate"].values()) == {0.0} and record["skip"]["param_rate"] > 0


@pytest.mark.parametrize("model, rank", [("tiny", 8), ("smollm2_135m", 32), ("llama3_1_8b", 128)])
def test_lora_rank_is_the_backbones_and_scaling_is_two(model, rank):
    from hero.methods.lora import with_lora

    cfg = compose_train([f"model={model}", "method=lora"])
    assert cfg.method.r == rank and cfg.method.lora_alpha is None
    assert compose_train([f"model={model}", "method=lora", "method.r=4"]).method.r == 4
    if model == "tiny":
        import transformers

        tiny = transformers.LlamaForCausalLM(
            small_llama_config(
                vocab_size=32,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
                max_position_embeddings=2048,  # LlamaConfig's defaults
            )
        )
        lora = with_lora(tiny, dict(cfg.method)).base_model.model.model.layers[0].mlp.up_proj
        assert lora.r["default"] == rank and lora.scaling["default"] == 2.0
