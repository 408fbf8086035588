"""The bottleneck adapter that replaces the frozen FFN for skipped tokens (eq 2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Adapter(nn.Module):
    """Adapter_j(u) = W2_j · SiLU(W1_j · u), W1: d → d_r, W2: d_r → d (eq 2).

    W2 starts at zero so that at initialisation a skipped token adds nothing to
    the residual stream (the routed model starts as "FFN or nothing").
    """

    def __init__(self, hidden_size: int, bottleneck: int):
        super().__init__()
        self.W1 = nn.Linear(hidden_size, bottleneck, bias=False)
        self.W2 = nn.Linear(bottleneck, hidden_size, bias=False)
        nn.init.zeros_(self.W2.weight)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.W2(F.silu(self.W1(u.to(self.W1.weight.dtype))))
