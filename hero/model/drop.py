"""The routable FFNs removed, nothing in their place (``method=drop_routable_ffn``, ``hero.methods``).

This is the floor a routing method must beat at 100 % skip of the routable layers
(and no adapter): a bed is only useful if this control loses clearly against the dense
backbone (the testbed's tests require >= 10 points of tiny-suite Retain).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from hero.model.attach import decoder_layers


class ZeroFFN(nn.Module):
    """Stands in for a decoder layer's ``mlp``: returns zeros, so the residual stream passes unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def second_half(model: nn.Module) -> tuple[int, ...]:
    """The default routable layers of ``model``: the second half of its decoder layers (0-based)."""
    n = len(decoder_layers(model))
    return tuple(range(n // 2, n))


@contextmanager
def drop_routable_ffn(model: nn.Module, layers: Sequence[int] | None = None) -> Iterator[nn.Module]:
    """Within the block, ``model`` has the ``mlp`` of ``layers`` (default: second half) replaced by zeros.

    Yields the same model object; the original FFNs are restored on exit.
    """
    stack = decoder_layers(model)
    layers = second_half(model) if layers is None else tuple(layers)
    saved = {i: stack[i].mlp for i in layers}
    try:
        for i in layers:
            stack[i].mlp = ZeroFFN()
        yield model
    finally:
        for i, mlp in saved.items():
            stack[i].mlp = mlp
