"""The evaluation benchmark (``python -m hero.bench eval``): config errors, and a real SmolLM2 router scored three
ways (old path, fast path cold, fast path warm) with equal Retain-task scores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import CONF, REPO
from hydra import compose, initialize_config_dir

from hero.bench.evaluation import check
from hero.errors import ConfigError


def bench_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="bench_eval", overrides=overrides)


@pytest.mark.parametrize(
    "override, message",
    [
        ("suites=[tiny]", r"suites=\['tiny'\]: allowed suites are smollm2, paper7_cpu"),
        ("suites=[]", r"suites=\[\]: allowed suites are"),
        ("threads=0", "threads=0: must be a positive integer"),
        ("router=/nowhere", "router='/nowhere': not a finished run's directory"),
    ],
)
def test_bad_bench_options_are_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        check(bench_cfg([override]))


def test_cli_scores_one_router_three_ways(tmp_path):
    """Kills: a fast variant whose Retain-task scores differ from the old path's (the bench exits 1), a warm variant
    that recomputes the prefix (no hits), the diagnostics scored in the fast variants."""
    out = tmp_path / "bench"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hero.bench",
            "eval",
            "suites=[smollm2]",
            'overrides.smollm2=["eval.limit=2"]',
            f"out_dir={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = json.loads((out / "bench_eval.json").read_text())["suites"]["smollm2"]
    assert rows["old"]["diagnostics"] and not rows["cold"]["diagnostics"] and not rows["warm"]["diagnostics"]
    assert rows["cold"]["max_abs_diff"] == rows["warm"]["max_abs_diff"] == 0.0
    assert rows["cold"]["prefix"]["misses"] > 0 and rows["cold"]["prefix"]["hits"] == 0
    assert rows["warm"]["prefix"]["hits"] == rows["cold"]["prefix"]["misses"] and rows["warm"]["prefix"]["misses"] == 0
    assert "smollm2    warm" in result.stdout
