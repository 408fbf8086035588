"""Cheaper updates (hero/update.py) give the same run as the plain path; bf16 autocast trains, resumes, records."""

from __future__ import annotations

import json

import pytest
from conftest import MICRO_RETAIN, compose_train
from omegaconf import OmegaConf

from hero.errors import ConfigError
from hero.pipeline import run
from hero.results import config_hash
from hero.update import length_groups


def test_length_groups_bound_the_padding_and_keep_every_sample():
    lengths = [200, 30, 190, 35, 100, 32, 180, 40]
    assert length_groups(lengths, 1.0) == [list(range(8))]
    groups = length_groups(lengths, 0.1)
    assert sorted(i for g in groups for i in g) == list(range(8))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert 1 - sum(lengths[i] for i in group) / (longest * len(group)) <= 0.1
    assert len(groups) > 1
    assert length_groups(lengths, 0.0) == [[0], [2], [6], [4], [7], [3], [5], [1]]


# The path every record before issue 59 ran: the speed options off (their DEFAULTED_KEYS values).
PLAIN = ["trainer.labelled_logits=false", "trainer.pad_waste=1.0", "trainer.prefix_cache=false"]


def test_new_trainer_keys_leave_the_hash_at_their_old_values():
    base = OmegaConf.to_container(compose_train(PLAIN), resolve=False)
    without = json.loads(json.dumps(base))
    for key in ("labelled_logits", "pad_waste", "prefix_cache", "prefix_cache_dir"):
        del without["trainer"][key]
    assert config_hash(base) == config_hash(without)
    moved = json.loads(json.dumps(base))
    moved["trainer"]["prefix_cache_dir"] = "/elsewhere"
    assert config_hash(moved) == config_hash(base)
    for key, value in (("labelled_logits", True), ("pad_waste", 0.1), ("prefix_cache", True)):
        changed = json.loads(json.dumps(base))
        changed["trainer"][key] = value
        assert config_hash(changed) != config_hash(base)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([], (True, 0.1, False)),  # the testbed: its states cost more than one run's prefix
        (["experiment=smollm2_cpu"], (True, 0.1, True)),
        (["trainer=paper"], (True, 0.1, False)),  # per-sample states of Tulu-3 on an 8B model: terabytes
        (["method=lora", "experiment=smollm2_cpu"], (True, 0.1, False)),  # trains every layer: no frozen prefix
        (["method=skipgpt_rt"], (True, 1.0, False)),  # Gumbel noise per token: sub-batches would redraw it
        (["method=skipgpt_rt", "experiment=smollm2_cpu"], (True, 1.0, True)),
        (["method=skipgpt_rt_official", "experiment=smollm2_cpu"], (True, 1.0, True)),
        (["method=random_skip", "experiment=smollm2_cpu"], (True, 1.0, True)),
        (["method=dense", "experiment=smollm2_cpu"], (False, 1.0, False)),  # nothing trains: the earlier hash
        (["method=drop_routable_ffn"], (False, 1.0, False)),
        (["method=static_drop", "experiment=smollm2_cpu"], (False, 1.0, False)),
        (["method=lora", "trainer.prefix_cache=true"], (True, 0.1, True)),  # the command line wins (then refused)
        (["method=skipgpt_rt", "trainer.pad_waste=0.1"], (True, 0.1, False)),
    ],
)
def test_speed_options_default_on_where_exact(overrides, expected):
    """Kills: the options left off by default, a method yaml before the trainer in train.yaml's defaults (its
    setting overwritten), LoRA defaulting to the prefix cache (fails out of the box), the stochastic methods
    defaulting to sub-batches."""
    trainer = compose_train(overrides).trainer
    assert (trainer.labelled_logits, trainer.pad_waste, trainer.prefix_cache) == expected


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.pad_waste=2", r"trainer.pad_waste=2: must be a number in \[0, 1\]"),
        ("trainer.labelled_logits=yes", "trainer.labelled_logits='yes': must be true or false"),
        ("trainer.prefix_cache=1", "trainer.prefix_cache=1: must be true or false"),
    ],
)
def test_bad_speed_options_fail_before_compute(micro_overrides, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        run(compose_train(micro_overrides + ["eval=none", override]), run_dir=tmp_path / "run")


@pytest.fixture
def built(micro_overrides, tmp_path):
    """The micro bed built before the runs compared: a run that builds it draws the global RNG after seeding
    (SkipGPT-RT's Gumbel noise then differs from a run that finds it built)."""
    run(compose_train(micro_overrides + ["eval=none", "trainer.max_steps=1"]), run_dir=tmp_path / "warm")
    return micro_overrides


def _record(overrides, tmp_path, name):
    run(compose_train(overrides + [f"paths.root={tmp_path}/{name}"]), run_dir=tmp_path / name)
    return json.loads((tmp_path / name / "results.json").read_text())


@pytest.mark.parametrize(
    "method, options",
    [
        ("hero", []),  # the testbed's defaults: labelled logits, pad_waste 0.1
        ("hero", ["trainer.pad_waste=0.05", "trainer.prefix_cache=true"]),  # + the cache, as on SmolLM2
        # SkipGPT-RT and random_skip draw noise per token in training: sub-batches draw it in another layout, so
        # pad_waste < 1 changes their draws (same distribution); their defaults (labelled logits and the prefix
        # cache, one padded batch) keep them.
        ("skipgpt_rt", ["trainer.prefix_cache=true"]),  # their defaults on SmolLM2
        ("random_skip", ["trainer.prefix_cache=true"]),
    ],
)
def test_default_speed_options_train_the_same_run(built, tmp_path, method, options):
    """Same losses up to float order and the same routing decisions as the plain path (every option off), HeRo's
    skip loss, SkipGPT-RT's and random routing's. Kills: a default that is not exact for its method (e.g.
    pad_waste 0.1 for skipgpt_rt or random_skip: other draws, other gates)."""
    overrides = built + [f"method={method}", "eval=none", "trainer.max_steps=3", "trainer.micro_batch=4"]
    overrides += [f"trainer.prefix_cache_dir={tmp_path / 'prefix'}"]
    plain = _record(overrides + PLAIN, tmp_path, "plain")
    cheap = _record(overrides + options, tmp_path, "cheap")
    assert cheap["config_hash"] != plain["config_hash"]
    for key in ("final_loss", "final_lm_loss", "final_skip_loss"):
        assert cheap["train"][key] == pytest.approx(plain["train"][key], rel=1e-5, abs=1e-7)
    assert cheap["train"]["tokens"] == plain["train"]["tokens"]
    assert cheap["skip"]["tokens"] == plain["skip"]["tokens"]
    assert cheap["skip"]["per_layer_ffn_rate"] == plain["skip"]["per_layer_ffn_rate"]
    for layer, gate in plain["skip"]["per_layer_mean_gate"].items():
        assert cheap["skip"]["per_layer_mean_gate"][layer] == pytest.approx(gate, rel=1e-5)


def test_lora_trains_at_the_defaults(micro_overrides, tmp_path):
    """``method=lora`` out of the box under a trainer whose default caches the prefix (``trainer=smollm2_cpu``): its
    yaml turns the cache off (kills: lora.yaml without it, or ``method`` before ``trainer`` in train.yaml)."""
    overrides = ["trainer=smollm2_cpu", *micro_overrides, "method=lora", "eval=none", "trainer.max_steps=1"]
    record = _record(overrides, tmp_path, "lora")
    assert record["train"]["steps"] == 1
    assert record["config"]["trainer"]["prefix_cache"] is False


def test_each_option_alone_matches_the_plain_loss(micro_overrides, tmp_path):
    overrides = micro_overrides + ["eval=none", "trainer.max_steps=2", "trainer.micro_batch=4"] + PLAIN
    plain = _record(overrides, tmp_path, "plain")
    for name, option in (("labelled", "trainer.labelled_logits=true"), ("buckets", "trainer.pad_waste=0.0")):
        other = _record(overrides + [option], tmp_path, name)
        assert other["train"]["final_loss"] == pytest.approx(plain["train"]["final_loss"], rel=1e-5), name
        assert other["skip"]["per_layer_ffn_rate"] == plain["skip"]["per_layer_ffn_rate"], name


def test_prefix_cache_trains_the_same_run_and_is_read_back(built, tmp_path, monkeypatch):
    """The hidden states entering the first routable layer, computed once and cached on disk, give the plain
    run's losses and routing; a second run reads the file instead of running the prefix."""
    overrides = built + ["eval=none", "trainer.max_steps=3", "trainer.micro_batch=4"]
    cache = tmp_path / "prefix"
    option = ["trainer.prefix_cache=true", f"trainer.prefix_cache_dir={cache}", "trainer.pad_waste=0.05"]
    plain = _record(overrides + PLAIN, tmp_path, "plain")
    cached = _record(overrides + option, tmp_path, "cached")
    assert len(list(cache.glob("*/states.pt"))) == 1
    for key in ("final_loss", "final_lm_loss", "final_skip_loss"):
        assert cached["train"][key] == pytest.approx(plain["train"][key], rel=1e-5, abs=1e-7)
    assert cached["skip"]["per_layer_ffn_rate"] == plain["skip"]["per_layer_ffn_rate"]
    import hero.update as update

    monkeypatch.setattr(update, "prefix_states", lambda *a, **k: pytest.fail("the cached prefix was recomputed"))
    again = _record(overrides + option + ["seed=43"], tmp_path, "again")
    assert again["train"]["steps"] == 3
    with pytest.raises(ConfigError, match="trainer.prefix_cache=true needs a frozen prefix"):
        run(compose_train(overrides + option + ["method=lora"]), run_dir=tmp_path / "lora")


def test_autograd_does_not_record_the_frozen_prefix(micro_overrides, tmp_path, monkeypatch):
    """The hidden states entering the first routable layer need no grad: the prefix keeps no activations."""
    import hero.model.block as block

    seen = []
    real = block.RoutedDecoderLayer.forward

    def spy(self, hidden_states, **kwargs):
        if self.j == 1 and self.training:
            seen.append((hidden_states.requires_grad, hidden_states.grad_fn))
        return real(self, hidden_states, **kwargs)

    monkeypatch.setattr(block.RoutedDecoderLayer, "forward", spy)
    run(compose_train(micro_overrides + ["eval=none", "trainer.max_steps=1", *PLAIN]), run_dir=tmp_path / "run")
    assert seen and all(entry == (False, None) for entry in seen)


def test_bf16_autocast_trains_resumes_and_records(micro_overrides, tmp_path, monkeypatch):
    """trainer.precision=bf16 (the paper recipe's): router, memory and skip loss under autocast, a checkpoint
    resumed after a crash, and a completed record, as the GPU runs we cannot test would do."""
    overrides = micro_overrides + [
        "trainer.precision=bf16",
        "trainer.max_steps=4",
        "trainer.checkpoint_every=2",
        MICRO_RETAIN,
    ]
    reference = _record(overrides, tmp_path, "ref")
    import hero.training as training

    real_save = training.save_checkpoint

    def save_then_crash(*args, **kwargs):
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("killed right after the first checkpoint")

    monkeypatch.setattr(training, "save_checkpoint", save_then_crash)
    cfg = compose_train(overrides + [f"paths.root={tmp_path}/crash"])
    with pytest.raises(KeyboardInterrupt):
        run(cfg, run_dir=tmp_path / "crash-1")
    monkeypatch.setattr(training, "save_checkpoint", real_save)
    run(cfg, run_dir=tmp_path / "crash-2")
    resumed = json.loads((tmp_path / "crash-2" / "results.json").read_text())
    assert resumed["status"] == "completed" and resumed["config"]["trainer"]["precision"] == "bf16"
    assert resumed["train"] == reference["train"] and resumed["skip"] == reference["skip"]
    assert resumed["train"]["steps"] == 4 and all(
        v == v for v in (resumed["train"]["final_loss"], resumed["train"]["final_skip_loss"])
    )
    assert resumed["train"]["final_skip_loss"] > 0 and resumed["retain"]["value"] > 0
    fp32 = _record(micro_overrides + ["eval=none", "trainer.max_steps=4"], tmp_path, "fp32")
    assert resumed["train"]["final_loss"] == pytest.approx(fp32["train"]["final_loss"], rel=0.05)
    assert resumed["train"]["final_loss"] != fp32["train"]["final_loss"]


def test_fp16_is_refused_in_one_line_that_points_to_bf16():
    """The loop has no loss scaling (GradScaler): fp16 would train with gradients that underflow to zero on a GPU.
    It is refused by the config check, before any compute (tests/test_pipeline.py: from the command line)."""
    from hero.spec import check

    with pytest.raises(
        ConfigError, match=r"^trainer.precision='fp16': .*no loss scaling.*allowed values are fp32, bf16"
    ):
        check(compose_train(["trainer.precision=fp16"]))
    check(compose_train(["trainer.precision=bf16"]))
