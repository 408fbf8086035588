"""``method=lora``: a LoRA fine-tune through peft, no skipping — the trained no-skip reference.

Rank ``method.r`` (128 on Llama as the paper; ``model.lora_r`` = 8 on the testbed), alpha 2r unless
``method.lora_alpha`` is set, on ``method.target_modules``. No compute is charged (``compute_cost``): the
low-rank updates merge into the frozen weights for inference.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from hero.methods.base import Method, MethodConfigError, Prepared, fixed_routing


class LoRA(Method):
    name = "lora"

    def options(self, cfg) -> dict:
        if not isinstance(cfg.method.r, int) or isinstance(cfg.method.r, bool) or cfg.method.r < 1:
            raise MethodConfigError(f"method.r={cfg.method.r!r}: the LoRA rank must be a positive integer")
        return {k: v for k, v in OmegaConf.to_container(cfg.method, resolve=True).items() if k != "name"}

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        skip = fixed_routing(model, layers, ffn_executed=True)
        return Prepared(with_lora(model, spec.options), trains=True, fixed_skip=skip)


def with_lora(model, options: dict):
    """``model`` wrapped by peft with the LoRA adapters of the method's ``options`` (only they train).

    peft is imported here, not with the registry: it adds 0.5 s of start-up (measured 2026-12-03) to every
    process that imports ``hero.methods``, and only a LoRA run uses it.
    """
    from peft import LoraConfig, get_peft_model

    r = int(options["r"])
    config = LoraConfig(
        r=r,
        lora_alpha=options["lora_alpha"] or 2 * r,
        lora_dropout=options["dropout"],
        target_modules=list(options["target_modules"]),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
