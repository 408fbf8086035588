"""Eq 3's branch functions of the routed block (``hero.model.block``) on hand-made tensors, values and gradients.

The model-level checks (a routed Llama against the equation oracle) are in ``test_core.py``; here each function
meets rows whose both branches are non-zero, so a sign or a factor on either branch shows.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hero.model.block import ZERO_BRANCH, both_branches, single_branch, single_branch_inference


class Scale(nn.Module):
    """A row-wise branch with a known output: ``factor · u``."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.factor * u


def rows():
    torch.manual_seed(0)
    hbar, u = torch.randn(6, 5), torch.randn(6, 5)
    gate = torch.tensor([0.9, 0.2, 0.7, 0.4, 0.6, 0.1])
    return hbar, u, gate, gate >= 0.5


def test_the_straight_through_variant_has_eq3s_values_and_its_own_gate_gradient():
    hbar, u, gate, executed = rows()
    ffn, adapter = Scale(2.0), Scale(-3.0)
    expected = single_branch_inference(hbar, u, gate, executed, ffn, adapter)
    g = gate.clone().requires_grad_(True)
    out = both_branches(hbar, u, g, executed, ffn, adapter)
    assert torch.allclose(out, expected, atol=1e-6)
    weights = torch.randn(6, 5)
    (out * weights).sum().backward()
    f, a, m = ffn(u), adapter(u), executed.float().unsqueeze(-1)
    gv = gate.unsqueeze(-1)
    # ∂h/∂g = g·F + m·F − (1 − g)·A − (1 − m)·A   (∂m_st/∂g = 1; the docstring's formula)
    grad = ((gv * f + m * f - (1 - gv) * a - (1 - m) * a) * weights).sum(-1)
    assert torch.allclose(g.grad, grad, atol=1e-5)


def test_the_paper_rule_scales_each_branch_and_passes_the_gradient_through_the_scale_only():
    hbar, u, gate, executed = rows()
    ffn, adapter = Scale(2.0), Scale(-3.0)
    g = gate.clone().requires_grad_(True)
    out = single_branch(hbar, u, g, executed, ffn, adapter)
    gv, m = gate.unsqueeze(-1), executed.unsqueeze(-1)
    assert torch.allclose(out, hbar + torch.where(m, gv * ffn(u), (1 - gv) * adapter(u)), atol=1e-6)
    assert torch.allclose(out, single_branch_inference(hbar, u, gate, executed, ffn, adapter), atol=1e-6)
    weights = torch.randn(6, 5)
    (out * weights).sum().backward()
    grad = (torch.where(m, ffn(u), -adapter(u)) * weights).sum(-1)
    assert torch.allclose(g.grad, grad, atol=1e-5)


@pytest.mark.parametrize("executed", [[True] * 6, [False] * 6])
def test_a_branch_no_row_takes_is_not_needed(executed):
    hbar, u, gate, _ = rows()
    executed = torch.tensor(executed)
    out = single_branch_inference(hbar, u, gate, executed, Scale(2.0), Scale(-3.0))
    gv = gate.unsqueeze(-1)
    expected = hbar + (gv * 2.0 * u if executed.all() else (1 - gv) * -3.0 * u)
    assert torch.allclose(out, expected, atol=1e-6)


def test_the_zero_branch_adds_nothing():
    u = torch.randn(3, 4)
    assert torch.equal(ZERO_BRANCH(u), torch.zeros(3, 4))


def test_a_routed_layer_forced_to_run_every_ffn_unscaled_is_the_dense_layer():
    """Wrap, don't fork: attention, both norms and the FFN are the backbone's own, so forcing every routable FFN to
    run with g = 1 gives the dense model's logits (a sign or a missing residual anywhere in the block shows)."""
    import copy

    from conftest import small_llama

    import hero
    from hero.model.intervention import Intervention, apply_intervention

    dense = small_llama()
    routed = hero.attach(copy.deepcopy(dense), "second_half")
    apply_intervention(routed, Intervention(force_execute=(3, 4, 5), unscaled=True))
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(routed(input_ids=ids).logits, dense(input_ids=ids).logits, atol=1e-5)
