"""What every ``method=`` option provides: its options, a prepared model, its compute cost, its trained state on disk.

``hero.spec`` reads a method's options once (``options``, before any compute); ``hero.pipeline`` then runs every
method the same way — ``prepare`` (the backbone with the method attached, whether and how it trains), ``fit`` when
it trains, ``save`` the trained tensors — and ``hero.scoring`` scores it, takes ``statistics`` on the routing data
and charges its ``compute_cost``; none of them branches on the method's name. ``python -m hero.rescore`` uses
``prepare`` + ``load`` to score a finished run again on another suite, and ``analysis.compute`` asks
``compute_cost`` for a record written before records carried their net compute.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from hero.errors import ConfigError
from hero.evaluation.routing import routing_statistics
from hero.knobs import Knob, knob_of
from hero.model.attach import decoder_layers
from hero.model.flops import Shape
from hero.model.io import backbone_fingerprint
from hero.objectives import total_param_count

TRAINED_DIR = "trained"
WEIGHTS_FILE = "trainable.safetensors"
META_FILE = "trainable.json"


class MethodConfigError(ConfigError):
    """A method option has a value the method cannot run with."""


@dataclass
class Prepared:
    """A method attached to a backbone, ready to train and score.

    ``weight`` × ``regularizer(gates, valid)`` is added to L_LM in training (``regularizer`` None: HeRo's
    L_skip, eq 18); ``card``: the run record's ``method_card`` (a Table 1 method's definition, deviations, knob
    and settings); ``fixed_skip``: the skip section of a model whose routing nothing decides.
    """

    model: nn.Module
    trains: bool = False
    weight: float = 0.0
    regularizer: Callable | None = None
    card: dict | None = None
    fixed_skip: dict | None = None


def fixed_routing(model: nn.Module, layers: list[int], ffn_executed: bool) -> dict:
    """The skip section of a model that runs every routable FFN (dense, LoRA) or none (drop control)."""
    blocks = decoder_layers(model)
    skipped = 0.0 if ffn_executed else sum(p.numel() for i in layers for p in blocks[i].mlp.parameters())
    return {
        "param_rate": skipped / total_param_count(model),
        "per_layer_ffn_rate": {str(layer): float(ffn_executed) for layer in layers},
    }


class Method:
    """One ``method=`` option; subclasses live one per module in ``hero/methods/`` (registry: ``METHODS``)."""

    name: ClassVar[str]
    reference: ClassVar[bool] = False  # the Retain baseline itself (dense): it writes the baseline cache
    routes: ClassVar[bool] = False  # tokens are routed: training and statistics collect gates, interventions apply
    state_dir: ClassVar[str] = TRAINED_DIR  # where a trained run keeps its trainable tensors, in its run dir
    # what ``eval.thresholds`` sets at evaluation (``set_threshold``); None: the method has no such threshold
    threshold: ClassVar[str | None] = None

    def options(self, cfg) -> dict:
        """The method's own options, checked, before any compute (``hero.spec``; the one place a method reads the
        composed config); raises ``ConfigError`` naming the bad value. A cost knob is resolved by the spec."""
        return {}

    @property
    def knob(self) -> Knob | None:
        """The knob that sets this method's cost (``hero.knobs``); None when nothing moves its skip rate."""
        return knob_of(self.name)

    def prepare(self, spec, model: nn.Module, tokenizer, layers: list[int], bed) -> Prepared:
        """The backbone with the method attached (``spec``: the run's ``hero.spec.RunSpec``)."""
        raise NotImplementedError

    def compute_cost(self, config: dict, shape: Shape, num_routable: int) -> tuple[list[float], int | None]:
        """(router FLOPs per token at each routable block, the skip branch's adapter width or None) of a run of this
        method with the resolved ``config`` (a record's ``config``): what ``hero.model.flops.net_compute`` charges.
        A method that routes nothing pays nothing."""
        return [0] * num_routable, None

    def threshold_of(self, prepared: Prepared) -> float:
        """The evaluation threshold the prepared model routes with now (``threshold``)."""
        raise MethodConfigError(f"method={self.name} has no evaluation threshold (eval.thresholds must be null)")

    def set_threshold(self, prepared: Prepared, value: float) -> None:
        """Route with evaluation threshold ``value`` from now on; training is untouched (``hero.scoring.score_curve``)."""
        raise MethodConfigError(f"method={self.name} has no evaluation threshold (eval.thresholds must be null)")

    def statistics(self, prepared: Prepared, batches: Callable, classes) -> tuple[dict, dict]:
        """(skip section, learned ρ) of the prepared model on routing data (``batches()`` yields them)."""
        if prepared.fixed_skip is not None:
            return prepared.fixed_skip, {}
        skip, rho = routing_statistics(prepared.model, batches(), classes)
        return skip, rho

    def save(self, prepared: Prepared, run_dir: Path) -> Path:
        """The trainable tensors beside the record (``<run_dir>/trained/``), tied to the backbone."""
        directory = Path(run_dir) / self.state_dir
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {n: p.detach().contiguous().cpu() for n, p in _trainable(prepared.model).items()}
        save_file(tensors, str(directory / WEIGHTS_FILE))
        meta = {"method": self.name, "tensors": sorted(tensors), "backbone": backbone_fingerprint(prepared.model)}
        (directory / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        return directory

    def load(self, prepared: Prepared, run_dir: Path) -> None:
        """Copy the tensors ``save`` wrote into the freshly prepared model; refuses another backbone or layout."""
        directory = Path(run_dir) / self.state_dir
        if not (directory / WEIGHTS_FILE).is_file():
            raise MethodConfigError(f"{directory}: no trained {self.name} tensors here (expected {WEIGHTS_FILE})")
        meta = json.loads((directory / META_FILE).read_text())
        found = backbone_fingerprint(prepared.model)
        if meta["backbone"] != found:
            raise MethodConfigError(f"{directory} was trained on another backbone ({meta['backbone']} vs {found})")
        state, params = load_file(str(directory / WEIGHTS_FILE)), _trainable(prepared.model)
        if set(state) != set(params):
            raise MethodConfigError(
                f"{directory} holds tensors {sorted(set(state) - set(params))[:3]} this "
                f"model lacks, and lacks {sorted(set(params) - set(state))[:3]}"
            )
        with torch.no_grad():
            for name, tensor in state.items():
                params[name].copy_(tensor)


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}
