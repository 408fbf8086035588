"""A run's spec (``hero.spec``): the config read once, every check before any compute, every committed hash kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import compose_train
from omegaconf import OmegaConf

import hero.calibration_file as calibration_file
from hero.calibration_file import backbone_key, layer_key, setup_hash, setup_of, transfer_report, write_entry
from hero.errors import ConfigError
from hero.spec import RunSpec

REPO = Path(__file__).resolve().parents[1]


def committed_run_records() -> list[Path]:
    """Every committed record of a run (the dense records the pipeline writes have no config of their own)."""
    out = []
    for path in sorted((REPO / "docs").rglob("results.json")):
        record = json.loads(path.read_text())
        if record.get("config") and record.get("origin") != "baseline_cache" and "bench" not in record:
            out.append(path)
    return out


def test_every_committed_record_resolves_to_its_own_config_hash():
    """The spec's hash is the hash the record was written with: a committed study's runs are found again, and a
    rescoring reads each record's config through the same checks (options added since take their old value)."""
    paths = committed_run_records()
    assert len(paths) > 300
    differ = []
    for path in paths:
        record = json.loads(path.read_text())
        if RunSpec.resolve(OmegaConf.create(record["config"])).config_hash != record["config_hash"]:
            differ.append(str(path.relative_to(REPO)))
    assert differ == []


def _calibrated_random_skip(tmp_path) -> tuple:
    path = tmp_path / "calibration.json"
    cfg = compose_train(
        ["method=random_skip", "method.p=calibrated", "calibration.target_skip=0.1", f"calibration.file={path}"]
    )
    setup = setup_of(cfg, "method.p")
    entry = {
        "backbone": backbone_key(cfg),
        "layer_set": layer_key(cfg),
        "variant": cfg.variant,
        "target_skip": 0.1,
        "knob": "p",
        "value": 0.3,
        "realized_skip": 0.101,
        "abs_error": 0.001,
        "tolerance": 0.005,
        "trials": 3,
        "study": "s",
        "seed": 42,
        "trial_steps": 10,
        "setup_hash": setup_hash(setup),
        "setup": setup,
    }
    write_entry(path, entry)
    return cfg, path


def test_a_calibrated_knob_is_read_from_the_file_once_per_run(tmp_path, monkeypatch):
    cfg, path = _calibrated_random_skip(tmp_path)
    reads = []
    real = calibration_file.read_entries
    monkeypatch.setattr(calibration_file, "read_entries", lambda p: (reads.append(p), real(p))[1])
    spec = RunSpec.resolve(cfg)
    assert spec.knob.value == 0.3 and spec.knob.calibrated and spec.resolved["method"]["p"] == 0.3
    assert spec.options["p"] == "calibrated"  # the option as configured; the value the run uses is the knob's
    report = transfer_report(spec.knob, str(path), 0.12)
    assert report["p"] == 0.3 and report["realized_skip"] == 0.12 and not report["within_tolerance"]
    assert reads == [path]


def test_the_spec_checks_before_it_reads_the_calibration_file(tmp_path):
    """A bad value is named even when the calibration file has no entry: checks come first, then the lookup."""
    with pytest.raises(ConfigError, match=r"^seed='x': must be an integer"):
        RunSpec.resolve(compose_train(["seed=x", "alpha=calibrated", f"calibration.file={tmp_path / 'none.json'}"]))
    with pytest.raises(ConfigError, match=r"^alpha=calibrated: .* has no α for variant=full"):
        RunSpec.resolve(
            compose_train(
                ["alpha=calibrated", "calibration.target_skip=0.2", f"calibration.file={tmp_path / 'none.json'}"]
            )
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method=dense", "intervention.unscaled=true"], "interventions change routed blocks; method=dense routes"),
        (["model=smollm2_135m", "data=smollm2", "eval=tiny"], "eval=tiny with model=smollm2_135m: a bed's data"),
        (["eval=paper7_cpu"], "eval=paper7_cpu with model=tiny: the testbed bed's backbone is scored on eval=tiny"),
    ],
)
def test_group_pairings_are_refused_by_the_spec(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec.resolve(compose_train(overrides))


def test_the_spec_names_the_run_in_one_line():
    spec = RunSpec.resolve(compose_train(["seed=43", "alpha=0.002", "ablation=no_history"]))
    assert spec.headline() == (
        f"run {spec.config_hash}: method=hero variant=no_history α=0.002 seed=43 model=tiny layers=second_half "
        "data=tiny eval=tiny precision=fp32"
    )
    bf16 = RunSpec.resolve(compose_train(["trainer.precision=bf16"]))
    assert bf16.headline().endswith(" precision=bf16")
    assert spec.alpha == 0.002 and spec.variant == "no_history" and spec.options["router"].history_branch is False
