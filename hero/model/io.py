"""Save and load the trainable HeRo tensors (safetensors) with the router config.

A saved router is tied to its backbone: the file records the backbone class,
shape and a fingerprint of its weights, and the layer set; loading onto anything
else fails with a message naming what differs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from hero.model.attach import attach, decoder_layers, is_hero_parameter, trainable_parameters
from hero.model.config import HeRoConfigError, RouterConfig

WEIGHTS_FILE = "hero_router.safetensors"
CONFIG_FILE = "hero_router.json"


def backbone_fingerprint(model: nn.Module) -> dict:
    """Class, shape and a hash of a sample of the frozen weights of the backbone.

    Trained tensors are left out (HeRo's router and adapters, peft's ``lora_*``), so a model hashes
    the same before and after training: what it identifies is the frozen backbone underneath.
    """
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        if is_hero_parameter(name) or ".lora_" in name:
            continue
        flat = p.detach().reshape(-1)
        digest.update(name.replace(".base_layer", "").encode())
        digest.update(flat[:64].float().cpu().numpy().tobytes())
    cfg = model.config
    return {
        "class": type(model).__name__,
        "hidden_size": cfg.hidden_size,
        "num_layers": len(decoder_layers(model)),
        "vocab_size": cfg.vocab_size,
        "weights_sha256": digest.hexdigest()[:16],
    }


def saved_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """What a saved router holds: the trainable tensors and HeRo's own buffers (e.g. tracked read statistics)."""
    buffers = {name: b for name, b in model.named_buffers() if is_hero_parameter(name)}
    return {**trainable_parameters(model), **buffers}


def save_router(model: nn.Module, directory: str | Path) -> Path:
    """Write the router, adapters and η (trainable tensors and HeRo buffers only) plus their config."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().contiguous().cpu() for name, p in saved_tensors(model).items()}
    save_file(tensors, str(directory / WEIGHTS_FILE))
    meta = {"router": model.hero_config.to_dict(), "layers": model.hero_layers, "backbone": backbone_fingerprint(model)}
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return directory


def load_router(backbone: nn.Module, directory: str | Path) -> nn.Module:
    """Load a saved router onto ``backbone`` (attaching HeRo with the saved config if needed)."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise HeRoConfigError(f"{path}: no saved HeRo router here (expected {CONFIG_FILE} and {WEIGHTS_FILE})")
    meta = json.loads(config_path.read_text())
    found = backbone_fingerprint(backbone)
    differs = {k: (v, found.get(k)) for k, v in meta["backbone"].items() if found.get(k) != v}
    if differs:
        detail = ", ".join(f"{k}: saved {a!r} vs this backbone {b!r}" for k, (a, b) in differs.items())
        raise HeRoConfigError(f"router in {directory} was trained on a different backbone ({detail})")
    config = RouterConfig.from_dict(meta["router"])
    if hasattr(backbone, "hero_router"):
        if backbone.hero_layers != meta["layers"]:
            raise HeRoConfigError(
                f"router in {directory} routes layers {meta['layers']}; this model routes {backbone.hero_layers}"
            )
        if backbone.hero_config != config:
            raise HeRoConfigError(
                f"router in {directory} has options {meta['router']}; this model has {backbone.hero_config.to_dict()}"
            )
        model = backbone
    else:
        model = attach(backbone, layers=meta["layers"], config=config)
    state = load_file(str(weights_path))
    params = saved_tensors(model)
    if set(state) != set(params):
        missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        raise HeRoConfigError(
            f"router in {directory} does not match this layer set: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor)
    return model
