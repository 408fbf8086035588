"""The bed interface: a backbone built together with its own training data, task suite and token classes.

A bed is what makes a backbone a complete experiment offline: the embedded testbed
(``hero.testbed.Testbed``) and SmolLM2-135M-Instruct (``hero.smollm2.SmolLM2Bed``) are the two
today. ``model.source`` names the bed (``hero.backbones.BEDS``); a hub backbone
(``source: hf``) has none. Callers ask the bed and never check which bed it is:

    data.source == bed.data_source   →  bed.conversations(data_cfg, split)      (hero.data)
    eval.suite == bed.suite          →  bed.task_manager(tokenizer, tasks, dir)  (hero.evaluation)
    routing statistics               →  bed.token_class_batches(...), bed.token_classes
    the run record                   →  bed.provenance()

Adding a bed is one module with a class that satisfies ``Bed`` (registered in
``hero.backbones.BEDS``) and its config files (``conf/model``, ``conf/data``, ``conf/eval``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch


class Bed(Protocol):
    name: ClassVar[str]  # the model.source that selects this bed
    data_source: ClassVar[str]  # the data.source of the conversations it generates
    suite: ClassVar[str]  # the eval.suite of its tasks
    scored_on: ClassVar[tuple[str, ...]]  # the eval.suite values its backbone can be scored on (its own among them)
    tasks: ClassVar[tuple[str, ...]]  # the task names its suite may list
    token_classes: ClassVar[tuple[str, ...]]  # the classes token_class_batches labels tokens with
    backbone_dir: Path  # a Hugging Face model directory (weights, config, tokenizer)

    @classmethod
    def check(cls, model_cfg) -> None:
        """Every model option of this bed (e.g. ``model.recipe``), before any compute; raises ConfigError."""

    @classmethod
    def check_data(cls, data_cfg) -> None:
        """Every option of a ``data.source == data_source`` config, before any compute; raises ConfigError."""

    @classmethod
    def ensure(cls, model_cfg, cache_root: str | Path | None) -> Bed:
        """The bed the model config names, built once per recipe under a lock and cached."""

    def provenance(self) -> dict:
        """What a run record names as the bed it ran on (hashes of the backbone, data and tasks)."""

    def conversations(self, data_cfg, split: str) -> list[list[dict[str, Any]]]:
        """The chat conversations of ``split`` ("train" or "validation") for a data config of this bed."""

    def task_manager(self, tokenizer, tasks: list[str], workdir: Path):
        """An lm-eval TaskManager that knows this bed's local tasks (data written to ``workdir`` if needed)."""

    def token_class_batches(
        self, tokenizer, batch_size: int
    ) -> Iterable[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(input_ids, attention_mask, class index) batches of held-out sequences; class −1 on padding."""
