"""``method=hero``: the HeRo router and adapters attached to the frozen backbone (HERO_SPEC eq 1–18).

Trains router, adapters and η with L = L_LM + α·L_skip (eq 17–18); its trained state is the
saved router (``<run_dir>/router/``, ``hero.model.save_router``), which ``hero.model.load_router``
refuses to put on another backbone, layer set or router config.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from hero.methods.base import Method, Prepared
from hero.model import RouterConfig, attach, load_router, save_router


class HeRo(Method):
    name = "hero"
    state_dir = "router"

    def prepare(self, cfg, model, tokenizer, layers, bed, alpha) -> Prepared:
        config = RouterConfig.from_dict(OmegaConf.to_container(cfg.router, resolve=True))
        return Prepared(
            attach(model, layers, config=config),
            trains=True,
            weight=alpha,
            routed=True,
            calibrated=cfg.alpha == "calibrated",
        )

    def save(self, prepared, run_dir):
        return save_router(prepared.model, run_dir / self.state_dir)

    def load(self, prepared, run_dir) -> None:
        load_router(prepared.model, run_dir / self.state_dir)
