"""α calibration: the monotone sampler, storages and masking, the calibration file, real calibrations
on the micro testbed (two variants, kill + resume, the file feeding a seeded multirun), clear errors."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from conftest import REPO, compose_train
from hero.calibration.file import CalibrationLookupError, calibrated_alpha, setup_hash, setup_of, write_entry
from hero.calibration.sampler import SKIP_ATTR, TARGET_ATTR, MonotoneSampler
from hero.calibration.storage import StorageConfigError, mask_secrets, mask_url, open_storage, storage_spec

optuna.logging.set_verbosity(optuna.logging.WARNING)

# Trial settings on the micro testbed where α matters within seconds (see MICRO_TRIAL in the README section).
MICRO_TRIAL = ["trainer.max_steps=40", "trainer.global_batch=8", "trainer.micro_batch=8", "trainer.lr=1e-3",
               "trainer.num_threads=1"]


def logistic_skip(alpha: float, mid: float = 1e-3, width: float = 0.4, ceiling: float = 0.25) -> float:
    """A smooth monotone stand-in for the α → skip response (used only by the sampler unit tests)."""
    return ceiling / (1.0 + math.exp(-(math.log10(alpha) - math.log10(mid)) / width))


def run_sampler(sampler, response, target: float, tolerance: float, budget: int = 40) -> list[float]:
    study = optuna.create_study(sampler=sampler, direction="minimize")
    study.set_user_attr(TARGET_ATTR, target)
    alphas = []
    for _ in range(budget):
        trial = study.ask({"alpha": optuna.distributions.FloatDistribution(1e-6, 10.0, log=True)})
        alpha = trial.params["alpha"]
        alphas.append(alpha)
        skip = response(alpha)
        trial.set_user_attr(SKIP_ATTR, skip)
        study.tell(trial, abs(skip - target))
        if abs(skip - target) <= tolerance:
            break
    return alphas


@pytest.mark.parametrize("target, mid", [(0.05, 1e-3), (0.2, 1e-3), (0.12, 3e-5), (0.12, 0.5)])
def test_monotone_sampler_reaches_tolerance_in_few_trials(target, mid):
    alphas = run_sampler(MonotoneSampler(x0=math.log10(3e-3)), lambda a: logistic_skip(a, mid), target, 0.005)
    assert abs(logistic_skip(alphas[-1], mid) - target) <= 0.005
    assert len(alphas) <= 6, alphas


def test_monotone_sampler_is_deterministic_and_beats_tpe():
    response = lambda a: logistic_skip(a, 2e-4)  # noqa: E731
    first = run_sampler(MonotoneSampler(x0=math.log10(3e-3)), response, 0.1, 0.005)
    again = run_sampler(MonotoneSampler(x0=math.log10(3e-3)), response, 0.1, 0.005)
    assert first == again
    tpe = run_sampler(optuna.samplers.TPESampler(seed=0), response, 0.1, 0.005)
    assert len(first) * 3 <= len(tpe), (len(first), len(tpe))


def test_parallel_proposals_are_spread_inside_the_bracket():
    sampler = MonotoneSampler(x0=-3.0, parallel=3)
    from hero.calibration.sampler import Point

    points = [Point(-4.0, 0.02), Point(-2.0, 0.22)]
    proposals: list[float] = []
    for _ in range(3):
        proposals.append(sampler.propose(points, 0.1, proposals, (-6.0, 1.0)))
    assert len(set(proposals)) == 3
    assert all(-4.0 < x < -2.0 for x in proposals)
    assert min(abs(a - b) for i, a in enumerate(proposals) for b in proposals[i + 1:]) >= 2.0 / 8 - 1e-9


def test_storage_urls_and_password_masking(tmp_path, monkeypatch):
    assert mask_url("postgresql+psycopg2://me:hunter2@db:5432/optuna") == "postgresql+psycopg2://me:***@db:5432/optuna"
    assert mask_url("sqlite:///x/optuna.db") == "sqlite:///x/optuna.db"
    monkeypatch.setenv("HERO_TEST_PW", "s3cr3t")
    masked = mask_secrets({"a": ["see s3cr3t", "mysql://u:pw@h/db"]}, ("s3cr3t",))
    assert masked == {"a": ["see ***", "mysql://u:***@h/db"]}
    sqlite = storage_spec(OmegaConf.create({"kind": "sqlite"}), tmp_path)
    assert sqlite.url == f"sqlite:///{tmp_path}/optuna.db"
    journal = storage_spec(OmegaConf.create({"kind": "journal"}), tmp_path)
    study = optuna.create_study(study_name="j", storage=open_storage(journal))
    study.enqueue_trial({"x": 1.0})
    assert optuna.load_study(study_name="j", storage=open_storage(journal)).trials[0].state.name == "WAITING"
    rdb = storage_spec(OmegaConf.create({"kind": "rdb", "url": "postgresql+psycopg2://me@127.0.0.1:1/none",
                                         "password_env": "HERO_TEST_PW"}), tmp_path)
    with pytest.raises(StorageConfigError) as err:
        open_storage(rdb)
    assert "s3cr3t" not in str(err.value) and "cannot open postgresql+psycopg2://me@127.0.0.1:1/none" in str(err.value)
    monkeypatch.delenv("HERO_TEST_PW")
    with pytest.raises(StorageConfigError, match="HERO_TEST_PW: the environment variable is not set"):
        open_storage(rdb)
    with pytest.raises(StorageConfigError, match="allowed values are sqlite, rdb, journal"):
        storage_spec(OmegaConf.create({"kind": "redis"}), tmp_path)


def test_calibration_file_lookup_and_clear_errors(tmp_path):
    path = tmp_path / "cal.json"
    cfg = compose_train([f"calibration.file={path}", "alpha=calibrated", "calibration.target_skip=0.25"])
    with pytest.raises(CalibrationLookupError, match=r"has no α for variant=full target_skip=0.25 .* it holds: nothing"):
        calibrated_alpha(cfg)
    setup = setup_of(cfg)
    entry = {"backbone": "tiny", "layer_set": "second_half", "variant": "full", "target_skip": 0.25, "alpha": 0.004,
             "realized_skip": 0.251, "tolerance": 0.005, "trials": 4, "study": "s", "trial_steps": 150,
             "setup_hash": setup_hash(setup), "setup": setup}
    write_entry(path, entry)
    other = setup_of(compose_train(["ablation=no_history"]))
    write_entry(path, {**entry, "variant": "no_history", "alpha": 0.007, "setup": other, "setup_hash": setup_hash(other)})
    assert calibrated_alpha(cfg) == 0.004
    assert calibrated_alpha(compose_train([f"calibration.file={path}", "alpha=calibrated", "ablation=no_history",
                                           "calibration.target_skip=0.25"])) == 0.007
    with pytest.raises(CalibrationLookupError, match=r"it holds: full@0.25 \(tiny, second_half\); no_history@0.25"):
        calibrated_alpha(compose_train([f"calibration.file={path}", "alpha=calibrated", "calibration.target_skip=0.2"]))
    with pytest.raises(CalibrationLookupError, match=r"different setup: router.memory_dim \(64 there, 128 here\)"):
        calibrated_alpha(compose_train([f"calibration.file={path}", "alpha=calibrated", "calibration.target_skip=0.25",
                                        "router.memory_dim=128"]))
