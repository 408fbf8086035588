"""Run slots for local jobs: at most ``size`` jobs at once, shared by every process that names the
same directory.

A slot is an exclusive ``flock`` on ``<directory>/slot-<i>``. The launching process holds it while
its job runs; the kernel drops it when that process exits or is killed, so a stopped sweep never
leaks a slot. Several multiruns started at once (``python -m hero.dispatch sweep`` runs a study's
variants side by side on the local launcher) then share the machine's cores instead of each
keeping its own count, and a variant with an odd number of jobs leaves no core idle.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


class SlotPool:
    """``size`` slots in ``directory`` (when None, a private temporary one - slots of this process
    only - removed with the pool; a held slot outlives it, its flock on the unlinked file)."""

    def __init__(self, directory: str | os.PathLike | None, size: int) -> None:
        if int(size) < 1:
            raise ValueError(f"slots: size {size} must be at least 1")
        self.size = int(size)
        self._private = tempfile.TemporaryDirectory(prefix="hero-slots-") if directory is None else None
        self.directory = Path(self._private.name if self._private else directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def try_acquire(self) -> int | None:
        """The descriptor holding a free slot, or None when all ``size`` are taken."""
        for i in range(self.size):
            fd = os.open(self.directory / f"slot-{i}", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

    def acquire(self, while_waiting: Callable[[], None] = lambda: None, poll_s: float = 1.0) -> int:
        """Block until a slot is free; ``while_waiting`` runs between polls (e.g. to free finished jobs' slots)."""
        while (fd := self.try_acquire()) is None:
            while_waiting()
            time.sleep(poll_s)
        return fd

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the only descriptor of the open file drops its flock
