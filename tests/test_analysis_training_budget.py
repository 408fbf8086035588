"""Retain against training budget (``analysis.training_budget``) on SYNTHETIC records with known Retain values."""

from __future__ import annotations

import polars as pl
import pytest

from analysis.report import main as report_main
from analysis.synthetic import RunSpec, write_run

DENSE = {"arc_easy": 0.8, "boolq": 0.6}


def _run(method: str, updates: int, target: float | None, seed: int, retain: float, skip: float, alpha=1e-3):
    """A run whose every task scores ``retain`` % of dense, trained ``updates`` updates for a calibrated ``target``."""
    spec = RunSpec(
        scores={t: s * retain / 100 for t, s in DENSE.items()},
        skip=skip,
        method=method,
        variant=f"{method}+u{updates}",
        seed=seed,
        alpha=alpha,
        run_name=f"{method}-u{updates}-t{target}-s{seed}",
    )
    record_config = {
        "model": {"name": "tiny"},
        "method": {"name": method},
        "ablation": spec.variant,
        "alpha": alpha,
        "seed": seed,
        "layers": "second_half",
        "trainer": {"max_steps": updates},
        "calibration": {"target_skip": target},
    }
    spec.extra = {"config": record_config, "train": {"steps": updates, "final_loss": 2.0}}
    return spec


def _dense() -> RunSpec:
    """The baseline, untrained (``train.steps`` 0, as a ``method=dense`` record has it)."""
    dense = RunSpec(scores=dict(DENSE), skip=0.0, method="dense", variant="dense", alpha=0.0, run_name="dense")
    dense.extra = {"train": {"steps": 0}}
    return dense


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    specs = [_dense()]
    # HeRo's gap to SkipGPT-RT: -10 at 90 updates, -2 at 300 (seed offsets ±1 for HeRo only), 6 % skip
    for seed, offset in ((42, -1.0), (43, 1.0)):
        specs += [
            _run("hero", 90, 0.06, seed, 80.0 + offset, 0.060),
            _run("hero", 300, 0.06, seed, 92.0 + offset, 0.061),
            _run("skipgpt_rt", 90, 0.06, seed, 90.0, 0.059),
            _run("skipgpt_rt", 300, 0.06, seed, 94.0, 0.060),
        ]
    specs.append(_run("hero", 900, None, 42, 99.5, 0.0, alpha=0.0))  # a no-skip control: its own level
    for spec in specs:
        write_run(root, spec)
    out = tmp_path_factory.mktemp("report")
    assert report_main([str(root), "--out", str(out), "--no-plots"]) == 0
    return out


def test_points_are_per_method_level_and_budget_with_seed_statistics(report):
    points = pl.read_csv(report / "training_budget.csv")
    hero = points.filter((pl.col("method") == "hero") & (pl.col("level") == "6.0 %")).sort("updates")
    assert hero["updates"].to_list() == [90, 300]
    assert hero["retain.mean"].to_list() == pytest.approx([80.0, 92.0])
    assert hero["retain.std"].to_list() == pytest.approx([2**0.5, 2**0.5])
    assert hero["skip.mean"].to_list() == pytest.approx([6.0, 6.1])
    control = points.filter((pl.col("method") == "hero") & (pl.col("level") == "α 0.0"))
    assert control["updates"].to_list() == [900] and control["retain.mean"].to_list() == pytest.approx([99.5])
    assert points.filter(pl.col("method") == "dense")["updates"].to_list() == [0]


def test_the_gap_is_paired_by_seed_at_each_budget(report):
    text = (report / "training_budget.md").read_text()
    assert "hero − skipgpt_rt, paired by seed" in text
    rows = {line.split("|")[3].strip(): line for line in text.splitlines() if line.startswith("| tiny | 6.0 % |")}
    assert set(rows) == {"90", "300"}  # the control's level has no SkipGPT-RT run to pair with
    assert "-10.00 ± 1.41" in rows["90"] and "-2.00 ± 1.41" in rows["300"]


def test_no_table_when_every_run_has_one_training_length(tmp_path):
    root = tmp_path / "records"
    write_run(root, _dense())
    for seed in (42, 43):
        write_run(root, _run("hero", 90, 0.06, seed, 80.0, 0.06))
    assert report_main([str(root), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert not (tmp_path / "out" / "training_budget.md").exists()
