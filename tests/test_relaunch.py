"""A relaunch of a committed study's sweep finds every record it committed, by config hash.

A default that changes (issue 59 turned the exact speed options on) moves the hash of every config that relied on
it; a committed study keeps its records findable by pinning the old value in its sweep file. This test plans each
job of each sweep whose records are committed (``hydra.launcher.records_root``), as ``python -m hero.dispatch sweep``
would, and looks its hash up among the committed records. Kills: a changed default without the pin, a calibration
lookup that no longer matches the committed calibration file (the job's α cannot be resolved).
"""

from __future__ import annotations

import itertools

import pytest
from conftest import REPO, compose_train

from hero.calibration_file import resolved_config
from hero.dispatch.studies import load_study, override_key, study_commands
from hero.results import config_hash, index_records

STUDIES = (
    "router_memory",
    "router_memory_smollm2",
    "hero_gap_smollm2",
    "paper_suite_smollm2",
    "budget_smollm2",
    "bf16_smollm2",
)


def jobs(cmd: list[str]):
    """The train.py overrides of each job of one ``-m`` command line (comma sweeps expanded, hydra keys left out)."""
    fixed, sweeps = [], []
    for o in cmd[3:]:
        if override_key(o).startswith("hydra"):
            continue
        value = o.split("=", 1)[1] if "=" in o else ""
        if "," in value and not value.strip().startswith(("[", "{")):
            sweeps.append([f"{override_key(o)}={v}" for v in value.split(",")])
        else:
            fixed.append(o)
    for combo in itertools.product(*sweeps):
        yield fixed + list(combo)


@pytest.mark.parametrize("name", STUDIES)
def test_a_relaunch_finds_every_committed_record(name, monkeypatch):
    monkeypatch.chdir(REPO)
    study = load_study(REPO / "sweeps" / f"{name}.yaml")
    root = next(o.split("=", 1)[1] for o in study["overrides"] if o.startswith("hydra.launcher.records_root="))
    index = index_records(REPO / root)
    planned = [config_hash(resolved_config(compose_train(job))) for cmd in study_commands(study) for job in jobs(cmd)]
    assert len(planned) == study["expected_jobs"]
    missing = [h for h in planned if h not in index]
    assert not missing, f"{len(missing)} of {len(planned)} jobs of {name} would run again"
