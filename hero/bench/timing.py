"""Wall-clock helpers for the benchmarks: interleaved repeats, medians, peak memory.

Every comparison in ``hero.bench`` times the candidates *interleaved* (A, B, A, B, ...)
after warm-up, so slow drift of the machine (thermal state, other processes, page
cache) hits both sides alike; the reported figure is the median of the repeats.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

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


def interleaved(
    candidates: Mapping[str, Callable[[], object]],
    device: torch.device | str,
    repeats: int,
    warmup: int = 1,
    clock: str = "wall",
) -> dict[str, list[float]]:
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
            order = names[r % len(names) :] + names[: r % len(names)]
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
    return {
        "median_s": median,
        "min_s": ordered[0],
        "rel_iqr": iqr / median if median > 0 else 0.0,
        "repeats": len(ordered),
    }


@contextmanager
def peak_memory(device: torch.device | str) -> Iterator[dict]:
    """Peak memory reached inside the block, beyond what was allocated on entry.

    CUDA: the caching allocator's peak (``torch.cuda.max_memory_allocated``) minus the
    allocation on entry. CPU: the peak bytes of tensors created inside the block
    (``_LiveTensorBytes``; the process RSS would hide it behind the C allocator's cache).
    ``kind`` in the result says which one was measured.
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
    tracker = _LiveTensorBytes()
    with tracker:
        yield out
    out.update(kind="cpu_live_tensor_bytes", peak_bytes=tracker.peak, delta_bytes=tracker.peak)


class _LiveTensorBytes:
    """Peak bytes of tensors created by torch ops inside the block (CPU peak-memory estimate).

    A ``TorchDispatchMode`` sees every op's outputs; each new storage is counted once
    (views share it) until the tensor that brought it is garbage collected. Kernel-internal
    scratch buffers are invisible, and a storage that outlives its first tensor through a
    view is released early, so this is a close lower bound of the activation + new KV
    memory, independent of what the C allocator keeps cached.
    """

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tracker._record(out)
                return out

        self.mode = Mode()
        self.live = 0
        self.peak = 0
        self.storages: dict[int, int] = {}

    def _record(self, out) -> None:
        import weakref

        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            try:
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            if nbytes == 0 or key in self.storages:
                continue
            self.storages[key] = nbytes
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._free, key)

    def _free(self, key: int) -> None:
        nbytes = self.storages.pop(key, 0)
        self.live -= nbytes

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)
