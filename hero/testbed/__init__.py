"""The embedded testbed: a tiny pretrained Llama and a task suite on which routing variants differ.

Public API (see each module for the what and why):

* ``RECIPE`` / ``Recipe`` / ``recipe_hash``        every knob of a build, and its cache key (``recipe``)
* ``ensure_testbed(cache_root=None, recipe=RECIPE) -> Testbed``   build once, cached (``bed``, ``cache``)
* ``evaluate``, ``TASKS``, ``RETAIN_TASKS``, ``TASK_PRIMARY_METRIC``, ``CHANCE``, ``retain``   the tiny suite (``tasks``)
* ``TOKEN_TYPES``, ``token_type_batches``, ``token_type_losses``   per-token-type labels (``tokentypes``)

Text sources, licences and the task-file formats are documented in ``corpus`` and ``tasks``.
"""

from hero.once import resolve_cache_root
from hero.testbed.bed import Testbed, ensure_testbed
from hero.testbed.recipe import RECIPE, TINY_RECIPE, Recipe, recipe_hash
from hero.testbed.tasks import CHANCE, CHANCE_MARGIN, RETAIN_TASKS, TASK_PRIMARY_METRIC, TASKS, evaluate, retain
from hero.testbed.tokentypes import TOKEN_TYPES, token_type_batches, token_type_losses

__all__ = [
    "CHANCE",
    "CHANCE_MARGIN",
    "RECIPE",
    "RETAIN_TASKS",
    "TASKS",
    "TASK_PRIMARY_METRIC",
    "TINY_RECIPE",
    "TOKEN_TYPES",
    "Recipe",
    "Testbed",
    "ensure_testbed",
    "evaluate",
    "recipe_hash",
    "resolve_cache_root",
    "retain",
    "token_type_batches",
    "token_type_losses",
]
