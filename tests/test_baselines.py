"""Table 1's baselines (hero.methods: skipgpt_rt, static_drop, random_skip): each method's definition,
single-branch execution, the pipeline, and calibration of each cost knob."""

from __future__ import annotations

import json
import math
from functools import partial
from types import SimpleNamespace

import optuna
import polars as pl
import pytest
import torch
from conftest import MICRO_RETAIN, compose_train, small_llama
from transformers import LlamaForCausalLM

from hero.calibration.sampler import SKIP_ATTR, TARGET_ATTR, MonotoneSampler
from hero.errors import ConfigError
from hero.knobs import KNOBS, KnobSetting
from hero.methods import METHODS, random_skip, static_drop
from hero.methods import skipgpt_rt as skipgpt
from hero.model import last_records, routed_blocks, routing_trace
from hero.model.policy import attach_policy
from hero.objectives import SkipMeter
from hero.pipeline import run
from hero.spec import check

optuna.logging.set_verbosity(optuna.logging.WARNING)
LAYERS = [0, 1, 2, 3]


def tiny_llama(seed: int = 0, layers: int = 4) -> LlamaForCausalLM:
    """A random Llama (nothing downloaded): 4 layers, hidden 32."""
    return small_llama(seed, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, max_position_embeddings=64)


def tokens(seed: int = 1, batch: int = 4, length: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 97, (batch, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, -5:] = 0  # some padding
    return ids, mask


def attach(model, name: str, adapter: bool = False, layers=LAYERS, **kwargs):
    factory = {
        "skipgpt_rt": partial(
            skipgpt.SkipGPTRouter, temperature=kwargs.get("temperature", 1.0), bias_init=kwargs.get("bias_init", 0.0)
        ),
        "random_skip": partial(random_skip.RandomPolicy, p=kwargs.get("p", 0.3)),
        "static_drop": partial(static_drop.StaticPolicy, removed_blocks=kwargs.get("removed", ())),
    }[name]
    return attach_policy(model, layers, name, {}, factory, adapter=adapter)


class RowCounter:
    """Counts the rows (tokens) entering each routable layer's frozen FFN and adapter."""

    def __init__(self, model):
        self.ffn, self.adapter = {}, {}
        self.handles = []
        for block in routed_blocks(model):
            self.handles.append(
                block.base_layer.mlp.register_forward_pre_hook(
                    lambda _m, args, layer=block.layer: self._add(self.ffn, layer, args[0])
                )
            )
            self.handles.append(
                block.adapter.register_forward_pre_hook(
                    lambda _m, args, layer=block.layer: self._add(self.adapter, layer, args[0])
                )
            )

    @staticmethod
    def _add(store: dict, layer: int, x: torch.Tensor) -> None:
        store[layer] = store.get(layer, 0) + x.reshape(-1, x.shape[-1]).shape[0]


# ----------------------------------------------------------------------------- SkipGPT-RT


def test_straight_through_gate_is_hard_in_value_and_soft_in_gradient():
    logits = torch.randn(64, 2, requires_grad=True)
    weights = torch.randn(64)
    torch.manual_seed(3)
    gate, y = skipgpt.straight_through_gate(logits, temperature=0.7)
    assert set(gate.tolist()) <= {0.0, 1.0} and 0 < gate.sum() < 64
    assert torch.equal(gate.detach(), (y.argmax(-1) == skipgpt.EXECUTE_LOGIT).float())
    (grad_st,) = torch.autograd.grad((weights * gate).sum(), logits)
    torch.manual_seed(3)  # the same Gumbel noise
    _, y_again = skipgpt.straight_through_gate(logits, temperature=0.7)
    (grad_soft,) = torch.autograd.grad((weights * y_again[:, skipgpt.EXECUTE_LOGIT]).sum(), logits)
    assert torch.allclose(grad_st, grad_soft) and grad_st.abs().sum() > 0
    # d y_exec / d ℓ = ± y_e (1 − y_e) / T for a two-way softmax
    expected = weights * y[:, 1] * (1 - y[:, 1]) / 0.7
    assert torch.allclose(grad_st[:, 1], expected.detach(), atol=1e-6)
    assert torch.allclose(grad_st[:, 0], -expected.detach(), atol=1e-6)


def test_skipgpt_router_gradient_is_the_straight_through_estimate_for_every_token(monkeypatch):
    """∂L/∂b_exec = Σ_t ⟨∂L/∂h_t, FFN(u_t)⟩ · y_e(1 − y_e)/T, skipped tokens included (the FFN runs in training)."""
    model = attach(tiny_llama(), "skipgpt_rt", layers=[2], temperature=0.5)
    with torch.no_grad():
        model.hero_router.routers[0].weight.normal_(0.0, 1.0)  # a mix of executed and skipped tokens
    softs = []
    real = skipgpt.straight_through_gate
    monkeypatch.setattr(
        skipgpt,
        "straight_through_gate",
        lambda logits, temperature: (lambda out: softs.append(out[1]) or out)(real(logits, temperature)),
    )
    block = routed_blocks(model)[0]
    ffn_out, h_out = [], []
    block.base_layer.mlp.register_forward_hook(lambda _m, _a, out: ffn_out.append(out))
    block.register_forward_hook(lambda _m, _a, out: h_out.append(out) or out.retain_grad())  # returns None
    ids, mask = tokens()
    model.train()
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    executed = last_records(model)[0].ffn_executed.reshape(-1)
    assert 0 < int(executed.sum()) < executed.numel()
    assert ffn_out[0].shape[0] == executed.numel()  # dense in training: skipped tokens' FFN(u) is computed
    y_e = softs[0][:, 1].detach()
    g_t = (h_out[0].grad.reshape(-1, 32) * ffn_out[0].detach()).sum(-1)
    expected = (g_t * y_e * (1 - y_e) / 0.5).sum()
    bias_grad = model.hero_router.routers[0].bias.grad
    assert torch.allclose(bias_grad[1], expected, rtol=1e-4, atol=1e-8)
    assert torch.allclose(bias_grad[0], -expected, rtol=1e-4, atol=1e-8)
    skipped_part = (g_t * y_e * (1 - y_e) / 0.5)[~executed].sum()
    assert skipped_part.abs() > 0  # the skipped tokens contribute


def test_skipgpt_training_forward_adds_nothing_for_skipped_tokens_and_inference_is_argmax():
    model = attach(tiny_llama(), "skipgpt_rt", bias_init=-30.0)  # every token skips every FFN
    ids, mask = tokens()
    model.train()
    trained = model(input_ids=ids, attention_mask=mask).logits
    assert not any(r.ffn_executed.any() for r in last_records(model))
    reference = tiny_llama()
    from hero.model.drop import drop_routable_ffn

    with drop_routable_ffn(reference, LAYERS) as dropped, torch.no_grad():
        removed = dropped(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(trained, removed, atol=1e-6)
    model.eval()
    with torch.no_grad():
        router = model.hero_router.routers[1]
        router.weight.normal_(0.0, 1.0)
        router.bias.zero_()
        model(input_ids=ids, attention_mask=mask)
        first = last_records(model)[1]
        model(input_ids=ids, attention_mask=mask)
        again = last_records(model)[1]
    # no Gumbel noise at inference: the decision is the argmax, the same for the same input
    assert torch.equal(first.ffn_executed, again.ffn_executed) and 0 < int(first.ffn_executed.sum()) < ids.numel()
    trace = routing_trace(model, ids, mask)[1]
    assert torch.equal(trace["ffn_executed"], trace["local_logit"] > 0)  # ℓ_execute − ℓ_skip > 0
    assert torch.isnan(trace["p_hist"]).all() and trace["memory_read"].shape[-1] == 0  # no history fields


def test_official_skipgpt_router_is_the_mlp_with_zero_biases_sampled_at_eval_and_annealed():
    model = attach_policy(
        tiny_llama(),
        LAYERS,
        "skipgpt_rt",
        {},
        partial(
            skipgpt.SkipGPTRouter,
            temperature=5.0,
            bias_init=0.0,
            router="mlp",
            eval_gate="gumbel",
            temperature_final=1.0,
        ),
        adapter=False,
    )
    policy = model.hero_router
    d = 32
    assert sum(p.numel() for p in policy.parameters()) == len(LAYERS) * (d * (d // 4) + d // 4 + (d // 4) * 2 + 2)
    assert all(float(r.hidden.bias.abs().sum() + r.out.bias.abs().sum()) == 0.0 for r in policy.routers)
    policy.set_progress(0.0)
    assert policy.temperature == 5.0
    policy.set_progress(0.5)
    assert policy.temperature == pytest.approx(3.0)
    ids, mask = tokens()
    model.eval()
    decisions = []
    with torch.no_grad():
        for seed in (0, 1):
            torch.manual_seed(seed)
            model(input_ids=ids, attention_mask=mask)
            decisions.append(torch.cat([r.ffn_executed.flatten() for r in last_records(model)]))
    # a Gumbel sample at evaluation: another draw, other decisions (Kaiming-initialised logits are near 0)
    assert not torch.equal(decisions[0], decisions[1])


def test_skipgpt_official_preset_composes_and_trains_with_an_annealed_temperature(micro_overrides, tmp_path):
    cfg = compose_train(micro_overrides + ["method=skipgpt_rt_official", "method.target_ratio=0.5", "eval=none"])
    assert (cfg.method.router, cfg.method.eval_gate, cfg.method.temperature, cfg.method.temperature_final) == (
        "mlp",
        "gumbel",
        5.0,
        1.0,
    )
    seen = []
    real = skipgpt.SkipGPTRouter.set_progress
    try:
        skipgpt.SkipGPTRouter.set_progress = lambda self, f: (real(self, f), seen.append(self.temperature))
        run(cfg, run_dir=tmp_path / "official")
    finally:
        skipgpt.SkipGPTRouter.set_progress = real
    assert seen == pytest.approx([5.0, 5.0 - 4.0 / 3, 5.0 - 8.0 / 3])  # 3 updates: T_s = 5 − 4·s/3
    record = _record(tmp_path / "official")
    assert record["variant"] == "skipgpt_rt_official" and record["method_card"]["router"] == "mlp"
    assert record["method_card"]["eval_gate"] == "gumbel" and record["method_card"]["temperature_final"] == 1.0


def test_sparsity_loss_is_the_squared_gap_of_the_mean_execution_ratio():
    valid = torch.tensor([[True, True, False], [True, False, False]])
    gates = [torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]), torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])]
    ratio = (1 + 0 + 1 + 0 + 0 + 1) / 6  # valid positions only, both layers
    assert skipgpt.sparsity_loss(gates, valid, 0.25).item() == pytest.approx((ratio - 0.75) ** 2)


# ----------------------------------------------------------------------------- static_drop


def independent_block_influence(model, ids, mask) -> dict[int, float]:
    """BI from the hidden states HF returns (layer outputs) and the attention outputs: h̄ = h_in + attn."""
    attn = {}
    hooks = [
        layer.self_attn.register_forward_hook(lambda _m, _a, out, i=i: attn.__setitem__(i, out[0]))
        for i, layer in enumerate(model.model.layers)
    ]
    with torch.no_grad():
        states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    for h in hooks:
        h.remove()
    out = {}
    real = mask.bool()
    for i in range(len(model.model.layers)):
        hbar = states[i] + attn[i]
        after = states[i + 1] if i + 1 < len(model.model.layers) else None
        if after is None:  # the last hidden state is after the final norm; recompute the layer output
            after = hbar + model.model.layers[i].mlp(model.model.layers[i].post_attention_layernorm(hbar))
        cos = torch.nn.functional.cosine_similarity(hbar, after, dim=-1)
        out[i] = 1.0 - float(cos[real].mean())
    return out


def forced_influence_model() -> LlamaForCausalLM:
    """FFN outputs scaled so that layer 1 has no influence, layer 2 almost none, layers 0 and 3 a lot."""
    model = tiny_llama()
    with torch.no_grad():
        for layer, scale in zip(model.model.layers, (20.0, 0.0, 0.01, 30.0)):
            layer.mlp.down_proj.weight.mul_(scale)
    return model


def static_spec(k: int) -> SimpleNamespace:
    """What static_drop's ``prepare`` reads of a ``hero.spec.RunSpec``: its options and its knob (k given)."""
    return SimpleNamespace(
        options={"k": k, "calibration_samples": 4},
        knob=KnobSetting(KNOBS["static_drop"], k, "given"),
        data=None,
        layer_set="all",
    )


def test_static_drop_removes_exactly_the_k_lowest_influence_ffns(monkeypatch):
    ids, mask = tokens()
    monkeypatch.setattr(static_drop, "calibration_batches", lambda data, samples, tokenizer, bed: [(ids, mask)])
    expected = independent_block_influence(forced_influence_model(), ids, mask)
    prepared = METHODS["static_drop"].prepare(static_spec(2), forced_influence_model(), None, LAYERS, None)
    record = prepared.card
    for layer, value in expected.items():
        assert record["block_influence"][str(layer)] == pytest.approx(value, abs=1e-6)
    assert record["block_influence"]["1"] == pytest.approx(0.0, abs=1e-6)
    assert record["ranking"] == sorted(LAYERS, key=lambda i: expected[i])
    assert record["ranking"][:2] == [1, 2] and record["removed_layers"] == [1, 2]
    assert not prepared.trains and record["knob"] == {"name": "k", "value": 2, "calibrated": False}
    # the same calibration text gives the same ranking (and the same values)
    again = METHODS["static_drop"].prepare(static_spec(3), forced_influence_model(), None, LAYERS, None).card
    assert again["block_influence"] == record["block_influence"] and again["ranking"] == record["ranking"]
    assert again["removed_layers"] == sorted(record["ranking"][:3])
    model = prepared.model
    counter = RowCounter(model)
    meter = SkipMeter(model)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    meter.update(last_records(model), mask)
    assert counter.ffn.get(1, 0) == counter.ffn.get(2, 0) == 0 and counter.ffn[0] == counter.ffn[3] == ids.numel()
    ffn = sum(p.numel() for p in model.model.layers[0].base_layer.mlp.parameters())
    assert meter.param_rate == pytest.approx(2 * ffn / meter.total_params)


def test_static_drop_k_beyond_the_layer_set_is_one_clear_error(monkeypatch):
    with pytest.raises(ConfigError, match=r"method.k=5: static_drop can remove at most the 4 routable FFNs"):
        METHODS["static_drop"].prepare(static_spec(5), tiny_llama(), None, LAYERS, None)


# ----------------------------------------------------------------------------- random_skip


def random_decisions(seed: int, p: float) -> torch.Tensor:
    model = attach(tiny_llama(), "random_skip", p=p)
    ids, mask = tokens(batch=8, length=50)
    torch.manual_seed(seed)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    return torch.stack([r.ffn_executed for r in last_records(model)])


@pytest.mark.parametrize("p", [0.1, 0.3, 0.7])
def test_random_skip_rate_lies_in_a_binomial_interval_of_p_and_follows_the_seed(p):
    executed = random_decisions(42, p)
    n = executed.numel()
    rate = 1.0 - executed.float().mean().item()
    assert abs(rate - p) <= 4.0 * math.sqrt(p * (1 - p) / n), (rate, p, n)  # 99.99 % interval
    # per layer too (independent per token and layer)
    for layer_rate in 1.0 - executed.float().mean(dim=(1, 2)):
        assert abs(layer_rate.item() - p) <= 4.0 * math.sqrt(p * (1 - p) / (n / len(LAYERS)))
    assert torch.equal(random_decisions(42, p), executed)
    assert not torch.equal(random_decisions(43, p), executed)


def test_random_skip_trains_adapters_single_branch_also_in_training():
    model = attach(tiny_llama(), "random_skip", adapter=True, p=0.4)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        f"model.layers.{i}.adapter.{w}.weight" for i in LAYERS for w in ("W1", "W2")
    }
    counter = RowCounter(model)
    ids, mask = tokens()
    model.train()
    model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    for record in last_records(model):
        executed = int(record.ffn_executed.sum())
        assert counter.ffn.get(record.layer, 0) == executed
        assert counter.adapter.get(record.layer, 0) == ids.numel() - executed
    assert model.model.layers[0].adapter.W2.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- every method


@pytest.mark.parametrize(
    "name, kwargs", [("skipgpt_rt", {}), ("static_drop", {"removed": (2, 4)}), ("random_skip", {"p": 0.5})]
)
def test_single_branch_at_inference_the_skipped_ffn_never_runs(name, kwargs):
    model = attach(tiny_llama(), name, **kwargs)
    if name == "skipgpt_rt":
        with torch.no_grad():
            for router in model.hero_router.routers:
                router.weight.normal_(0.0, 1.0)
    counter = RowCounter(model)
    ids, mask = tokens()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    records = last_records(model)
    skipped = sum(int((~r.ffn_executed).sum()) for r in records)
    assert skipped > 0
    for record in records:
        assert counter.ffn.get(record.layer, 0) == int(record.ffn_executed.sum())
        assert set(record.gate.unique().tolist()) <= {0.0, 1.0}
    # generation with a KV cache goes through the same routed forward
    with torch.no_grad():
        out = model.generate(ids[:1, :8], attention_mask=mask[:1, :8], max_new_tokens=3, do_sample=False)
    assert out.shape[1] == 11


# ----------------------------------------------------------------------------- config and pipeline


@pytest.mark.parametrize(
    "args, message",
    [
        (["method=random_skip", "method.p=1.5"], "method.p=1.5: random_skip needs a number in [0, 1] or 'calibrated'"),
        (
            ["method=skipgpt_rt", "method.target_ratio=1.0"],
            "method.target_ratio=1.0: skipgpt_rt needs a number in [0, 1)",
        ),
        (["method=static_drop", "method.k=-1"], "method.k=-1: static_drop removes k ≥ 0 routable FFNs"),
        (["method=skipgpt_rt", "method.temperature=0"], "method.temperature=0: must be positive"),
        (["method=skipgpt_rt", "method.router=deep"], "method.router='deep': must be linear or mlp"),
        (["method=skipgpt_rt", "method.eval_gate=noisy"], "method.eval_gate='noisy': must be argmax or gumbel"),
        (["method=skipgpt_rt", "method.temperature_final=0"], "method.temperature_final=0: must be null or positive"),
        (["method=random_skip", "method.adapter=maybe"], "method.adapter='maybe': must be true or false"),
    ],
)
def test_bad_baseline_values_fail_before_any_compute(args, message):
    with pytest.raises(ConfigError) as err:
        check(compose_train(args))
    assert message in str(err.value) and "\n" not in str(err.value)


def _record(path) -> dict:
    return json.loads((path / "results.json").read_text())


def test_baselines_run_through_the_pipeline(micro_overrides, tmp_path):
    for name, extra in (
        ("skipgpt_rt", ["method.target_ratio=0.5"]),
        ("static_drop", ["method.k=1"]),
        ("random_skip", ["method.p=0.5", "method.adapter=false"]),
    ):
        run(compose_train(micro_overrides + [f"method={name}", "eval=none", *extra]), run_dir=tmp_path / name)
        record = _record(tmp_path / name)
        assert record["method"] == record["variant"] == name and record["method_card"]["deviations"] is not None
        assert record["knob_name"] == METHODS[name].knob.name and record["rho"] == {}
        assert record["method_card"]["source"] and record["skip"]["per_layer_ffn_rate"]
    assert _record(tmp_path / "skipgpt_rt")["train"]["steps"] == 3
    assert "router" not in _record(tmp_path / "skipgpt_rt")["method_card"]  # official-code keys only when changed
    assert _record(tmp_path / "skipgpt_rt")["router_params"]["router"] == 2 * (64 + 1)  # one Linear(64, 2), 1 layer
    static = _record(tmp_path / "static_drop")
    assert static["train"] is None and static["skip"]["param_rate"] == pytest.approx(static["skip"]["max_param_rate"])
    assert static["method_card"]["removed_layers"] == [1] and "1" in static["method_card"]["block_influence"]
    rates = _record(tmp_path / "random_skip")["skip"]
    n = rates["tokens"]
    assert abs(rates["param_rate"] - 0.5 * rates["max_param_rate"]) <= 4 * rates["max_param_rate"] * math.sqrt(0.25 / n)


def test_random_skip_with_adapters_trains_and_scores_against_dense(micro_overrides, tmp_path):
    run(
        compose_train(micro_overrides + ["method=random_skip", "method.p=0.5", "eval.limit=8", MICRO_RETAIN]),
        run_dir=tmp_path / "r",
    )
    record = _record(tmp_path / "r")
    assert record["train"]["steps"] == 3 and record["router_params"]["trainable"] > 0
    assert record["retain"]["baseline"] == "dense" and record["retain"]["value"] > 0


def _calibrate(args):
    from test_calibration import _calibrate_main

    return _calibrate_main()(args)


def test_calibrate_random_skip_and_static_drop_then_train_at_the_calibrated_knob(micro_cache, tmp_path, capsys):
    common = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={tmp_path}",
        "trainer.progress=false",
        "trainer.max_steps=2",
        "trainer.global_batch=2",
        "trainer.micro_batch=2",
        "trainer.num_threads=1",
    ]
    assert _calibrate(["method=random_skip", "method.adapter=false", "target_skip=0.1", *common]) == 0
    assert _calibrate(["method=static_drop", "target_skip=0.198", *common]) == 0
    entries = {
        e["variant"]: e for e in json.loads((tmp_path / "calibration" / "calibration.json").read_text())["entries"]
    }
    assert entries["random_skip"]["knob"] == "p" and abs(entries["random_skip"]["realized_skip"] - 0.1) <= 0.005
    assert 0.4 < entries["random_skip"]["value"] < 0.6 and entries["random_skip"]["trials"] <= 3
    assert entries["static_drop"]["knob"] == "k" and entries["static_drop"]["value"] == 1
    capsys.readouterr()
    # a target between two whole k is reported as a jump, not searched forever
    assert _calibrate(["method=static_drop", "target_skip=0.1", *common]) == 1
    assert "skip jumps from 0.0000 at k=0 to 0.1995 at k=1" in capsys.readouterr().out
    cfg = compose_train(
        common
        + [
            "method=random_skip",
            "method.adapter=false",
            "method.p=calibrated",
            "calibration.target_skip=0.1",
            "eval=none",
        ]
    )
    run(cfg, run_dir=tmp_path / "final")
    record = _record(tmp_path / "final")
    assert record["knob"] == entries["random_skip"]["value"] and record["method_card"]["knob"]["calibrated"]
    assert record["config"]["method"]["p"] == record["knob"] and record["calibration"]["p"] == record["knob"]


# ----------------------------------------------------------------------------- the sampler on baseline knobs


def run_knob(sampler, distribution, response, target, tolerance=0.005, budget=12) -> list:
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.set_user_attr(TARGET_ATTR, target)
    values = []
    for _ in range(budget):
        trial = study.ask({sampler.param: distribution})
        value = trial.params[sampler.param]
        values.append(value)
        skip = response(value)
        trial.set_user_attr(SKIP_ATTR, skip)
        study.tell(trial, abs(skip - target))
        if abs(skip - target) <= tolerance:
            break
    return values


def test_monotone_sampler_on_an_integer_knob_and_a_linear_one():
    per_layer = 0.0219  # one Llama-3.1-8B FFN: 176 M of 8.03 B parameters
    ks = run_knob(
        MonotoneSampler(x0=2.0, step=1.0, param="k"),
        optuna.distributions.IntDistribution(0, 16),
        lambda k: k * per_layer,
        0.2,
    )
    assert ks[-1] == 9 and all(isinstance(k, int) for k in ks) and len(ks) <= 5 and len(set(ks)) == len(ks)
    ceiling = 0.35
    response = lambda p: p * ceiling + 0.004 * math.sin(20 * p)  # noqa: E731 - skip ≈ p · ceiling, not exactly
    uniform = optuna.distributions.FloatDistribution(0.0, 1.0)
    far = run_knob(MonotoneSampler(x0=0.9, step=0.25, param="p"), uniform, response, 0.2)
    assert abs(response(far[-1]) - 0.2) <= 0.005 and len(far) <= 6
    expected = run_knob(MonotoneSampler(x0=0.2 / ceiling, step=0.25, param="p"), uniform, response, 0.2)
    assert abs(response(expected[-1]) - 0.2) <= 0.005 and len(expected) <= 2  # the start calibrate.py uses


# ----------------------------------------------------------------------------- analysis


def test_analysis_lists_each_baseline_knob_as_a_table1_row_and_a_curve_point(tmp_path):
    """SYNTHETIC records (analysis/synthetic.py): a baseline's knob values are separate groups and one curve."""
    from analysis.curves import curve_points, curves
    from analysis.load import load_runs
    from analysis.reference import resolve_baselines, with_retain
    from analysis.synthetic import RunSpec, make_record
    from analysis.tables import build_table, paper_tables
    from hero.results import RESULTS_FILENAME, write_atomic

    dense = {"arc_easy": 0.8, "boolq": 0.6}
    specs = [RunSpec(dense, 0.0, method="dense", variant="dense", alpha=0.0)]
    for name, knob, values in (("random_skip", "p", (0.3, 0.6)), ("static_drop", "k", (1, 2))):
        for value in values:
            for seed in (42, 43):
                scores = {t: s * (1 - 0.3 * value / max(values)) for t, s in dense.items()}
                config = {"model": {"name": "tiny"}, "method": {"name": name, knob: value}, "seed": seed}
                specs.append(
                    RunSpec(
                        scores,
                        0.1 * value / max(values),
                        method=name,
                        variant=name,
                        alpha=0.0,
                        seed=seed,
                        extra={"knob": value, "knob_name": knob, "config": config},
                        run_name=f"{name}-{value}-{seed}",
                    )
                )
    for spec in specs:
        write_atomic(tmp_path / spec.name / RESULTS_FILENAME, make_record(spec))
    runs = load_runs([tmp_path])
    frame = runs.records.collect()
    assert runs.problems.height == 0
    table = build_table(frame, paper_tables()[0], runs.tasks)
    rows = table.stats.filter(pl.col("method") != "dense").sort("method", "knob")
    assert rows.select("method", "knob", "n").rows() == [
        ("random_skip", 0.3, 2),
        ("random_skip", 0.6, 2),
        ("static_drop", 1.0, 2),
        ("static_drop", 2.0, 2),
    ]
    assert rows["skip.mean"].to_list() == pytest.approx([5.0, 10.0, 5.0, 10.0])
    assert "Knob" in table.display().columns and "Skip %" in table.display().columns
    scored = with_retain(frame, resolve_baselines(frame, "method=dense", "--curve-baseline", runs.tasks))
    found = {c.key["method"]: c for c in curves(curve_points(scored, ["retain"]), "retain")}
    assert list(found["random_skip"].skip) == pytest.approx([5.0, 10.0]) and found["static_drop"].interpolable


def test_random_skip_inference_draws_follow_the_run_seed_even_after_a_global_reseed():
    """lm-eval reseeds the global RNG before every task; evaluation routing must still differ between run seeds."""

    def evaluated(seed: int) -> torch.Tensor:
        model = attach(tiny_llama(), "random_skip", p=0.4)
        model.hero_router.seed = seed
        model.eval()
        ids, mask = tokens(batch=8, length=50)
        torch.manual_seed(1234)
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
        return torch.stack([r.ffn_executed for r in last_records(model)])

    assert torch.equal(evaluated(42), evaluated(42))
    assert not torch.equal(evaluated(42), evaluated(43))
