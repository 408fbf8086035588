"""The testbed cache: one built testbed per recipe hash, built once even under parallel jobs.

Location: ``<cache_root>/testbed/<recipe_hash>/`` where ``cache_root`` is the argument,
else ``$HERO_CACHE``, else ``~/.cache/hero`` (``hero.once.resolve_cache_root``). A build goes
to a temporary sibling directory and is renamed into place when complete, so a directory
with a ``manifest.json`` is always a finished build. An exclusive ``fcntl`` lock on
``<recipe_hash>.lock`` serialises builders: a second process asking for the same
testbed waits for the first and then reuses its result.

``hero.testbed.bed.ensure_testbed`` loads the build found or made here as a ``Testbed``;
this module knows directories only (so it never imports the bed back).

Force a rebuild with ``ensure_testbed(rebuild=True)``, ``python -m hero.testbed --rebuild``,
``HERO_TESTBED_REBUILD=1``, or by deleting the directory. The lock, the temporary directory and
the rebuild rule are ``hero.once.built_once``'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from hero.once import built_once, resolve_cache_root
from hero.testbed.recipe import RECIPE, Recipe, recipe_hash


def testbed_directory(cache_root: str | Path | None = None, recipe: Recipe = RECIPE, rebuild: bool = False) -> Path:
    """The directory of ``recipe``'s build, built (once, under a file lock) if it is not in the cache yet.

    With ``rebuild`` the testbed is built anew unless another process finished building
    it while this one waited for the lock (``hero.once.built_once``).
    """
    from hero.testbed.build import build

    key = recipe_hash(recipe)
    directory = resolve_cache_root(cache_root) / "testbed" / key
    rebuild = rebuild or os.environ.get("HERO_TESTBED_REBUILD", "") not in ("", "0")
    built_once(
        directory,
        "manifest.json",
        lambda tmp: build(recipe, tmp),
        key,
        "testbed",
        note="minutes on 2 CPU cores, once per recipe",
        rebuild=rebuild,
    )
    return directory
