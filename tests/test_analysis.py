"""Tests of the analysis package on SYNTHETIC records from analysis/synthetic.py."""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import polars as pl
import pytest

from analysis import (
    BaselineError,
    build_table,
    curves,
    load_runs,
    matched_skip,
    monotone_fit,
    paired_differences,
    paper_tables,
    reference_curves,
    resolve_baselines,
    skip_adjusted,
    summarize,
    t_quantile,
    with_retain,
)
from analysis.curves import Curve, area_between
from analysis.report import main as report_main
from analysis.synthetic import RunSpec, make_record, write_fixture_set, write_run

TASKS = "arc_easy (acc), boolq (acc), hellaswag (acc_norm)"
TASK_BASE_SMALL = {"arc_easy": 0.8, "boolq": 0.6}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    write_fixture_set(root)
    return root


@pytest.fixture(scope="module")
def runs(records):
    return load_runs([records])


@pytest.fixture(scope="module")
def report(records, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert report_main([str(records), "--out", str(out)]) == 0
    return out


def test_results_filename_matches_the_schema():
    from analysis.load import RESULTS_FILENAME as ANALYSIS_FILENAME
    from hero.results import RESULTS_FILENAME

    assert ANALYSIS_FILENAME == RESULTS_FILENAME


# --- loading --------------------------------------------------------------------------------------------------------


def test_loader_counts_and_lists_failed_and_incomplete_runs(runs, records):
    assert runs.counts() == {"found": 70, "completed": 68, "failed": 1, "incomplete": 1}
    assert runs.records.filter(~pl.col("scored")).collect()["variant"].sort().to_list() == ["dense"] + ["trained"] * 4
    problems = {r["kind"]: r for r in runs.problems.to_dicts()}
    assert problems["failed"]["reason"] == "RuntimeError: loss is NaN at step 7"
    assert problems["failed"]["variant"] == "no_memory_read" and problems["failed"]["seed"] == 42
    assert problems["incomplete"]["path"].endswith("_s45")  # once: its router/ is not a run of its own
    assert "has .hydra/, checkpoints/" in problems["incomplete"]["reason"]
    assert "seed=45" in problems["incomplete"]["reason"]
    frame = runs.records.collect()
    assert frame["path"].str.starts_with(str(records)).all()
    assert runs.tasks == {"arc_easy": "acc", "boolq": "acc", "hellaswag": "acc_norm"}


def test_primary_metric_is_used_not_another_metric(runs):
    frame = runs.records.collect()
    assert (frame["score.hellaswag"] == frame["eval.hellaswag.acc_norm"]).all()
    assert (frame["score.hellaswag"] != frame["eval.hellaswag.acc"]).all()


def test_loader_tolerates_missing_optional_and_added_fields(tmp_path):
    full = RunSpec(
        scores={"arc_easy": 0.5},
        skip=0.2,
        bench={"decode_ms_per_token": {"b1_s64": 3.0}},
        extra={
            "retain": {"value": 99.0, "baseline": "dense"},
            "wandb": {"run_id": "x", "mode": "offline"},
            "a_field_from_the_future": {"nested": [1, 2]},
        },
    )
    bare = RunSpec(scores={"arc_easy": 0.4}, skip=0.1, seed=43, extra={"eval_meta": {}})
    write_run(tmp_path, full)
    write_run(tmp_path, bare)
    runs = load_runs([tmp_path])
    frame = runs.records.collect().sort("seed")
    assert runs.counts() == {"found": 2, "completed": 2}
    assert frame["score.arc_easy"].to_list() == [0.5, 0.4]  # single metric, no primary declared: that metric
    assert frame["retain.value"].to_list() == [99.0, None]
    assert frame["bench.decode_ms_per_token.b1_s64"].to_list() == [3.0, None]
    assert frame["a_field_from_the_future.nested"].to_list()[0] == [1, 2]


def test_loader_tolerates_a_field_with_conflicting_types(tmp_path):
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.5}, skip=0.2))
    odd = make_record(RunSpec(scores={"arc_easy": 0.4}, skip=0.1, seed=43))
    odd["alpha"], odd["train"], odd["skip"]["per_layer_ffn_rate"] = "0.001", "n/a", [0.5, 0.5]
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "results.json").write_text(json.dumps(odd))
    runs = load_runs([tmp_path])
    frame = runs.records.collect().sort("seed")
    assert runs.counts() == {"found": 2, "completed": 2}
    assert frame["alpha"].to_list() == [0.001, 0.001] and frame["score.arc_easy"].to_list() == [0.5, 0.4]
    assert frame["train"].to_list() == [None, "n/a"] and frame["train.steps"].to_list() == [10, None]


def test_unreadable_invalid_and_duplicate_records_are_listed(tmp_path):
    good = RunSpec(scores={"arc_easy": 0.5}, skip=0.2)
    path = write_run(tmp_path / "local", good)
    shutil.copytree(path.parent, tmp_path / "cluster_copy" / path.parent.name)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text('{"status": "completed", "seed": ')
    no_seed = make_record(RunSpec(scores={"arc_easy": 0.5}, skip=0.2, seed=7))
    del no_seed["seed"]
    (tmp_path / "noseed").mkdir()
    (tmp_path / "noseed" / "results.json").write_text(json.dumps(no_seed))
    runs = load_runs([tmp_path])
    kinds = dict(runs.problems.select("kind", "path").iter_rows())
    assert runs.counts()["completed"] == 1
    assert set(kinds) == {"duplicate", "unreadable", "invalid"}
    assert "broken" in kinds["unreadable"] and "noseed" in kinds["invalid"]
    kept = runs.records.collect()["path"][0]
    duplicate = runs.problems.filter(pl.col("kind") == "duplicate").row(0, named=True)
    assert {"local", "cluster_copy"} == {p.split("/")[-3] for p in (kept, duplicate["path"])}
    assert duplicate["reason"].endswith(f"as {kept}")
    assert runs.problems.filter(pl.col("kind") == "invalid")["reason"][0] == "missing seed"


def test_a_seed_scored_twice_in_one_group_counts_once(tmp_path):
    """A run and a re-run that differ only outside the grouping keys (e.g. calibration.target_skip) are one seed."""
    write_run(tmp_path / "demo", RunSpec(scores={"arc_easy": 0.5}, skip=0.2))
    again = make_record(RunSpec(scores={"arc_easy": 0.7}, skip=0.2))
    again["config_hash"] = "another"
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    (tmp_path / "sweep" / "0" / "results.json").write_text(json.dumps(again))
    trial = make_record(RunSpec(scores={}, skip=0.2, extra={"eval_meta": {"suite": "none"}}))
    trial["config_hash"] = "a calibration trial"
    (tmp_path / "trial" / "0").mkdir(parents=True)
    (tmp_path / "trial" / "0" / "results.json").write_text(json.dumps(trial))
    runs = load_runs([tmp_path])
    frame = runs.records.collect()
    assert frame.filter(pl.col("scored")).height == 1 and frame.height == 2
    duplicate = runs.problems.filter(pl.col("kind") == "duplicate").row(0, named=True)
    assert "same group and seed" in duplicate["reason"]
    assert summarize(frame.filter(pl.col("scored")), ["score.arc_easy"])["n"].to_list() == [1]


def test_budget_sums_wall_and_cpu_time_per_group_and_in_all(tmp_path):
    from analysis.budget import budget_markdown, budget_table

    runs = [
        (RunSpec(scores={"arc_easy": 0.5}, skip=0.2, seed=42), 60.0, 1),
        (RunSpec(scores={"arc_easy": 0.6}, skip=0.2, seed=43), 120.0, 2),
        (RunSpec(scores={"arc_easy": 0.8}, skip=0.0, method="dense", variant="dense", alpha=0.0), 30.0, None),
    ]
    for spec, wall, threads in runs:
        record = make_record(spec)
        record["wall_time_s"], record["config"]["trainer"] = wall, {"num_threads": threads}
        (tmp_path / spec.name).mkdir()
        (tmp_path / spec.name / "results.json").write_text(json.dumps(record))
    table = budget_table(load_runs([tmp_path]).records.collect())
    rows = {r["method"]: r for r in table.to_dicts()}
    assert (rows["hero"]["n"], rows["hero"]["job_s"], rows["hero"]["cpu_s"], rows["hero"]["threads"]) == (
        2,
        180.0,
        300.0,
        "1 2",
    )
    assert rows["dense"]["cpu_s"] is None  # all cores: its CPU time is unknown
    assert (rows["total"]["n"], rows["total"]["job_s"], rows["total"]["cpu_s"]) == (3, 210.0, None)
    md = budget_markdown(table)
    assert "3 runs, wall time summed over runs 3.5 min (0.06 h), CPU time unknown" in md
    assert "| tiny hero/full α 0.001 | 2 | 3.0 | 1.5 | 1 2 | 5.0 |" in md
    assert "reused" not in table.columns and "trained state" not in md
    record = json.loads((tmp_path / runs[1][0].name / "results.json").read_text())
    record["trained_by"] = "outputs/trial/results.json"
    (tmp_path / runs[1][0].name / "results.json").write_text(json.dumps(record))
    table = budget_table(load_runs([tmp_path]).records.collect())
    assert {r["method"]: r["reused"] for r in table.to_dicts()} == {"hero": 1, "dense": 0, "total": 1}
    assert "1 of them loaded a finished run's trained state instead of training" in budget_markdown(table)


def test_runs_on_different_training_files_are_noted(tmp_path):
    for seed, sha in ((42, "aaaaaaaaaaaa"), (43, "aaaaaaaaaaaa"), (44, "bbbbbbbbbbbb")):
        write_run(
            tmp_path, RunSpec(scores={"arc_easy": 0.6}, skip=0.3, seed=seed, extra={"bed": {"train_sha256": sha}})
        )
    notes = [n for n in load_runs([tmp_path]).notes if "training files" in n]
    assert len(notes) == 1
    assert "2 different training files" in notes[0]
    assert "aaaaaaaaaaaa (2 runs), bbbbbbbbbbbb (1 runs)" in notes[0]
    (tmp_path / "other").mkdir()
    write_run(
        tmp_path / "other", RunSpec(scores={"arc_easy": 0.6}, skip=0.3, extra={"bed": {"train_sha256": "c" * 12}})
    )
    assert not any("training files" in n for n in load_runs([tmp_path / "other"]).notes)


def test_run_without_task_scores_counts_for_skip_only(tmp_path):
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.8}, skip=0.0, method="dense", variant="dense", alpha=0.0))
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.6}, skip=0.3))
    no_eval = {"eval_meta": {"suite": "none", "primary_metric": {}}}
    write_run(tmp_path, RunSpec(scores={}, skip=0.25, seed=43, extra=no_eval))
    runs = load_runs([tmp_path])
    frame = runs.records.collect()
    assert runs.counts() == {"found": 3, "completed": 3}
    assert frame.sort("seed")["scored"].to_list() == [True, True, False]
    assert any("1 completed runs have no task scores" in n for n in runs.notes)
    table = build_table(frame, paper_tables()[0], runs.tasks)
    hero = table.stats.filter(pl.col("method") == "hero").row(0, named=True)
    assert hero["n"] == 1 and hero["skip.mean"] == pytest.approx(30.0)


def test_missing_input_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such results directory"):
        load_runs([tmp_path / "nope"])


# --- statistics -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("df,expected", [(1, 12.706205), (2, 4.302653), (3, 3.182446), (9, 2.262157), (30, 2.042272)])
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, abs=1e-5)


def test_summarize_mean_std_and_t_interval():
    runs = pl.DataFrame(
        {
            "backbone": ["b"] * 3,
            "method": ["hero"] * 3,
            "variant": ["full"] * 3,
            "alpha": [1e-3] * 3,
            "memory_dim": [64] * 3,
            "layer_set": ["all"] * 3,
            "seed": [1, 2, 3],
            "x": [1.0, 2.0, 6.0],
        }
    )
    row = summarize(runs, ["x"]).row(0, named=True)
    std = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)
    assert row["n"] == 3 and row["seeds"] == [1, 2, 3]
    assert row["x.mean"] == pytest.approx(3.0) and row["x.std"] == pytest.approx(std)
    assert row["x.ci_hi"] - row["x.mean"] == pytest.approx(4.302653 * std / math.sqrt(3), rel=1e-6)


def test_paired_differences_use_shared_seeds_only():
    keys = {"backbone": "b", "method": "hero", "alpha": 1e-3, "memory_dim": 64, "layer_set": "all"}
    a = pl.DataFrame([{**keys, "variant": "a", "seed": s, "x": v} for s, v in [(1, 10.0), (2, 12.0), (3, 20.0)]])
    ref = pl.DataFrame([{**keys, "variant": "ref", "seed": s, "x": v} for s, v in [(2, 11.0), (3, 16.0), (4, 0.0)]])
    row = paired_differences(a, ref, ["x"]).row(0, named=True)
    assert row["n"] == 2 and row["seeds"] == [2, 3]
    assert row["x.mean"] == pytest.approx(2.5)  # (12-11 + 20-16) / 2
    assert row["x.std"] == pytest.approx(math.sqrt(4.5))


# --- Retain ---------------------------------------------------------------------------------------------------------


def _retain_case(tmp_path):
    """Dense scores (0.8, 0.2); HeRo (0.8, 0.1): mean of ratios 75 %, ratio of means 90 %."""
    write_run(
        tmp_path, RunSpec(scores={"arc_easy": 0.8, "boolq": 0.2}, skip=0.0, method="dense", variant="dense", alpha=0.0)
    )
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.8, "boolq": 0.1}, skip=0.25))
    runs = load_runs([tmp_path])
    return runs, runs.records.collect()


def test_retain_is_the_mean_of_ratios_not_the_ratio_of_means(tmp_path):
    runs, frame = _retain_case(tmp_path)
    base = resolve_baselines(frame, "method=dense", "--baseline-table1", runs.tasks)
    hero = with_retain(frame, base).filter(pl.col("method") == "hero")
    ratio_of_means = (0.8 + 0.1) / (0.8 + 0.2) * 100
    assert hero["retain"][0] == pytest.approx(75.0)
    assert hero["retain"][0] != pytest.approx(ratio_of_means)
    table = build_table(frame, paper_tables()[0], runs.tasks)
    assert table.stats.filter(pl.col("method") == "hero")["retain.mean"][0] == pytest.approx(75.0)


def test_fixture_retain_differs_from_ratio_of_means(runs):
    frame = runs.records.collect()
    base = resolve_baselines(frame, "method=dense", "--curve-baseline", runs.tasks)["tiny"]
    run = (
        with_retain(frame, {"tiny": base})
        .filter((pl.col("variant") == "no_aux_state") & (pl.col("seed") == 43) & (pl.col("alpha") == 1e-3))
        .row(0, named=True)
    )
    tasks = list(base.scores)
    mean_of_ratios = 100 * np.mean([run[f"score.{t}"] / base.scores[t] for t in tasks])
    ratio_of_means = 100 * sum(run[f"score.{t}"] for t in tasks) / sum(base.scores.values())
    assert run["retain"] == pytest.approx(mean_of_ratios)
    assert abs(mean_of_ratios - ratio_of_means) > 0.5


def test_baseline_group_retains_100_on_average(runs):
    frame = runs.records.collect()
    table = build_table(frame, paper_tables()[1], runs.tasks)
    first = table.stats.row(0, named=True)
    assert first["alpha"] == 1e-3 and first["retain.mean"] == pytest.approx(100.0)
    assert first["retain.std"] > 0


def test_missing_and_ambiguous_baselines_are_errors(runs):
    frame = runs.records.collect()
    with pytest.raises(
        BaselineError,
        match=r"--baseline-table2 'alpha=0.002' selects no runs .*available groups: "
        r"hero/full α=0.0001",
    ):
        build_table(frame, paper_tables(baselines={2: "alpha=0.002"})[1], runs.tasks)
    with pytest.raises(BaselineError, match="selects 19 groups"):
        resolve_baselines(frame, "method=hero", "--baseline-table1", runs.tasks)
    with pytest.raises(BaselineError, match="unknown field 'colour'"):
        resolve_baselines(frame, "colour=red", "--baseline-table1", runs.tasks)


def test_task_set_restriction_and_missing_task(tmp_path):
    runs, frame = _retain_case(tmp_path)
    base = resolve_baselines(frame, "method=dense", "--baseline-table1", runs.tasks, tasks=["arc_easy"])
    assert base["tiny"].tasks == ("arc_easy",)
    assert with_retain(frame, base).filter(pl.col("method") == "hero")["retain"][0] == pytest.approx(100.0)
    with pytest.raises(BaselineError, match="has no score for piqa"):
        resolve_baselines(frame, "method=dense", "--baseline-table1", runs.tasks, tasks=["piqa"])
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.7}, skip=0.3, seed=43))
    runs = load_runs([tmp_path])
    table = build_table(runs.records.collect(), paper_tables()[0], runs.tasks)
    assert table.runs.filter(pl.col("seed") == 43)["retain"][0] is None
    assert any("_s43" in note and "a task of the set is missing" in note for note in table.notes)


# --- curves ---------------------------------------------------------------------------------------------------------


def test_monotone_fit_pools_violators():
    x, y = monotone_fit([10, 20, 30, 40], [5.0, 6.0, 4.0, 4.5], [1, 1, 1, 1])
    assert x.tolist() == [10, 20, 30, 40]
    assert y.tolist() == pytest.approx([5.5, 5.5, 4.25, 4.25])
    x, y = monotone_fit([10, 10, 20], [4.0, 6.0, 3.0], [1, 3, 1])
    assert x.tolist() == [10, 20] and y.tolist() == pytest.approx([5.5, 3.0])


def _line(variant, xs, intercept):
    key = {"backbone": "b", "method": "hero", "variant": variant, "memory_dim": 64, "layer_set": "all"}
    xs = np.asarray(xs, dtype=float)
    return Curve(key, "retain", xs, intercept - xs, np.ones_like(xs))


def test_matched_skip_and_area_between_curves():
    ref, other = _line("full", [10, 20, 30], 100.0), _line("ablated", [15, 25], 90.0)
    refs = {"b": ref}
    matched = matched_skip([ref, other], refs, levels=[12.0, 20.0, 25.0])
    assert matched["in_range"].to_list() == [False, True, True]
    assert matched["difference"].to_list() == [None, pytest.approx(-10.0), pytest.approx(-10.0)]
    area = area_between([ref, other], refs).row(0, named=True)
    assert (area["skip_lo"], area["skip_hi"]) == (15.0, 25.0)
    assert area["area"] == pytest.approx(-100.0) and area["mean_gap"] == pytest.approx(-10.0)
    assert np.isnan(other.at(np.array([30.0]))[0])  # never extrapolated


def test_fixture_curves_rank_ablations_below_full_hero(runs):
    frame = runs.records.collect()
    scored = with_retain(frame, resolve_baselines(frame, "method=dense", "--curve-baseline", runs.tasks))
    from analysis import curve_points

    cs = curves(curve_points(scored, ["retain"]), "retain")
    refs = reference_curves(cs, "method=hero,variant=full,memory_dim=64")
    gaps = dict(area_between(cs, refs).select("variant", "mean_gap").iter_rows())
    assert set(gaps) == {"no_position_state", "no_aux_state", "no_history", "no_memory_read"}
    assert all(g < 0 for g in gaps.values())
    assert gaps["no_memory_read"] > gaps["no_aux_state"]  # the fixture's slopes: 0.08 vs 0.11


# --- report ---------------------------------------------------------------------------------------------------------

EXPECTED_FILES = [
    f"{stem}.{ext}"
    for stem in ("table1_main", "table2_alpha_sweep", "table3_ablations", "table4_memory_dim")
    for ext in ("md", "csv", "tex")
]
EXPECTED_FILES += [
    "table3_ablations_paired.csv",
    "groups.csv",
    "curves.csv",
    "matched_skip.csv",
    "matched_skip.md",
    "curve_areas.csv",
    "latency.csv",
    "problems.csv",
    "problems.md",
    "summary.json",
    "resolution.csv",
    "resolution.md",
    "budget.csv",
    "budget.md",
    "quality_cost.png",
    "quality_latency.png",
    "ffn_usage_heatmap.png",
    "per_token_skip.png",
    "rho_per_layer.png",
]


def test_report_produces_every_table_and_plot(report):
    for name in EXPECTED_FILES:
        path = report / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (report / "quality_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["counts"] == {"found": 70, "completed": 68, "failed": 1, "incomplete": 1}
    assert all(v for v in summary["plots"].values())
    full = next(r for r in summary["tables"]["table1_main"]["values"] if r["method"] == "hero")
    assert full["retain.mean"] == pytest.approx(98.0) and full["skip.mean"] == pytest.approx(27.0)


@pytest.mark.parametrize(
    "number,selector,group",
    [
        (1, "method=dense", "tiny dense/dense α=0 d_m=64 second_half"),
        (2, "alpha=0.001", "tiny hero/full α=0.001 d_m=64 second_half"),
        (3, "variant=full", "tiny hero/full α=0.001 d_m=64 second_half"),
        (4, "memory_dim=64", "tiny hero/full α=0.001 d_m=64 second_half"),
    ],
)
def test_every_table_output_states_its_baseline_and_task_set(report, number, selector, group):
    stem = next(p.stem for p in report.glob(f"table{number}_*.md"))
    md = (report / f"{stem}.md").read_text()
    assert f"Retain baseline (--baseline-table{number} '{selector}') for tiny: {group}" in md
    assert f"task set (3): {TASKS}" in md
    tex = (report / f"{stem}.tex").read_text()
    assert f"--baseline-table{number} '{selector.replace('_', chr(92) + '_')}'" in tex
    assert "task set (3): arc\\_easy (acc), boolq (acc), hellaswag (acc\\_norm)" in tex
    rows = list(csv.DictReader((report / f"{stem}.csv").open()))
    assert rows and all(r["retain_baseline"] == f"{group} ({selector})" for r in rows)
    assert all(r["task_set"] == "arc_easy:acc boolq:acc hellaswag:acc_norm" for r in rows)
    entry = json.loads((report / "summary.json").read_text())["tables"][stem]["baseline"]["tiny"]
    assert entry["selector"] == selector and entry["task_set"] == {
        "arc_easy": "acc",
        "boolq": "acc",
        "hellaswag": "acc_norm",
    }


@pytest.mark.parametrize("name", ["groups.csv", "curves.csv", "matched_skip.csv", "curve_areas.csv", "latency.csv"])
def test_every_retain_csv_names_its_baseline_and_task_set(report, name):
    rows = list(csv.DictReader((report / name).open()))
    assert rows and "retain" in "".join(rows[0])
    assert all(r["retain_baseline"] == "tiny dense/dense α=0 d_m=64 second_half (method=dense)" for r in rows)
    assert all(r["task_set"] == "arc_easy:acc boolq:acc hellaswag:acc_norm" for r in rows)


def test_table3_rows_and_paired_differences(report):
    rows = {r["variant"]: r for r in csv.DictReader((report / "table3_ablations.csv").open())}
    assert list(rows) == ["full", "no_aux_state", "no_history", "no_memory_read", "no_position_state"]
    assert float(rows["full"]["retain.mean"]) == pytest.approx(100.0)
    assert float(rows["no_aux_state"]["skip.mean"]) == pytest.approx(27.0)
    paired = {r["variant"]: r for r in csv.DictReader((report / "table3_ablations_paired.csv").open())}
    assert paired["no_aux_state"]["n"] == "3" and float(paired["no_aux_state"]["retain.mean"]) < -5
    assert paired["no_aux_state"]["retain_baseline"] == "tiny hero/full α=0.001 d_m=64 second_half (variant=full)"


def test_seeds_needed_inverts_the_t_half_width():
    from analysis.resolution import seeds_needed

    # half-width t_{0.975, n-1} / sqrt(n) at std 1: n=3 -> 4.303/1.732 = 2.484, n=4 -> 3.182/2 = 1.591
    assert seeds_needed(1.0, 2.49) == 3 and seeds_needed(1.0, 2.48) == 4 and seeds_needed(1.0, 1.59) == 5
    assert seeds_needed(2.0, 4.97) == 3 and seeds_needed(0.0, 0.1) == 2
    assert seeds_needed(10.0, 0.01, max_n=50) is None


def test_resolution_lists_every_paired_comparison_with_its_half_width(report):
    paired = {r["variant"]: r for r in csv.DictReader((report / "table3_ablations_paired.csv").open())}
    found = {(r["source"], r["variant"]): r for r in csv.DictReader((report / "resolution.csv").open())}
    table3 = {v: r for (src, v), r in found.items() if src == "table3_ablations"}
    assert sorted(table3) == ["no_aux_state", "no_history", "no_memory_read", "no_position_state"]  # not full itself
    for variant, r in table3.items():
        p = paired[variant]
        n, std = int(p["n"]), float(p["retain.std"])
        assert float(r["half_width"]) == pytest.approx(t_quantile(0.95, n - 1) * std / n**0.5)
        assert (r["resolved"] == "true") == (float(p["retain.ci_lo"]) > 0 or float(p["retain.ci_hi"]) < 0)
    assert any(src == "skip_adjusted" for src, _ in found)
    md = (report / "resolution.md").read_text()
    assert "**table3_ablations** (against tiny hero/full α=0.001 d_m=64 second_half): 4 comparisons of 3 seeds" in md
    assert "resolved: no_aux_state (α 0.001)" in md
    adjusted = next(line for line in md.splitlines() if line.startswith("- **skip_adjusted**"))
    assert " runs; " in adjusted and "seeds" not in adjusted  # its n counts runs at their own knobs, not shared seeds


def test_benchmark_records_are_linked_to_the_quality_they_measure(report):
    rows = {(r["method"], round(float(r["skip"]), 1)): r for r in csv.DictReader((report / "latency.csv").open())}
    assert len(rows) == 5
    dense = rows[("dense", 0.0)]
    assert dense["quality_source"] == "group tiny dense/dense α=0 d_m=64 second_half" and dense["quality_runs"] == "3"
    assert float(dense["retain"]) == pytest.approx(100.0)
    trained = rows[("hero", 26.6)]  # full HeRo, α = 1e-3, seed 42: skip 0.27 - 0.004
    assert trained["quality_source"].startswith("trained run ")
    assert "_a0.001_m64_second_half_s42/" in trained["quality_source"]
    groups = {(r["variant"], r["alpha"]): r for r in csv.DictReader((report / "groups.csv").open())}
    assert float(trained["retain"]) < float(groups[("full", "0.001")]["retain.mean"])  # seed 42 is the low seed


def test_report_lists_the_failed_and_incomplete_runs(report, capsys, records, tmp_path):
    problems = (report / "problems.md").read_text()
    assert "| failed |" in problems and "RuntimeError: loss is NaN at step 7" in problems
    assert "| incomplete |" in problems and "_s45" in problems
    assert report_main([str(records), "--out", str(tmp_path), "--no-plots", "--tables", "3"]) == 0
    out = capsys.readouterr().out
    assert "failed 1" in out and "incomplete 1" in out and "failed: " in out


def test_report_missing_baseline_skips_that_table_in_one_line(records, tmp_path, capsys):
    assert report_main([str(records), "--out", str(tmp_path), "--baseline-table4", "memory_dim=48", "--no-plots"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("table4_memory_dim:"))
    assert line.startswith(
        "table4_memory_dim: skipped: --baseline-table4 'memory_dim=48' selects no runs of backbone 'tiny'"
    )
    assert "d_m=32" in line and "d_m=256" in line
    assert line.endswith("`python train.py router.memory_dim=48 alpha=0.001 layers=second_half` would provide it")
    assert not list(tmp_path.glob("table4_*"))
    for name in ("table1_main.md", "table2_alpha_sweep.md", "table3_ablations.md", "curves.csv", "matched_skip.md"):
        assert (tmp_path / name).is_file(), name
    assert "skipped" in json.loads((tmp_path / "summary.json").read_text())["tables"]["table4_memory_dim"]


def test_report_without_any_baseline_still_writes_skip_statistics_and_plots(tmp_path, capsys):
    write_run(tmp_path / "in", RunSpec(scores={"arc_easy": 0.6}, skip=0.3))
    write_run(tmp_path / "in", RunSpec(scores={"arc_easy": 0.62}, skip=0.28, seed=43))
    assert report_main([str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "table1_main: skipped: --baseline-table1 'method=dense' selects no runs" in out
    assert "`python train.py method=dense` would provide it" in out
    assert "curves: skipped: --curve-baseline 'method=dense'" in out
    groups = list(csv.DictReader((tmp_path / "out" / "groups.csv").open()))
    assert groups[0]["n"] == "2" and float(groups[0]["skip.mean"]) == pytest.approx(29.0)
    assert (tmp_path / "out" / "table3_ablations.md").is_file()  # its baseline, full HeRo, exists


def test_main_setting_comes_from_the_records(tmp_path, capsys):
    for seed in (42, 43):
        write_run(
            tmp_path,
            RunSpec(scores=dict(TASK_BASE_SMALL), skip=0.0, method="dense", variant="dense", alpha=0.0, seed=seed),
        )
        for variant, shift in (("full", 0.0), ("no_history", 0.01)):
            write_run(
                tmp_path,
                RunSpec(
                    scores={t: v * 0.9 for t, v in TASK_BASE_SMALL.items()},
                    skip=0.15 + shift,
                    variant=variant,
                    alpha=3e-3,
                    seed=seed,
                ),
            )
    assert report_main([str(tmp_path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "main setting: alpha=0.003, memory_dim=64, layer_set=second_half (alpha from records" in out
    assert "skipped" not in out
    rows = {r["variant"]: r for r in csv.DictReader((tmp_path / "out" / "table3_ablations.csv").open())}
    assert set(rows) == {"full", "no_history"} and rows["full"]["alpha"] == "0.003"


def test_report_pushes_tables_to_wandb_offline(records, tmp_path, monkeypatch):
    import wandb  # noqa: F401  declared in pyproject: a broken install fails here, never skips

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "out"
    assert (
        report_main(
            [str(records), "--out", str(out), "--no-plots", "--tables", "3", "--wandb-project", "hero-analysis-test"]
        )
        == 0
    )
    info = json.loads((out / "summary.json").read_text())["wandb"]
    assert info["mode"] == "offline"
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{info['run_id']}"))


def test_benchmark_runs_and_prints_its_figures(capsys):
    from analysis.report_timing import main as bench_main

    bench_main(["--records", "84", "--backbones", "2"])
    out = capsys.readouterr().out
    assert "'completed': 84, 'failed': 1, 'incomplete': 1" in out
    assert "all tables (load + Tables 1-4" in out and "s wall" in out


def test_outputs_root_is_searched_to_any_depth_and_a_checkpoint_directory_is_not_a_run(tmp_path):
    outputs = tmp_path / "outputs"
    write_run(outputs / "runs" / "hero-full", RunSpec(scores={"arc_easy": 0.6}, skip=0.3))
    write_run(
        outputs / "multirun" / "2026-01-01_00-00-00" / "deep" / "er",
        RunSpec(scores={"arc_easy": 0.6}, skip=0.3, seed=43),
    )
    ckpt = outputs / "checkpoints" / "0123456789abcdef" / "step_000003"
    ckpt.mkdir(parents=True)
    (ckpt / "trainable.safetensors").write_bytes(b"x")
    (outputs / "index").mkdir()
    (outputs / "index" / "0123456789abcdef.json").write_text('{"status": "running"}')
    runs = load_runs([outputs])
    assert runs.counts() == {"found": 2, "completed": 2}


def test_a_calibrated_alpha_is_its_own_table2_baseline_and_can_be_typed_back(tmp_path, capsys):
    """A searched α (many digits) selects its own runs; the listing shows it at the digits groups use."""
    alpha = 0.0065134950079061334
    for seed in (42, 43, 44):
        write_run(tmp_path, RunSpec(scores={"arc_easy": 0.6}, skip=0.2, seed=seed, alpha=alpha))
    write_run(tmp_path, RunSpec(scores={"arc_easy": 0.8}, skip=0.0, method="dense", variant="dense", alpha=0.0))
    assert report_main([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "table2_alpha_sweep: 1 rows" in out and "α=0.00651349501" in out
    runs = load_runs([tmp_path]).records.collect()
    assert len(resolve_baselines(runs, "alpha=0.00651349501", "--baseline-table2", {"arc_easy": "acc"})) == 1


def test_calibrated_variants_form_table3_at_their_target_whatever_their_alpha(tmp_path, capsys):
    """alpha=calibrated gives each variant its own α at one realized skip: when more groups are calibrated to
    the target (3) than share an α (2 curve points), Table 3 takes them by target; --main-target none goes back
    to α. (With as many groups at an α, the α stays the main setting: tests/test_newcomer.py.)"""
    calibrated = {"calibration": {"target": 0.2, "tolerance": 0.005}}
    for seed in (42, 43):
        write_run(
            tmp_path,
            RunSpec(scores=dict(TASK_BASE_SMALL), skip=0.0, method="dense", variant="dense", alpha=0.0, seed=seed),
        )
        for variant, alpha in (("full", 0.0065), ("no_history", 0.004), ("no_memory_read", 0.005)):
            write_run(
                tmp_path,
                RunSpec(
                    scores={t: v * 0.9 for t, v in TASK_BASE_SMALL.items()},
                    skip=0.2,
                    variant=variant,
                    alpha=alpha,
                    seed=seed,
                    extra=calibrated,
                ),
            )
            for grid_alpha in (0.002, 0.02) if variant == "full" else (0.002,) if variant == "no_history" else ():
                write_run(
                    tmp_path,
                    RunSpec(
                        scores={t: v * 0.8 for t, v in TASK_BASE_SMALL.items()},
                        skip=0.1,
                        variant=variant,
                        alpha=grid_alpha,
                        seed=seed,
                    ),
                )
    assert report_main([str(tmp_path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert "target=0.2" in capsys.readouterr().out
    rows = {r["variant"]: r for r in csv.DictReader((tmp_path / "out" / "table3_ablations.csv").open())}
    assert {v: r["alpha"] for v, r in rows.items()} == {
        "full": "0.0065",
        "no_history": "0.004",
        "no_memory_read": "0.005",
    }
    assert "calibrated to 20 % skip" in (tmp_path / "out" / "table3_ablations.md").read_text()
    assert report_main([str(tmp_path), "--out", str(tmp_path / "alpha"), "--no-plots", "--main-target", "none"]) == 0
    rows = list(csv.DictReader((tmp_path / "alpha" / "table3_ablations.csv").open()))
    assert {r["alpha"] for r in rows} == {"0.002"} and {r["variant"] for r in rows} == {"full", "no_history"}
    capsys.readouterr()
    assert report_main([str(tmp_path), "--out", str(tmp_path / "bad"), "--main-target", "20"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --main-target '20': expected a realized skip rate in (0, 1), e.g. 0.2, or 'none'"
    )
    assert not (tmp_path / "bad").exists()


def test_skip_adjusted_difference_takes_each_run_at_its_own_skip():
    """Runs 2 points under the reference line at skips between its points: −2 exactly; a run beyond the
    reference's range is counted outside, never extrapolated."""
    key = {"backbone": "tiny", "method": "hero", "memory_dim": 64, "layer_set": "second_half"}
    ref_x = np.array([10.0, 20.0, 30.0])
    ref = Curve({**key, "variant": "full"}, "retain", ref_x, 100 - ref_x, np.ones(3), ref_x, 100 - ref_x)
    run_x = np.array([15.0, 25.0, 12.0, 40.0])
    other = Curve({**key, "variant": "no_history"}, "retain", run_x, 98 - run_x, np.ones(4), run_x, 98 - run_x)
    row = skip_adjusted([ref, other], {"tiny": ref}).row(0, named=True)
    assert (row["variant"], row["n"], row["n_outside"]) == ("no_history", 3, 1)
    assert row["mean"] == pytest.approx(-2.0) and row["std"] == pytest.approx(0.0, abs=1e-12)
    assert row["reference_resid_std"] == pytest.approx(0.0, abs=1e-12)
