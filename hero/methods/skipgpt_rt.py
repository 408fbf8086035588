"""``method=skipgpt_rt``: SkipGPT's per-layer routers tuned with the backbone frozen (``hero.baselines.skipgpt``)."""

from __future__ import annotations

from functools import partial

from hero.baselines import skipgpt
from hero.baselines.attach import attach_policy
from hero.methods.base import MethodConfigError, Prepared
from hero.methods.baseline import Baseline, check_number
from hero.results import drop_defaults


class SkipGPTRT(Baseline):
    name = "skipgpt_rt"
    module = skipgpt

    def check(self, cfg) -> None:
        method = cfg.method
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

    def prepare(self, cfg, model, tokenizer, layers, bed, alpha) -> Prepared:
        method = cfg.method
        value, calibrated = self.knob_value(cfg)
        factory = partial(
            skipgpt.SkipGPTRouter,
            temperature=method.temperature,
            bias_init=method.bias_init,
            router=method.router,
            eval_gate=method.eval_gate,
            temperature_final=method.temperature_final,
        )
        model = attach_policy(model, layers, self.name, self.options(cfg, value), factory, adapter=False)
        record = self.record(
            value,
            calibrated,
            target_ratio=value,
            sparsity_weight=method.sparsity_weight,
            temperature=method.temperature,
            # the official-code options, recorded only away from the defaults that predate them (DEFAULTED_KEYS)
            **drop_defaults({k: method[k] for k in ("router", "eval_gate", "temperature_final")}, prefix="method"),
        )
        return Prepared(
            model,
            trains=True,
            weight=float(method.sparsity_weight),
            routed=True,
            record=record,
            regularizer=partial(skipgpt.sparsity_loss, target_ratio=float(value)),
            calibrated=calibrated,
        )
