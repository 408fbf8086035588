"""Benchmark results as run records (``hero.records.RunRecord``, figures under ``bench``).

Two records per run, so the analysis can put dense and routed on one quality–latency plot:
``<out_dir>/dense/results.json`` (method ``dense``) and ``<out_dir>/hero/results.json``
(method ``hero``, variant ``forced_skip`` or ``trained``). ``bench`` holds numbers only,
keyed ``bench.<figure>.<shape>`` (shape ``b1_s512`` for prefill, ``b1_p128`` for decode):

    prefill_tokens_per_s, decode_ms_per_token (ms per decode step: one new token for
    each sequence of the batch), decode_tokens_per_s, peak_memory_mb (both records),
    and in the hero record also measured_speedup, ideal_speedup (the lower of the FLOP
    and bytes-moved ideals), measured_over_ideal, flop_ideal_speedup,
    bytes_ideal_speedup (prefill_* and decode_*) and realized_ffn_skip.

``bench_meta`` says how it was measured (device, dtype, threads, repeats, memory kind).
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from hero.records import RunRecord
from hero.results import RESULTS_FILENAME, config_hash, write_atomic


def _figures(results: dict, name: str) -> dict:
    out: dict = {"prefill_tokens_per_s": {}, "decode_ms_per_token": {}, "decode_tokens_per_s": {}, "peak_memory_mb": {}}
    for key, r in results["prefill"].items():
        out["prefill_tokens_per_s"][key] = r[name]["tokens_per_s"]
        out["peak_memory_mb"][f"prefill_{key}"] = r[name]["peak_memory"].get("delta_bytes", 0) / 2**20
    for key, r in results["decode"].items():
        out["decode_ms_per_token"][key] = r[name]["ms_per_token"]
        out["decode_tokens_per_s"][key] = r[name]["tokens_per_s"]
        out["peak_memory_mb"][f"decode_{key}"] = r[name]["peak_memory"].get("delta_bytes", 0) / 2**20
    if name == "routed":
        for phase in ("prefill", "decode"):
            for figure in (
                "measured_speedup",
                "ideal_speedup",
                "measured_over_ideal",
                "flop_ideal_speedup",
                "bytes_ideal_speedup",
            ):
                out[f"{phase}_{figure}"] = {key: r[figure] for key, r in results[phase].items()}
            out[f"{phase}_realized_ffn_skip"] = {key: r["realized"]["ffn_skip"] for key, r in results[phase].items()}
            out[f"{phase}_realized_param_skip"] = {
                key: r["realized"]["param_rate"] for key, r in results[phase].items()
            }
    return out


def write_records(
    cfg, bench, results: dict, device: torch.device, dtype: torch.dtype, wall_time_s: float
) -> list[Path]:
    out_dir = Path(cfg.out_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    threads = torch.get_num_threads()
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({threads} threads)"
    meta = {
        "device": str(device),
        "device_name": device_name,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": threads,
        "compile": bool(cfg.compile),
        "prefill_repeats": cfg.prefill.repeats,
        "decode_repeats": cfg.decode.repeats,
        "decode_prompt": cfg.decode.prompt,
        "decode_steps": cfg.decode.steps,
        "memory_kind": next(
            (
                r["dense"]["peak_memory"].get("kind")
                for r in [*results["prefill"].values(), *results["decode"].values()]
            ),
            None,
        ),
        "skipped_shapes": results.get("skipped_shapes", []),
        "timing": "median of interleaved repeats",
        "clock": cfg.clock,
    }
    # Realized routing of all measured tokens (prefill and decode pooled, weighted by tokens).
    tokens = sum(r["realized"]["tokens"] for phase in ("prefill", "decode") for r in results[phase].values())
    param_rate = sum(
        r["realized"]["param_rate"] * r["realized"]["tokens"]
        for phase in ("prefill", "decode")
        for r in results[phase].values()
    ) / max(1, tokens)
    per_layer: dict[str, float] = {}
    for phase in ("prefill", "decode"):
        for r in results[phase].values():
            for layer, rate in r["realized"]["per_layer_ffn_rate"].items():
                per_layer[layer] = per_layer.get(layer, 0.0) + rate * r["realized"]["tokens"] / max(1, tokens)
    checkpoint = cfg.router.checkpoint
    router_options = bench.routed.hero_config.to_dict()
    paths = []
    for name, method in (("dense", "dense"), ("routed", "hero")):
        variant = "dense" if method == "dense" else ("trained" if checkpoint else "forced_skip")
        config = dict(resolved, method=method)
        record = RunRecord(
            status="completed",
            method=method,
            variant=variant,
            backbone=str(cfg.model.name),
            seed=int(cfg.seed),
            alpha=0.0,
            layer_set=cfg.layers if isinstance(cfg.layers, str) else "explicit",
            routable_layers=bench.layers if method == "hero" else [],
            router=router_options if method == "hero" else None,
            memory_dim=router_options["memory_dim"] if method == "hero" else None,
            skip=(
                {
                    "param_rate": param_rate,
                    "tokens": tokens,
                    "per_layer_ffn_rate": per_layer,
                    "target_ffn_skip": None if checkpoint else float(cfg.router.ffn_skip),
                }
                if method == "hero"
                else {"param_rate": 0.0}
            ),
            eval={},
            eval_meta={"suite": "none"},
            rho={},
            bench=_figures(results, name),
            bench_meta=meta,
            device=device_name,
            config=config,
            config_hash=config_hash(config),
            wall_time_s=wall_time_s,
        )
        paths.append(record.write(out_dir / method / RESULTS_FILENAME))
    paths.append(write_atomic(out_dir / "bench.json", {"config": resolved, "meta": meta, "results": results}))
    return paths
