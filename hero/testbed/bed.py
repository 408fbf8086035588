"""The embedded testbed as a bed (``hero.bed.Bed``): its backbone, SFT data, ``tiny`` suite and token types.

``model=tiny`` (``source: testbed``) selects it; ``model.recipe`` (``full`` or ``micro``) and
``model.recipe_seed`` choose the build, which ``hero.testbed.cache`` makes once per recipe hash
and ``ensure_testbed`` loads.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from hero.data.sft import DataError, read_conversations
from hero.errors import ConfigError
from hero.testbed.cache import testbed_directory
from hero.testbed.recipe import RECIPE, TINY_RECIPE, Recipe
from hero.testbed.sft import ensure_sampled
from hero.testbed.suite import task_manager, write_task_data
from hero.testbed.tasks import TASKS
from hero.testbed.tokentypes import TOKEN_TYPES, token_type_batches

RECIPES = {"full": RECIPE, "micro": TINY_RECIPE}
RESPONSES = ("sampled", "written")


@dataclass
class Testbed:
    """Paths of one built testbed and its manifest."""

    name = "testbed"
    data_source = "testbed"
    suite = "tiny"
    # a 256-token context and a vocabulary of its own small corpus: the paper's suites are out of its reach
    scored_on = ("tiny", "none")
    tasks = TASKS
    token_classes = TOKEN_TYPES

    root: Path
    backbone_dir: Path
    data_dir: Path
    recipe_hash: str
    manifest: dict

    @staticmethod
    def recipe_of(model_cfg) -> Recipe:
        """The recipe of ``model.recipe`` (``full`` or ``micro``), reseeded by ``model.recipe_seed`` when set.

        Another recipe seed builds another backbone from the same recipe, differing only in
        noise (text sampling, initial weights, data order): the builds on which the testbed's
        claims are checked (``python -m hero.audit``).
        """
        if model_cfg.recipe not in RECIPES:
            raise ConfigError(f"model.recipe={model_cfg.recipe!r}: allowed testbed recipes are {', '.join(RECIPES)}")
        seed = model_cfg.get("recipe_seed")
        if seed is None:
            return RECIPES[model_cfg.recipe]
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(
                f"model.recipe_seed={seed!r}: must be a non-negative integer or null (the recipe's own seed)"
            )
        return dataclasses.replace(RECIPES[model_cfg.recipe], seed=seed)

    @classmethod
    def check(cls, model_cfg) -> None:
        cls.recipe_of(model_cfg)

    @classmethod
    def check_data(cls, data_cfg) -> None:
        if data_cfg.get("responses") not in RESPONSES:
            raise DataError(f"data.responses={data_cfg.get('responses')!r}: allowed values are {', '.join(RESPONSES)}")

    @classmethod
    def load(cls, directory: Path) -> Testbed:
        """The finished build in ``directory`` (``<cache_root>/testbed/<recipe_hash>/``)."""
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        return cls(
            root=directory,
            backbone_dir=directory / "backbone",
            data_dir=directory / "data",
            recipe_hash=directory.name,
            manifest=manifest,
        )

    @classmethod
    def ensure(cls, model_cfg, cache_root: str | Path | None = None) -> Testbed:
        return ensure_testbed(cache_root, recipe=cls.recipe_of(model_cfg))

    def provenance(self) -> dict:
        """What a run record names as the bed it ran on: the recipe hash (backbone, data and tasks)."""
        return {"name": self.name, "recipe_hash": self.recipe_hash}

    def conversations(self, data_cfg, split: str) -> list[list[dict]]:
        """The written responses, or (``data.responses: sampled``) the dense backbone's own samples."""
        source = self.data_dir if data_cfg.responses == "written" else ensure_sampled(self)
        return read_conversations(source / ("sft_train.jsonl" if split == "train" else "sft_val.jsonl"))

    def task_manager(self, tokenizer, tasks: list[str], workdir: Path):
        """The ``tiny`` tasks, their rows converted for lm-eval into ``workdir`` (``hero.testbed.suite``)."""
        write_task_data(self, tokenizer, workdir, tasks)
        return task_manager(workdir)

    def token_class_batches(self, tokenizer, batch_size: int):
        return token_type_batches(self, tokenizer, batch_size=batch_size)

    def load_backbone(self, dtype: torch.dtype = torch.float32):
        """The pretrained backbone (``LlamaForCausalLM``) in eval mode."""
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.backbone_dir, dtype=dtype).eval()

    def load_tokenizer(self):
        """The testbed tokenizer (with its chat template)."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.backbone_dir)


def ensure_testbed(cache_root: str | Path | None = None, recipe: Recipe = RECIPE, rebuild: bool = False) -> Testbed:
    """The testbed of ``recipe``, built (once, under a file lock) if it is not in the cache yet.

    With ``rebuild`` the testbed is built anew unless another process finished building
    it while this one waited for the lock (``hero.testbed.cache``).
    """
    return Testbed.load(testbed_directory(cache_root, recipe, rebuild))
