"""HeRo Lab: history-aware dynamic FFN routing on frozen LLMs."""
__version__ = "0.1.0"

from hero.model import (  # noqa: E402
    HeRoConfigError,
    RouterConfig,
    attach,
    detach,
    forced_routing,
    last_records,
    load_router,
    routed_blocks,
    routing_trace,
    save_router,
    trainable_parameters,
)
from hero.objectives import SkipMeter, prediction_positions, skip_loss  # noqa: E402

__all__ = [
    "HeRoConfigError", "RouterConfig", "SkipMeter", "attach", "detach", "forced_routing", "last_records",
    "load_router", "prediction_positions", "routed_blocks", "routing_trace", "save_router", "skip_loss",
    "trainable_parameters",
]
