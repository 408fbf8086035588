"""``method=hero``: the HeRo router and adapters attached to the frozen backbone (HERO_SPEC eq 1–18).

Trains router, adapters and η with L = L_LM + α·L_skip (eq 17–18); its trained state is the
saved router (``<run_dir>/router/``, ``hero.model.save_router``), which ``hero.model.load_router``
refuses to put on another backbone, layer set or router config.
"""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from hero.methods.base import Method, Prepared
from hero.model import RouterConfig, attach, load_router, save_router
from hero.model.controls import resolve_matched
from hero.model.flops import router_flops


class HeRo(Method):
    name = "hero"
    routes = True
    state_dir = "router"
    threshold = "router.tau: a token's FFN runs where its gate g ≥ τ (eq 3)"

    def options(self, cfg) -> dict:
        """The router options (``router:``; the ``ablation=`` group switches its booleans), checked."""
        return {"router": RouterConfig.from_dict(OmegaConf.to_container(cfg.router, resolve=True))}

    def prepare(self, spec, model, tokenizer, layers, bed) -> Prepared:
        return Prepared(attach(model, layers, config=spec.options["router"]), trains=True, weight=spec.alpha)

    def threshold_of(self, prepared) -> float:
        return prepared.model.hero_router.config.tau

    def set_threshold(self, prepared, value: float) -> None:
        router = prepared.model.hero_router
        router.config = dataclasses.replace(router.config, tau=value)

    def compute_cost(self, config, shape, num_routable):
        """HeRo's router at every routable block (``hero.model.flops.router_flops``; a ``matched`` local head at its
        resolved width) and its adapters (d_r, ``RouterConfig.resolved_adapter_dim``)."""
        router = resolve_matched(RouterConfig.from_dict(config["router"]), shape.hidden, num_routable)
        flops = [router_flops(shape, router, j, num_routable) for j in range(1, num_routable + 1)]
        return flops, router.resolved_adapter_dim(shape.hidden)

    def save(self, prepared, run_dir):
        return save_router(prepared.model, run_dir / self.state_dir)

    def load(self, prepared, run_dir) -> None:
        load_router(prepared.model, run_dir / self.state_dir)
