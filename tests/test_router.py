"""The router's memory read, novelty and fused first layer (``hero.model.router``) in float64 against eq 11 and 13.

``test_core.py`` checks every equation on a routed model at float32 tolerances; these tests pin what those
tolerances cannot see: ε's sign and size in eq 11's denominator and in eq 13's cosine, and that the inference-time
cache of the fused first layer follows in-place parameter updates.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import small_llama

import hero
from hero.model.router import Carry, phi


@pytest.fixture(scope="module")
def router():
    return copy.deepcopy(hero.attach(small_llama(), "second_half").hero_router).double()


def carry_of(S: torch.Tensor, zeta: torch.Tensor) -> Carry:
    n = S.shape[0]
    zeros = torch.zeros(n, 1, dtype=S.dtype)
    return Carry(zeros, zeros, S, zeta, torch.ones(n, dtype=S.dtype), torch.ones(n, dtype=S.dtype))


def test_eq11_read_divides_by_phi_q_zeta_plus_epsilon(router):
    torch.manual_seed(0)
    m, s_dim = router.config.memory_dim, router.config.state_dim
    q = torch.randn(3, m, dtype=torch.float64)
    S = torch.rand(3, m, m, dtype=torch.float64)
    zeta = torch.full((3, m), 1e-4, dtype=torch.float64)  # a small normaliser, where ε is a visible share
    s = torch.randn(3, s_dim, dtype=torch.float64)
    read, _ = router.read(s, q, carry_of(S, zeta))
    fq = phi(q)
    expected = torch.einsum("nm,nmk->nk", fq, S) / ((fq * zeta).sum(-1, keepdim=True) + router.config.eps)
    assert torch.allclose(read, expected, rtol=1e-12, atol=0)


def test_eq13_novelty_uses_the_routers_epsilon_for_a_read_near_zero(router):
    torch.manual_seed(1)
    s = torch.randn(2, router.config.state_dim, dtype=torch.float64)
    read = 1e-9 * torch.randn(2, router.config.memory_dim, dtype=torch.float64)  # ‖W_c c‖ under ε
    a, b = F.linear(s, router.W_n.weight, router.W_n.bias), F.linear(read, router.W_c.weight, router.W_c.bias)
    eps = router.config.eps  # torch's cosine: each vector over max(its norm, ε)
    cos = (a / a.norm(dim=-1, keepdim=True).clamp_min(eps) * (b / b.norm(dim=-1, keepdim=True).clamp_min(eps))).sum(-1)
    assert torch.allclose(router.novelty(s, read), 1.0 - cos, rtol=1e-12, atol=1e-15)


def test_the_fused_first_layer_follows_an_in_place_update_without_autograd(router):
    x = torch.randn(4, router.hidden_size, dtype=torch.float64)
    first, down = router.local_head[0], router.content_down
    with torch.no_grad():
        router._fused_first_layer(x)  # fills the inference cache
        first.weight.add_(0.5)  # as an optimiser step does, in place
        local, content = router._fused_first_layer(x)
    assert torch.allclose(local, F.silu(F.linear(x, first.weight, first.bias)), rtol=1e-12)
    assert torch.allclose(content, F.silu(F.linear(x, down.weight, down.bias)), rtol=1e-12)


def test_the_routers_rmsnorm_scales_by_its_weight_and_uses_its_epsilon():
    from hero.model.router import RMSNorm

    norm = RMSNorm(4, eps=1e-6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
    x = torch.tensor([[1e-4, -2e-4, 3e-4, 1e-4]], dtype=torch.float64)  # mean(x²) ≈ 4e-8, ε a visible share
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    assert torch.allclose(norm(x), expected, rtol=1e-12, atol=0)
