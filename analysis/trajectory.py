"""Training curves: how each run's parameter skip and loss moved over its updates (``train.trajectory``).

A record's ``train.trajectory`` (``hero.training.trajectory``) holds, per window of ``trainer.log_every``
updates, the means of the update's loss terms and of its batch's parameter skip rate over the batch's
non-padding tokens. That is skip on the training batches, not the realized skip of the record's ``skip``
block, which is measured on the evaluation tokens. Calibration trials carry it too, so a calibration's
trials show, for each α or target ratio, whether the skip had settled by the last update or was still moving.

One row per (run, window): the run's ``KEYS``, seed, calibration target (``config.calibration.target_skip``,
null for a fixed knob), the record's folder name (``run``: it tells apart runs of one config, and does not
depend on how the records directory was named on the command line, so the table rebuilds byte for byte), the
window's last update (``step``), ``loss``, ``lm_loss``, ``skip_loss`` and ``param_skip`` in %. Runs without a
trajectory (untrained, or recorded before records carried one) have no rows.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.load import KEYS
from analysis.training_budget import TARGET

COLUMN = "train.trajectory"
FIELDS = ("loss", "lm_loss", "skip_loss", "param_skip")
"""``hero.training.TRAJECTORY_FIELDS``, restated: analysis does not import torch."""


def trajectory_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The long table of the module docstring, from ``analysis.load`` rows (every completed record, scored or not)."""
    if COLUMN not in frame.columns or frame.height == 0:
        return pl.DataFrame()
    runs = frame.filter(pl.col(COLUMN).is_not_null() & (pl.col(COLUMN).list.len() > 0))
    if runs.height == 0:
        return pl.DataFrame()
    target = pl.col(TARGET).cast(pl.Float64) if TARGET in runs.columns else pl.lit(None, pl.Float64)
    return (
        runs.select(
            *KEYS,
            "seed",
            target.alias("target"),
            pl.col("path").map_elements(lambda p: Path(p).parent.name, return_dtype=pl.String).alias("run"),
            pl.col(COLUMN).alias("window"),
        )
        .explode("window")
        .unnest("window")
        .select(*KEYS, "seed", "target", "run", "step", *FIELDS)
        .with_columns(pl.col("param_skip") * 100.0)
        .sort([*KEYS, "seed", "run", "step"], nulls_last=True)
    )


def write(frame: pl.DataFrame, out: Path, plots: bool = True) -> list[Path]:
    """``training_trajectory.csv`` and (``plots``) ``training_trajectory.png``; nothing when no record has a curve."""
    from analysis.plots import training_trajectory

    rows = trajectory_rows(frame)
    if rows.height == 0:
        return []
    csv = out / "training_trajectory.csv"
    rows.write_csv(csv)
    plot = training_trajectory(rows, out / "training_trajectory.png") if plots else None
    return [csv, *([plot] if plot else [])]
