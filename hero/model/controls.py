"""Controls beyond the paper (HERO_SPEC §9): what in the history helps — capacity, content or order?

The paper's ablations (HERO_SPEC §8) show that removing history hurts, but not why. Each
control below removes exactly one ingredient of the history branch and keeps the rest:

  param_matched_local  no history branch, local head f_ψ widened so that the router has full
                       HeRo's trainable parameter count (``local_head_hidden="matched"``):
                       capacity without history.
  shuffled_history     the depth memory (eq 11–12) holds the same writes, accumulated in a
                       random permutation of the routable depth order (``ShuffledHistoryRouter``):
                       content without order.
  random_history       the read c_j is noise with the running mean and variance of real reads
                       (``RandomHistoryRouter``): a history input without information.
  recent_state_only    ρ = 0 (``RouterConfig.forget="zero"``): S_{j−1} = φ(k_{j−1}) v_{j−1}ᵀ, so
                       c_j = v_{j−1}·φ(q)ᵀφ(k)/(φ(q)ᵀφ(k) + ε): the previous block's state only.

``build_router`` picks the router class for a config, resolves the matched width and counts
parameters. The count is the router's trainable tensors plus the per-layer η (forget) scalars;
the adapters are excluded (identical in every variant).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from hero.model.config import RouterConfig
from hero.model.router import Carry, Decision, Router, phi

READ_STATS_MOMENTUM = 0.01


def trainable_count(config: RouterConfig, hidden_size: int, num_routable: int) -> int:
    """Trainable parameters of the router of ``config`` plus one η per routable block (no adapters).

    Built on the meta device: nothing is allocated.
    """
    with torch.device("meta"):
        router = router_class(config)(config, hidden_size, num_routable)
    return sum(p.numel() for p in router.parameters() if p.requires_grad) + num_routable


def full_hero(config: RouterConfig) -> RouterConfig:
    """Full HeRo with the same sizes as ``config``: every state, history branch, memory read, plain memory."""
    return dataclasses.replace(
        config,
        position_state=True,
        aux_state=True,
        history_branch=True,
        memory_read=True,
        local_head_hidden=None,
        history_control="none",
    )


def matched_local_width(config: RouterConfig, hidden_size: int, num_routable: int) -> int:
    """Width of f_ψ that brings a local-only router closest to full HeRo's trainable count.

    The count is affine in the width (f_ψ = Linear(d, w) · SiLU · Linear(w, 1) adds d + 2
    per unit), so two probes give the slope and the closest width is one rounding away.
    """
    target = trainable_count(full_hero(config), hidden_size, num_routable)
    at_one, at_two = (
        trainable_count(dataclasses.replace(config, local_head_hidden=w), hidden_size, num_routable) for w in (1, 2)
    )
    return max(1, round(1 + (target - at_one) / (at_two - at_one)))


def resolve_matched(config: RouterConfig, hidden_size: int, num_routable: int) -> RouterConfig:
    """``config`` with ``local_head_hidden="matched"`` replaced by its width (``matched_local_width``)."""
    if config.local_head_hidden != "matched":
        return config
    return dataclasses.replace(config, local_head_hidden=matched_local_width(config, hidden_size, num_routable))


def build_router(config: RouterConfig, hidden_size: int, num_routable: int) -> tuple[Router, dict]:
    """The router for ``config`` and its parameter counts against full HeRo.

    ``local_head_hidden="matched"`` is resolved here (the router gets the number; the model
    keeps the config as written, so a saved router re-resolves to the same width).
    """
    resolved = resolve_matched(config, hidden_size, num_routable)
    router = router_class(resolved)(resolved, hidden_size, num_routable)
    count = sum(p.numel() for p in router.parameters() if p.requires_grad) + num_routable
    full = trainable_count(full_hero(config), hidden_size, num_routable)
    counts = {
        "router": count,
        "full_hero": full,
        "relative_to_full": count / full - 1.0,
        "local_head_hidden": resolved.local_head_hidden or resolved.head_hidden,
        "counted": "router parameters + per-layer eta; adapters excluded (identical across variants)",
    }
    return router, counts


def router_class(config: RouterConfig) -> type[Router]:
    return {"none": Router, "shuffled": ShuffledHistoryRouter, "random": RandomHistoryRouter}[config.history_control]


@dataclass
class WriteLog(Carry):
    """Carry of the shuffled-history router: the memory kept as its individual writes.

    S      φ(k_i) of the writes so far, stacked in depth order   (N, n, d_m)
    zeta   v_i of the same writes                                 (N, n, d_m)
    rhos   ρ_i of the blocks that wrote                           (n,)
    order  π: the 1-based routable blocks in memory-time order    (L,), drawn once per forward
    """

    rhos: torch.Tensor
    order: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return super().tensors() + (self.rhos, self.order)


class ShuffledHistoryRouter(Router):
    """Depth memory written and read in a random permutation π of the routable depth order.

    A forward pass is sequential, so block j can only read what blocks 1..j−1 wrote: the
    *content* of the memory at block j is, as in HeRo, the writes of the shallower blocks.
    What π changes is the order in which those writes are accumulated by eq 12. HeRo's
    S_{j−1} = Σ_{i<j} (Π_{i<m<j} ρ_m) φ(k_i) v_iᵀ decays a write by the forget factor of
    every later writer in depth; here "later" means later in π:

        S^π_{j−1} = Σ_{i<j} w_i φ(k_i) v_iᵀ,  ζ^π_{j−1} = Σ_{i<j} w_i φ(k_i),
        w_i = Π_{m<j, π⁻¹(m) > π⁻¹(i)} ρ_m,

    i.e. exactly the memory eq 12 would build if blocks 1..j−1 had written in the order π
    restricts to them. The read is eq 11 on S^π, ζ^π. With π the identity this is HeRo's
    memory; with ρ = 0 only the write latest in π survives instead of block j−1's. The
    weight of a write changes whenever a deeper block joins ahead of it in π, so the memory
    is kept unsummed (``WriteLog``) and summed at each read.

    π is drawn from the global torch RNG at block 1 (``initial_carry``), once per forward
    pass (fresh per batch, shared by its tokens), so a seed reproduces it and gradient
    checkpointing, which restores the RNG state for its recomputation, redraws the same π.
    Blocks 2..L receive π in the carry. The trace shows it as ``write_order`` (B, T, L).
    """

    def initial_carry(self, hbar: torch.Tensor) -> WriteLog:
        base = super().initial_carry(hbar)
        n, d_m, L = hbar.shape[0], self.config.memory_dim, self.num_routable
        empty = hbar.new_zeros((n, 0, d_m), dtype=torch.float32)
        order = (torch.randperm(L) + 1).to(hbar.device)
        return WriteLog(
            base.prev_hbar,
            base.prev_delta,
            empty,
            empty,
            base.p_hist,
            base.m_hist,
            rhos=hbar.new_zeros(0, dtype=torch.float32),
            order=order,
        )

    def unpack_carry(self, tensors: tuple[torch.Tensor, ...]) -> WriteLog:
        return WriteLog(*tensors)

    def step(self, j: int, hbar: torch.Tensor, carry: WriteLog, rho: torch.Tensor) -> tuple[Decision, WriteLog]:
        """HeRo's decision (eq 4–16) with the π-ordered memory; logs ρ_j with block j's write."""
        decision, new = super().step(j, hbar, carry, rho)
        wrote = new.S.shape[1] > carry.S.shape[1]
        rhos = torch.cat([carry.rhos, rho.float().reshape(1)]) if wrote else carry.rhos
        decision.extras["write_order"] = carry.order.expand(hbar.shape[0], -1)
        return decision, WriteLog(*new.tensors(), rhos=rhos, order=carry.order)

    def read(self, s: torch.Tensor, q: torch.Tensor, carry: WriteLog) -> tuple[torch.Tensor, torch.Tensor]:
        """c_j = φ(q)ᵀ S^π_{j−1} / (φ(q)ᵀ ζ^π_{j−1} + ε) (eq 11 on the π-ordered memory) and ν_j (eq 13)."""
        n = carry.S.shape[1]
        rank = torch.argsort(carry.order)[:n]
        later = rank.unsqueeze(0) > rank.unsqueeze(1)
        weights = torch.where(later, carry.rhos.unsqueeze(0), torch.ones_like(carry.rhos).unsqueeze(0)).prod(dim=1)
        scores = (carry.S * phi(q).unsqueeze(1)).sum(-1) * weights
        numerator = torch.bmm(scores.unsqueeze(1), carry.zeta).squeeze(1)
        read = numerator / (scores.sum(-1, keepdim=True) + self.config.eps)
        return read, self.novelty(s, read)

    def write(
        self, carry: WriteLog, k: torch.Tensor, v: torch.Tensor, rho: torch.Tensor, first: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log block j's write (φ(k_j), v_j); its ρ_j weighs it at later reads (see the class docstring)."""
        return torch.cat([carry.S, phi(k).unsqueeze(1)], dim=1), torch.cat([carry.zeta, v.unsqueeze(1)], dim=1)


@dataclass
class NoiseCarry(Carry):
    """Carry of the random-history router: the read statistics frozen for this forward pass.

    read_mean, read_std   (d_m,) mean and standard deviation the random reads are drawn with
    """

    read_mean: torch.Tensor
    read_std: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return super().tensors() + (self.read_mean, self.read_std)


class RandomHistoryRouter(Router):
    """The memory read c_j (eq 11) replaced by noise with the statistics of real reads.

    Every token at every block j ≥ 2 reads c̃_j ~ N(μ, diag σ²), drawn from the global torch
    RNG, independently of the input; c_1 = 0 as in HeRo. ν_j (eq 13) is computed from c̃_j.
    The history head keeps its full input width, so the capacity is there, but the read
    carries nothing about earlier blocks.

    μ, σ² are per memory dimension, pooled over tokens (padding included: the router sees
    flattened tokens without the mask) and blocks j ≥ 2. The real memory is still written
    (eq 12); in training it is also read (eq 11), without gradient, only to track exponential
    moving averages (momentum ``READ_STATS_MOMENTUM``, bias-corrected as in Adam) of the batch
    mean of c and c², one update per block and forward pass. Since nothing downstream uses the
    real memory, W_q, W_k, W_v get no gradient: the tracked reads are those of the initial
    projections applied to the trained states. A forward pass
    draws with the statistics tracked up to the pass before it (frozen into the carry at
    block 1), so a gradient-checkpoint recomputation redraws exactly the same reads, and the
    recomputation (inside backward) does not update them again. Before any update, μ = 0,
    σ = 1. The statistics are buffers: saved and loaded with the router.
    """

    def __init__(self, config: RouterConfig, hidden_size: int, num_routable: int):
        super().__init__(config, hidden_size, num_routable)
        self.register_buffer("read_mean_ema", torch.zeros(config.memory_dim))
        self.register_buffer("read_sq_ema", torch.zeros(config.memory_dim))
        self.register_buffer("read_updates", torch.zeros(()))

    def read_statistics(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Tracked (μ, σ) of real reads; (0, 1) before the first update."""
        if self.read_updates == 0:
            return torch.zeros_like(self.read_mean_ema), torch.ones_like(self.read_sq_ema)
        correction = 1.0 - (1.0 - READ_STATS_MOMENTUM) ** self.read_updates
        mean = self.read_mean_ema / correction
        var = (self.read_sq_ema / correction - mean.square()).clamp_min(0.0)
        return mean, var.sqrt()

    def initial_carry(self, hbar: torch.Tensor) -> NoiseCarry:
        mean, std = self.read_statistics()
        return NoiseCarry(*super().initial_carry(hbar).tensors(), read_mean=mean.clone(), read_std=std.clone())

    def unpack_carry(self, tensors: tuple[torch.Tensor, ...]) -> NoiseCarry:
        return NoiseCarry(*tensors)

    def step(self, j: int, hbar: torch.Tensor, carry: NoiseCarry, rho: torch.Tensor) -> tuple[Decision, NoiseCarry]:
        decision, new = super().step(j, hbar, carry, rho)
        return decision, NoiseCarry(*new.tensors(), read_mean=carry.read_mean, read_std=carry.read_std)

    def read(self, s: torch.Tensor, q: torch.Tensor, carry: NoiseCarry) -> tuple[torch.Tensor, torch.Tensor]:
        """c̃_j = μ + σ ⊙ ε, ε ~ N(0, I), and ν_j = 1 − cos(W_n s, W_c c̃_j) (eq 13)."""
        if self.training and torch._C._current_graph_task_id() == -1:  # a forward pass, not a recomputation in backward
            with torch.no_grad():
                real, _ = super().read(s, q, carry)
                self._track(real)
        noise = torch.randn(s.shape[0], self.config.memory_dim, device=s.device)
        read = carry.read_mean + carry.read_std * noise
        return read, self.novelty(s, read)

    @torch.no_grad()
    def _track(self, real: torch.Tensor) -> None:
        """One moving-average step towards the batch mean of c and c² (per memory dimension)."""
        self.read_mean_ema.lerp_(real.mean(0), READ_STATS_MOMENTUM)
        self.read_sq_ema.lerp_(real.square().mean(0), READ_STATS_MOMENTUM)
        self.read_updates += 1
