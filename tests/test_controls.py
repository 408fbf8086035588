"""Controls beyond the paper (hero.model.controls): each variant does what its docstring claims."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import SMALL, compose_train, small_llama
from test_core import batch_with_padding, spread_gates

import hero
from hero.model.config import RouterConfig
from hero.model.controls import (
    READ_STATS_MOMENTUM,
    RandomHistoryRouter,
    ShuffledHistoryRouter,
    full_hero,
    matched_local_width,
    trainable_count,
)
from hero.pipeline import run

CONTROLS = ("param_matched_local", "shuffled_history", "random_history", "recent_state_only")


def routed(layers="all", **options):
    """All six layers routable (by default), gates on both sides of τ; same weights for the same shapes."""
    model = hero.attach(small_llama(), layers, **options)
    spread_gates(model)
    return model


def set_rho(model, values) -> None:
    """Distinct forget factors, far from 1, so that the order of accumulation shows in the read."""
    with torch.no_grad():
        for block, rho in zip(hero.routed_blocks(model), values):
            block.eta.fill_(torch.logit(torch.tensor(rho)))


def states(model, trace) -> list[torch.Tensor]:
    """s_j = [z^h ; z^a] (eq 5, 9) recomputed from the trace, flattened over tokens."""
    router = model.hero_router
    out = []
    with torch.no_grad():
        for record in trace:
            h = record["h_bar"].reshape(-1, SMALL["hidden_size"])
            z_h = router.content_up(F.silu(router.content_down(router.norm(h))))
            out.append(torch.cat([z_h, router.path_encoder(record["x_path"].reshape(-1, 6))], dim=-1))
    return out


def phi(x):
    return F.elu(x) + 1


# --- param_matched_local ----------------------------------------------------------------------------------------


def test_param_matched_local_matches_full_hero_count(capsys):
    model = hero.attach(small_llama(), "all", history_branch=False, local_head_hidden="matched")
    printed = capsys.readouterr().out
    counts = model.hero_param_counts
    full = hero.attach(small_llama(), "all")
    adapters = lambda m: sum(p.numel() for n, p in hero.trainable_parameters(m).items() if ".adapter." in n)  # noqa: E731
    actual = lambda m: sum(p.numel() for p in hero.trainable_parameters(m).values()) - adapters(m)  # noqa: E731
    print(
        f"param_matched_local: {counts['router']} vs full HeRo {counts['full_hero']} "
        f"({counts['relative_to_full']:+.3%}), local head width {counts['local_head_hidden']}"
    )
    assert counts["router"] == actual(model) and counts["full_hero"] == actual(full)
    assert adapters(model) == adapters(full)
    assert abs(counts["relative_to_full"]) < 0.02
    assert f"{counts['router']:,}" in printed and f"{counts['full_hero']:,}" in printed
    assert model.hero_router.local_head[0].out_features == counts["local_head_hidden"] > 256
    assert not any("history_head" in n or "qkv" in n for n in hero.trainable_parameters(model))
    assert model.hero_config.local_head_hidden == "matched"  # the model keeps the config as written


@pytest.mark.parametrize("hidden, layers", [(256, 4), (4096, 16), (4096, 24), (5120, 20)])
def test_matched_width_within_two_percent_at_every_scale(hidden, layers):
    """Testbed (d = 256, 4 routable) and the paper's backbones (Llama-3.1-8B second half / layers 9-32, 13B)."""
    config = RouterConfig(history_branch=False, local_head_hidden="matched")
    width = matched_local_width(config, hidden, layers)
    matched = trainable_count(RouterConfig(history_branch=False, local_head_hidden=width), hidden, layers)
    full = trainable_count(full_hero(config), hidden, layers)
    print(
        f"d={hidden} L_R={layers}: local head width {width}, {matched} vs full HeRo {full} ({matched / full - 1:+.3%})"
    )
    assert abs(matched / full - 1) < 0.02


def test_matched_needs_history_branch_off():
    with pytest.raises(hero.HeRoConfigError, match="history_branch=false"):
        RouterConfig(local_head_hidden="matched")
    with pytest.raises(hero.HeRoConfigError, match="history_control"):
        RouterConfig(history_control="sometimes")
    with pytest.raises(hero.HeRoConfigError, match="memory_read=true"):
        RouterConfig(history_control="random", memory_read=False)


# --- shuffled_history --------------------------------------------------------------------------------------------


def test_shuffled_trace_shows_a_fresh_reproducible_permutation():
    model = routed(history_control="shuffled")
    assert isinstance(model.hero_router, ShuffledHistoryRouter)
    ids, mask = batch_with_padding()
    orders = []
    for seed in (11, 12, 11):
        torch.manual_seed(seed)
        trace = hero.routing_trace(model, ids, mask)
        order = trace[0]["write_order"]
        assert order.shape == (*ids.shape, 6)
        assert all(torch.equal(r["write_order"], order) for r in trace)  # one π per forward pass
        assert torch.all(order == order[0, 0])  # shared by every token of the batch
        orders.append(order[0, 0].tolist())
    assert sorted(orders[0]) == [1, 2, 3, 4, 5, 6]
    assert orders[0] != [1, 2, 3, 4, 5, 6]  # a permuted write order, not the depth order
    assert orders[0] != orders[1]  # fresh per batch
    assert orders[0] == orders[2]  # reproducible under a seed


def test_shuffled_read_accumulates_writes_in_the_permuted_order():
    """c_j recomputed from s_1..s_{j−1} with w_i = Π ρ_m over the blocks m < j that follow i in π (eq 11-12)."""
    model = routed(history_control="shuffled")
    rhos = [0.2, 0.4, 0.6, 0.3, 0.5, 0.7]
    set_rho(model, rhos)
    ids, mask = batch_with_padding()
    torch.manual_seed(11)
    trace = hero.routing_trace(model, ids, mask)
    order = trace[0]["write_order"][0, 0].tolist()
    rank = {block: t for t, block in enumerate(order)}
    s = states(model, trace)
    qkv = model.hero_router.qkv
    differs = False
    with torch.no_grad():
        for j in range(2, 7):
            q = qkv(s[j - 1]).chunk(3, dim=-1)[0]
            num, den, depth_num, depth_den = 0, 0, 0, 0
            for i in range(1, j):
                _, k, v = qkv(s[i - 1]).chunk(3, dim=-1)
                score = (phi(q) * phi(k)).sum(-1, keepdim=True)
                w = torch.prod(torch.tensor([rhos[m - 1] for m in range(1, j) if rank[m] > rank[i]] + [1.0]))
                depth_w = torch.prod(torch.tensor([rhos[m - 1] for m in range(i + 1, j)] + [1.0]))
                num, den = num + w * score * v, den + w * score
                depth_num, depth_den = depth_num + depth_w * score * v, depth_den + depth_w * score
            read = trace[j - 1]["memory_read"].reshape(-1, 64)
            assert torch.allclose(read, num / (den + 1e-6), rtol=1e-4, atol=1e-5)
            differs |= not torch.allclose(read, depth_num / (depth_den + 1e-6), rtol=1e-3, atol=1e-4)
    assert differs  # the order changed what was read


def test_shuffled_with_identity_order_is_hero(monkeypatch):
    """π = depth order reproduces full HeRo exactly: the control changes the order and nothing else."""
    monkeypatch.setattr(torch, "randperm", lambda n: torch.arange(n))
    full, shuffled = routed(), routed(history_control="shuffled")
    set_rho(full, [0.2, 0.4, 0.6, 0.3, 0.5, 0.7])
    set_rho(shuffled, [0.2, 0.4, 0.6, 0.3, 0.5, 0.7])
    ids, mask = batch_with_padding()
    for a, b in zip(hero.routing_trace(full, ids, mask), hero.routing_trace(shuffled, ids, mask)):
        for name in ("memory_read", "nu", "gate", "h_out"):
            assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name


# --- random_history ----------------------------------------------------------------------------------------------


def _train_forwards(model, steps: int = 3, batch: int = 3) -> None:
    model.train()
    for step in range(steps):
        ids, mask = batch_with_padding(seed=20 + step, batch=batch)
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        out.loss.backward()


def test_random_read_is_independent_of_the_input():
    model = routed(history_control="random")
    assert isinstance(model.hero_router, RandomHistoryRouter)
    _train_forwards(model)
    model.eval()
    a, mask = batch_with_padding(seed=2)
    b, _ = batch_with_padding(seed=3)
    assert not torch.equal(a, b)
    torch.manual_seed(5)
    trace_a = hero.routing_trace(model, a, mask)
    torch.manual_seed(5)
    trace_b = hero.routing_trace(model, b, mask)
    assert not torch.allclose(trace_a[3]["h_bar"], trace_b[3]["h_bar"])  # different inputs, different states
    for ra, rb in zip(trace_a[1:], trace_b[1:]):
        assert torch.equal(ra["memory_read"], rb["memory_read"])  # same seed, same read, whatever the input
    assert torch.all(trace_a[0]["memory_read"] == 0)  # c_1 = 0 as in HeRo
    real = hero.routing_trace(twin(model), a, mask)  # full HeRo with the same weights reads the real memory
    for rr, ra in zip(real[1:], trace_a[1:]):
        assert not torch.allclose(rr["memory_read"], ra["memory_read"], atol=1e-3)


def twin(model, layers="all"):
    """Full HeRo with the trainable weights of ``model`` (same parameter names, no tracked statistics)."""
    full = hero.attach(small_llama(), layers)
    with torch.no_grad():
        for (name, p), (other, q) in zip(full.named_parameters(), model.named_parameters()):
            assert name == other
            p.copy_(q)
    return full.eval()


def test_random_read_statistics_are_those_of_real_reads():
    """After one training forward with two routable blocks, (μ, σ²) are the batch moments of the real read c_2."""
    random = hero.attach(small_llama(), [4, 5], history_control="random")
    spread_gates(random)
    real = twin(random, [4, 5])
    ids, mask = batch_with_padding(seed=30, batch=4)
    expected = hero.routing_trace(real, ids, mask)[1]["memory_read"].reshape(-1, 64)
    router = random.hero_router
    router.read_updates.zero_()
    router.read_mean_ema.zero_()
    router.read_sq_ema.zero_()
    random.train()
    random(input_ids=ids, attention_mask=mask)
    mean, std = router.read_statistics()
    assert int(router.read_updates) == 1
    assert torch.allclose(router.read_mean_ema, READ_STATS_MOMENTUM * expected.mean(0), atol=1e-7)
    assert torch.allclose(mean, expected.mean(0), rtol=1e-4, atol=1e-6)
    assert torch.allclose(std, expected.var(0, unbiased=False).sqrt(), rtol=1e-3, atol=1e-5)


def test_random_read_distribution_matches_tracked_statistics():
    model = routed(history_control="random")
    _train_forwards(model, steps=2)
    model.eval()
    mean, std = model.hero_router.read_statistics()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SMALL["vocab_size"], (32, 16), generator=gen)
    torch.manual_seed(1)
    trace = hero.routing_trace(model, ids)
    reads = torch.cat([r["memory_read"].reshape(-1, 64) for r in trace[1:]])  # 5 blocks × 512 tokens
    n = reads.shape[0]
    assert torch.all((reads.mean(0) - mean).abs() < 5 * std / n**0.5 + 1e-6)
    assert torch.allclose(reads.std(0), std, rtol=0.1)
    with torch.no_grad():  # ν_j = 1 − cos(W_n s, W_c c̃) (eq 13) on the random read
        r = model.hero_router
        s = states(model, trace)[2]
        nu = 1 - F.cosine_similarity(r.W_n(s), r.W_c(trace[2]["memory_read"].reshape(-1, 64)), dim=-1, eps=1e-6)
    assert torch.allclose(trace[2]["nu"].reshape(-1), nu, atol=1e-5)


def test_random_statistics_are_saved_with_the_router(tmp_path):
    model = routed(history_control="random")
    _train_forwards(model, steps=2)
    hero.save_router(model, tmp_path)
    loaded = hero.load_router(small_llama(), tmp_path)
    for name in ("read_mean_ema", "read_sq_ema", "read_updates"):
        assert torch.equal(getattr(loaded.hero_router, name), getattr(model.hero_router, name))


@pytest.mark.parametrize("control", ["shuffled", "random"])
def test_checkpointing_recomputes_the_same_random_draws(control):
    """Same gradients with and without gradient checkpointing; statistics updated once per forward pass."""
    grads, updates = [], []
    for checkpointing in (False, True):
        model = routed("second_half", history_control=control)
        if checkpointing:
            model.activation_checkpointing_enable()
        model.train()
        ids, mask = batch_with_padding()
        torch.manual_seed(9)
        out = model(input_ids=ids, attention_mask=mask, labels=ids)
        (out.loss + 1e-2 * sum(r.gate.sum() for r in hero.last_records(model))).backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        updates.append(float(getattr(model.hero_router, "read_updates", torch.zeros(()))))
    assert grads[0].keys() == grads[1].keys() and any("history_head" in n for n in grads[0])
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-7), name
    assert updates[0] == updates[1]


# --- recent_state_only -------------------------------------------------------------------------------------------


def test_recent_state_only_memory_is_the_last_write(monkeypatch):
    """ρ = 0: S_j = φ(k_j) v_jᵀ, ζ_j = φ(k_j), so c_{j+1} = v_j up to ε (eq 11-12)."""
    router_options = dict(compose_train(["ablation=recent_state_only"]).router)
    assert router_options["forget"] == "zero"
    model = routed(**router_options)
    router = model.hero_router
    writes = []
    original = router.write

    def logged_write(carry, k, v, rho, **options):
        S, zeta = original(carry, k, v, rho, **options)
        writes.append((k, v, (S.clone(), zeta.clone())))  # inference updates a donated memory in place later
        return S, zeta

    monkeypatch.setattr(router, "write", logged_write)
    ids, mask = batch_with_padding()
    trace = hero.routing_trace(model, ids, mask)
    assert len(writes) == 5
    for k, v, (S, zeta) in writes:
        assert torch.equal(S, phi(k).unsqueeze(-1) * v.unsqueeze(-2))
        assert torch.equal(zeta, phi(k))
    for j in range(2, 7):
        v_prev = writes[j - 2][1]
        assert torch.allclose(trace[j - 1]["memory_read"].reshape(-1, 64), v_prev, rtol=1e-4, atol=1e-5)


# --- end to end ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("control", CONTROLS)
def test_control_runs_end_to_end(control, micro_overrides, tmp_path):
    """Train, route and record on the micro testbed, both layers routable so that block 2 reads the memory."""
    cfg = compose_train(micro_overrides + [f"ablation={control}", "layers=all", "eval=none"])
    run(cfg, run_dir=tmp_path / "run")
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["status"] == "completed" and record["variant"] == control and record["train"]["steps"] == 3
    counts = record["router_params"]
    assert abs(counts["relative_to_full"]) < (0.02 if control == "param_matched_local" else 1e-12)
    assert 0.0 <= record["skip"]["param_rate"] < 1.0
    saved = json.loads((tmp_path / "run" / "router" / "hero_router.json").read_text())
    assert RouterConfig.from_dict(saved["router"]) == RouterConfig.from_dict(dict(cfg.router))
