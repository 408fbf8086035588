"""The testbed cache: one built testbed per recipe hash, built once even under parallel jobs.

Location: ``<cache_root>/testbed/<recipe_hash>/`` where ``cache_root`` is the argument,
else ``$HERO_CACHE``, else ``~/.cache/hero``. A build goes to a temporary sibling
directory and is renamed into place when complete, so a directory with a
``manifest.json`` is always a finished build. An exclusive ``fcntl`` lock on
``<recipe_hash>.lock`` serialises builders: a second process asking for the same
testbed waits for the first and then reuses its result.

``hero.testbed.bed.ensure_testbed`` loads the build found or made here as a ``Testbed``;
this module knows directories only (so it never imports the bed back).

Force a rebuild with ``ensure_testbed(rebuild=True)``, ``python -m hero.testbed --rebuild``,
``HERO_TESTBED_REBUILD=1``, or by deleting the directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

from hero.testbed.recipe import RECIPE, Recipe, recipe_hash


def resolve_cache_root(root: str | Path | None = None) -> Path:
    """The cache root: ``root``, else ``$HERO_CACHE``, else ``~/.cache/hero``."""
    if root is not None:
        return Path(root).expanduser()
    return Path(os.environ.get("HERO_CACHE") or Path.home() / ".cache" / "hero").expanduser()


def testbed_directory(cache_root: str | Path | None = None, recipe: Recipe = RECIPE, rebuild: bool = False) -> Path:
    """The directory of ``recipe``'s build, built (once, under a file lock) if it is not in the cache yet.

    With ``rebuild`` the testbed is built anew unless another process finished building
    it while this one waited for the lock.
    """
    from hero.testbed.build import build

    key = recipe_hash(recipe)
    base = resolve_cache_root(cache_root) / "testbed"
    directory = base / key
    rebuild = rebuild or os.environ.get("HERO_TESTBED_REBUILD", "") not in ("", "0")
    if not rebuild and (directory / "manifest.json").exists():
        return directory
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f"{key}.lock", "w") as lock:
        asked = time.time()
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = directory / "manifest.json"
        if manifest.exists() and (not rebuild or manifest.stat().st_mtime >= asked):
            return directory
        tmp = base / f"{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        print(f"[testbed] building {key} into {directory} (minutes on 2 CPU cores, once per recipe)", flush=True)
        t0 = time.time()
        try:
            build(recipe, tmp)
            shutil.rmtree(directory, ignore_errors=True)
            tmp.rename(directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"[testbed] built {key} in {time.time() - t0:.0f}s", flush=True)
    return directory
