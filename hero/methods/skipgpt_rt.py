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
    eval:  g = 1[ℓ_execute > ℓ_skip]                       hard argmax, no noise (method.eval_gate=argmax)
           g = 1[ℓ_execute − ℓ_skip > logit(t)]            at evaluation threshold t on P(execute) (eval.thresholds;
                                                           t = 0.5 is the argmax)
    h = h̄ + g · FFN(LN_ffn(h̄))                             skipped tokens keep h̄ (no adapter)

    L = L_LM + λ (r̄ − (1 − s*))²,   r̄ = mean of g over valid prediction positions and routable layers

with s* the target skip ratio of the routable FFNs (``method.target_ratio``, the calibration
knob) and λ = ``method.sparsity_weight``. In training the FFN runs on every token (its output
multiplied by g), because the estimator's gradient for a skipped token is ⟨∂L/∂h, FFN(u)⟩;
without gradient the block runs only the chosen branch (``hero.model.policy``).

The official code (EIT-NLP/SkipGPT, ``router_attn_mlp.py``) differs in four choices, each an option here
(``conf/method/skipgpt_rt_official.yaml`` sets all four): its router is Linear(d, d/4) + ReLU + Linear(d/4, 2)
with Kaiming-uniform weights and zero biases (``router=mlp``, ``bias_init=0``); it samples the hard Gumbel gate
at evaluation too, at the final temperature (``eval_gate=gumbel``); and it anneals T linearly from 5 to 1 over the
training updates, T_s = T_0 − (T_0 − T_1)·s/S for update s of S (``temperature=5``, ``temperature_final=1``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from hero.methods.base import MethodConfigError, Prepared
from hero.methods.table1 import Table1Method, check_number
from hero.model.flops import skipgpt_router_flops
from hero.model.policy import Policy, PolicyConfig, attach_policy, hard_decision
from hero.results import drop_defaults

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
    "by default: Gumbel temperature constant (method.temperature); the official linear annealing is "
    "method.temperature_final",
    "by default: router Linear(d, 2), bias starts at +method.bias_init for 'execute' (≈ dense model at step 0, like "
    "HeRo's gate), weights ~ N(0, 1e-3); the official Linear(d, d/4) + ReLU + Linear(d/4, 2) with zero biases is "
    "method.router=mlp, method.bias_init=0",
    "by default: a deterministic argmax gate at evaluation; the official code samples Gumbel there too "
    "(method.eval_gate=gumbel)",
    "the official MLP router reads the block's input (before attention); here every router reads h̄/RMS(h̄)",
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


def mlp_width(hidden_size: int) -> int:
    """The official MLP router's hidden width, d/4."""
    return hidden_size // 4


class MLPRouter(nn.Module):
    """The official code's router: Linear(d, d/4) + ReLU + Linear(d/4, 2), Kaiming-uniform weights, zero biases."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.hidden = nn.Linear(hidden_size, mlp_width(hidden_size))
        self.out = nn.Linear(hidden_size // 4, 2)
        nn.init.kaiming_uniform_(self.hidden.weight, nonlinearity="relu")
        nn.init.kaiming_uniform_(self.out.weight, nonlinearity="linear")
        nn.init.zeros_(self.hidden.bias)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


class SkipGPTRouter(Policy):
    """One router per routable layer (skip, execute): Linear(d, 2) (``router="linear"``) or the official MLP.

    ``temperature_final``: T anneals linearly from ``temperature`` to it over training (``set_progress``, called
    by the trainer before each update); None keeps T constant. ``eval_gate``: ``"argmax"`` or ``"gumbel"`` (a hard
    sample at the final temperature, as the official code evaluates).
    """

    dense_straight_through = True

    def __init__(
        self,
        hidden_size: int,
        num_routable: int,
        config: PolicyConfig,
        temperature: float,
        bias_init: float,
        router: str = "linear",
        eval_gate: str = "argmax",
        temperature_final: float | None = None,
    ):
        super().__init__(hidden_size, num_routable, config)
        self.temperature_initial = float(temperature)
        self.temperature_final = float(temperature if temperature_final is None else temperature_final)
        self.temperature = self.temperature_initial
        self.eval_gate = eval_gate
        self.eval_threshold = 0.5  # P(execute) a token needs at evaluation (the argmax gate: 0.5)
        with torch.no_grad():
            if router == "mlp":
                self.routers = nn.ModuleList(MLPRouter(hidden_size) for _ in range(num_routable))
                heads = [r.out for r in self.routers]
            else:
                self.routers = nn.ModuleList(nn.Linear(hidden_size, 2) for _ in range(num_routable))
                heads = list(self.routers)
                for head in heads:
                    head.weight.normal_(0.0, 1e-3)
            for head in heads:  # the layer that gives the (skip, execute) logits
                head.bias.copy_(torch.tensor([0.0, float(bias_init)]))

    def set_progress(self, fraction: float) -> None:
        """T for the update at ``fraction`` = s/S of training: T_0 − (T_0 − T_1)·s/S (the official schedule)."""
        self.temperature = self.temperature_initial - (self.temperature_initial - self.temperature_final) * fraction

    def logits(self, j: int, hbar: torch.Tensor) -> torch.Tensor:
        """ℓ = router_j(h̄/RMS(h̄)), (N, 2) in float32."""
        with torch.autocast(device_type=hbar.device.type, enabled=False):
            return self.routers[j - 1](rms_normalise(hbar.float()))

    def step(self, j: int, hbar: torch.Tensor, carry, rho: torch.Tensor):
        logits = self.logits(j, hbar)
        margin = logits[:, EXECUTE_LOGIT] - logits[:, SKIP_LOGIT]
        if self.training:
            gate, _ = straight_through_gate(logits, self.temperature)
        elif self.eval_gate == "gumbel":
            gate = straight_through_gate(logits, self.temperature_final)[0].detach()
        else:  # P(execute) > t ⇔ margin > logit(t); t = 0.5 is the argmax (a − b > 0 ⇔ a > b in IEEE floats)
            gate = (margin > math.log(self.eval_threshold / (1.0 - self.eval_threshold))).float()
        return hard_decision(gate, margin), carry


def sparsity_loss(gates: Sequence[torch.Tensor], valid: torch.Tensor, target_ratio: float) -> torch.Tensor:
    """(r̄ − (1 − s*))², r̄ = mean of the gates over valid positions (B, T) and routable layers."""
    stacked = torch.stack([g.float() for g in gates], dim=0)
    weights = valid.to(stacked.dtype).unsqueeze(0).expand_as(stacked)
    ratio = (stacked * weights).sum() / weights.sum().clamp_min(1.0)
    return (ratio - (1.0 - target_ratio)).pow(2)


class SkipGPTRT(Table1Method):
    """``method=skipgpt_rt``: the per-layer routers above, tuned with the backbone frozen (LM + sparsity loss)."""

    name = "skipgpt_rt"
    source = SOURCE
    deviations = DEVIATIONS
    added_options = ("router", "eval_gate", "temperature_final")

    def check(self, method) -> None:
        if method.target_ratio != "calibrated":
            check_number(self.name, "target_ratio", method.target_ratio, 0.0, 1.0, knob=True)
        check_number(self.name, "sparsity_weight", method.sparsity_weight, 0.0, float("inf"))
        if not method.temperature > 0:
            raise MethodConfigError(f"method.temperature={method.temperature!r}: must be positive")
        check_number(self.name, "bias_init", method.bias_init, -float("inf"), float("inf"))
        if method.router not in ("linear", "mlp"):
            raise MethodConfigError(f"method.router={method.router!r}: must be linear or mlp")
        if method.eval_gate not in ("argmax", "gumbel"):
            raise MethodConfigError(f"method.eval_gate={method.eval_gate!r}: must be argmax or gumbel")
        final = method.temperature_final
        if final is not None and not (isinstance(final, int | float) and final > 0):
            raise MethodConfigError(f"method.temperature_final={final!r}: must be null or positive")

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        options, ratio = spec.options, spec.knob.value
        factory = partial(
            SkipGPTRouter,
            temperature=options["temperature"],
            bias_init=options["bias_init"],
            router=options["router"],
            eval_gate=options["eval_gate"],
            temperature_final=options["temperature_final"],
        )
        model = attach_policy(model, layers, self.name, self.policy_options(spec), factory, adapter=False)
        card = self.card(
            spec,
            target_ratio=ratio,
            sparsity_weight=options["sparsity_weight"],
            temperature=options["temperature"],
            # the official-code options, recorded only away from the defaults that predate them (DEFAULTED_KEYS)
            **drop_defaults({k: options[k] for k in ("router", "eval_gate", "temperature_final")}, prefix="method"),
        )
        return Prepared(
            model,
            trains=True,
            weight=float(options["sparsity_weight"]),
            card=card,
            regularizer=partial(sparsity_loss, target_ratio=float(ratio)),
        )

    threshold = "P(execute) = softmax(ℓ)_execute a token needs at evaluation (the argmax gate: 0.5)"

    def threshold_of(self, prepared) -> float:
        return prepared.model.hero_router.eval_threshold

    def set_threshold(self, prepared, value: float) -> None:
        router = prepared.model.hero_router
        if router.eval_gate == "gumbel":
            raise MethodConfigError(
                "method.eval_gate=gumbel samples its gate at evaluation: eval.thresholds must be null"
            )
        router.eval_threshold = value

    def compute_cost(self, config, shape, num_routable):
        """RMS normalisation and the router per token at every routable block (``skipgpt_router_flops``): Linear(d, 2),
        or the official MLP (``method.router=mlp``, hidden width d/4); no adapter."""
        hidden = mlp_width(shape.hidden) if config["method"].get("router") == "mlp" else None
        return [skipgpt_router_flops(shape, hidden)] * num_routable, None
