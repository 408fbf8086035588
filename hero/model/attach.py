"""Inject HeRo into a frozen decoder-only backbone, peft style.

``attach`` finds the decoder layers by structure (any layer with
``input_layernorm``, ``self_attn``, ``post_attention_layernorm`` and ``mlp``:
Llama, Mistral, Qwen2/3, ...), wraps the routable ones in ``RoutedDecoderLayer``
(the original stays as ``base_layer``), registers one shared ``Router`` as
``model.hero_router`` and freezes every backbone parameter.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hero.model.block import RoutedDecoderLayer, RoutingContext
from hero.model.config import HeRoConfigError, RouterConfig
from hero.model.controls import build_router

LAYER_PARTS = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
LAYER_SETS = ("second_half", "from_9", "all")


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The backbone's list of decoder layers, found by structure; a clear error otherwise."""
    for module in model.modules():
        if (
            isinstance(module, nn.ModuleList)
            and len(module) > 0
            and all(
                isinstance(layer, RoutedDecoderLayer) or all(hasattr(layer, part) for part in LAYER_PARTS)
                for layer in module
            )
        ):
            return module
    raise HeRoConfigError(
        f"{type(model).__name__} has no list of decoder layers with {', '.join(LAYER_PARTS)}; "
        "HeRo supports Llama-family decoders (Llama, Mistral, Qwen2/3)"
    )


def resolve_layers(spec: str | Sequence[int], num_layers: int) -> list[int]:
    """0-based routable layer indices from a layer-set name or an explicit list.

    second_half  the paper's ~25 % budget: layers ⌊n/2⌋ … n−1
    from_9       the paper's 40 % budget on 32 layers (1-indexed 9–32), scaled: ⌊n/4⌋ … n−1
    all          every layer
    """
    if isinstance(spec, str):
        if spec == "second_half":
            return list(range(num_layers // 2, num_layers))
        if spec == "from_9":
            return list(range(num_layers // 4, num_layers))
        if spec == "all":
            return list(range(num_layers))
        raise HeRoConfigError(
            f"layers={spec!r}: allowed layer sets are {', '.join(LAYER_SETS)} or a list of 0-based indices"
        )
    layers = list(spec)
    if not layers:
        raise HeRoConfigError("layers=[]: at least one routable layer is needed")
    for index in layers:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < num_layers:
            raise HeRoConfigError(f"layer index {index!r} is outside the model: valid range is 0..{num_layers - 1}")
    if len(set(layers)) != len(layers):
        raise HeRoConfigError(f"layers={layers}: duplicate layer indices")
    return sorted(layers)


def attach(
    model: nn.Module, layers: str | Sequence[int] = "second_half", config: RouterConfig | None = None, **router_options
) -> nn.Module:
    """Turn ``model`` into a HeRo-routed model in place and return it.

    ``router_options`` are ``RouterConfig`` fields (``memory_read=False``, ...); the router class
    and a ``local_head_hidden="matched"`` width come from ``hero.model.controls.build_router``,
    whose parameter counts are kept as ``model.hero_param_counts``.
    Trainable after this call: the router, the adapters and the forget parameters η;
    every backbone parameter is frozen.
    """
    if config is None:
        config = RouterConfig(**router_options)
    elif router_options:
        raise HeRoConfigError("pass either config= or router options, not both")
    if hasattr(model, "hero_router"):
        raise HeRoConfigError(f"{type(model).__name__} already has HeRo attached; call hero.detach first")
    module_list = decoder_layers(model)
    routable = resolve_layers(layers, len(module_list))
    hidden_size = model.config.hidden_size
    for param in model.parameters():
        param.requires_grad_(False)
    reference = next(model.parameters())
    router, counts = build_router(config, hidden_size, len(routable))
    router = router.to(reference.device)
    if config.local_head_hidden == "matched":
        print(
            f"[hero] param_matched_local: local head width {counts['local_head_hidden']}, "
            f"{counts['router']:,} trainable router parameters vs full HeRo {counts['full_hero']:,} "
            f"({counts['relative_to_full']:+.2%}; router + eta, adapters excluded)",
            flush=True,
        )
    context = RoutingContext()
    for j, index in enumerate(routable, start=1):
        block = RoutedDecoderLayer(
            module_list[index],
            router,
            context,
            j,
            index,
            config.resolved_adapter_dim(hidden_size),
            config.rho_init,
            config.forget,
        )
        module_list[index] = block.to(reference.device)
    model.add_module("hero_router", router)
    model.hero_config = config
    model.hero_context = context
    model.hero_layers = routable
    model.hero_param_counts = counts
    return model


def detach(model: nn.Module) -> nn.Module:
    """Remove HeRo: put the original decoder layers back and drop router and adapters."""
    module_list = decoder_layers(model)
    for index, layer in enumerate(module_list):
        if isinstance(layer, RoutedDecoderLayer):
            module_list[index] = layer.base_layer
    del model.hero_router
    for name in ("hero_config", "hero_context", "hero_layers", "hero_param_counts"):
        delattr(model, name)
    return model


def routed_blocks(model: nn.Module) -> list[RoutedDecoderLayer]:
    """The routable blocks in depth order; an error if HeRo is not attached."""
    if not hasattr(model, "hero_router"):
        raise HeRoConfigError(f"{type(model).__name__} has no HeRo attached; call hero.attach first")
    return [layer for layer in decoder_layers(model) if isinstance(layer, RoutedDecoderLayer)]


def is_hero_parameter(name: str) -> bool:
    """True for the tensors HeRo adds (router, adapters, η), by their names in the routed model."""
    return name.startswith("hero_router.") or ".adapter." in name or name.endswith(".eta")


def trainable_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Name → parameter for exactly the tensors HeRo trains (router, adapters, η)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}
