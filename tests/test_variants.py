"""Training variants beyond the paper: per-layer gate bias, α warm-up, skip loss on the LM positions only."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import MICRO_RETAIN, SMALL, compose_train, small_llama_config
from omegaconf import OmegaConf
from transformers import LlamaForCausalLM

import hero
from hero.errors import ConfigError
from hero.model import RouterConfig
from hero.objectives import prediction_positions, skip_loss
from hero.pipeline import run
from hero.results import config_hash
from hero.spec import check
from hero.training import alpha_schedule, fit

SHAPE = dict(num_hidden_layers=4, max_position_embeddings=64)  # conftest.SMALL, four layers


def small(config: RouterConfig | None = None):
    torch.manual_seed(0)
    return hero.attach(LlamaForCausalLM(small_llama_config(**SHAPE)), "second_half", config=config or RouterConfig())


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
    seen, losses = [], []

    def regularizer(gates, valid):
        seen.append(valid.clone())
        loss = skip_loss(gates, valid)
        depth_sum = torch.stack([g.detach().float() for g in gates]).sum(0)
        losses.append((loss.item(), (depth_sum[valid] ** 2).mean().item()))  # eq 18 over the valid positions only
        return loss

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
    assert torch.equal(seen[0].cpu(), on_lm if positions == "lm" else everywhere)  # the positions, not just their count
    # the init gates are nearly uniform: counting the excluded positions moves the loss by ≥ 1e-5 relative, fp32 by ~1e-7
    assert losses and all(got == pytest.approx(expected, rel=2e-6) for got, expected in losses)


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
            check(compose_train([override]))


def test_variants_at_default_leave_hash_and_calibration_setup_as_before():
    from hero.calibration_file import setup_hash, setup_of

    cfg = compose_train([])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    older = json.loads(json.dumps(resolved))
    del older["router"]["layer_gate_bias"], older["router"]["straight_through"], older["trainer"]["alpha_warmup_frac"]
    del older["trainer"]["skip_loss_positions"], older["intervention"]
    assert config_hash(resolved) == config_hash(older)
    setup = setup_of(cfg)
    assert "layer_gate_bias" not in setup["router"] and "alpha_warmup_frac" not in setup["trainer"]
    for override in (
        "router.layer_gate_bias=true",
        "router.straight_through=true",
        "trainer.alpha_warmup_frac=0.2",
        "trainer.skip_loss_positions=lm",
    ):
        other = compose_train([override])
        assert config_hash(OmegaConf.to_container(other, resolve=True)) != config_hash(resolved), override
        assert setup_hash(setup_of(other)) != setup_hash(setup), override


def test_the_variants_train_end_to_end_on_the_micro_bed(micro_overrides, tmp_path):
    overrides = [
        *micro_overrides,
        MICRO_RETAIN,
        "router.layer_gate_bias=true",
        "router.straight_through=true",
        "trainer.alpha_warmup_frac=0.5",
        "trainer.skip_loss_positions=lm",
        "trainer.lr=3e-2",
    ]
    run(compose_train(overrides), run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["router"]["layer_gate_bias"] is True and record["router"]["straight_through"] is True
    assert record["config"]["trainer"]["skip_loss_positions"] == "lm"
    from safetensors.torch import load_file

    tensors = load_file(str(next((tmp_path / "run" / "router").glob("*.safetensors"))))
    bias = next(v for k, v in tensors.items() if k.endswith("layer_bias"))
    assert bias.abs().sum() > 0  # trained


def test_both_branches_keeps_eq3_values_and_gives_skipped_gates_the_ffn_gradient():
    from hero.model.adapter import Adapter
    from hero.model.block import both_branches, single_branch

    torch.manual_seed(0)
    ffn, adapter = torch.nn.Linear(8, 8), Adapter(8, 3)  # W2 = 0: a fresh adapter adds nothing
    hbar, u = torch.randn(6, 8), torch.randn(6, 8)
    executed = torch.tensor([True, False, True, False, False, True])
    outs, grads = {}, {}
    for name, rule in (("single", single_branch), ("both", both_branches)):
        gate = torch.tensor([0.9, 0.2, 0.7, 0.4, 0.1, 0.6], requires_grad=True)
        out = rule(hbar, u, gate, executed, ffn, adapter)
        out.square().sum().backward()
        outs[name], grads[name] = out.detach(), gate.grad
    torch.testing.assert_close(outs["both"], outs["single"], rtol=0, atol=1e-6)
    skipped = ~executed
    assert torch.equal(grads["single"][skipped], torch.zeros(3))  # the paper's rule: no signal while W2 = 0
    assert (grads["both"][skipped].abs() > 0).all()


def test_straight_through_trains_both_branches_and_evaluates_single_branch(monkeypatch):
    import hero.model.block as block_module

    calls = []
    real = block_module.both_branches
    monkeypatch.setattr(block_module, "both_branches", lambda *a: calls.append(1) or real(*a))
    model = small(RouterConfig(straight_through=True))
    fit(model, Items(), trainer(max_steps=1), 0.1, 0, "/nonexistent/ckpt")
    assert len(calls) == 2  # one training forward, two routable blocks
    with torch.no_grad():
        model(torch.randint(0, SMALL["vocab_size"], (1, 5)))
    assert len(calls) == 2
    plain = small()
    fit(plain, Items(), trainer(max_steps=1), 0.1, 0, "/nonexistent/ckpt")
    assert len(calls) == 2
