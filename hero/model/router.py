"""The HeRo router shared by all routable blocks: state encoder, depth memory, two heads.

One ``Router`` serves every routable block (HERO_SPEC §2: encoders, memory
projections and heads are shared); the per-layer forget parameter η and the
adapter live in each block. ``Router.step`` is one decision point j: it reads the
carry left by block j−1 and returns the gate and the carry for block j+1.
All router arithmetic runs in float32 (also under autocast): path features
difference nearly equal residual vectors, and the memory accumulates over depth.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from hero.model.config import RouterConfig


@dataclass
class Carry:
    """Per-token router state passed from routable block j to j+1 (flattened tokens N).

    prev_hbar  h̄_{j}          (N, d)      for δ_{j+1} (eq 7)
    prev_delta δ_{j}          (N, d)      for γ_{j+1} (eq 8)
    S          S_{j}          (N, d_m, d_m) memory matrix (eq 12)
    zeta       ζ_{j}          (N, d_m)    memory normaliser (eq 12)
    p_hist     p^hist_{j}     (N,)        (eq 14)
    m_hist     m^hist_{j}     (N,)        (eq 15)
    """

    prev_hbar: torch.Tensor
    prev_delta: torch.Tensor
    S: torch.Tensor
    zeta: torch.Tensor
    p_hist: torch.Tensor
    m_hist: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.prev_hbar, self.prev_delta, self.S, self.zeta, self.p_hist, self.m_hist)


@dataclass
class Decision:
    """Everything block j decided, all flattened over tokens (N, ...).

    ``extras``: further per-token fields a router variant adds to the trace (hero.model.controls).
    """

    gate: torch.Tensor
    history_logit: torch.Tensor
    local_logit: torch.Tensor
    p_hist: torch.Tensor
    m_hist: torch.Tensor
    x_path: torch.Tensor
    memory_read: torch.Tensor
    nu: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


def phi(x: torch.Tensor) -> torch.Tensor:
    """Positive feature map of the kernelised linear attention: φ(x) = ELU(x) + 1 (eq 11)."""
    return F.elu(x) + 1.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x · rsqrt(mean(x²) + ε) · w, in one fused pass (bit-identical to the three-pass formula in fp32)."""
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_out))


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` without nn.Module's call machinery: the router runs ~10 small layers per
    routable block and decision, where the per-call overhead is a measurable share of a decode step."""
    return F.linear(x, layer.weight, layer.bias)


def run_mlp(net: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``net(x)`` for an ``mlp`` (Linear, SiLU, Linear), the same ops called directly."""
    first, _, last = net
    return linear(last, F.silu(linear(first, x)))


class Router(nn.Module):
    """Shared router parameters and the per-decision computation (eq 4–16)."""

    def __init__(self, config: RouterConfig, hidden_size: int, num_routable: int):
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.num_routable = num_routable
        c = config
        local_hidden = c.local_head_hidden or c.head_hidden
        self.norm = RMSNorm(hidden_size)
        # f_ψ: local head on the normalised h̄ (eq 16). The raw residual grows with depth,
        # so the head shared across layers reads it through the same RMSNorm as z^h (eq 5).
        self.local_head = mlp(hidden_size, local_hidden, 1)
        if c.history_branch:
            # z^h = W_hu · SiLU(W_hd · RMSNorm(h̄))  (eq 5)
            self.content_down = nn.Linear(hidden_size, c.content_hidden)
            self.content_up = nn.Linear(c.content_hidden, c.content_dim)
            if c.aux_state:
                # z^a = FFN_path(x_path)  (eq 9)
                self.path_encoder = mlp(len(c.path_features), c.path_hidden, c.path_dim)
            # q, k, v = W_q s, W_k s, W_v s  (eq 10), fused into one projection.
            self.qkv = nn.Linear(c.state_dim, 3 * c.memory_dim, bias=False)
            # ν = 1 − cos(W_n s, W_c c)  (eq 13)
            self.W_n = nn.Linear(c.state_dim, c.memory_dim, bias=False)
            self.W_c = nn.Linear(c.memory_dim, c.memory_dim, bias=False)
            # a = f_θ([s ; c ; ν])  (eq 14)
            self.history_head = mlp(c.state_dim + c.memory_dim + 1, c.head_hidden, 1)
        if c.layer_gate_bias:
            # β_j: one learned gate-logit bias per routable block (a variant beyond the paper), 0 at init
            self.layer_bias = nn.Parameter(torch.zeros(num_routable))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Start near the dense model: g ≈ σ(gate_bias_init) so every FFN executes at step 0."""
        self.local_head[2].weight.normal_(0.0, 1e-3)
        self.local_head[2].bias.fill_(self.config.gate_bias_init)
        if self.config.history_branch:
            self.history_head[2].weight.normal_(0.0, 1e-3)
            self.history_head[2].bias.zero_()

    def initial_carry(self, hbar: torch.Tensor) -> Carry:
        """The state before the first routable block: zeros, p_hist_0 = m_hist_0 = 1 (eq 7, 11, 15).

        Variants that never read the memory carry an empty (N, 0, 0) matrix.
        """
        n = hbar.shape[0]
        d_m = self.config.carried_memory_dim
        zeros_h = torch.zeros_like(hbar, dtype=torch.float32)
        ones = torch.ones(n, dtype=torch.float32, device=hbar.device)
        return Carry(
            prev_hbar=zeros_h,
            prev_delta=zeros_h,
            # S_0 = 0 as a broadcast view: block 1 never reads it and its write does not
            # need it, so the (N, d_m, d_m) zeros are never materialised.
            S=hbar.new_zeros((), dtype=torch.float32).expand(n, d_m, d_m),
            zeta=hbar.new_zeros((n, d_m), dtype=torch.float32),
            p_hist=ones,
            m_hist=ones,
        )

    def unpack_carry(self, tensors: tuple[torch.Tensor, ...]) -> Carry:
        """The carry from ``Carry.tensors()`` (how it crosses a gradient checkpoint)."""
        return Carry(*tensors)

    def path_vector(self, j: int, hbar: torch.Tensor, carry: Carry) -> tuple[torch.Tensor, torch.Tensor]:
        """x_path_j = [r, q_rem, d, γ, p_hist_{j−1}, m_hist_{j−1}] (eq 4, 6–8); returns (x_path, δ_j).

        j is 1-based among routable blocks. δ_1 = 0; γ_1 = γ_2 = 0.
        """
        n = hbar.shape[0]
        L = self.num_routable
        if j == 1:
            delta = torch.zeros_like(hbar)
        else:
            delta = hbar - carry.prev_hbar
        dist = torch.linalg.vector_norm(delta, dim=-1)
        if j > 2:
            dot = (delta * carry.prev_delta).sum(-1)
            gamma = dot / (dist * torch.linalg.vector_norm(carry.prev_delta, dim=-1) + self.config.eps)
        else:
            gamma = torch.zeros(n, dtype=hbar.dtype, device=hbar.device)
        r = torch.full((n,), j / L, dtype=hbar.dtype, device=hbar.device)
        q_rem = torch.full((n,), (L - j) / L, dtype=hbar.dtype, device=hbar.device)
        x_path = torch.stack([r, q_rem, dist, gamma, carry.p_hist, carry.m_hist], dim=-1)
        return x_path, delta

    def step(self, j: int, hbar: torch.Tensor, carry: Carry, rho: torch.Tensor) -> tuple[Decision, Carry]:
        """One decision point (eq 4–16) and the memory write (eq 12).

        The last block skips the write: nothing reads it, so ρ of the last routable
        layer never receives gradient (as in the paper's definition).

        hbar: (N, d) post-attention residual h̄_j; carry: state after block j−1;
        rho: scalar forget factor ρ_j of this block.
        """
        c = self.config
        device = hbar.device.type
        # fp32 under autocast; outside autocast the switch is skipped (entering it costs time in every decode step).
        fp32 = (
            torch.autocast(device_type=device, enabled=False)
            if torch.is_autocast_enabled(device)
            else contextlib.nullcontext()
        )
        with fp32:
            hbar = hbar.float()
            x_path, delta = self.path_vector(j, hbar, carry)
            normed = self.norm(hbar)
            if c.history_branch:
                # local head (eq 16) and content encoder (eq 5) read the same RMSNorm(h̄) and
                # both start with Linear + SiLU: one fused matmul, split afterwards.
                local_hidden, content_hidden = self._fused_first_layer(normed)
            else:
                local_hidden = F.silu(linear(self.local_head[0], normed))
            b = linear(self.local_head[2], local_hidden).squeeze(-1)
            if not c.history_branch:
                a = torch.zeros_like(b)
                read = hbar.new_zeros((hbar.shape[0], c.memory_dim))
                nu = torch.zeros_like(b)
                S, zeta = carry.S, carry.zeta
            else:
                z_h = linear(self.content_up, content_hidden)
                if c.aux_state:
                    features = x_path if len(c.path_features) == x_path.shape[-1] else x_path[:, list(c.path_features)]
                    z_a = run_mlp(self.path_encoder, features)
                    s = torch.cat([z_h, z_a], dim=-1)
                else:
                    s = z_h
                q, k, v = linear(self.qkv, s).chunk(3, dim=-1)
                if c.memory_read and j > 1:
                    read, nu = self.read(s, q, carry)
                else:
                    read = s.new_zeros((s.shape[0], c.memory_dim))
                    nu = s.new_zeros(s.shape[0])
                a = run_mlp(self.history_head, torch.cat([s, read, nu.unsqueeze(-1)], dim=-1)).squeeze(-1)
                if c.memory_read and j < self.num_routable:
                    S, zeta = self.write(carry, k, v, rho, first=j == 1)
                else:
                    S, zeta = carry.S, carry.zeta
            p_hist = torch.sigmoid(a / c.T_hist)
            m_hist = carry.m_hist * p_hist
            logit = a + b
            if c.layer_gate_bias:
                logit = logit + self.layer_bias[j - 1]
            gate = torch.sigmoid(logit)
        decision = Decision(gate, a, b, p_hist, m_hist, x_path, read, nu)
        new_carry = Carry(prev_hbar=hbar, prev_delta=delta, S=S, zeta=zeta, p_hist=p_hist, m_hist=m_hist)
        return decision, new_carry

    def _fused_first_layer(self, normed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """SiLU(local_head[0](x)), SiLU(content_down(x)) from one matmul over [W_ψ1 ; W_hd].

        The parameters stay separate (state dict, optimiser); the concatenated weight is
        rebuilt per call under autograd and cached otherwise (keyed on the parameters'
        storage and version counters, so in-place updates invalidate it).
        """
        first, down = self.local_head[0], self.content_down
        params = (first.weight, first.bias, down.weight, down.bias)
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            weight, bias = torch.cat([first.weight, down.weight]), torch.cat([first.bias, down.bias])
        else:
            key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
            cached = self.__dict__.get("_fused_cache")
            if cached is None or cached[0] != key:
                with torch.no_grad():
                    cached = (key, torch.cat([first.weight, down.weight]), torch.cat([first.bias, down.bias]))
                self.__dict__["_fused_cache"] = cached
            _, weight, bias = cached
        hidden = F.silu(F.linear(normed, weight, bias))
        return hidden[:, : first.out_features], hidden[:, first.out_features :]

    def read(self, s: torch.Tensor, q: torch.Tensor, carry: Carry) -> tuple[torch.Tensor, torch.Tensor]:
        """c_j = φ(q)ᵀ S_{j−1} / (φ(q)ᵀ ζ_{j−1} + ε) (eq 11) and ν_j = 1 − cos(W_n s, W_c c) (eq 13)."""
        fq = phi(q)
        numerator = torch.bmm(fq.unsqueeze(1), carry.S).squeeze(1)
        denominator = (fq * carry.zeta).sum(-1, keepdim=True) + self.config.eps
        read = numerator / denominator
        return read, self.novelty(s, read)

    def novelty(self, s: torch.Tensor, read: torch.Tensor) -> torch.Tensor:
        """ν_j = 1 − cos(W_n s_j, W_c c_j) (eq 13)."""
        return 1.0 - F.cosine_similarity(linear(self.W_n, s), linear(self.W_c, read), dim=-1, eps=self.config.eps)

    def write(
        self, carry: Carry, k: torch.Tensor, v: torch.Tensor, rho: torch.Tensor, first: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """S_j = ρ S_{j−1} + φ(k) vᵀ,  ζ_j = ρ ζ_{j−1} + φ(k) (eq 12).

        ``first``: S_0 = ζ_0 = 0, so S_1 = φ(k) vᵀ and ζ_1 = φ(k) exactly (no ρ·0 pass).
        The (N, d_m, d_m) update is one fused ``baddbmm`` pass over S instead of three
        elementwise passes; without autograd ρ enters as a Python scalar (β).
        """
        fk = phi(k)
        outer_l, outer_r = fk.unsqueeze(-1), v.unsqueeze(-2)
        if first and not torch.is_grad_enabled():
            return outer_l * outer_r, fk
        if getattr(carry, "donated", False) and not torch.is_grad_enabled():
            # the block handed over a carry nobody reads again (inference): update it in place
            beta = float(rho)
            return carry.S.baddbmm_(outer_l, outer_r, beta=beta), carry.zeta.mul_(beta).add_(fk)
        if torch.is_grad_enabled() and (rho.requires_grad or carry.S.requires_grad):
            S = torch.baddbmm(rho * carry.S, outer_l, outer_r)
        else:
            S = torch.baddbmm(carry.S, outer_l, outer_r, beta=float(rho))
        zeta = rho * carry.zeta + fk
        return S, zeta
