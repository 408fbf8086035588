"""HeRo core: every equation of HERO_SPEC §1–§5 checked through the trace, on small random backbones."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import SMALL, small_llama, small_llama_config
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

import hero
from hero.model import TRACE_FIELDS, HeRoConfigError, RouterConfig, resolve_layers
from hero.objectives import SkipMeter, prediction_positions, skip_loss


def spread_gates(model, seed: int = 1, scale: float = 0.5) -> None:
    """Randomise the router so that gates fall on both sides of τ (the init puts them all above)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and not name.endswith(".eta"):
                p.add_(torch.randn(p.shape, generator=gen) * scale / max(1, p.shape[-1]) ** 0.5)
        heads = [model.hero_router.local_head] + (
            [model.hero_router.history_head] if model.hero_config.history_branch else []
        )
        for head in heads:
            head[2].weight.normal_(0.0, 4.0 / head[2].in_features ** 0.5, generator=gen)
            head[2].bias.zero_()
    logits = torch.cat(
        [(r["history_logit"] + r["local_logit"]).reshape(-1) for r in hero.routing_trace(model, *batch_with_padding())]
    )
    with torch.no_grad():
        model.hero_router.local_head[2].bias.fill_(-float(logits.median()))


def batch_with_padding(seed: int = 2, batch: int = 3, length: int = 9):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, SMALL["vocab_size"], (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    mask[2, :1] = 0
    return ids, mask


@pytest.fixture
def routed():
    model = hero.attach(small_llama(), "second_half")
    spread_gates(model)
    return model


def test_trace_fields_and_both_branches_used(routed):
    ids, mask = batch_with_padding()
    trace = hero.routing_trace(routed, ids, mask)
    assert [r["layer"] for r in trace] == [3, 4, 5]
    for record in trace:
        assert set(TRACE_FIELDS) <= set(record)
        assert record["x_path"].shape == (3, 9, 6)
        assert record["gate"].shape == (3, 9)
    executed = torch.stack([r["ffn_executed"] for r in trace])
    assert executed.any() and not executed.all(), "test needs gates on both sides of tau"


def test_first_blocks_start_from_zero(routed):
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    assert torch.all(t[0]["memory_read"] == 0)  # c_1 = 0
    assert torch.all(t[0]["nu"] == 0)  # nu_1 = 0
    assert torch.all(t[0]["x_path"][..., 2] == 0)  # d_1 = ||delta_1|| = 0
    assert torch.all(t[0]["x_path"][..., 3] == 0) and torch.all(t[1]["x_path"][..., 3] == 0)  # gamma_1 = gamma_2 = 0
    assert torch.all(t[0]["x_path"][..., 4] == 1) and torch.all(t[0]["x_path"][..., 5] == 1)  # p_hist_0 = m_hist_0 = 1
    assert t[1]["memory_read"].abs().sum() > 0 and t[1]["nu"].abs().sum() > 0


def test_path_vector_matches_definitions(routed):
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    L = len(t)
    for j, record in enumerate(t, start=1):
        x = record["x_path"]
        assert torch.allclose(x[..., 0], torch.full_like(x[..., 0], j / L))
        assert torch.allclose(x[..., 1], torch.full_like(x[..., 1], (L - j) / L))
        if j > 1:
            delta = t[j - 1]["h_bar"] - t[j - 2]["h_bar"]
            assert torch.allclose(x[..., 2], delta.norm(dim=-1).reshape(x.shape[:2]), rtol=1e-5, atol=1e-5)
        if j > 2:
            delta = (t[j - 1]["h_bar"] - t[j - 2]["h_bar"]).reshape(*x.shape[:2], -1).double()
            prev = (t[j - 2]["h_bar"] - t[j - 3]["h_bar"]).reshape(*x.shape[:2], -1).double()
            # eq 8 as written: ⟨δ_j, δ_{j−1}⟩ / (‖δ_j‖‖δ_{j−1}‖ + ε), the router's ε, in float64
            eps = routed.hero_config.eps
            gamma = (delta * prev).sum(-1) / (delta.norm(dim=-1) * prev.norm(dim=-1) + eps)
            # fp32 rounding is ~3e-8 here; the same γ without ε (or with ε inside each norm) is ~1.7e-5 off
            assert torch.allclose(x[..., 3].double(), gamma, rtol=0, atol=1e-6)
        prev_p = t[j - 2]["p_hist"] if j > 1 else torch.ones_like(x[..., 4])
        prev_m = t[j - 2]["m_hist"] if j > 1 else torch.ones_like(x[..., 5])
        assert torch.allclose(x[..., 4], prev_p) and torch.allclose(x[..., 5], prev_m)


def test_heads_gate_and_history_scores(routed):
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    T_hist, tau = routed.hero_config.T_hist, routed.hero_config.tau
    running = torch.ones_like(t[0]["p_hist"])
    for record in t:
        a, b = record["history_logit"], record["local_logit"]
        assert torch.allclose(record["p_hist"], torch.sigmoid(a / T_hist))  # eq 14
        running = running * record["p_hist"]
        assert torch.allclose(record["m_hist"], running, rtol=1e-5)  # eq 15
        assert torch.allclose(record["gate"], torch.sigmoid(a + b))  # eq 16
        assert torch.equal(record["ffn_executed"], record["gate"] >= tau)  # eq 3 threshold
        assert not torch.allclose(record["gate"], record["p_hist"])  # gate and p_hist are different quantities


def test_heads_read_their_inputs(routed):
    """a_j = f_θ([s_j ; c_j ; ν_j]) and b_j = f_ψ(RMSNorm(h̄_j)) (eq 13, 14, 16): the heads' inputs are rebuilt
    from the traced h̄, x_path and c (s per eq 5, 9; ν per eq 13 with ν_1 = 0) and fed to the router's own heads."""
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    router = routed.hero_router
    eps = router.config.eps
    with torch.no_grad():
        for j, record in enumerate(t, start=1):
            h = record["h_bar"].reshape(-1, SMALL["hidden_size"])
            normed = router.norm(h)
            z_h = router.content_up(F.silu(router.content_down(normed)))
            s = torch.cat([z_h, router.path_encoder(record["x_path"].reshape(-1, 6))], dim=-1)
            c = record["memory_read"].reshape(-1, router.config.memory_dim)
            if j == 1:
                nu = torch.zeros(s.shape[0])
            else:
                nu = 1 - F.cosine_similarity(router.W_n(s), router.W_c(c), dim=-1, eps=eps)
                assert nu.abs().min() > 1e-3  # ν is far from 0: a head fed ν = 0 gives another a
            assert torch.allclose(record["nu"].reshape(-1), nu, rtol=1e-5, atol=1e-6), j
            a = router.history_head(torch.cat([s, c, nu.unsqueeze(-1)], dim=-1)).squeeze(-1)
            b = router.local_head(normed).squeeze(-1)
            assert torch.allclose(record["history_logit"].reshape(-1), a, rtol=1e-5, atol=1e-6), j
            assert torch.allclose(record["local_logit"].reshape(-1), b, rtol=1e-5, atol=1e-6), j


def test_memory_read_is_linear_attention_over_earlier_blocks(routed):
    """c_j recomputed from the projections of s_1..s_{j-1} with the learned rho (eq 10-12)."""
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    blocks = hero.routed_blocks(routed)
    router = routed.hero_router
    states = []
    with torch.no_grad():
        for record in t:
            h = record["h_bar"].reshape(-1, SMALL["hidden_size"])
            z_h = router.content_up(F.silu(router.content_down(router.norm(h))))
            z_a = router.path_encoder(record["x_path"].reshape(-1, 6))
            states.append(torch.cat([z_h, z_a], dim=-1))
        phi = lambda x: F.elu(x) + 1  # noqa: E731
        for j in range(1, len(t)):
            q = router.qkv(states[j]).chunk(3, dim=-1)[0]
            num, den = 0, 0
            for i in range(j):
                _, k, v = router.qkv(states[i]).chunk(3, dim=-1)
                decay = torch.prod(torch.stack([blocks[m].rho for m in range(i + 1, j)])) if i + 1 < j else 1.0
                num = num + decay * (phi(q) * phi(k)).sum(-1, keepdim=True) * v
                den = den + decay * (phi(q) * phi(k)).sum(-1, keepdim=True)
            expected = num / (den + router.config.eps)
            assert torch.allclose(t[j]["memory_read"].reshape(expected.shape), expected, rtol=1e-4, atol=1e-5)


def test_h_out_is_single_branch_scaled_output(routed):
    ids, mask = batch_with_padding()
    t = hero.routing_trace(routed, ids, mask)
    for record, block in zip(t, hero.routed_blocks(routed)):
        u = record["u"].reshape(-1, SMALL["hidden_size"])
        g = record["gate"].reshape(-1, 1)
        hbar = record["h_bar"].reshape(-1, SMALL["hidden_size"])
        with torch.no_grad():
            ffn = hbar + g * block.base_layer.mlp(u)
            adapter = hbar + (1 - g) * block.adapter(u)
        executed = record["ffn_executed"].reshape(-1)
        h_out = record["h_out"].reshape(-1, SMALL["hidden_size"])
        assert torch.allclose(h_out[executed], ffn[executed], atol=1e-6)
        assert torch.allclose(h_out[~executed], adapter[~executed], atol=1e-6)


def test_only_the_chosen_branch_runs(routed):
    """The frozen FFN sees exactly the executed rows and the adapter exactly the others."""
    seen = {}
    hooks = []
    for block in hero.routed_blocks(routed):
        for name, module in (("ffn", block.base_layer.mlp), ("adapter", block.adapter)):
            hooks.append(
                module.register_forward_hook(
                    lambda m, inp, out, key=(block.layer, name): seen.__setitem__(key, inp[0].shape[0])
                )
            )
    ids, mask = batch_with_padding()
    routed(input_ids=ids, attention_mask=mask)
    for h in hooks:
        h.remove()
    for record in hero.last_records(routed):
        n_ffn = int(record.ffn_executed.sum())
        assert seen.get((record.layer, "ffn"), 0) == n_ffn
        assert seen.get((record.layer, "adapter"), 0) == record.ffn_executed.numel() - n_ffn


@pytest.mark.parametrize("policy", ["gate", "all_ffn", "no_ffn"])
def test_inference_path_runs_each_branch_on_its_rows_only(routed, policy):
    """Without autograd: the FFN sees the executed rows (2–3 of ≥ 4 padded to 4), the adapter the others,
    and a branch that no row takes is not called; h_out is eq 3 row by row."""
    from hero.model.block import GEMM_MIN_ROWS

    seen = {}
    hooks = [
        module.register_forward_hook(
            lambda m, inp, out, key=(block.layer, name): seen.__setitem__(key, inp[0].shape[0])
        )
        for block in hero.routed_blocks(routed)
        for name, module in (("ffn", block.base_layer.mlp), ("adapter", block.adapter))
    ]
    forced = {
        "all_ffn": lambda j, g: torch.ones_like(g, dtype=torch.bool),
        "no_ffn": lambda j, g: torch.zeros_like(g, dtype=torch.bool),
    }.get(policy)
    ids, mask = batch_with_padding()
    with torch.no_grad():
        if forced is None:
            routed(input_ids=ids, attention_mask=mask)
        else:
            with hero.forced_routing(routed, forced):
                routed(input_ids=ids, attention_mask=mask)
    for h in hooks:
        h.remove()
    for record in hero.last_records(routed):
        n, n_ffn = record.ffn_executed.numel(), int(record.ffn_executed.sum())
        assert seen.get((record.layer, "ffn"), 0) == (GEMM_MIN_ROWS if 1 < n_ffn < GEMM_MIN_ROWS <= n else n_ffn)
        assert seen.get((record.layer, "adapter"), 0) == n - n_ffn
    if policy == "gate":
        assert any(0 < int(r.ffn_executed.sum()) < r.ffn_executed.numel() for r in hero.last_records(routed))


def test_skip_loss_sums_depth_before_squaring():
    """Eq 18 on two layers: the padded positions' depth sums differ from the valid ones', so
    counting a padded position, squaring per layer or averaging over B·T each change the number."""
    gates = [torch.tensor([[0.5, 0.9, 0.2], [0.1, 0.3, 0.7]]), torch.tensor([[0.25, 0.8, 0.6], [0.4, 0.05, 0.3]])]
    valid = torch.tensor([[True, False, True], [False, True, False]])
    # depth sums, by hand: [[0.75, 1.7, 0.8], [0.5, 0.35, 1.0]]; valid ones 0.75, 0.8, 0.35
    expected = (0.75**2 + 0.8**2 + 0.35**2) / 3
    assert skip_loss(gates, valid).item() == pytest.approx(expected, rel=1e-6)
    with_padding = (0.75**2 + 1.7**2 + 0.8**2 + 0.5**2 + 0.35**2 + 1.0**2) / 6
    per_layer_squared = (0.5**2 + 0.2**2 + 0.3**2) / 3 + (0.25**2 + 0.6**2 + 0.05**2) / 3
    # the test can tell eq 18 from counting padding and from squaring per layer
    assert abs(expected - with_padding) > 0.1 and abs(expected - per_layer_squared) > 0.1
    assert skip_loss(gates, torch.zeros_like(valid)).item() == 0.0  # no valid position: nothing to average


def test_prediction_positions_exclude_padding_and_last():
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    assert prediction_positions(mask).tolist() == [[False, True, True, False], [True, True, False, False]]


def test_realized_param_skip_rate_counts_bypassed_ffn_parameters(routed):
    ids, mask = batch_with_padding()
    routed(input_ids=ids, attention_mask=mask)
    records = hero.last_records(routed)
    meter = SkipMeter(routed)
    meter.update(records, mask)
    ffn = sum(p.numel() for p in records and hero.routed_blocks(routed)[0].base_layer.mlp.parameters())
    total = sum(p.numel() for n, p in routed.named_parameters() if not p.requires_grad)
    skipped = sum((~r.ffn_executed).float() for r in records)
    expected = (skipped * ffn / total)[mask.bool()].mean().item()
    stats = meter.result()
    assert stats["param_rate"] == pytest.approx(expected)
    assert stats["tokens"] == int(mask.sum())
    for record in records:
        rate = record.ffn_executed[mask.bool()].float().mean().item()
        assert stats["per_layer_ffn_rate"][str(record.layer)] == pytest.approx(rate)


def test_executed_gate_averages_over_executed_tokens_only_and_mean_gate_over_all(routed):
    """The two gate statistics differ exactly by the skipped tokens; padding counts in neither."""
    from hero.model.block import BlockRecord

    first, second = (block.layer for block in hero.routed_blocks(routed)[:2])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    gate = torch.tensor([[0.9, 0.2, 0.7, 0.99], [0.3, 0.8, 0.1, 0.6]])
    executed = gate >= 0.5
    records = [BlockRecord(first, gate, executed), BlockRecord(second, gate, torch.zeros_like(executed))]
    meter = SkipMeter(routed)
    meter.update(records, mask)
    stats = meter.result()
    assert stats["per_layer_executed_gate"][str(first)] == pytest.approx((0.9 + 0.7 + 0.8 + 0.6) / 4)
    assert stats["per_layer_mean_gate"][str(first)] == pytest.approx((0.9 + 0.2 + 0.7 + 0.3 + 0.8 + 0.1 + 0.6) / 7)
    assert stats["per_layer_executed_gate"][str(second)] is None  # no executed token: no executed gate
    assert stats["ffn_execution_rate"] == pytest.approx(4 / (7 * len(meter.layers)))  # executions / routable calls
    assert stats["ffn_execution_rate"] == pytest.approx(sum(stats["per_layer_ffn_rate"].values()) / len(meter.layers))


def _trainable_names(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def test_switch_memory_read_off():
    model = hero.attach(small_llama(), "second_half", memory_read=False)
    spread_gates(model)
    t = hero.routing_trace(model, *batch_with_padding())
    assert all(torch.all(r["memory_read"] == 0) and torch.all(r["nu"] == 0) for r in t)
    assert any(r["history_logit"].abs().sum() > 0 for r in t)  # the history head still runs


def test_switch_history_branch_off():
    model = hero.attach(small_llama(), "second_half", history_branch=False)
    spread_gates(model)
    t = hero.routing_trace(model, *batch_with_padding())
    for r in t:
        assert torch.all(r["history_logit"] == 0)
        assert torch.allclose(r["gate"], torch.sigmoid(r["local_logit"]))
    names = _trainable_names(model)
    assert not any("history_head" in n or "qkv" in n or "path_encoder" in n for n in names)


def test_switch_aux_state_off_removes_path_encoder():
    full = _trainable_names(hero.attach(small_llama(), "second_half"))
    no_aux = _trainable_names(hero.attach(small_llama(), "second_half", aux_state=False))
    assert any("path_encoder" in n for n in full)
    assert not any("path_encoder" in n for n in no_aux)


def test_switch_position_state_off_reads_only_history_scores():
    model = hero.attach(small_llama(), "second_half", position_state=False)
    assert model.hero_router.path_encoder[0].in_features == 2
    spread_gates(model)
    ids, mask = batch_with_padding()
    t = hero.routing_trace(model, ids, mask)
    # Changing r, q_rem, d, gamma cannot change the path code: only p_hist, m_hist enter.
    x = t[1]["x_path"].reshape(-1, 6).clone()
    z = model.hero_router.path_encoder(x[:, [4, 5]])
    x[:, :4] = torch.randn_like(x[:, :4])
    assert torch.equal(z, model.hero_router.path_encoder(x[:, list(model.hero_config.path_features)]))


def test_recent_state_only_forget_zero():
    model = hero.attach(small_llama(), "second_half", forget="zero")
    assert all(float(b.rho.detach()) == 0.0 for b in hero.routed_blocks(model))


def test_rho_initialised_near_paper_value(routed):
    assert all(abs(float(b.rho.detach()) - 0.98) < 1e-6 for b in hero.routed_blocks(routed))


def _train_steps(model, steps=3, checkpointing=False, seed=0):
    if checkpointing:
        model.activation_checkpointing_enable()
    model.train()
    params = list(hero.trainable_parameters(model).values())
    opt = torch.optim.AdamW(params, lr=1e-2)
    ids, mask = batch_with_padding(seed)
    for _ in range(steps):
        out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
        gates = [r.gate for r in hero.last_records(model)]
        loss = out.loss + 1e-2 * skip_loss(gates, prediction_positions(mask))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def test_backbone_frozen_and_router_trains(routed):
    frozen = {n: p.detach().clone() for n, p in routed.named_parameters() if not p.requires_grad}
    trainable = {n: p.detach().clone() for n, p in routed.named_parameters() if p.requires_grad}
    _train_steps(routed)
    for n, p in routed.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), f"backbone parameter {n} changed"
            assert p.grad is None
    changed = [n for n, p in routed.named_parameters() if n in trainable and not torch.equal(p, trainable[n])]
    assert any("local_head" in n for n in changed) and any("history_head" in n for n in changed)
    assert any(".adapter." in n for n in changed) and any(n.endswith(".eta") for n in changed)


def test_gradient_checkpointing_gives_same_gradients(monkeypatch):
    from hero.model.block import RoutedDecoderLayer

    calls = []
    original = RoutedDecoderLayer._block
    monkeypatch.setattr(RoutedDecoderLayer, "_block", lambda self, *a: calls.append(self.j) or original(self, *a))
    grads = []
    for checkpointing in (False, True):
        model = hero.attach(small_llama(), "second_half")
        spread_gates(model)
        if checkpointing:
            model.activation_checkpointing_enable()
        model.train()
        ids, mask = batch_with_padding()
        calls.clear()
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        loss = out.loss + 1e-2 * skip_loss([r.gate for r in hero.last_records(model)], prediction_positions(mask))
        loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad and p.grad is not None})
        assert calls == ([1, 2, 3, 3, 2, 1] if checkpointing else [1, 2, 3])  # backward recomputes each block
    assert grads[0].keys() == grads[1].keys()
    assert any(".adapter." in n for n in grads[0]) and any("history_head" in n for n in grads[0])
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-7), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_forward_backward(routed, dtype):
    ids, mask = batch_with_padding()
    routed.train()
    with torch.autocast("cpu", dtype=dtype):
        out = routed(input_ids=ids, attention_mask=mask, labels=ids)
        loss = out.loss + 1e-2 * skip_loss([r.gate for r in hero.last_records(routed)], prediction_positions(mask))
    loss.backward()
    executed = torch.stack([r.ffn_executed for r in hero.last_records(routed)])
    assert executed.any() and not executed.all()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in hero.trainable_parameters(routed).values() if p.grad is not None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_router_computes_in_fp32_under_autocast(routed, dtype):
    """The router's outputs under autocast equal the router replayed in fp32 on the same h̄ (HERO_SPEC: router
    arithmetic in float32). Measured: guarded, the two agree bit for bit; without the guard the lower-precision
    matmuls move every output by ≥ 2e-3 (bf16) / ≥ 2.5e-4 (fp16), on AVX512-BF16 and on ATEN_CPU_CAPABILITY=avx2."""
    ids, mask = batch_with_padding()
    with torch.autocast("cpu", dtype=dtype):
        t = hero.routing_trace(routed, ids, mask)
    router = routed.hero_router
    fields = ("gate", "history_logit", "local_logit", "p_hist", "m_hist", "memory_read", "nu", "x_path")
    with torch.no_grad():
        hbars = [r["h_bar"].detach().float().reshape(-1, SMALL["hidden_size"]) for r in t]
        carry = router.initial_carry(hbars[0])
        for j, (record, block, h) in enumerate(zip(t, hero.routed_blocks(routed), hbars), start=1):
            decision, carry = router.step(j, h, carry, block.rho)
            for name in fields:
                traced = record[name]
                expected = getattr(decision, name).reshape(traced.shape)
                assert torch.allclose(traced.detach().float(), expected, rtol=0, atol=1e-5), (j, name)
                assert traced.dtype == torch.float32, (j, name)


ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_architectures_route_train_and_generate(arch):
    config_cls, model_cls = ARCHS[arch]
    torch.manual_seed(0)
    model = hero.attach(model_cls(config_cls(**SMALL)).eval(), "second_half")
    spread_gates(model)
    ids, mask = batch_with_padding()
    _train_steps(model, steps=1)
    model.eval()
    prompt = ids[:1, :5]
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=True)
        uncached = model.generate(prompt, max_new_tokens=6, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
    assert cached.shape[1] == 11


def test_router_state_does_not_leak_between_forward_passes(routed):
    ids, mask = batch_with_padding()
    first = routed(input_ids=ids, attention_mask=mask).logits
    routed(input_ids=ids[:, :4], attention_mask=mask[:, :4])
    again = routed(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(first, again)
    assert routed.hero_context.carry is None


def test_errors_are_clear():
    with pytest.raises(HeRoConfigError, match="GPT2LMHeadModel"):
        hero.attach(GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50)))
    with pytest.raises(HeRoConfigError, match=r"layer index 6 .*0\.\.5"):
        hero.attach(small_llama(), [2, 6])
    with pytest.raises(HeRoConfigError, match="allowed layer sets"):
        hero.attach(small_llama(), "first_half")
    bad = [
        dict(memory_dim=0),
        dict(tau=1.0),
        dict(tau=0.0),
        dict(T_hist=0.0),
        dict(T_hist=-1.0),
        dict(adapter_dim=-3),
        dict(rho_init=1.0),
        dict(forget="sometimes"),
        dict(memory_read="no"),
    ]
    for options in bad:
        with pytest.raises(HeRoConfigError, match=next(iter(options))):
            RouterConfig(**options)
    with pytest.raises(HeRoConfigError, match="already has HeRo"):
        hero.attach(hero.attach(small_llama()))


def test_layer_sets():
    assert resolve_layers("second_half", 32) == list(range(16, 32))
    assert resolve_layers("from_9", 32) == list(range(8, 32))  # the paper's 1-indexed layers 9-32
    assert len(resolve_layers("from_9", 32)) == 24
    assert resolve_layers("all", 4) == [0, 1, 2, 3]
    assert resolve_layers([5, 1], 8) == [1, 5]


def test_save_and_load_roundtrip(tmp_path, routed):
    _train_steps(routed, steps=2)
    routed.eval()
    ids, mask = batch_with_padding()
    expected = routed(input_ids=ids, attention_mask=mask).logits
    hero.save_router(routed, tmp_path)
    saved = {p.name for p in tmp_path.iterdir()}
    assert saved == {"hero_router.safetensors", "hero_router.json"}
    reloaded = hero.load_router(small_llama(), tmp_path)
    assert torch.equal(reloaded(input_ids=ids, attention_mask=mask).logits, expected)


def test_load_onto_wrong_backbone_or_layer_set_fails(tmp_path, routed):
    hero.save_router(routed, tmp_path)
    with pytest.raises(HeRoConfigError, match="different backbone.*weights_sha256"):
        hero.load_router(small_llama(seed=5), tmp_path)
    with pytest.raises(HeRoConfigError, match="num_layers"):
        hero.load_router(LlamaForCausalLM(small_llama_config(num_hidden_layers=8)), tmp_path)
    with pytest.raises(HeRoConfigError, match="routes layers"):
        hero.load_router(hero.attach(small_llama(), [1, 2]), tmp_path)


def test_detach_restores_the_backbone():
    base = small_llama()
    reference = copy.deepcopy(base)
    ids, mask = batch_with_padding()
    model = hero.detach(hero.attach(base))
    assert torch.equal(
        model(input_ids=ids, attention_mask=mask).logits, reference(input_ids=ids, attention_mask=mask).logits
    )
    assert not hasattr(model, "hero_router")
