"""SkipGPT-RT: token-aware FFN skipping by a per-layer router, tuned with the backbone frozen.

SkipGPT (Zhao et al., 2025, "SkipGPT: Dynamic Layer Pruning Reinvented with Token Awareness
and Module Decoupling") gives each module a linear router on the token's hidden state that
decides, per token, whether the module runs; the router is trained with a straight-through
Gumbel estimator and a sparsity objective that pulls the execution ratio to a target, first
with the backbone frozen (router tuning, "RT"). For routable block j and token t:

    x      = h̄ / RMS(h̄)                                   the post-attention residual, RMS-normalised
    ℓ      = W_j x + b_j ∈ R²                              logits (skip, execute), one router per layer
    train: y = softmax((ℓ + G) / T),  G ~ Gumbel(0, 1)     i.i.d. per token, layer and logit
           g = (onehot(argmax y) + (y − sg(y)))[execute]   exactly 0 or 1; gradient of y (straight-through)
    eval:  g = 1[ℓ_execute > ℓ_skip]                       hard argmax, no noise
    h = h̄ + g · FFN(LN_ffn(h̄))                             skipped tokens keep h̄ (no adapter)

    L = L_LM + λ (r̄ − (1 − s*))²,   r̄ = mean of g over valid prediction positions and routable layers

with s* the target skip ratio of the routable FFNs (``method.target_ratio``, the calibration
knob) and λ = ``method.sparsity_weight``. In training the FFN runs on every token (its output
multiplied by g), because the estimator's gradient for a skipped token is ⟨∂L/∂h, FFN(u)⟩;
without gradient the block runs only the chosen branch (``hero.baselines.attach``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from hero.baselines.attach import Policy, PolicyConfig, hard_decision
from hero.model.flops import Shape, skipgpt_router_flops

SOURCE = (
    "Zhao et al., 2025, SkipGPT: Dynamic Layer Pruning Reinvented with Token Awareness and Module "
    "Decoupling (router tuning stage, SkipGPT-RT)"
)
DEVIATIONS = (
    "FFN-only routing: SkipGPT also routes attention (module decoupling); here attention always runs, as in HeRo, "
    "so both skip the same modules and the KV cache stays complete",
    "router input is the parameter-free RMS-normalised post-attention residual h̄ (a linear router absorbs the "
    "backbone's LN_ffn weight, so this equals routing on the FFN input up to a reparametrisation)",
    "sparsity objective: λ·(mean execution ratio − (1 − target skip ratio))², mean over valid prediction positions "
    "and routable layers of the straight-through gate; λ = method.sparsity_weight",
    "Gumbel temperature constant (method.temperature), no annealing",
    "router bias starts at +method.bias_init for 'execute' (≈ dense model at step 0, like HeRo's gate), weights ~ N(0, 1e-3)",
    "no LoRA stage after router tuning (SkipGPT's optional second stage)",
    "training data, recipe and evaluation are the platform's (the same as HeRo's), not SkipGPT's",
)
SKIP_LOGIT, EXECUTE_LOGIT = 0, 1


def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def straight_through_gate(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, y): the hard execute gate with the straight-through gradient, and the soft Gumbel-softmax y (N, 2)."""
    gumbel = -torch.empty_like(logits).exponential_().log()
    y = torch.softmax((logits + gumbel) / temperature, dim=-1)
    hard = F.one_hot(y.argmax(-1), num_classes=2).to(y.dtype)
    # hard + (y − sg(y)): the bracket is exactly 0 in value, so g is exactly 0 or 1 ((hard + y) − y would round)
    return (hard + (y - y.detach()))[:, EXECUTE_LOGIT], y


class SkipGPTRouter(Policy):
    """One Linear(d, 2) router per routable layer (skip, execute)."""

    dense_straight_through = True

    def __init__(self, hidden_size: int, num_routable: int, config: PolicyConfig, temperature: float, bias_init: float):
        super().__init__(hidden_size, num_routable, config)
        self.temperature = float(temperature)
        self.routers = nn.ModuleList(nn.Linear(hidden_size, 2) for _ in range(num_routable))
        with torch.no_grad():
            for router in self.routers:
                router.weight.normal_(0.0, 1e-3)
                router.bias.copy_(torch.tensor([0.0, float(bias_init)]))

    def flops_per_token(self, shape: Shape, j: int) -> int:
        """RMS normalisation and Linear(d, 2) per token (``hero.model.flops.skipgpt_router_flops``)."""
        return skipgpt_router_flops(shape)

    def logits(self, j: int, hbar: torch.Tensor) -> torch.Tensor:
        """ℓ = W_j · h̄/RMS(h̄) + b_j, (N, 2) in float32."""
        with torch.autocast(device_type=hbar.device.type, enabled=False):
            return self.routers[j - 1](rms_normalise(hbar.float()))

    def step(self, j: int, hbar: torch.Tensor, carry, rho: torch.Tensor):
        logits = self.logits(j, hbar)
        if self.training:
            gate, _ = straight_through_gate(logits, self.temperature)
        else:
            gate = (logits[:, EXECUTE_LOGIT] > logits[:, SKIP_LOGIT]).float()
        margin = logits[:, EXECUTE_LOGIT] - logits[:, SKIP_LOGIT]
        return hard_decision(gate, margin), carry


def sparsity_loss(gates: Sequence[torch.Tensor], valid: torch.Tensor, target_ratio: float) -> torch.Tensor:
    """(r̄ − (1 − s*))², r̄ = mean of the gates over valid positions (B, T) and routable layers."""
    stacked = torch.stack([g.float() for g in gates], dim=0)
    weights = valid.to(stacked.dtype).unsqueeze(0).expand_as(stacked)
    ratio = (stacked * weights).sum() / weights.sum().clamp_min(1.0)
    return (ratio - (1.0 - target_ratio)).pow(2)
