"""Training curves (``analysis.trajectory``) on SYNTHETIC records whose ``train.trajectory`` is written out here."""

from __future__ import annotations

import polars as pl

from analysis.report import main as report_main
from analysis.synthetic import RunSpec, write_run


def _trial(alpha: float, skips: list[float], target: float | None = 0.06, seed: int = 42) -> RunSpec:
    """An unscored run (as a calibration trial is) whose windows of 10 updates had these batch skip rates."""
    windows = [
        {"step": 10 * (i + 1), "loss": 3.0 + s, "lm_loss": 3.0, "skip_loss": 100 * s, "param_skip": s}
        for i, s in enumerate(skips)
    ]
    spec = RunSpec(scores={}, skip=skips[-1], alpha=alpha, seed=seed, run_name=f"trial-a{alpha:g}-s{seed}")
    config = {"model": {"name": "tiny"}, "method": {"name": "hero"}, "ablation": "full", "alpha": alpha}
    spec.extra = {
        "config": {**config, "seed": seed, "calibration": {"target_skip": target}},
        "train": {"steps": 10 * len(skips), "final_loss": 3.0, "trajectory": windows},
    }
    return spec


def test_the_report_writes_each_runs_training_curve_in_percent_with_its_knob_and_target(tmp_path):
    root = tmp_path / "records"
    write_run(root, _trial(1e-4, [0.0, 0.03, 0.09]))
    write_run(root, _trial(2e-4, [0.01, 0.05, 0.05, 0.06]))
    write_run(root, _trial(2e-4, [0.02], target=None, seed=43))
    write_run(root, RunSpec(scores={"arc_easy": 0.8}, skip=0.0, method="dense", variant="dense", alpha=0.0))
    assert report_main([str(root), "--out", str(tmp_path / "report")]) == 0
    rows = pl.read_csv(tmp_path / "report" / "training_trajectory.csv")
    assert rows.height == 3 + 4 + 1  # the dense record has no curve: no rows
    first = rows.filter(pl.col("alpha") == 1e-4).sort("step")
    assert first["step"].to_list() == [10, 20, 30]
    assert first["param_skip"].to_list() == [0.0, 3.0, 9.0]  # in %
    assert first["target"].to_list() == [0.06] * 3
    assert rows.filter(pl.col("seed") == 43)["target"].is_null().all()  # a fixed knob: no target
    assert (tmp_path / "report" / "training_trajectory.png").stat().st_size > 0


def test_records_without_curves_write_no_trajectory_file(tmp_path):
    root = tmp_path / "records"
    write_run(root, RunSpec(scores={"arc_easy": 0.8}, skip=0.0, method="dense", variant="dense", alpha=0.0))
    write_run(root, RunSpec(scores={"arc_easy": 0.7}, skip=0.05))
    assert report_main([str(root), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    assert not (tmp_path / "report" / "training_trajectory.csv").exists()


def test_the_table_does_not_depend_on_how_the_records_directory_is_named(tmp_path, monkeypatch):
    """A committed study's report rebuilds byte for byte whether its records are passed relative or absolute."""
    root = tmp_path / "records"
    write_run(root, _trial(1e-4, [0.0, 0.03]))
    monkeypatch.chdir(tmp_path)
    assert report_main(["records", "--out", "relative", "--no-plots"]) == 0
    assert report_main([str(root), "--out", "absolute", "--no-plots"]) == 0
    relative = (tmp_path / "relative" / "training_trajectory.csv").read_bytes()
    assert relative == (tmp_path / "absolute" / "training_trajectory.csv").read_bytes()
    assert pl.read_csv(tmp_path / "relative" / "training_trajectory.csv")["run"].to_list() == ["trial-a0.0001-s42"] * 2
