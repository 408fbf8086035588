"""HeRo Lab: history-aware dynamic FFN routing on frozen LLMs.

The public names below load on first use (PEP 562), so ``import hero.results`` or the
dispatch CLI (``python -m hero.dispatch status``) does not import torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "hero.model": (
        "HeRoConfigError",
        "RouterConfig",
        "attach",
        "detach",
        "forced_routing",
        "last_records",
        "load_router",
        "routed_blocks",
        "routing_trace",
        "save_router",
        "trainable_parameters",
    ),
    "hero.objectives": ("SkipMeter", "prediction_positions", "skip_loss"),
}
_HOME = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'hero' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
