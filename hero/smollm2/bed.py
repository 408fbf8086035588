"""The SmolLM2 bed: backbone, training data and evaluation tasks, built once and cached.

Location: ``<cache_root>/smollm2/<gguf sha256[:12]>/``: ``backbone/`` (the de-quantised
HF model and tokenizer, ``hero.smollm2.convert``) and ``data/<data hash>/`` (SFT data,
task files, ``manifest.json``), where the data hash covers ``DataRecipe`` and the
sources of the prompts and questions. Each part is built in a temporary sibling and
renamed into place under an exclusive ``fcntl`` lock, so parallel jobs build it once and a
directory with its marker file (``gguf.json``, ``manifest.json``) is always complete.

Building the data needs the dense model: it samples the training responses, answers the
evaluation prompts, and gives the next-token distributions the agreement tasks compare
against (``hero.smollm2.data``, ``hero.smollm2.tasks``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hero.data import sampled
from hero.data.sft import read_conversations
from hero.errors import ConfigError
from hero.once import built_once, resolve_cache_root
from hero.smollm2 import data as sft
from hero.smollm2 import knowledge, more_prompts, prompts, tasks
from hero.smollm2.convert import convert, file_sha256, gguf_path
from hero.smollm2.suite import task_manager
from hero.smollm2.tokentypes import TOKEN_CLASSES, token_class_batches

TASKS = ("knowledge", "answer", "heldout_ppl", "agree_text", "agree_chat")


@dataclass(frozen=True)
class DataRecipe:
    prompt_plays: tuple[str, ...] = ("hamlet", "lear", "othello", "romeo_and_juliet", "tempest", "julius_caesar")
    heldout_plays: tuple[str, ...] = ("macbeth", "twelfth_night")
    n_prompts: int | None = None
    n_eval_prompts: int | None = None
    n_passages: int = 60
    samples_per_prompt: int = 2
    max_new_tokens: int = 64
    val_fraction: float = 0.05
    n_ppl_chunks: int = 48
    n_agree_chunks: int = 48
    chunk_tokens: int = 128
    agree_per_text: int = 4
    top_k: int = 16
    seed: int = 0
    # Fields added after the first beds; a recipe hashes them only when they differ from these defaults, so the
    # beds built before them keep their data hash (``data_hash``).
    more_prompts: bool = False  # add hero.smollm2.more_prompts (templates, topics, continuation requests)
    n_continuations: int = 0
    sample_batch_size: int = 32
    sample_by_length: bool = False  # sample the prompts in order of length (less padding), answers kept in order


RECIPE = DataRecipe()
LATER_FIELDS = {
    k: getattr(RECIPE, k) for k in ("more_prompts", "n_continuations", "sample_batch_size", "sample_by_length")
}
# A seconds-to-build miniature (16 prompts, 8 evaluation chats, short answers) for the pipeline tests only.
MICRO_RECIPE = DataRecipe(
    n_prompts=16,
    n_eval_prompts=8,
    n_passages=4,
    samples_per_prompt=1,
    max_new_tokens=16,
    val_fraction=0.25,
    n_ppl_chunks=4,
    n_agree_chunks=4,
    chunk_tokens=48,
    agree_per_text=2,
)
# Ten times the training conversations (>= 7,000): more templates, topics and training-side plays, continuation
# requests; the same evaluation tasks as ``full``. Sampled in batches of 128 prompts of similar length (on a
# 128-prompt probe, 2 cores: 15,300 conversations an hour against 11,200 in batches of 32; docs/smollm2).
X10_RECIPE = DataRecipe(
    prompt_plays=RECIPE.prompt_plays
    + (
        "antony_and_cleopatra",
        "as_you_like_it",
        "coriolanus",
        "henry_v",
        "merchant_of_venice",
        "midsummer_nights_dream",
        "much_ado_about_nothing",
        "richard_iii",
        "taming_of_the_shrew",
        "winters_tale",
    ),
    n_passages=400,
    more_prompts=True,
    n_continuations=400,
    sample_batch_size=128,
    sample_by_length=True,
)
RECIPES = {"full": RECIPE, "x10": X10_RECIPE, "micro": MICRO_RECIPE}


@dataclass
class SmolLM2Bed:
    """Paths of the built bed and its data manifest; the ``hero.bed.Bed`` of ``model=smollm2_135m``."""

    name = "smollm2"
    data_source = "smollm2"
    suite = "smollm2"
    scored_on = ("smollm2", "paper7", "paper7_cpu", "extended9", "public", "none")
    tasks = TASKS
    token_classes = TOKEN_CLASSES

    root: Path
    backbone_dir: Path
    data_dir: Path
    gguf_sha256: str
    manifest: dict

    def provenance(self) -> dict:
        """What a run record names as the bed it ran on: the GGUF file's sha256, the data hash, and the training file's.

        The data hash names the recipe and the code that built it; the responses are sampled at temperature 1, so
        another CPU's float order can sample other text under the same data hash. ``train_sha256`` (of
        ``sft_train.jsonl``, 12 hex digits) tells whether two runs trained on the same conversations.
        """
        return {
            "name": self.name,
            "gguf_sha256": self.gguf_sha256,
            "data_hash": self.manifest["data_hash"],
            "train_sha256": file_sha256(self.data_dir / "sft_train.jsonl")[:12],
        }

    @classmethod
    def check(cls, model_cfg) -> None:
        if model_cfg.get("recipe") not in RECIPES:
            raise ConfigError(
                f"model.recipe={model_cfg.get('recipe')!r}: allowed smollm2 recipes are {', '.join(RECIPES)}"
            )

    @classmethod
    def check_data(cls, data_cfg) -> None:
        """The bed's data has no options beyond the common ones (``max_samples``, ``max_length``)."""

    @classmethod
    def ensure(cls, model_cfg, cache_root: str | Path | None = None) -> SmolLM2Bed:
        return ensure_smollm2(cache_root, recipe=RECIPES[model_cfg.recipe])

    def conversations(self, data_cfg, split: str) -> list[list[dict]]:
        """The responses SmolLM2 sampled for the recipe's prompts (``build_data``)."""
        return read_conversations(self.data_dir / ("sft_train.jsonl" if split == "train" else "sft_val.jsonl"))

    def task_manager(self, tokenizer, tasks: list[str], workdir: Path):
        """The ``smollm2`` tasks, reading the task files the bed wrote once (``workdir`` is not needed)."""
        return task_manager(self.data_dir / "tasks")

    def token_class_batches(self, tokenizer, batch_size: int):
        return token_class_batches(self, tokenizer, batch_size=batch_size)


def data_hash(recipe: DataRecipe) -> str:
    """The recipe (fields of ``LATER_FIELDS`` only when set) and the sources of the modules that build its data."""
    fields = {k: v for k, v in asdict(recipe).items() if k not in LATER_FIELDS or v != LATER_FIELDS[k]}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode())
    for module in (prompts, knowledge, sft, sampled, tasks) + ((more_prompts,) if recipe.more_prompts else ()):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:12]


def ensure_smollm2(cache_root: str | Path | None = None, recipe: DataRecipe = RECIPE) -> SmolLM2Bed:
    """The bed (backbone converted from the wheel's GGUF file, data and tasks), built once per GGUF hash × recipe."""
    source = gguf_path()
    sha = file_sha256(source)
    root = resolve_cache_root(cache_root) / "smollm2" / sha[:12]
    backbone_dir = root / "backbone"
    built_once(
        backbone_dir, "gguf.json", lambda tmp: convert(tmp, source), "the backbone (de-quantising Q4_1)", "smollm2"
    )
    data_dir = root / "data" / data_hash(recipe)
    built_once(
        data_dir,
        "manifest.json",
        lambda tmp: build_data(backbone_dir, tmp, recipe),
        "training data and tasks",
        "smollm2",
    )
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    return SmolLM2Bed(root=root, backbone_dir=backbone_dir, data_dir=data_dir, gguf_sha256=sha, manifest=manifest)


def split_prompts(recipe: DataRecipe = RECIPE) -> tuple[list[str], list[str]]:
    """The recipe's chat prompts as (training, validation): the first ``val_fraction`` (at least one) validate.

    Each prompt gets ``samples_per_prompt`` sampled responses, so a pass over the training
    data is at most ``len(training) * samples_per_prompt`` conversations (an empty response
    is dropped).
    """
    plays = sft.read_plays(recipe.prompt_plays)
    if recipe.more_prompts:
        chat = more_prompts.train_prompts(plays, recipe.n_passages, recipe.n_continuations, recipe.seed)
    else:
        chat = prompts.train_prompts(plays, recipe.n_passages, recipe.seed)
    chat = chat[: recipe.n_prompts]
    n_val = max(1, int(len(chat) * recipe.val_fraction))
    return chat[n_val:], chat[:n_val]


def _unsorted(order: list[int], values: list) -> list:
    """``values[j]`` belongs to item ``order[j]``; back in item order."""
    out = [None] * len(values)
    for j, i in enumerate(order):
        out[i] = values[j]
    return out


def build_data(backbone_dir: Path, out: Path, recipe: DataRecipe = RECIPE) -> dict:
    """SFT train/validation files, task files and ``manifest.json`` (counts, times, dense reference numbers)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(backbone_dir)
    model = AutoModelForCausalLM.from_pretrained(backbone_dir, dtype=torch.float32).eval()
    train_prompts, val_prompts = split_prompts(recipe)
    chat = val_prompts + train_prompts  # the recipe's order, which the seeded sampling follows
    repeated = [p for p in chat for _ in range(recipe.samples_per_prompt)]
    order = sorted(range(len(repeated)), key=lambda i: len(repeated[i])) if recipe.sample_by_length else None
    answers, truncated = sampled.respond(
        model,
        tokenizer,
        [repeated[i] for i in order] if order else repeated,
        recipe.max_new_tokens,
        sample=True,
        seed=recipe.seed,
        batch_size=recipe.sample_batch_size,
        desc="sampling training responses",
    )
    if order:
        answers, truncated = _unsorted(order, answers), _unsorted(order, truncated)
    rows = sampled.conversations(repeated, answers, truncated)
    val_prompts = set(val_prompts)
    tasks.write_jsonl(out / "sft_train.jsonl", [r for r in rows if r["messages"][0]["content"] not in val_prompts])
    tasks.write_jsonl(out / "sft_val.jsonl", [r for r in rows if r["messages"][0]["content"] in val_prompts])
    t_sft = time.time() - t0

    eval_prompts = prompts.eval_prompts()[: recipe.n_eval_prompts]
    eval_answers, _ = sampled.respond(
        model,
        tokenizer,
        eval_prompts,
        recipe.max_new_tokens,
        sample=False,
        seed=recipe.seed,
        desc="greedy evaluation answers",
    )
    tasks.write_jsonl(out / "eval_chat.jsonl", sampled.conversations(eval_prompts, eval_answers))
    plays = sft.read_plays(recipe.heldout_plays)
    chunks = tasks.text_chunks(
        tokenizer, plays, recipe.n_ppl_chunks + recipe.n_agree_chunks, recipe.chunk_tokens, recipe.seed
    )
    task_dir = out / "tasks"
    task_dir.mkdir()
    tasks.write_jsonl(task_dir / "knowledge.jsonl", tasks.knowledge_rows(recipe.seed))
    tasks.write_jsonl(task_dir / "answer.jsonl", tasks.answer_rows())
    tasks.write_jsonl(task_dir / "heldout_ppl.jsonl", tasks.ppl_rows(tokenizer, chunks[: recipe.n_ppl_chunks]))
    tasks.write_jsonl(out / "heldout_text.jsonl", chunks[recipe.n_ppl_chunks :])
    text_items, text_mass = tasks.agreement_rows(
        model,
        tokenizer,
        [(c["text"], 8) for c in chunks[recipe.n_ppl_chunks :]],
        recipe.agree_per_text,
        recipe.top_k,
        recipe.seed,
    )
    chat_items, chat_mass = tasks.agreement_rows(
        model,
        tokenizer,
        tasks.chat_texts(tokenizer, eval_prompts, eval_answers),
        recipe.agree_per_text,
        recipe.top_k,
        recipe.seed,
    )
    tasks.write_jsonl(task_dir / "agree_text.jsonl", text_items)
    tasks.write_jsonl(task_dir / "agree_chat.jsonl", chat_items)
    manifest = {
        "recipe": asdict(recipe),
        "data_hash": data_hash(recipe),
        "build_s": round(time.time() - t0, 1),
        "sft_s": round(t_sft, 1),
        "n_train_prompts": len(chat),
        "n_sft": len(rows),
        "n_items": {
            "knowledge": len(knowledge.questions()),
            "heldout_ppl": recipe.n_ppl_chunks,
            "agree_text": len(text_items),
            "agree_chat": len(chat_items),
        },
        "dense_topk_mass": {"agree_text": text_mass, "agree_chat": chat_mass},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest
