"""Training variants beyond the paper: per-layer gate bias, α warm-up, skip loss on the LM positions only."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MICRO_RETAIN, compose_train
from omegaconf import OmegaConf
from transformers import LlamaConfig, LlamaForCausalLM

import hero
from hero.errors import ConfigError
from hero.model import RouterConfig
from hero.objectives import prediction_positions, skip_loss
from hero.pipeline import run, validate
from hero.results import config_hash
from hero.training import alpha_schedule, fit

SMALL = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def small(config: RouterConfig | None = None):
    torch.manual_seed(0)
    return hero.attach(LlamaForCausalLM(LlamaConfig(**SMALL)), "second_half", config=config or RouterConfig())


class Items:
    """The part of ``SFTDataset`` the loop reads: items with labels, and a tokenizer's pad id."""

    tokenizer = type("Tok", (), {"pad_token_id": 0})()

    def __init__(self, n: int = 8, length: int = 10):
        gen = torch.Generator().manual_seed(3)
        self.items = []
        for _ in range(n):
            ids = torch.randint(1, SMALL["vocab_size"], (length,), generator=gen).tolist()
            labels = [-100] * (length // 2) + ids[length // 2 :]  # a prompt, then the answer
            self.items.append({"input_ids": ids, "labels": labels})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def trainer(**over):
    cfg = OmegaConf.to_container(compose_train([]).trainer, resolve=True)
    cfg.update(max_steps=4, global_batch=2, micro_batch=2, progress=False, checkpoint_every=100, warmup_frac=0.0)
    cfg.update(over)
    return OmegaConf.create(cfg)


def test_alpha_warmup_ramps_alpha_t_and_defaults_to_the_paper():
    assert [alpha_schedule(10, 0.4)(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert all(alpha_schedule(10, 0.0)(s) == 1.0 for s in range(10))
    summary = fit(small(), Items(), trainer(alpha_warmup_frac=0.5), 0.5, 0, "/nonexistent/ckpt")
    for step, h in enumerate(summary.history):
        factor = min(1.0, (step + 1) / 2)
        assert h["loss"] - h["lm_loss"] == pytest.approx(0.5 * factor * h["skip_loss"], rel=1e-5), step


@pytest.mark.parametrize("positions", ["all", "lm"])
def test_skip_loss_positions(positions):
    seen = []

    def regularizer(gates, valid):
        seen.append(valid.clone())
        return skip_loss(gates, valid)

    items = Items()
    fit(
        small(),
        items,
        trainer(skip_loss_positions=positions, max_steps=1),
        0.1,
        0,
        "/nonexistent/ckpt",
        regularizer=regularizer,
    )
    mask = torch.ones(2, 10, dtype=torch.long)
    labels = torch.tensor([items[i]["labels"] for i in range(2)])
    everywhere, on_lm = prediction_positions(mask), prediction_positions(mask, labels)
    assert on_lm.sum() < everywhere.sum()
    assert int(seen[0].sum()) == int((on_lm if positions == "lm" else everywhere).sum())


def test_layer_gate_bias_adds_one_learned_bias_per_routable_block():
    model = small(RouterConfig(layer_gate_bias=True))
    bias = model.hero_router.layer_bias
    assert bias.shape == (2,) and bias.requires_grad and torch.equal(bias, torch.zeros(2))
    with torch.no_grad():
        bias.copy_(torch.tensor([-1.5, 2.0]))
    ids = torch.randint(0, SMALL["vocab_size"], (2, 7))
    for j, r in enumerate(hero.routing_trace(model, ids), start=1):
        logit = r["history_logit"] + r["local_logit"] + bias[j - 1]
        torch.testing.assert_close(r["gate"], torch.sigmoid(logit))
    assert not hasattr(small().hero_router, "layer_bias")


def test_bad_variant_values_fail_in_one_line():
    for override, message in (
        ("trainer.alpha_warmup_frac=1.5", "trainer.alpha_warmup_frac=1.5: must lie in [0, 1]"),
        ("trainer.skip_loss_positions=prompt", "trainer.skip_loss_positions='prompt': allowed values are all, lm"),
        ("router.layer_gate_bias=maybe", "router.layer_gate_bias='maybe': must be true or false"),
    ):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            validate(compose_train([override]))


def test_variants_at_default_leave_hash_and_calibration_setup_as_before():
    from hero.calibration_file import setup_hash, setup_of

    cfg = compose_train([])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    older = json.loads(json.dumps(resolved))
    del older["router"]["layer_gate_bias"], older["trainer"]["alpha_warmup_frac"]
    del older["trainer"]["skip_loss_positions"], older["intervention"]
    assert config_hash(resolved) == config_hash(older)
    setup = setup_of(cfg)
    assert "layer_gate_bias" not in setup["router"] and "alpha_warmup_frac" not in setup["trainer"]
    for override in ("router.layer_gate_bias=true", "trainer.alpha_warmup_frac=0.2", "trainer.skip_loss_positions=lm"):
        other = compose_train([override])
        assert config_hash(OmegaConf.to_container(other, resolve=True)) != config_hash(resolved), override
        assert setup_hash(setup_of(other)) != setup_hash(setup), override


def test_the_variants_train_end_to_end_on_the_micro_bed(micro_overrides, tmp_path):
    overrides = [
        *micro_overrides,
        MICRO_RETAIN,
        "router.layer_gate_bias=true",
        "trainer.alpha_warmup_frac=0.5",
        "trainer.skip_loss_positions=lm",
        "trainer.lr=3e-2",
    ]
    run(compose_train(overrides), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["router"]["layer_gate_bias"] is True and record["config"]["trainer"]["skip_loss_positions"] == "lm"
    from safetensors.torch import load_file

    tensors = load_file(str(next((tmp_path / "run" / "router").glob("*.safetensors"))))
    bias = next(v for k, v in tensors.items() if k.endswith("layer_bias"))
    assert bias.abs().sum() > 0  # trained
