"""The testbed recipe: every knob that determines the built corpus, tokenizer and backbone.

The recipe is a frozen dataclass so that it can be hashed. ``recipe_hash`` is the
cache key: any change of a field (or of ``BUILD_VERSION``, bumped when the build code
changes what it produces for the same recipe) yields a new hash and hence a fresh
build in a new cache directory; old builds are left untouched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

BUILD_VERSION = 3


@dataclass(frozen=True)
class Recipe:
    """All knobs of the embedded testbed. Defaults are the full testbed used by the tests."""

    seed: int = 1234
    # --- corpus -----------------------------------------------------------------
    heldout_plays: tuple[str, ...] = ("macbeth", "twelfth_night")
    heldout_eval_tokens: int = 16384  # tokens of held-out plays scored by evaluate()
    play_fraction: float = 1.0  # share of each training play's text used (tests shrink it)
    n_entities: int = 30
    mix_plays: float = 0.35  # share of pretraining rows drawn from each source
    mix_facts: float = 0.45
    mix_arith: float = 0.15
    mix_chat: float = 0.05
    arith_heldout_fraction: float = 0.1  # share of (a, b) pairs never seen in training
    # --- tokenizer --------------------------------------------------------------
    vocab_size: int = 2048
    # --- backbone (Llama architecture) -------------------------------------------
    hidden_size: int = 128
    num_layers: int = 8
    num_heads: int = 2
    num_kv_heads: int = 1
    intermediate_size: int = 384
    seq_len: int = 256
    tie_embeddings: bool = False
    # --- pretraining --------------------------------------------------------------
    steps: int = 680
    batch_size: int = 16
    lr: float = 4e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # --- task suite sizes -----------------------------------------------------------
    n_arith_eval: int = 300
    n_cloze_eval: int = 300
    n_sft_train: int = 3000
    n_sft_val: int = 300

    @property
    def routable_layers(self) -> tuple[int, ...]:
        """The layers whose FFNs are routable on the testbed: the second half (0-based)."""
        return tuple(range(self.num_layers // 2, self.num_layers))


RECIPE = Recipe()

# A recipe small enough to build in seconds: used by tests of caching, locking and
# determinism, never for measuring anything.
TINY_RECIPE = Recipe(
    play_fraction=0.05,
    heldout_eval_tokens=1024,
    n_entities=12,
    vocab_size=384,
    hidden_size=64,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=128,
    seq_len=64,
    steps=4,
    batch_size=4,
    warmup_steps=1,
    n_arith_eval=20,
    n_cloze_eval=20,
    n_sft_train=40,
    n_sft_val=10,
)


def recipe_dict(recipe: Recipe) -> dict:
    """The recipe as a JSON-able dict (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(recipe)))


def recipe_hash(recipe: Recipe = RECIPE) -> str:
    """Short stable hash of the recipe and the build version: the cache key."""
    payload = json.dumps({"build_version": BUILD_VERSION, **recipe_dict(recipe)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]
