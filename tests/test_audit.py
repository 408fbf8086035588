"""The testbed audit (hero.audit) on one micro build: every job runs through the pipeline, the
table is recomputed from the records, and a report-only rerun reproduces it without running anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from hero.audit import jobs
from hero.testbed import retain

MICRO = [
    "model.recipe=micro",
    "trainer.max_steps=3",
    "trainer.global_batch=4",
    "trainer.micro_batch=2",
    "eval.limit=12",
]


def _audit(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hero.audit",
            "--recipe-seeds",
            "7",
            "--isa",
            "native",
            "--seeds",
            "42,43",
            "--out",
            str(tmp_path / "audit"),
            *args,
            *MICRO,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_audit_runs_every_job_and_tabulates_the_claims_from_the_records(tmp_path):
    proc = _audit([], tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a claim fails on the micro build
    builds = json.loads((tmp_path / "audit" / "audit.json").read_text())
    build = builds["native-7"]
    runs = tmp_path / "audit" / "runs" / "native-7"
    assert {p.parent.name for p in runs.glob("*/results.json")} == set(jobs([42, 43]))
    dense = json.loads((runs / "dense" / "results.json").read_text())["eval"]
    drop = json.loads((runs / "drop_routable_ffn" / "results.json").read_text())["eval"]
    expected = retain(drop, dense)  # RETAIN_TASKS; None where the micro's dense score is 0
    if expected is None:
        assert build["retain"]["drop_routable_ffn"] is None and build["claims"]["above_chance"] is False
    else:
        assert build["retain"]["drop_routable_ffn"] == pytest.approx(expected)
    assert set(build["claims"]) == {
        "above_chance",
        "drop_loses_10",
        "no_skip_near_100",
        "hero_within_noise",
        "noise_floor",
        "token_types",
    }
    assert set(build["retain"]) == set(jobs([42, 43])) - {"dense"}
    table = (tmp_path / "audit" / "audit.md").read_text()
    assert table.startswith("| build |") and "native-7" in table

    again = _audit(
        [
            "--report-only",
            "--out",
            str(tmp_path / "again"),
            "--outputs",
            str(tmp_path / "audit" / "runs"),
            "--cache-root",
            str(tmp_path / "audit" / "cache"),
        ],
        tmp_path,
    )
    assert again.returncode == proc.returncode, again.stderr[-3000:]
    assert (tmp_path / "again" / "audit.md").read_text() == table
    assert "[audit]" not in again.stdout  # nothing ran


def test_audit_refuses_an_unknown_instruction_set_or_job_in_one_line(tmp_path):
    for args, message in ((["--isa", "sse"], "--isa='sse'"), (["--jobs", "nope"], "--jobs='nope'")):
        proc = _audit(args, tmp_path)
        assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1]
