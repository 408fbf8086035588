"""The testbed audit (hero.audit) on one micro build: every job runs through the pipeline, the
table is recomputed from the records, and a report-only rerun reproduces it without running anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from hero import audit
from hero.audit import jobs
from hero.testbed import retain
from hero.testbed.tasks import CHANCE, TASK_PRIMARY_METRIC

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
    assert proc.returncode == (1 if False in build["claims"].values() else 0), build["claims"]
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


# The claim logic on constructed records: every claim at its threshold holds, just past it fails.
SEEDS = (42, 43, 44)
PASSING = {  # job → Retain / 100 on both Retain tasks (dense scores 1.0: the ratios are exact in floats)
    "drop_routable_ffn": 0.9,  # drop_loss = 10: drop_loses_10 at its edge
    "lora": 1.02,  # |Retain − 100| = 2: no_skip_near_100 at its edge
    "hero_alpha0": 0.98,
    "hero_s42": 0.99,  # HeRo 99 / 100 / 101: mean 100, std 1
    "hero_s43": 1.0,
    "hero_s44": 1.01,
}
TOKEN_LOSSES = {
    "dense": {"plain": 3.0, "arith_answer": 2.0, "fact_answer": 4.0},
    "drop_routable_ffn": {"plain": 3.5, "arith_answer": 2.5, "fact_answer": 3.0},  # fact answers are not claimed
}


def _write_build(root, ratios, dense=None, skip=None):
    """results.json of every job under ``root``: dense scores ``dense`` (task → score, default 1.0), each other
    job ``ratio`` × dense on every task; a job whose ratio is None is left out (not run)."""
    dense = {t: 1.0 for t in TASK_PRIMARY_METRIC} | (dense or {})
    for name in jobs(SEEDS):
        ratio = 1.0 if name == "dense" else ratios.get(name)
        if ratio is None:
            continue
        (root / name).mkdir(parents=True, exist_ok=True)
        record = {
            "eval": {t: {m: dense[t] * ratio} for t, m in TASK_PRIMARY_METRIC.items()},
            "skip": {"param_rate": (skip or {}).get(name, 0.0)},
        }
        (root / name / "results.json").write_text(json.dumps(record))
    return root


@pytest.fixture
def claims(tmp_path, monkeypatch):
    """claims(**ratio overrides, dense=…, token_losses=…) → the claims ``summarize_build`` finds."""
    counter = iter(range(1000))

    def summarize(dense=None, token_losses=None, **over):
        monkeypatch.setattr(audit, "_manifest", lambda record: {"token_type_losses": token_losses or TOKEN_LOSSES})
        root = _write_build(tmp_path / str(next(counter)), {**PASSING, **over}, dense)
        return audit.summarize_build(root, SEEDS)

    return summarize


def test_audit_claims_hold_at_their_thresholds(claims):
    summary = claims()
    assert summary["claims"] == dict.fromkeys(summary["claims"], True)
    assert summary["retain"] == {name: ratio * 100 for name, ratio in PASSING.items()}
    assert summary["drop_loss"] == 10.0 and summary["hero_mean"] == 100.0 and summary["hero_std"] == 1.0


def test_audit_above_chance_edge(claims):
    edge = 2.0 * CHANCE["fact_select"]  # CHANCE_MARGIN × chance
    assert claims(dense={"fact_select": edge})["claims"]["above_chance"] is True
    assert claims(dense={"fact_select": edge * (1 - 1e-9)})["claims"]["above_chance"] is False
    heldout = 2.0 * CHANCE["heldout_ppl"]
    assert claims(dense={"heldout_ppl": heldout * (1 - 1e-9)})["claims"]["above_chance"] is False
    # diagnostic tasks are not Retain tasks: at chance they do not fail the claim
    assert claims(dense={"fact_recall": CHANCE["fact_recall"]})["claims"]["above_chance"] is True


def test_audit_drop_loses_10_edge(claims):
    assert claims(drop_routable_ffn=0.9)["claims"]["drop_loses_10"] is True  # Retain 90: loses exactly 10
    assert claims(drop_routable_ffn=0.9001)["claims"]["drop_loses_10"] is False  # Retain 90.01
    assert claims(drop_routable_ffn=None)["claims"]["drop_loses_10"] is None  # not run: not measured


def test_audit_no_skip_near_100_edge(claims):
    for name in ("lora", "hero_alpha0"):
        assert claims(**{name: 1.02})["claims"]["no_skip_near_100"] is True, name
        assert claims(**{name: 0.98})["claims"]["no_skip_near_100"] is True, name
        assert claims(**{name: 1.0201})["claims"]["no_skip_near_100"] is False, name
        assert claims(**{name: 0.9799})["claims"]["no_skip_near_100"] is False, name
        assert claims(**{name: None})["claims"]["no_skip_near_100"] is None, name  # one of the two missing


def test_audit_hero_within_noise_edge(claims):
    # spread = max(2, |lora − 100|, |α=0 − 100|): HeRo's mean may reach 100 + spread, not beyond
    high = dict(hero_s42=1.01, hero_s43=1.02, hero_s44=1.03)  # mean 102
    assert claims(**high)["claims"]["hero_within_noise"] is True
    assert claims(**high, lora=1.0, hero_alpha0=1.0)["claims"]["hero_within_noise"] is True  # floor of 2
    assert claims(**{**high, "hero_s44": 1.0301})["claims"]["hero_within_noise"] is False  # mean 102.0033
    wider = dict(hero_s42=1.02, hero_s43=1.03, hero_s44=1.04)  # mean 103
    assert claims(**wider)["claims"]["hero_within_noise"] is False
    assert claims(**wider, lora=1.03)["claims"]["hero_within_noise"] is True  # lora's spread 3 widens it
    assert claims(**wider, hero_alpha0=0.97)["claims"]["hero_within_noise"] is True
    assert claims(**high, lora=None)["claims"]["hero_within_noise"] is None  # no spread without both runs


def test_audit_noise_floor_edge(claims):
    # drop Retain 80 loses 20: HeRo's std over seeds may be 20 / 4 = 5 (95, 100, 105), not 6 (94, 100, 106)
    assert claims(drop_routable_ffn=0.8, hero_s42=0.95, hero_s44=1.05)["claims"]["noise_floor"] is True
    assert claims(drop_routable_ffn=0.8, hero_s42=0.94, hero_s44=1.06)["claims"]["noise_floor"] is False
    assert claims(hero_s44=None)["claims"]["noise_floor"] is None  # a seed missing: no std


def test_audit_token_types_edge(claims):
    assert claims()["claims"]["token_types"] is True
    for kind in ("plain", "arith_answer"):  # the loss must rise: equal is not enough
        losses = {**TOKEN_LOSSES, "drop_routable_ffn": {**TOKEN_LOSSES["drop_routable_ffn"], kind: 2.0}}
        losses["drop_routable_ffn"][kind] = losses["dense"][kind]
        assert claims(token_losses=losses)["claims"]["token_types"] is False, kind


@pytest.mark.parametrize(
    "over, code",
    [({}, 0), ({"drop_routable_ffn": 0.9001}, 1), ({"lora": None, "hero_s44": None}, 0)],
    ids=["all-hold", "one-fails", "unmeasured-is-not-failed"],
)
def test_audit_exit_code_is_1_exactly_when_a_claim_fails(tmp_path, monkeypatch, capsys, over, code):
    monkeypatch.setattr(audit, "_manifest", lambda record: {"token_type_losses": TOKEN_LOSSES})
    _write_build(tmp_path / "runs" / "native-7", {**PASSING, **over})
    argv = ["--report-only", "--recipe-seeds", "7", "--isa", "native", "--seeds", "42,43,44"]
    assert audit.main([*argv, "--out", str(tmp_path / "out"), "--outputs", str(tmp_path / "runs")]) == code
    failed = "claims that do not hold on every build: {'native-7': ['drop_loses_10']}"
    assert (failed in capsys.readouterr().out) == (code == 1)
