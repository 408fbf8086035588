"""The routed model: adapter, router, routed block, attach/detach, trace, save/load."""

from hero.model.attach import (
    LAYER_SETS,
    attach,
    decoder_layers,
    detach,
    resolve_layers,
    routed_blocks,
    trainable_parameters,
)
from hero.model.config import HeRoConfigError, RouterConfig
from hero.model.io import load_router, save_router
from hero.model.trace import TRACE_FIELDS, forced_routing, last_records, routing_trace

__all__ = [
    "LAYER_SETS",
    "HeRoConfigError",
    "RouterConfig",
    "TRACE_FIELDS",
    "attach",
    "decoder_layers",
    "detach",
    "forced_routing",
    "last_records",
    "load_router",
    "resolve_layers",
    "routed_blocks",
    "routing_trace",
    "save_router",
    "trainable_parameters",
]
