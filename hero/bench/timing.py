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


CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def time_once(fn: Callable[[], object], device: torch.device | str, clock: str = "wall") -> float:
    """Seconds for one call of ``fn``, synchronised on accelerators.

    ``clock="wall"``: wall-clock time (the figure the benchmark reports by default).
    ``clock="process"``: CPU time of this process — on a CPU machine shared with other
    jobs, with ``torch.set_num_threads(1)``, it leaves out the time the process waited
    for a core; with several threads it adds up their CPU time (spin-waits included).
    """
    now = CLOCKS[clock]
    synchronize(device)
    start = now()
    fn()
    synchronize(device)
    return now() - start


def interleaved(candidates: Mapping[str, Callable[[], object]], device: torch.device | str, repeats: int,
                warmup: int = 1, clock: str = "wall") -> dict[str, list[float]]:
    """Time every candidate ``repeats`` times in round-robin order after ``warmup`` rounds.

    Returns name → list of seconds (warm-up excluded). The round-robin order rotates
    each round so that no candidate always runs right after the same other one.
    """
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            time_once(candidates[name], device, clock)
    times: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeats):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                times[name].append(time_once(candidates[name], device, clock))
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
def peak_memory(device: torch.device | str, interval_s: float = 0.0005) -> Iterator[dict]:
    """Peak memory reached inside the block, beyond what was allocated on entry.

    CUDA: the caching allocator's peak (``torch.cuda.max_memory_allocated``) minus the
    allocation on entry. CPU: the process resident set size, sampled from
    /proc/self/statm by a background thread every ``interval_s`` (torch kernels release
    the GIL), minus the RSS on entry — an approximation (short peaks between samples
    are missed; memory the C allocator keeps after a free counts as used). ``kind``
    in the result says which one was measured; ``peak_bytes`` is the absolute peak.
    """
    device = torch.device(device)
    out: dict = {}
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        yield out
        synchronize(device)
        peak = int(torch.cuda.max_memory_allocated(device))
        out.update(kind="cuda_max_allocated", peak_bytes=peak, delta_bytes=peak - base)
        return
    import threading

    base = _rss_bytes()
    state = {"peak": base, "stop": False}

    def sample() -> None:
        while not state["stop"]:
            state["peak"] = max(state["peak"], _rss_bytes())
            time.sleep(interval_s)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        state["stop"] = True
        thread.join()
        peak = max(state["peak"], _rss_bytes())
        out.update(kind="cpu_rss_sampled", peak_bytes=peak, delta_bytes=peak - base)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return -1


try:
    import os as _os

    _PAGE = _os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    _PAGE = 4096
