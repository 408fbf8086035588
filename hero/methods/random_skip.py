"""``method=random_skip``: each token's routable FFN skipped with probability p, seeded (``hero.baselines.random_skip``).

With ``method.adapter=true`` the skip branch is HeRo's adapter, trained with L_LM alone.
"""

from __future__ import annotations

from functools import partial

from hero.baselines import random_skip
from hero.baselines.attach import attach_policy
from hero.methods.base import MethodConfigError, Prepared
from hero.methods.baseline import Baseline, check_number, no_regularizer


class RandomSkip(Baseline):
    name = "random_skip"
    module = random_skip

    def check(self, cfg) -> None:
        if cfg.method.p != "calibrated":
            check_number(self.name, "p", cfg.method.p, 0.0, 1.0, closed_high=True, knob=True)
        if not isinstance(cfg.method.adapter, bool):
            raise MethodConfigError(f"method.adapter={cfg.method.adapter!r}: must be true or false")

    def prepare(self, cfg, model, tokenizer, layers, bed, alpha) -> Prepared:
        value, calibrated = self.knob_value(cfg)
        adapter = bool(cfg.method.adapter)
        factory = partial(random_skip.RandomPolicy, p=value, seed=cfg.seed)
        model = attach_policy(model, layers, self.name, self.options(cfg, value), factory, adapter=adapter)
        return Prepared(
            model,
            trains=adapter,
            routed=True,
            regularizer=no_regularizer,
            calibrated=calibrated,
            record=self.record(value, calibrated, p=value, adapter=adapter),
        )
