"""Random routing at a given cost: each token's FFN skipped with probability p.

The control every learned router must beat at equal cost. For routable block j and token t,
independently of everything else:

    skip_{j,t} ~ Bernoulli(p),   g = 1 − skip,   h = h̄ + FFN(u) if g = 1 else h̄ + Adapter_j(u)

In training the draws come from the global torch RNG, which the run's seed fixes (``seed=``),
so a run is reproducible and a different seed draws differently; gradient checkpointing
restores that RNG for its recomputation, so it redraws the same decisions. At inference
(``model.eval()``) they come from the policy's own generator, seeded with the run's seed:
lm-eval reseeds the global RNG with a fixed seed before every task, which would give every
run seed the same evaluation routing. With ``method.adapter=true`` HeRo's
adapters (eq 2, d_r = 7d/32, zero-initialised W2) are trained under this routing with the LM
loss alone; with ``adapter=false`` nothing trains and a skipped token keeps h̄. The realized
parameter skip rate is p × (routable FFN parameters / all parameters) in expectation; p is
the calibration knob.
"""

from __future__ import annotations

import torch

from hero.baselines.attach import Policy, PolicyConfig, hard_decision

SOURCE = "random routing control (this project): Bernoulli(p) FFN skip per token and layer, seeded"
DEVIATIONS = ()


class RandomPolicy(Policy):
    def __init__(self, hidden_size: int, num_routable: int, config: PolicyConfig, p: float, seed: int = 0):
        super().__init__(hidden_size, num_routable, config)
        self.p = float(p)
        self.seed = int(seed)
        self._generator: torch.Generator | None = None

    def _inference_generator(self, device: torch.device) -> torch.Generator:
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device).manual_seed(self.seed)
        return self._generator

    def step(self, j: int, hbar: torch.Tensor, carry, rho: torch.Tensor):
        generator = None if self.training else self._inference_generator(hbar.device)
        executed = torch.rand(hbar.shape[0], device=hbar.device, generator=generator) >= self.p
        return hard_decision(executed.float()), carry
