"""``python -m hero.bench.precision``: where bf16 autocast changes HeRo's routing, one SmolLM2 update measured.

One micro-batch of the SmolLM2 bed's training conversations through HeRo's forward and backward
(``hero.update.micro_batch_loss``, the exact speed options, α = 1e-3) under four precisions, each against fp32:

    bf16            everything under bf16 autocast, as ``trainer.precision=bf16`` trains (the router's own
                    arithmetic, ``Router.step``, already runs in fp32 under autocast)
    bf16_adapter32  the same with the adapters (the skip branch, eq 2) in fp32
    bf16_prefix     only the frozen prefix (layers below the first routable one) in bf16: its states, then fp32
    bf16_routable   only the routable layers and the head in bf16 (the prefix's states in fp32)

Every variant computes the prefix's states per sample first (``hero.update.prefix_states``, as
``trainer.prefix_cache`` does) and runs layers k… on one padded batch, so the layouts are the same.

Per variant: the gates' largest and mean absolute difference, the share of (token, layer) pairs whose executed
decision flips across τ, the skip loss's and LM loss's relative difference, and the cosine and relative norm
difference of the router's and the adapters' gradients. The router is HeRo's with seeded random weights, its gate
logits shifted so that 6 % of the gates fall below τ (``hero.bench.evaluation._router``; the initialisation puts
every gate near σ(3)). Writes a JSON file.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from hero.bench.evaluation import _router, _train_cfg

VARIANTS = ("fp32", "bf16", "bf16_adapter32", "bf16_prefix", "bf16_routable")


def _autocast(on: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=on)


@contextmanager
def _adapters_fp32(model):
    """Every adapter runs in fp32 (autocast off, input cast up) inside the block."""
    from hero.model.adapter import Adapter

    adapters = [m for m in model.modules() if isinstance(m, Adapter)]
    real = [a.forward for a in adapters]
    for adapter, forward in zip(adapters, real, strict=True):

        def fp32(u, forward=forward):
            with torch.autocast("cpu", enabled=False):
                return forward(u.float())

        adapter.forward = fp32
    try:
        yield
    finally:
        for adapter in adapters:
            del adapter.forward


# variant -> (prefix in bf16, routable layers and head in bf16, adapters kept in fp32)
SETTINGS = {
    "fp32": (False, False, False),
    "bf16": (True, True, False),
    "bf16_adapter32": (True, True, True),
    "bf16_prefix": (True, False, False),
    "bf16_routable": (False, True, False),
}


def _step(model, items, pad_id, variant: str, first: int):
    """One forward and backward: the prefix's states under its precision, then layers k… and the head under theirs
    (one padded batch, labelled logits: the same layout in every variant)."""
    from hero.update import micro_batch_loss, prefix_states

    prefix_bf16, routable_bf16, adapter32 = SETTINGS[variant]
    model.zero_grad(set_to_none=True)
    model.eval()
    with _autocast(prefix_bf16):
        states = prefix_states(model, items, first)
    model.train()
    prefix = (first, [s.float() for s in states])
    adapters = _adapters_fp32(model) if adapter32 else _nothing()
    with _autocast(routable_bf16), adapters:
        loss, lm, skip, records, mask = micro_batch_loss(
            model, items, pad_id, torch.device("cpu"), 1e-3, True, None, True, 1.0, prefix
        )
    loss.backward()
    valid = mask.bool()
    gates = torch.stack([r.gate.float()[valid] for r in records])
    executed = torch.stack([r.ffn_executed[valid] for r in records])
    grads = {
        part: torch.cat([p.grad.flatten() for n, p in model.named_parameters() if p.grad is not None and part in n])
        for part in ("hero_router", "adapter")
    }
    return {"lm": float(lm), "skip": float(skip), "gates": gates, "executed": executed, "grads": grads}


@contextmanager
def _nothing():
    yield


def _compare(ref: dict, other: dict) -> dict:
    out = {
        "gate_max_abs_diff": float((other["gates"] - ref["gates"]).abs().max()),
        "gate_mean_abs_diff": float((other["gates"] - ref["gates"]).abs().mean()),
        "flip_share": float((other["executed"] != ref["executed"]).float().mean()),
        "executed_share": float(other["executed"].float().mean()),
        "lm_rel_diff": (other["lm"] - ref["lm"]) / abs(ref["lm"]),
        "skip_rel_diff": (other["skip"] - ref["skip"]) / abs(ref["skip"]),
    }
    for part, grad in ref["grads"].items():
        g = other["grads"][part]
        out[f"{part}_grad_cosine"] = float(torch.nn.functional.cosine_similarity(g, grad, dim=0))
        out[f"{part}_grad_rel_norm_diff"] = float((g - grad).norm() / grad.norm())
    return out


def main(argv: list[str] | None = None) -> int:
    from omegaconf import OmegaConf

    from hero.bench.train import bed_items
    from hero.model.prefix import frozen_prefix_end
    from hero.spec import RunSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="conversations in the micro-batch (default 8)")
    parser.add_argument("--seed", type=int, default=42, help="router weights and the samples drawn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="outputs/bench/precision.json")
    args = parser.parse_args(argv)
    if args.samples <= 0:
        parser.error(f"--samples={args.samples}: must be a positive integer")
    torch.set_num_threads(args.threads)
    start = time.time()
    cache = OmegaConf.select(OmegaConf.create({"c": "${oc.env:HERO_CACHE,${oc.env:HOME}/.cache/hero}"}), "c")
    cfg = OmegaConf.create({"seed": args.seed, "cache": cache, "overrides": {}})
    spec = RunSpec.resolve(_train_cfg(cfg, "smollm2", Path("/tmp/hero-bench-precision")))
    loaded = spec.load()
    model = _router(spec, loaded, None, args.seed).train()
    tokenizer = loaded.backbone.tokenizer
    items = bed_items(loaded.bed, tokenizer, int(spec.data.max_length))
    generator = torch.Generator().manual_seed(args.seed)
    items = [items[i] for i in torch.randperm(len(items), generator=generator)[: args.samples].tolist()]
    first = frozen_prefix_end(model)
    runs = {v: _step(model, items, tokenizer.pad_token_id, v, first) for v in VARIANTS}
    out = {
        "samples": args.samples,
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "fp32": {
            "lm": runs["fp32"]["lm"],
            "skip": runs["fp32"]["skip"],
            "executed_share": float(runs["fp32"]["executed"].float().mean()),
        },
        "vs_fp32": {v: _compare(runs["fp32"], runs[v]) for v in VARIANTS[1:]},
        "wall_s": time.time() - start,
    }
    for variant, row in out["vs_fp32"].items():
        print(
            f"{variant:15s} gates |Δ| max {row['gate_max_abs_diff']:.2e} mean {row['gate_mean_abs_diff']:.2e}; "
            f"flips {100 * row['flip_share']:.3f} %; LM {100 * row['lm_rel_diff']:+.3f} %, skip loss "
            f"{100 * row['skip_rel_diff']:+.3f} %; router grad cos {row['hero_router_grad_cosine']:.5f} "
            f"(|Δ|/|g| {row['hero_router_grad_rel_norm_diff']:.3f}), adapter grad cos {row['adapter_grad_cosine']:.5f}",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
