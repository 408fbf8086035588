"""The newcomer's path: the commands a finished run prints under ``next:``, run as printed, then the report.

Everything runs in a fresh working directory with the default ``outputs/`` (as after ``make demo``),
on the micro testbed: each ``train.py`` / ``calibrate.py`` command gets ``MICRO`` appended (two
routable layers, so a 20 % skip target is reachable), and ``calibrate.py`` a ±20 pp tolerance so that
its studies end in a trial or two (how well calibration hits ±0.5 pp is ``tests/test_calibration.py``'s
business); nothing else.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys

import polars as pl
import pytest
from conftest import MICRO_RETAIN, REPO

from analysis.load import load_runs

MICRO = [
    "model.recipe=micro",
    "layers=all",
    "trainer.max_steps=40",
    "trainer.global_batch=8",
    "trainer.micro_batch=8",
    "trainer.lr=1e-3",
    "trainer.num_threads=1",
    "trainer.progress=false",
    "logger=none",
]
CALIBRATE = ["calibration.tolerance=0.2"]


def _run(command: str, cwd, env) -> subprocess.CompletedProcess:
    argv = shlex.split(command.split("  #")[0])
    assert argv[0] == "python", command
    argv[0] = sys.executable
    if argv[1].endswith(".py"):
        extra = CALIBRATE if argv[1] == "calibrate.py" else [MICRO_RETAIN]
        argv = [argv[0], str(REPO / argv[1]), *argv[2:], *MICRO, *extra]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


def test_printed_next_commands_work_as_printed_and_the_report_covers_every_run(micro_cache, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HERO_CACHE": str(micro_cache)}
    env.pop("HERO_OUTPUTS", None)
    demo = _run("python train.py", tmp_path, env)
    assert demo.returncode == 0, demo.stderr[-2000:]
    printed = demo.stdout.split("\nnext:\n", 1)[1].split("\n─")[0]
    commands = [line.strip() for line in printed.splitlines()]
    assert len(commands) == 4 and commands[-1].startswith("python -m analysis.report outputs --out report")

    for bad in ("seed=abc", "router.tau=1.5"):  # refused before any compute: no run directory is left
        proc = _run(f"python train.py {bad}", tmp_path, env)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(f"error: {bad.split('=')[0]}")

    for command in commands[:-1]:
        proc = _run(command, tmp_path, env)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    report = _run(commands[-1], tmp_path, env)
    assert report.returncode == 0, report.stderr[-2000:]
    out = tmp_path / "report"

    runs = load_runs([tmp_path / "outputs"])
    # Refused runs and checkpoints are not runs. The only problem allowed: when the calibrated α of `full` is the
    # demo's α (the search starts there), the matched sweep's seed-42 run repeats the demo run and counts once.
    twice = runs.problems.filter(pl.col("reason").str.contains("scored twice"))
    assert runs.problems.height == twice.height <= 1, runs.problems.to_dicts()
    counts = runs.counts()
    # demo 1 + ablation 3 + matched sweep 6 scored; the dense record every run shares; calibration trials (no scores)
    frame = runs.records.collect()
    assert frame.filter("scored").height == 11 - twice.height and counts["completed"] > 11 - twice.height
    assert frame.filter(frame["method"] == "dense")["path"].str.contains("/baselines/").all()

    summary = json.loads((out / "summary.json").read_text())
    assert summary["main_setting"]["alpha"] == pytest.approx(3e-3) and summary["main_setting"]["layer_set"] == "all"
    for stem in ("table1_main", "table2_alpha_sweep", "table3_ablations", "table4_memory_dim"):
        assert "skipped" not in summary["tables"][stem], (stem, summary["tables"][stem])
        assert (out / f"{stem}.md").is_file()
    assert "skipped" not in summary["curves"]
    table3 = {r["variant"] for r in csv.DictReader((out / "table3_ablations.csv").open())}
    assert {"full", "no_memory_read"} <= table3

    per_seed = list(csv.DictReader((out / "calibration.csv").open()))
    assert sorted((r["variant"], r["seed"]) for r in per_seed) == sorted(
        (v, s) for v in ("full", "no_history") for s in ("42", "43", "44")
    )
    matched = [r for r in csv.DictReader((out / "matched_skip.csv").open()) if r["metric"] == "retain"]
    at_target = {r["variant"] for r in matched if abs(float(r["skip"]) - 20.0) < 1e-9}
    assert {"no_history", "no_memory_read"} <= at_target, matched
    print(report.stdout)
    print((out / "calibration.md").read_text())
    print((out / "matched_skip.md").read_text())
