"""Cache directories built once: a build goes to a temporary sibling and is renamed into place.

Every cache lives under one root, ``resolve_cache_root``: the ``cache_root`` a caller passes (the
config's ``paths.cache``), else ``$HERO_CACHE``, else ``~/.cache/hero``.

Parallel jobs asking for the same directory serialise on an exclusive ``fcntl`` lock on
``<directory>.lock``; the first builds it, the others wait and reuse it. A directory that
holds its marker file is always complete, so an interrupted build leaves nothing behind
that a later run would mistake for a result.

``rebuild=True`` builds anew even when the marker exists, unless another process finished a
build (the marker's mtime) while this one waited for the lock: that build is as new as asked for.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path


def resolve_cache_root(root: str | Path | None = None) -> Path:
    """The cache root: ``root``, else ``$HERO_CACHE``, else ``~/.cache/hero`` (an empty value counts as unset)."""
    return Path(root or os.environ.get("HERO_CACHE") or Path.home() / ".cache" / "hero").expanduser()


def built_once(
    directory: Path,
    marker: str,
    build: Callable[[Path], object],
    label: str,
    tag: str,
    note: str = "once",
    rebuild: bool = False,
) -> None:
    """Run ``build(tmp)`` and rename ``tmp`` to ``directory`` unless ``directory/marker`` exists (under a lock).

    ``label``, ``tag`` and ``note`` make the two lines printed around a build:
    ``[tag] building label into directory (note)`` and ``[tag] built label in Ns``.
    """
    if not rebuild and (directory / marker).exists():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:
        asked = time.time()
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = directory / marker
        if done.exists() and (not rebuild or done.stat().st_mtime >= asked):
            return
        tmp = directory.parent / f"{directory.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        print(f"[{tag}] building {label} into {directory} ({note})", flush=True)
        t0 = time.time()
        try:
            build(tmp)
            shutil.rmtree(directory, ignore_errors=True)
            tmp.rename(directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"[{tag}] built {label} in {time.time() - t0:.0f}s", flush=True)
