"""``python -m hero.testbed [--rebuild] [--cache-root DIR] [--recipe-seed N]``: build (or find) the testbed.

Builds the backbone and the self-sampled SFT data the default job trains on (``data=tiny``,
``responses: sampled``), and prints the manifest summary of the build it found or made.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from hero.testbed import RECIPE, ensure_testbed
from hero.testbed.sft import ensure_sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rebuild", action="store_true", help="build anew even if cached")
    parser.add_argument("--cache-root", default=None, help="default: $HERO_CACHE or ~/.cache/hero")
    parser.add_argument(
        "--recipe-seed",
        type=int,
        default=None,
        help="another seed of the recipe: a build that differs only in noise (default: the recipe's)",
    )
    args = parser.parse_args()
    recipe = RECIPE if args.recipe_seed is None else dataclasses.replace(RECIPE, seed=args.recipe_seed)
    tb = ensure_testbed(args.cache_root, recipe=recipe, rebuild=args.rebuild)
    sampled = ensure_sampled(tb)
    m = tb.manifest
    print(
        json.dumps(
            {
                "root": str(tb.root),
                "recipe_hash": tb.recipe_hash,
                "sampled_sft": str(sampled),
                "build_time_s": m["build_time_s"],
                "heldout_ppl": m["heldout_ppl"],
                "unigram_ppl": m["unigram_ppl"],
                "dense": m["dense"],
                "drop_routable_ffn": m["drop_routable_ffn"],
                "drop_routable_ffn_retain": m["drop_routable_ffn_retain"],
                "token_type_losses": m["token_type_losses"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
