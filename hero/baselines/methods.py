"""The Table 1 baselines as ``method=`` options: their checks, cost knob, routed model, objective and record.

``hero.pipeline`` asks this module four things about a baseline run: ``check`` (every value,
before any compute), ``knob_value`` (the cost knob, or its calibrated value), ``prepare`` (the
backbone with the policy attached, whether and how it trains, the record's ``baseline``
section). Each baseline's cost is reported like HeRo's: the realized parameter skip rate
(HERO_SPEC §7) measured by the same ``SkipMeter`` on the same routing data.

    method        knob            trains                              definition
    skipgpt_rt    target_ratio    the per-layer routers (backbone     hero.baselines.skipgpt
                                  frozen), LM + sparsity loss
    static_drop   k               nothing                             hero.baselines.static_drop
    random_skip   p               the adapters (adapter=true), LM     hero.baselines.random_skip
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from hero.baselines import random_skip, skipgpt, static_drop
from hero.baselines.attach import attach_policy
from hero.errors import ConfigError

BASELINES = ("skipgpt_rt", "static_drop", "random_skip")
KNOBS = {"skipgpt_rt": "target_ratio", "static_drop": "k", "random_skip": "p"}
MODULES = {"skipgpt_rt": skipgpt, "static_drop": static_drop, "random_skip": random_skip}
BI_BATCH = 8


class BaselineConfigError(ConfigError):
    """A baseline option has a value the method cannot run with."""


def _number(method: str, key: str, value, low: float, high: float, closed_high: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value and (
        value <= high if closed_high else value < high)
    if not ok:
        bracket = "]" if closed_high else ")"
        raise BaselineConfigError(f"method.{key}={value!r}: {method} needs a number in [{low:g}, {high:g}{bracket}"
                                  + (" or 'calibrated'" if key == KNOBS[method] else ""))


def check(method_cfg: DictConfig) -> None:
    """Every option of a baseline method config; one line naming the bad value."""
    name = method_cfg.name
    knob = method_cfg.get(KNOBS[name])
    if name == "skipgpt_rt":
        if knob != "calibrated":
            _number(name, "target_ratio", knob, 0.0, 1.0)
        _number(name, "sparsity_weight", method_cfg.sparsity_weight, 0.0, float("inf"))
        if not method_cfg.temperature > 0:
            raise BaselineConfigError(f"method.temperature={method_cfg.temperature!r}: must be positive")
        _number(name, "bias_init", method_cfg.bias_init, -float("inf"), float("inf"))
    elif name == "static_drop":
        if knob != "calibrated" and (not isinstance(knob, int) or isinstance(knob, bool) or knob < 0):
            raise BaselineConfigError(f"method.k={knob!r}: static_drop removes k ≥ 0 routable FFNs (an integer) "
                                      "or k=calibrated")
        n = method_cfg.calibration_samples
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise BaselineConfigError(f"method.calibration_samples={n!r}: must be a positive integer")
    elif name == "random_skip":
        if knob != "calibrated":
            _number(name, "p", knob, 0.0, 1.0, closed_high=True)
        if not isinstance(method_cfg.adapter, bool):
            raise BaselineConfigError(f"method.adapter={method_cfg.adapter!r}: must be true or false")


def knob_value(cfg: DictConfig) -> tuple[float | int, bool]:
    """(the cost knob's value, whether it came from the calibration file: ``method.<knob>=calibrated``)."""
    name = cfg.method.name
    value = cfg.method[KNOBS[name]]
    if value != "calibrated":
        return value, False
    from hero.calibration.file import calibrated_knob

    value = calibrated_knob(cfg)
    return (int(round(value)) if name == "static_drop" else float(value)), True


def trains(method_cfg: DictConfig) -> bool:
    return method_cfg.name == "skipgpt_rt" or (method_cfg.name == "random_skip" and bool(method_cfg.adapter))


@dataclass
class Prepared:
    """A baseline ready to train / evaluate.

    ``regularizer(gates, valid)`` is the auxiliary loss and ``weight`` its coefficient (the
    training loop adds weight × regularizer to L_LM); ``record`` is the run record's ``baseline``.
    """

    model: torch.nn.Module
    trains: bool
    weight: float
    regularizer: Callable
    record: dict


def no_regularizer(gates, valid: torch.Tensor) -> torch.Tensor:
    """Random and static routing have nothing to regularise: the loss is L_LM alone."""
    return torch.zeros((), device=valid.device)


def prepare(cfg: DictConfig, model: torch.nn.Module, tokenizer, layers: list[int], bed) -> Prepared:
    """Attach the baseline's policy to ``model`` (in place) and describe the run."""
    method = cfg.method
    name = method.name
    value, calibrated = knob_value(cfg)
    options = {k: v for k, v in OmegaConf.to_container(method, resolve=True).items() if k != "name"}
    options[KNOBS[name]] = value
    module = MODULES[name]
    record = {"method": name, "source": module.SOURCE, "deviations": list(module.DEVIATIONS),
              "knob": {"name": KNOBS[name], "value": value, "calibrated": calibrated}}
    if name == "skipgpt_rt":
        factory = partial(skipgpt.SkipGPTRouter, temperature=method.temperature, bias_init=method.bias_init)
        model = attach_policy(model, layers, name, options, factory, adapter=False)
        regularizer = partial(skipgpt.sparsity_loss, target_ratio=float(value))
        record.update(target_ratio=value, sparsity_weight=method.sparsity_weight, temperature=method.temperature)
        return Prepared(model, True, float(method.sparsity_weight), regularizer, record)
    if name == "random_skip":
        factory = partial(random_skip.RandomPolicy, p=value, seed=cfg.seed)
        model = attach_policy(model, layers, name, options, factory, adapter=bool(method.adapter))
        record.update(p=value, adapter=bool(method.adapter))
        return Prepared(model, bool(method.adapter), 0.0, no_regularizer, record)
    if value > len(layers):
        raise BaselineConfigError(f"method.k={value}: static_drop can remove at most the {len(layers)} routable "
                                  f"FFNs of layers={cfg.layers.name}")
    influence = static_drop.block_influence(model, calibration_batches(cfg, tokenizer, bed), layers)
    order = static_drop.ranking(influence)
    removed = sorted(order[:value])
    blocks = [layers.index(layer) + 1 for layer in removed]
    model = attach_policy(model, layers, name, options, partial(static_drop.StaticPolicy, removed_blocks=blocks),
                          adapter=False)
    record.update(k=value, block_influence={str(layer): bi for layer, bi in influence.items()},
                  ranking=order, removed_layers=removed, calibration_samples=method.calibration_samples)
    return Prepared(model, False, 0.0, no_regularizer, record)


def calibration_batches(cfg: DictConfig, tokenizer, bed) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Held-out calibration text: the first ``method.calibration_samples`` conversations of the validation split."""
    from hero.data import collate, load_conversations, tokenize_conversation

    conversations = load_conversations(cfg.data, bed, split="validation")[: cfg.method.calibration_samples]
    if not conversations:
        raise BaselineConfigError(f"data={cfg.data.name} has no validation conversations for static_drop's Block Influence")
    items = [tokenize_conversation(tokenizer, c, cfg.data.max_length) for c in conversations]
    batches = (collate(items[i: i + BI_BATCH], tokenizer.pad_token_id) for i in range(0, len(items), BI_BATCH))
    return [(b["input_ids"], b["attention_mask"]) for b in batches]
