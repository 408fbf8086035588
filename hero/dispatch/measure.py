"""What a few real training updates cost on this machine, to hold the planner's prediction against.

``measure(overrides, updates)`` composes ``train.py``'s config with the overrides, loads the run the way
``hero.pipeline`` does (``RunSpec.load``, ``method.prepare``, ``SFTDataset``), and runs ``updates`` real updates of
``hero.training.fit``: ``micro_batch_loss`` under the trainer's autocast, backward, grad-clip, AdamW step, on the
micro-batches of the run's own seeded sample order. It records, per update:

    time_s          process CPU time of the update (1 thread: a shared machine's waits left out), seconds
    positions       padded positions the decoder ran (micro_batch × longest item, summed over micro-batches)
    saved_bytes     bytes autograd kept for backward at the end of the micro-batch's forward (every saved tensor's
                    storage once; ``torch.autograd.graph.saved_tensors_hooks``), the largest micro-batch's

and, over the updates, ``rss_update_bytes``: the resident set's high-water mark (``VmHWM``, reset once the run is
loaded) minus the resident set then: what the updates added (trainable gradients and AdamW state, activations,
logits and their gradients, backward's working set). Run it with ``MALLOC_MMAP_THRESHOLD_=1048576`` so that glibc
hands every freed large tensor back (otherwise its heap keeps freed blocks and the high-water mark counts them).
``sgemm_gflops`` / ``bandwidth_gbs`` are the host's 1-thread SGEMM rate and copy bandwidth on the process clock
(``host_rates``), the CPU row the planner predicts with; ``sgemm_wall_gflops`` the bench's own wall-clock figure.

    MALLOC_MMAP_THRESHOLD_=1048576 python -m hero.dispatch.measure [--updates N] [overrides]   # JSON: compare()

Used by ``tests/test_planner_measured.py`` and the table in docs/planner.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from hero.dispatch.cost import compose_job


def _status_bytes(key: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (high-water mark since the last reset) of this process, bytes (Linux)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0: write 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def host_rates(n: int = 1024, repeats: int = 9) -> tuple[float, float]:
    """(float32 SGEMM FLOP/s, copy bandwidth bytes/s) of one thread of this machine, on the process clock.

    The SGEMM is ``hero.bench.train.sgemm_flops_per_s``'s 1024³ matmul, timed in CPU seconds (as the updates are)
    and taken at its best repeat, so that other processes sharing the cores slow neither figure; the bandwidth is a
    256 MiB float32 copy (bytes read + written), best repeat."""
    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    x = torch.randn(64 * 1024 * 1024)
    y = torch.empty_like(x)
    a @ b
    y.copy_(x)
    mm, cp = [], []
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        mm.append(time.process_time() - start)
        start = time.process_time()
        y.copy_(x)
        cp.append(time.process_time() - start)
    return 2 * n**3 / min(mm), 2 * x.numel() * 4 / min(cp)


def cuda_rates(n: int = 8192, repeats: int = 5) -> tuple[float, float]:
    """(bf16 GEMM FLOP/s, copy bandwidth bytes/s) of this GPU, best repeat, synchronised wall clock."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    x = torch.empty(256 * 1024 * 1024, device="cuda")
    y = torch.empty_like(x)
    mm, cp = [], []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        mm.append(time.perf_counter() - start)
        start = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        cp.append(time.perf_counter() - start)
    return 2 * n**3 / min(mm[1:]), 2 * x.numel() * 4 / min(cp[1:])


def measure(
    overrides: Sequence[str], updates: int = 3, warmup: int = 1, threads: int = 1, device_name: str = "cpu"
) -> dict:
    """Run ``warmup + updates`` real updates of the configured run; the figures of the module docstring.

    ``device_name="cuda"``: on the GPU, timed on the synchronised wall clock, memory from the caching allocator
    (``max_memory_allocated`` over the updates minus what was allocated before them, in ``rss_update_bytes``), rates
    from ``cuda_rates`` (bf16 GEMM, copy bandwidth)."""
    from hero.bench.train import sgemm_flops_per_s
    from hero.data import SFTDataset, load_conversations
    from hero.training import autocast_context, sample_order, seed_everything, set_threads
    from hero.update import micro_batch_loss

    torch.set_num_threads(threads)
    spec = compose_job(overrides)
    set_threads(spec.trainer)
    torch.set_num_threads(threads)
    cuda = device_name == "cuda"
    sgemm_wall = sgemm_flops_per_s() if not cuda else 0.0
    sgemm, bandwidth = cuda_rates() if cuda else host_rates()
    loaded = spec.load(device=device_name)
    seed_everything(spec.seed)
    tok = loaded.backbone.tokenizer
    prepared = spec.method.prepare(spec, loaded.backbone.model, tok, loaded.layers, loaded.bed)
    model, tcfg = prepared.model, spec.trainer
    dataset = SFTDataset(
        load_conversations(spec.data, loaded.bed), tok, spec.data.max_length, spec.data.assistant_only_loss
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    if tcfg.gradient_checkpointing:
        model.activation_checkpointing_enable()
    model.train()
    device = torch.device(device_name)
    total = warmup + updates
    order = sample_order(len(dataset), total, tcfg.global_batch, spec.seed)
    accum = tcfg.global_batch // tcfg.micro_batch
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    rows = []
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        rss_loaded = torch.cuda.memory_allocated()
    else:
        _reset_peak()
        rss_loaded = _status_bytes("VmRSS")

    def clock() -> float:
        if cuda:
            torch.cuda.synchronize()
            return time.perf_counter()
        return time.process_time()

    for u in range(total):
        saved_peak, positions, lengths, biggest, micro_batches = 0, 0, [], 0, []
        start = clock()
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
                {
                    "time_s": clock() - start,
                    "positions": positions,
                    "saved_bytes": saved_peak,
                    "micro_batches": micro_batches,
                    "largest_micro_batch": biggest,
                }
            )
    return {
        "overrides": list(overrides),
        "threads": threads,
        "sgemm_gflops": sgemm / 1e9,
        "sgemm_wall_gflops": sgemm_wall / 1e9,
        "bandwidth_gbs": bandwidth / 1e9,
        "updates": rows,
        "trainable_params": sum(p.numel() for p in params),
        "rss_update_bytes": (torch.cuda.max_memory_allocated() if cuda else _status_bytes("VmHWM")) - rss_loaded,
        "device": device_name,
    }


def compare(measured: dict, util: float) -> dict:
    """The planner's figures for the very micro-batches ``measured`` ran, beside what they measured.

    time: ``cost.update_seconds`` of Σ over micro-batches of ``cost.update_flops`` and ``cost.update_traffic`` (their
    own B × padded length) on this CPU (SGEMM rate at ``util``, copy bandwidth);
    activations: ``cost.activations`` of the largest micro-batch (saved tensors only: the LM head's figure is
    logits + their gradient, of which autograd keeps one fp32 copy); rss: the planner's per-GPU total
    (weights, trainable state, activations and LM head of the largest micro-batch) against the RSS rise."""
    from hero.dispatch import cost

    spec = cost.compose_job(measured["overrides"])
    config, _ = cost.backbone_config(spec)
    model, _, layers = cost.build_meta(spec, config)
    shape = cost.flops.Shape.from_config(config)
    router = cost.resolve_router(spec, shape, layers)
    per_block, _ = spec.method.compute_cost(spec.resolved, shape, len(layers))
    first, a, w = min(layers), cost.activation_width(spec), cost.weight_width(spec)
    ckpt = bool(spec.trainer.gradient_checkpointing)
    device = cost.cpu_device(measured["sgemm_gflops"], measured["bandwidth_gbs"])  # the measured rates, either way
    path, routable = shape.layers - first, len(layers)
    rows = []
    for u in measured["updates"]:
        fl = sum(
            cost.update_flops(shape, float(sum(per_block)), first, b * t, t, ckpt) for b, t, _ in u["micro_batches"]
        )
        traffic = sum(
            cost.update_traffic(cost.activations(shape, router, b * t, t, path, routable, a, False))
            for b, t, _ in u["micro_batches"]
        ) * (4 / 3 if ckpt else 1.0)
        b, t, saved = max(u["micro_batches"], key=lambda m: m[0] * m[1])
        acts = cost.activations(shape, router, b * t, t, shape.layers - first, len(layers), a, ckpt, w)
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
        dynamic = (
            3 * sum(p.numel() * p.element_size() for p in trainable)
            + acts["activations"]
            + acts["backward"]
            + acts["lm_head"]
        )
        rows.append(
            {
                "time_s": u["time_s"],
                "predicted_update_bytes": dynamic,
                "predicted_time_s": cost.update_seconds(fl, traffic, device, spec.trainer.precision, util),
                "flops": fl,
                "traffic_bytes": traffic,
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
        "sgemm_wall_gflops": measured["sgemm_wall_gflops"],
        "bandwidth_gbs": measured["bandwidth_gbs"],
        "util": util,
        "updates": rows,
        "median": med,
        "trainable_params": measured["trainable_params"],
        "predicted_trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "rss_update_bytes": measured["rss_update_bytes"],
        "predicted_update_bytes": max(r["predicted_update_bytes"] for r in rows),
        "predicted_total_bytes": max(r["predicted_total_bytes"] for r in rows),
    }


def main(argv: list[str]) -> int:
    """``[--updates N] [--out FILE] [--device cpu|cuda] overrides...``: the comparison as JSON, on stdout's last
    line or into FILE."""
    updates, out_path, device = 3, None, "cpu"
    while argv[:1] in (["--updates"], ["--out"], ["--device"]):
        if argv[0] == "--updates":
            updates = int(argv[1])
        elif argv[0] == "--device":
            device = argv[1]
        else:
            out_path = argv[1]
        argv = argv[2:]
    text = json.dumps(compare(measure(argv, updates=updates, device_name=device), util=cost_util()))
    if out_path:
        Path(out_path).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def cost_util() -> float:
    from hero.dispatch.cost import CPU_UTIL

    return CPU_UTIL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
