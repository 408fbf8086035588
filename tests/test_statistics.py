"""hero.statistics: one definition of each statistic a record stores, used by ``hero`` and by ``analysis`` alike."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analysis.gates import ffn_execution_rate as record_ffn_execution_rate
from analysis.load import load_runs
from analysis.reference import resolve_baselines, with_retain
from hero import statistics
from hero.statistics import RetainError, retain, retain_value

REPO = Path(__file__).resolve().parents[1]
# the dense record here is the baseline file the runs were scored against (hero.rescore --into filed it)
STUDY = REPO / "docs" / "studies" / "budget_smollm2_paper_suite" / "records"
DENSE = "baselines/smollm2_135m-c50fb9ca6e40f15c-paper7_cpu-9da20f124c26"
RUN = "hero-full+u900-calibrated-target_skip=0.12-s42"


def _record(name: str) -> dict:
    return json.loads((STUDY / name / "results.json").read_text())


def test_a_records_retain_and_analysis_recomputed_retain_agree():
    record, dense = _record(RUN), _record(DENSE)
    stored = record["retain"]
    # hero's definition on the record's own scores and the baseline's
    again = retain(record["eval"], dense["eval"], stored["metrics"], baseline_name=stored["baseline"])
    assert again["tasks"] == stored["tasks"] and again["value"] == pytest.approx(stored["value"], rel=1e-14)
    # analysis's, on a polars frame of the study's runs, through the same retain_value; not always equal to the bit:
    # polars divides by a number as a multiplication by its reciprocal
    runs = load_runs([STUDY])
    frame = runs.records.collect()
    base = resolve_baselines(frame, "method=dense", "--baseline", runs.tasks)
    assert list(base["smollm2_135m"].tasks) == stored["tasks"] and len(base["smollm2_135m"].seeds) == 1
    scored = with_retain(frame, base).filter(pl.col("config_hash") == record["config_hash"])
    assert scored.height == 1
    assert scored["retain"][0] == pytest.approx(stored["value"], rel=1e-14)
    assert scored["retain"][0] == pytest.approx(again["value"], rel=1e-14)


def test_retain_value_is_the_mean_of_ratios_in_task_order_for_floats_and_frames():
    ratios = {"b": 1.5, "a": 0.5, "c": 0.7}
    assert retain_value(ratios) == (0.5 + 1.5 + 0.7) / 3 * 100.0
    frame = pl.DataFrame({"a": [0.5, None], "b": [1.5, 1.0], "c": [0.7, 1.0]})
    exprs = {t: pl.col(t) for t in ratios}
    assert frame.select(retain_value(exprs, total=pl.sum_horizontal))[0, 0] == retain_value(ratios)
    with pytest.raises(RetainError, match="no tasks"):
        retain_value({})


def test_routing_rates_from_counts_and_from_a_records_per_layer_rates():
    executed, gate_sums, executed_sums = {"1": 30.0, "2": 0.0}, {"1": 20.0, "2": 5.0}, {"1": 18.0, "2": 0.0}
    assert statistics.layer_ffn_rates(executed, 40) == {"1": 0.75, "2": 0.0}
    assert statistics.layer_mean_gates(gate_sums, 40) == {"1": 0.5, "2": 0.125}
    assert statistics.layer_executed_gates(executed_sums, executed) == {"1": 0.6, "2": None}
    assert statistics.ffn_execution_rate(list(executed.values()), 40) == 30 / 80
    assert statistics.ffn_execution_rate([0.75, 0.0]) == 0.375  # per-layer rates: tokens = 1
    assert statistics.layer_ffn_rates({}, 0) == {} and statistics.ffn_execution_rate([], 0) != 0  # nan: no calls
    # a committed record: its stored share of FFN calls is the share its per-layer rates give
    skip = _record(RUN)["skip"]
    older = {k: v for k, v in skip.items() if k != "ffn_execution_rate"}
    assert record_ffn_execution_rate(older) == pytest.approx(skip["ffn_execution_rate"], rel=1e-12)
    assert record_ffn_execution_rate(skip) == skip["ffn_execution_rate"]


def test_chance_normalised_retain_in_full_and_its_refusals():
    """Each field of the section, a baseline exactly at chance (undefined, not 0/0), and the one-line refusals."""
    from hero.statistics import RetainError, chance_normalised

    primary = {"at": "acc", "boolq": "acc", "piqa": "acc"}
    chance = {"at": 0.25, "boolq": 0.6, "piqa": 0.5}
    dense = {"at": {"acc": 0.25}, "boolq": {"acc": 0.7}, "piqa": {"acc": 0.8}}
    run = {"at": {"acc": 0.3}, "boolq": {"acc": 0.65}, "piqa": {"acc": 0.65}}
    out = chance_normalised(run, dense, primary, chance, "dense")
    assert out == {
        "value": pytest.approx(50.0),
        "baseline": "dense",
        "tasks": ["boolq", "piqa"],
        "chance": chance,
        "per_task": {"boolq": pytest.approx(50.0), "piqa": pytest.approx(50.0)},
        "undefined": ["at"],
    }
    with pytest.raises(RetainError, match=r"^baseline 'dense' has no piqa\.acc; it has \['at', 'boolq'\]$"):
        chance_normalised(run, {k: v for k, v in dense.items() if k != "piqa"}, primary, chance, "dense")
    with pytest.raises(RetainError, match=r"^baseline 'dense' has no piqa\.acc; it has \['at', 'boolq', 'piqa'\]$"):
        chance_normalised(run, {**dense, "piqa": {"acc_norm": 0.8}}, primary, chance, "dense")
    with pytest.raises(RetainError, match=r"^run has no piqa\.acc to compare with baseline 'dense'$"):
        chance_normalised({**run, "piqa": {"acc_norm": 0.7}}, dense, primary, chance, "dense")


def test_retain_refusals_name_the_task_metric_and_baseline():
    from hero.statistics import RetainError, retain, retain_value

    dense = {"a": {"acc": 0.5}}
    with pytest.raises(RetainError, match=r"^run has no a\.acc to compare with baseline 'dense'$"):
        retain({"a": {"acc_norm": 0.4}}, dense, {"a": "acc"}, "dense")
    with pytest.raises(RetainError, match=r"^baseline 'dense' has no a\.acc; it has \['a'\]$"):
        retain({"a": {"acc": 0.4}}, {"a": {"acc_norm": 0.5}}, {"a": "acc"}, "dense")
    with pytest.raises(RetainError, match=r"^baseline 'dense' scores 0 on a\.acc: Retain is undefined$"):
        retain({"a": {"acc": 0.4}}, {"a": {"acc": 0.0}}, {"a": "acc"}, "dense")
    with pytest.raises(RetainError, match=r"^no tasks to compute Retain over$"):
        retain_value({})


def test_layer_rates_over_one_token_and_none():
    from hero.statistics import layer_ffn_rates, layer_mean_gates

    assert layer_ffn_rates({"3": 1}, tokens=1) == {"3": 1.0}
    assert layer_mean_gates({"3": 0.75}, tokens=1) == {"3": 0.75}
    assert layer_ffn_rates({"3": 0}, tokens=0) == {"3": 0.0} == layer_mean_gates({"3": 0.0}, tokens=0)
