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

from functools import partial

import torch

from hero.methods.base import MethodConfigError, Prepared
from hero.methods.table1 import Table1Method, check_number, no_regularizer
from hero.model import RouterConfig
from hero.model.policy import Policy, PolicyConfig, attach_policy, hard_decision

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


class RandomSkip(Table1Method):
    """``method=random_skip``: the policy above; with ``method.adapter=true`` the skip branch is HeRo's adapter,
    trained with L_LM alone."""

    name = "random_skip"
    source = SOURCE
    deviations = DEVIATIONS

    def check(self, method) -> None:
        if method.p != "calibrated":
            check_number(self.name, "p", method.p, 0.0, 1.0, closed_high=True, knob=True)
        if not isinstance(method.adapter, bool):
            raise MethodConfigError(f"method.adapter={method.adapter!r}: must be true or false")

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        p, adapter = spec.knob.value, spec.options["adapter"]
        factory = partial(RandomPolicy, p=p, seed=spec.seed)
        model = attach_policy(model, layers, self.name, self.policy_options(spec), factory, adapter=adapter)
        card = self.card(spec, p=p, adapter=adapter)
        return Prepared(model, trains=adapter, regularizer=no_regularizer, card=card)

    def compute_cost(self, config, shape, num_routable):
        """No router arithmetic (the draws read no hidden state); HeRo's adapters at their default width
        (d_r = 7d/32, as ``attach_policy`` builds them) when ``method.adapter`` is true."""
        width = RouterConfig().resolved_adapter_dim(shape.hidden) if config["method"].get("adapter") else None
        return [0] * num_routable, width
