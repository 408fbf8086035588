"""Wall-clock helpers for the benchmarks: interleaved repeats, medians, peak memory.

Every comparison in ``hero.bench`` times the candidates *interleaved* (A, B, A, B, ...)
after warm-up, so slow drift of the machine (thermal state, other processes, page
cache) hits both sides alike; the reported figure is the median of the repeats.
"""
from __future__ import annotations

import gc
import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

import torch


def synchronize(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device: torch.device | str) -> float:
    """Seconds for one call of ``fn``, synchronised on accelerators."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def interleaved(candidates: Mapping[str, Callable[[], object]], device: torch.device | str, repeats: int,
                warmup: int = 1) -> dict[str, list[float]]:
    """Time every candidate ``repeats`` times in round-robin order after ``warmup`` rounds.

    Returns name → list of seconds (warm-up excluded). The round-robin order rotates
    each round so that no candidate always runs right after the same other one.
    """
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            time_once(candidates[name], device)
    times: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                times[name].append(time_once(candidates[name], device))
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def summary(seconds: list[float]) -> dict[str, float]:
    """Median, min and spread (interquartile range / median) of a list of timings."""
    ordered = sorted(seconds)
    median = statistics.median(ordered)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return {"median_s": median, "min_s": ordered[0], "rel_iqr": iqr / median if median > 0 else 0.0,
            "repeats": len(ordered)}


@contextmanager
def peak_memory(device: torch.device | str) -> Iterator[dict]:
    """Peak memory of the block: CUDA allocator peak on GPUs, process max RSS on CPU.

    On CPU the max RSS is monotone over the process lifetime, so the figure is the
    high-water mark reached so far (``kind`` says which one was measured).
    """
    device = torch.device(device)
    out: dict = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        yield out
        synchronize(device)
        out.update(kind="cuda_max_allocated", peak_bytes=int(torch.cuda.max_memory_allocated(device)),
                   activation_bytes=int(torch.cuda.max_memory_allocated(device) - base))
    else:
        yield out
        out.update(kind="process_max_rss", peak_bytes=_max_rss_bytes())


def _max_rss_bytes() -> int:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except Exception:  # noqa: BLE001 - platforms without resource
        return -1
