"""What a few real training updates cost on this machine, to hold the planner's prediction against.

``measure(overrides, updates)`` composes ``train.py``'s config with the overrides, loads the run the way
``hero.pipeline`` does (``RunSpec.load``, ``method.prepare``, ``SFTDataset``), and runs ``updates`` real updates of
``hero.training.fit``: ``micro_batch_loss`` under the trainer's autocast, backward, grad-clip, AdamW step, on the
micro-batches of the run's own seeded sample order. It records, per update:

    time_s          process CPU time of the update (1 thread: a shared machine's waits left out), seconds
    positions       padded positions the decoder ran (micro_batch × longest item, summed over micro-batches)
    saved_bytes     bytes autograd kept for backward at the end of the micro-batch's forward (every saved tensor's
                    storage once; ``torch.autograd.graph.saved_tensors_hooks``), the largest micro-batch's

and, for the whole process, ``rss_peak_bytes``: the resident set's high-water mark (``ru_maxrss``) after the
updates minus the one measured before the backbone was loaded, i.e. every byte the run added (weights,
trainable state, activations, logits, allocator slack, data). ``sgemm_gflops`` is the host's 1-thread float32
SGEMM rate measured in the same process (``hero.bench.train.sgemm_flops_per_s``), the peak the planner's CPU
row divides by. Used by ``tests/test_planner_measured.py`` and the table in docs/planner.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Sequence

import torch

from hero.dispatch.cost import compose_job


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _status_bytes(key: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (high-water mark since the last reset) of this process, bytes (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0: write 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def sgemm_cpu_flops_per_s(n: int = 1024, repeats: int = 7) -> float:
    """``hero.bench.train.sgemm_flops_per_s`` on the process clock: the same 1024³ float32 matmul, timed in CPU
    seconds as the updates are, so that other processes on a shared machine slow neither figure."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        times.append(time.process_time() - start)
    return 2 * n**3 / sorted(times)[len(times) // 2]


def measure(overrides: Sequence[str], updates: int = 3, warmup: int = 1, threads: int = 1) -> dict:
    """Run ``warmup + updates`` real updates of the configured run on CPU; the figures of the module docstring."""
    from hero.bench.train import sgemm_flops_per_s
    from hero.data import SFTDataset, load_conversations
    from hero.training import autocast_context, sample_order, seed_everything, set_threads
    from hero.update import micro_batch_loss

    torch.set_num_threads(threads)
    spec = compose_job(overrides)
    set_threads(spec.trainer)
    torch.set_num_threads(threads)
    sgemm_wall = sgemm_flops_per_s()
    sgemm = sgemm_cpu_flops_per_s()
    rss_before = _rss_bytes()
    loaded = spec.load(device="cpu")
    seed_everything(spec.seed)
    tok = loaded.backbone.tokenizer
    prepared = spec.method.prepare(spec, loaded.backbone.model, tok, loaded.layers, loaded.bed)
    model, tcfg = prepared.model, spec.trainer
    dataset = SFTDataset(load_conversations(spec.data, loaded.bed), tok, spec.data.max_length, spec.data.assistant_only_loss)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    if tcfg.gradient_checkpointing:
        model.activation_checkpointing_enable()
    model.train()
    device = torch.device("cpu")
    total = warmup + updates
    order = sample_order(len(dataset), total, tcfg.global_batch, spec.seed)
    accum = tcfg.global_batch // tcfg.micro_batch
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    rows = []
    gc.collect()
    _reset_peak()
    rss_loaded = _status_bytes("VmRSS")
    for u in range(total):
        saved_peak, positions, lengths, biggest, micro_batches = 0, 0, [], 0, []
        start = time.process_time()
        for micro in range(accum):
            lo = u * tcfg.global_batch + micro * tcfg.micro_batch
            items = [dataset[i] for i in order[lo : lo + tcfg.micro_batch]]
            lengths.append([len(item["input_ids"]) for item in items])
            biggest = max(biggest, len(items) * max(lengths[-1]))
            positions += len(items) * max(lengths[-1])
            storages: dict[int, int] = {}

            def pack(t: torch.Tensor, storages=storages) -> torch.Tensor:
                s = t.untyped_storage()
                if s.data_ptr() in param_storages:  # the weights themselves: counted as weights, not activations
                    return t
                storages[s.data_ptr()] = max(storages.get(s.data_ptr(), 0), s.nbytes())
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with autocast_context(tcfg.precision, device):
                    loss, *_ = micro_batch_loss(
                        model,
                        items,
                        tok.pad_token_id,
                        device,
                        spec.alpha,
                        spec.method.routes,
                        prepared.regularizer,
                        bool(tcfg.get("labelled_logits", False)),
                        float(tcfg.get("pad_waste", 1.0)),
                    )
            saved_peak = max(saved_peak, sum(storages.values()))
            micro_batches.append((len(items), max(lengths[-1]), sum(storages.values())))
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if u >= warmup:
            rows.append(
                {"time_s": time.process_time() - start, "positions": positions, "saved_bytes": saved_peak,
                 "micro_batches": micro_batches, "largest_micro_batch": biggest}
            )
    return {
        "overrides": list(overrides),
        "threads": threads,
        "sgemm_gflops": sgemm / 1e9,
        "sgemm_wall_gflops": sgemm_wall / 1e9,
        "updates": rows,
        "rss_peak_bytes": _rss_bytes() - rss_before,
        "rss_update_bytes": _status_bytes("VmHWM") - rss_loaded,
    }


def compare(measured: dict, util: float) -> dict:
    """The planner's figures for the very micro-batches ``measured`` ran, beside what they measured.

    time: Σ over micro-batches of ``cost.update_flops`` (their own B × padded length) / (SGEMM rate × ``util``);
    activations: ``cost.activations`` of the largest micro-batch (saved tensors only: the LM head's figure is
    logits + their gradient, of which autograd keeps one fp32 copy); rss: the planner's per-GPU total
    (weights, trainable state, activations and LM head of the largest micro-batch) against the RSS rise."""
    from hero.dispatch import cost

    spec = cost.compose_job(measured["overrides"])
    config, _ = cost.backbone_config(spec)
    model, _, layers = cost.build_meta(spec, config)
    shape = cost.flops.Shape.from_config(config)
    router = cost.resolve_router(spec, shape, layers)
    per_block, adapter_dim = spec.method.compute_cost(spec.resolved, shape, len(layers))
    first, a = min(layers), cost.activation_width(spec)
    ckpt = bool(spec.trainer.gradient_checkpointing)
    rows = []
    for u in measured["updates"]:
        fl = sum(
            cost.update_flops(shape, float(sum(per_block)), adapter_dim, first, b * t, t, ckpt)
            for b, t, _ in u["micro_batches"]
        )
        b, t, saved = max(u["micro_batches"], key=lambda m: m[0] * m[1])
        acts = cost.activations(shape, router, b * t, t, shape.layers - first, len(layers), a, ckpt)
        saved_pred = acts["activations"] + b * t * shape.vocab * 4  # + the one fp32 logits copy autograd keeps
        trainable = [p for p in model.parameters() if p.requires_grad]
        frozen = [p for p in model.parameters() if not p.requires_grad]
        total = (
            sum(p.numel() * p.element_size() for p in frozen)
            + 4 * sum(p.numel() * p.element_size() for p in trainable)
            + acts["activations"]
            + acts["backward"]
            + acts["lm_head"]
        )
        dynamic = 3 * sum(p.numel() * p.element_size() for p in trainable) + acts["activations"] + acts["backward"] + acts["lm_head"]
        rows.append(
            {
                "time_s": u["time_s"],
                "predicted_update_bytes": dynamic,
                "predicted_time_s": fl / (measured["sgemm_gflops"] * 1e9 * util),
                "flops": fl,
                "achieved_util": fl / (u["time_s"] * measured["sgemm_gflops"] * 1e9),
                "saved_bytes": saved,
                "predicted_saved_bytes": saved_pred,
                "predicted_total_bytes": total,
            }
        )
    med = sorted(rows, key=lambda r: r["time_s"])[len(rows) // 2]
    return {
        "overrides": measured["overrides"],
        "sgemm_gflops": measured["sgemm_gflops"],
        "util": util,
        "updates": rows,
        "median": med,
        "rss_peak_bytes": measured["rss_peak_bytes"],
        "rss_update_bytes": measured["rss_update_bytes"],
        "predicted_update_bytes": max(r["predicted_update_bytes"] for r in rows),
        "predicted_total_bytes": max(r["predicted_total_bytes"] for r in rows),
    }
