"""Training on the full embedded testbed (marker ``testbed``: the cached backbone, built on first use).

Its own file so that ``make test``'s two workers can share the tests that wait for the testbed's build:
this one trains for about two minutes, the rest of them take about as long together.
"""

from __future__ import annotations

import json
import os

import pytest

from hero.testbed import RECIPE, RETAIN_TASKS, ensure_testbed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.testbed
def test_lora_trained_without_skip_stays_within_two_retain_points_of_dense(tmp_path):
    """On the self-sampled data, training alone barely moves Retain (docs/testbed_audit).

    The default recipe's builds: 100.6 (AVX-512) and 99.9 (AVX2); over all six audited builds
    98.2–101.3. The bound is issue 13's 2 points: the written answers (88.7 / 93.3 on these
    builds), a full-rank LoRA (96.5) and cut samples trained to end their turn (95.6 on
    recipe seed 1235) fail it.
    """
    from hydra import compose, initialize_config_dir

    from hero.pipeline import run

    tb = ensure_testbed(recipe=RECIPE)
    with initialize_config_dir(config_dir=os.path.join(REPO, "conf"), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "method=lora",
                "seed=42",
                f"paths.cache={tb.root.parents[1]}",
                f"paths.root={tmp_path}",
                "logger=none",
                "trainer.progress=false",
            ],
        )
    run(cfg, run_dir=tmp_path / "lora")
    record = json.loads((tmp_path / "lora" / "results.json").read_text())
    assert record["retain"]["baseline"] == "dense" and set(record["retain"]["tasks"]) == set(RETAIN_TASKS)
    assert abs(record["retain"]["value"] - 100.0) <= 2.0, record["retain"]
