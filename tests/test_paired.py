"""Paired comparisons by seed and item (analysis.paired), matched cost through a run's curve (analysis.matched) and
per-item task values (analysis.items), on hand-built records whose variance components are known."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from analysis import items as items_mod
from analysis.items import ItemsError, item_frame, task_values
from analysis.matched import at_skip
from analysis.paired import Run, compare, design, load_run, main
from hero.results import ITEMS_FILENAME, write_items

DENSE = {"qa": 0.8, "ppl": 0.05}


def write_run(root, name, seed, scores, ppl=None, fingerprint="f1", curve=None, threshold_scores=None, skip=0.1):
    """A record with items: task ``qa`` (mean kind, one score per item) and optionally ``ppl`` (token kind)."""
    run = root / name
    run.mkdir(parents=True)
    rows = [{"task": "qa", "item": i, "doc": f"d{i}", "metrics": {"acc": float(s)}} for i, s in enumerate(scores)]
    primary = {"qa": "acc"}
    if ppl is not None:
        rows += [
            {"task": "ppl", "item": i, "doc": f"p{i}", "metrics": {"inv_ppl": [ll, n]}} for i, (ll, n) in enumerate(ppl)
        ]
        primary["ppl"] = "inv_ppl"
    for t, sc in (threshold_scores or {}).items():
        rows += [
            {"task": "qa", "item": i, "doc": f"d{i}", "metrics": {"acc": float(s)}, "threshold": t}
            for i, s in enumerate(sc)
        ]
    write_items(run / ITEMS_FILENAME, rows)
    record = {
        "seed": seed,
        "method": "hero",
        "variant": name.rsplit("-", 1)[0],
        "eval": {"qa": {"acc": float(np.mean(scores))}},
        "eval_meta": {
            "primary_metric": primary,
            "fingerprint": fingerprint,
            "wall_time_s": 10.0,
            "tasks": {"qa": {"wall_time_s": 10.0, "n_samples": {"effective": len(scores)}}},
        },
        "retain": {"baseline_source": str(root / "dense.json")},
        "skip": {"param_rate": skip, "net_compute_rate": skip / 2},
        "wall_time_s": 110.0,
    }
    if curve:
        record["curve"] = curve
    (run / "results.json").write_text(json.dumps(record))
    return run / "results.json"


def test_items_file_name_matches_the_writer():
    from hero.results import ITEMS_FILENAME as WRITTEN

    assert items_mod.ITEMS_FILENAME == WRITTEN


def test_token_task_value_is_the_token_weighted_inverse_perplexity(tmp_path):
    """Mutant killed: averaging per-document perplexities instead of summing log-probs and tokens."""
    path = write_run(tmp_path, "a-42", 42, [1, 0], ppl=[(-10.0, 5), (-30.0, 5)])
    values = task_values(item_frame(path))
    assert values["ppl"] == pytest.approx(math.exp(-40.0 / 10))
    assert values["qa"] == 0.5


def test_p_gold_is_the_gold_choice_probability(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    write_items(
        run / ITEMS_FILENAME,
        [{"task": "mc", "item": 0, "doc": "x", "ll": [-1.0, -2.0, -3.0], "gold": 1, "metrics": {"acc": 0.0}}],
    )
    (run / "results.json").write_text(json.dumps({"eval_meta": {"primary_metric": {"mc": "acc"}}}))
    frame = item_frame(run / "results.json").filter(pl.col("task") == "mc:p_gold")
    expected = math.exp(-2) / (math.exp(-1) + math.exp(-2) + math.exp(-3))
    assert frame["score"].item() == pytest.approx(expected)


def _runs(tmp_path, S, n_items, sd_seed, sd_item, sd_inter, rng):
    """Groups A and B over S seeds and I items with d_si = α_s + β_i + ε_si (continuous scores, mean kind)."""
    base = rng.uniform(0.2, 0.8, n_items)
    beta = rng.normal(0, sd_item, n_items)
    a, b = [], []
    for s in range(S):
        alpha = rng.normal(0, sd_seed)
        eps = rng.normal(0, sd_inter, n_items)
        a.append(load_run(write_run(tmp_path, f"a-{s}", s, base + alpha + beta + eps)))
        b.append(load_run(write_run(tmp_path, f"b-{s}", s, base)))
    return a, b


def test_components_recover_the_variances_they_were_drawn_with(tmp_path):
    """Mutants killed: seeds and items swapped in the mean squares, the interaction not subtracted, ddof 0."""
    rng = np.random.default_rng(0)
    a, b = _runs(tmp_path, S=30, n_items=400, sd_seed=0.05, sd_item=0.2, sd_inter=0.1, rng=rng)
    result = compare(a, b, {"qa": 0.8})
    comp = result["components"]
    c = 100.0 / 0.8
    assert comp.c["qa"] == pytest.approx(c)
    assert comp.item_var["qa"] == pytest.approx(0.2**2, rel=0.2)
    assert comp.inter_var["qa"] == pytest.approx(0.1**2, rel=0.1)
    assert comp.seed_var == pytest.approx(c**2 * 0.05**2, rel=0.6)
    per_seed_mean = np.mean(result["per_seed"])
    assert result["difference"] == pytest.approx(per_seed_mean)


def test_bootstrap_agrees_with_the_analytic_variance(tmp_path):
    rng = np.random.default_rng(1)
    a, b = _runs(tmp_path, S=8, n_items=300, sd_seed=0.02, sd_item=0.15, sd_inter=0.05, rng=rng)
    result = compare(a, b, {"qa": 0.8})
    comp = result["components"]
    analytic = math.sqrt(sum(comp.variance(comp.seeds)))
    assert result["bootstrap"]["std"] == pytest.approx(analytic, rel=0.3)


def _far_apart_ppl(tmp_path, seeds):
    """A perplexity task whose two groups lie far apart: A's documents −15 ± 1 nats over 10 tokens, less 0.1 per
    seed (inv_ppl ≈ e^-1.5 = 0.223), B's −30 ± 1 (e^-3 = 0.050); the qa task equal in both."""
    a, b = [], []
    for s in seeds:
        ppl_a = [(-15.0 + (1.0 if i % 2 else -1.0) - 0.1 * s, 10) for i in range(40)]
        ppl_b = [(-30.0 + (1.0 if i % 2 else -1.0), 10) for i in range(40)]
        a.append(load_run(write_run(tmp_path, f"a-{s}", s, [1, 0] * 20, ppl=ppl_a)))
        b.append(load_run(write_run(tmp_path, f"b-{s}", s, [1, 0] * 20, ppl=ppl_b)))
    return a, b


def test_a_far_apart_perplexity_task_weights_each_groups_items_at_its_own_slope(tmp_path):
    """Mutant killed: one slope, at the two values' midpoint, for both groups (A's item variance then weighted
    (0.219 / 0.134)² = 2.7× too little and B's (0.134 / 0.050)² = 7.3× too much)."""
    a, b = _far_apart_ppl(tmp_path, seeds=[1])
    comp = compare(a, b, {"qa": 0.5, "ppl": 0.05})["components"]
    v_a, v_b = math.exp(-1.5 - 0.01), math.exp(-3.0)
    k_a, k_b = v_a / (0.5 * (v_a + v_b)), v_b / (0.5 * (v_a + v_b))
    expected = np.var(k_a * np.array([-16.1, -14.1] * 20) - k_b * np.array([-31.0, -29.0] * 20), ddof=1)
    assert comp.item_var["ppl"] == pytest.approx(expected)


def test_the_bootstrap_is_of_d_itself_not_its_linearisation(tmp_path):
    """Mutant killed: the bootstrap of c_t × (mean item difference), which for these far-apart perplexity values
    centres on +199 Retain points while D is +169 (its interval ±6)."""
    a, b = _far_apart_ppl(tmp_path, seeds=[1, 2, 3])
    result = compare(a, b, {"qa": 0.5, "ppl": 0.05})
    boot = result["bootstrap"]
    assert result["difference"] == pytest.approx(50 * (math.exp(-1.52) - math.exp(-3.0)) / 0.05, rel=0.01)
    assert boot["lo"] < result["difference"] < boot["hi"]
    assert boot["hi"] - boot["lo"] < 20


def test_a_perplexity_tasks_item_variance_is_that_of_a_ratio(tmp_path):
    """Documents of 5–50 tokens whose log-likelihoods scale with their length (A 1.5, B 2 nats per token, ± 1): the
    analytic item sd agrees with the bootstrap's. Mutant killed: items entered as s_i instead of s_i − r·n_i (the
    documents' lengths then counted as item noise, 3.4× the sd)."""
    rng = np.random.default_rng(3)
    n = rng.integers(5, 51, 300)
    ppl_a = [(-1.5 * k + rng.normal(0, 1), int(k)) for k in n]
    ppl_b = [(-2.0 * k + rng.normal(0, 1), int(k)) for k in n]
    a = [load_run(write_run(tmp_path, "a-1", 1, [1, 0] * 150, ppl=ppl_a))]
    b = [load_run(write_run(tmp_path, "b-1", 1, [1, 0] * 150, ppl=ppl_b))]
    result = compare(a, b, {"qa": 0.5, "ppl": 0.2})
    comp = result["components"]
    assert math.sqrt(comp.variance(1)[1]) == pytest.approx(result["bootstrap"]["std"], rel=0.15)


def test_design_returns_the_fewest_seeds_that_resolve_the_target(tmp_path):
    rng = np.random.default_rng(2)
    a, b = _runs(tmp_path, S=4, n_items=200, sd_seed=0.04, sd_item=0.2, sd_inter=0.05, rng=rng)
    comp = compare(a, b, {"qa": 0.8})["components"]
    target = comp.half_width(6) * 1.0001
    rows = design(comp, target, cost={"train_s": 100.0, "eval_s_per_item": {"qa": 1.0}}, scales=(1,))
    seeds = rows[0]["seeds"]
    assert comp.half_width(seeds) <= target < comp.half_width(seeds - 1)
    assert rows[0]["cpu_hours"] == pytest.approx(2 * seeds * (100.0 + 200) / 3600)
    assert comp.half_width(4, scale=4) < comp.half_width(4, scale=1)


def test_groups_without_a_shared_seed_or_suite_are_refused(tmp_path):
    a = load_run(write_run(tmp_path, "a-1", 1, [1, 0]))
    b = load_run(write_run(tmp_path, "b-2", 2, [1, 1]))
    with pytest.raises(ItemsError, match="no shared seed"):
        compare([a], [b], {"qa": 0.8})
    c = load_run(write_run(tmp_path, "c-1", 1, [1, 1], fingerprint="other"))
    with pytest.raises(ItemsError, match="different suites"):
        compare([a], [c], {"qa": 0.8})


def test_only_shared_items_are_paired(tmp_path):
    """Mutant killed: pairing items by position instead of by id and document."""
    a = load_run(write_run(tmp_path, "a-1", 1, [1, 0, 1]))
    b = Run(a.path, a.record, a.items.filter(pl.col("item") != 1), {"qa": 1.0}, 0.1, 0.05)
    result = compare([a], [b], {"qa": 1.0})
    assert result["components"].items == {"qa": 2}


def test_a_run_is_read_at_exactly_the_target_skip_through_its_curve(tmp_path):
    """Mutants killed: the weight on the wrong side, the other axis not mixed, extrapolation allowed."""
    curve = [
        {"threshold": 0.3, "skip": {"param_rate": 0.05, "net_compute_rate": 0.01}, "eval": {}, "retain": None},
        {"threshold": 0.7, "skip": {"param_rate": 0.25, "net_compute_rate": 0.2}, "eval": {}, "retain": None},
    ]
    path = write_run(
        tmp_path,
        "a-1",
        1,
        [1, 1, 1, 1],
        curve=curve,
        skip=0.15,
        threshold_scores={0.3: [1, 1, 1, 1], 0.7: [0, 0, 1, 0]},
    )
    record = json.loads(path.read_text())
    items, values, param, compute = at_skip(record, item_frame(path), 0.2, "param")
    assert param == 0.2
    assert compute == pytest.approx(0.5 * 0.075 + 0.5 * 0.2)  # trained point's net compute: 0.15 / 2
    assert values["qa"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.25)
    assert items["score"].mean() == pytest.approx(values["qa"])
    _, _, param, compute = at_skip(record, item_frame(path), 0.1, "compute")
    assert compute == 0.1
    with pytest.raises(ItemsError, match="outside the run's curve"):
        at_skip(record, item_frame(path), 0.3, "param")


def test_a_perplexity_task_is_mixed_per_document_so_its_value_is_the_mixed_items_value(tmp_path):
    """Mutant killed: task values mixed linearly between the two points (a draw per run) while the items, and with
    them the variance and the bootstrap, are mixed per document: for ``inv_ppl`` the two differ (geometric against
    linear mixture), and D then disagreed with its own bootstrap by 12 Retain points on bf16_smollm2's public task."""
    curve = [{"threshold": 0.7, "skip": {"param_rate": 0.3, "net_compute_rate": 0.2}, "eval": {}, "retain": None}]
    path = write_run(tmp_path, "a-1", 1, [1, 1], ppl=[(-5.0, 5), (-5.0, 5)], curve=curve, skip=0.1)
    rows = [
        {"task": "qa", "item": i, "doc": f"d{i}", "metrics": {"acc": 1.0}, "threshold": t}
        for i in range(2)
        for t in (None, 0.7)
    ]
    rows += [{"task": "ppl", "item": i, "doc": f"p{i}", "metrics": {"inv_ppl": [-5.0, 5]}} for i in range(2)]
    rows += [
        {"task": "ppl", "item": i, "doc": f"p{i}", "metrics": {"inv_ppl": [-45.0, 5]}, "threshold": 0.7}
        for i in range(2)
    ]
    write_items(path.parent / ITEMS_FILENAME, [{k: v for k, v in r.items() if v is not None} for r in rows])
    record = json.loads(path.read_text())
    items, values, _, _ = at_skip(record, item_frame(path), 0.2, "param")
    # geometric: e^-5, not (e^-1 + e^-9) / 2
    assert values["ppl"] == pytest.approx(math.exp(-(0.5 * 5.0 + 0.5 * 45.0) / 5))
    assert values["ppl"] == pytest.approx(task_values(items)["ppl"])


def test_at_b_reads_each_a_run_at_its_same_seed_b_runs_trained_skip(tmp_path, capsys):
    """Mutants killed: A read at B's skip of another seed (or at the mean of B's skips); --at and --at-b together
    accepted."""
    curve = [
        {"threshold": 0.05, "skip": {"param_rate": 0.0, "net_compute_rate": 0.0}, "eval": {}, "retain": None},
        {"threshold": 0.95, "skip": {"param_rate": 0.4, "net_compute_rate": 0.2}, "eval": {}, "retain": None},
    ]
    ends = {0.05: [1, 1, 1, 1], 0.95: [0, 0, 0, 0]}
    write_run(tmp_path, "a-1", 1, [1, 1, 0, 0], curve=curve, skip=0.2, threshold_scores=ends)
    write_run(tmp_path, "a-2", 2, [1, 1, 0, 0], curve=curve, skip=0.2, threshold_scores=ends)
    write_run(tmp_path, "b-1", 1, [1, 1, 1, 0], curve=curve, skip=0.1, threshold_scores=ends)
    write_run(tmp_path, "b-2", 2, [1, 0, 0, 0], curve=curve, skip=0.3, threshold_scores=ends)
    (tmp_path / "dense.json").write_text(json.dumps({"eval": {"qa": {"acc": 1.0}}}))
    assert main([str(tmp_path), "--a", "variant=a", "--b", "variant=b", "--at-b"]) == 0
    out = capsys.readouterr().out
    # seed 1: A at 0.1 is halfway between τ 0.05 (1.0) and trained (0.5): 0.75, B 0.75 → 0; seed 2: A at 0.3 is
    # halfway between trained (0.5) and τ 0.95 (0.0): 0.25, B 0.25 → 0
    assert "(per seed +0.00, +0.00)" in out
    assert "1: 10.00 / 5.00 %, 2: 30.00 / 15.00 %" in out
    assert main([str(tmp_path), "--a", "variant=a", "--b", "variant=b", "--at-b", "--at", "0.2"]) == 2


def test_nearest_reads_both_runs_of_a_seed_at_the_nearest_skip_both_curves_reach(tmp_path, capsys):
    """Mutants killed: B left at its trained point when the skip read moved (D +25 instead of +50 at seed 1); the
    skip moved although A's curve reaches B's trained skip (seed 2); curves that share no skip, or --nearest without
    --at-b, accepted."""

    def curve(lo, hi):
        return [
            {"threshold": 0.05, "skip": {"param_rate": lo, "net_compute_rate": lo / 2}, "eval": {}, "retain": None},
            {"threshold": 0.95, "skip": {"param_rate": hi, "net_compute_rate": hi / 2}, "eval": {}, "retain": None},
        ]

    ends = {0.05: [1, 1, 1, 1], 0.95: [0, 0, 0, 0]}
    for seed in (1, 2):
        write_run(tmp_path, f"a-{seed}", seed, [1, 1, 0, 0], curve=curve(0.2, 0.4), skip=0.3, threshold_scores=ends)
    write_run(tmp_path, "b-1", 1, [1, 1, 1, 0], curve=curve(0.0, 0.4), skip=0.1, threshold_scores=ends)
    write_run(tmp_path, "b-2", 2, [1, 0, 0, 0], curve=curve(0.0, 0.4), skip=0.3, threshold_scores=ends)
    (tmp_path / "dense.json").write_text(json.dumps({"eval": {"qa": {"acc": 1.0}}}))
    args = [str(tmp_path), "--a", "variant=a", "--b", "variant=b", "--at-b"]
    assert main(args) == 2  # A's curve [0.2, 0.4] does not reach B's 0.1 at seed 1
    capsys.readouterr()
    assert main([*args, "--nearest"]) == 0
    out = capsys.readouterr().out
    # seed 1 read at 0.2: A at its τ 0.05 point (1.0); B two thirds of the way from τ 0.95 (0.4, 0.0) back to its
    # trained point (0.1, 0.75): 0.5 → +50. Seed 2 at B's own 0.3: A's trained 0.5 against B's 0.25 → +25.
    assert "(per seed +50.00, +25.00)" in out
    assert "1: 20.00 % (10.00, 30.00), 2: 30.00 % (30.00, 30.00)" in out
    write_run(tmp_path, "b-3", 3, [1, 0, 0, 0], curve=curve(0.0, 0.1), skip=0.05, threshold_scores=ends)
    write_run(tmp_path, "a-3", 3, [1, 1, 0, 0], curve=curve(0.2, 0.4), skip=0.3, threshold_scores=ends)
    assert main([*args, "--nearest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed 3" in err[0] and "share no param skip" in err[0]
    assert main([str(tmp_path), "--a", "variant=a", "--b", "variant=b", "--nearest"]) == 2


def test_cli_refuses_a_group_without_runs_in_one_line(tmp_path, capsys):
    write_run(tmp_path, "a-1", 1, [1, 0])
    assert main([str(tmp_path), "--a", "variant=a", "--b", "variant=nothing"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "variant=nothing" in err[0]


def test_across_runs_reads_b_between_its_runs_of_the_same_seed_on_the_chosen_axis():
    """Mutants killed: B's runs of another seed used; the parameter axis read when net compute was asked;
    extrapolation past B's runs."""
    from analysis.matched import across_runs

    def rec(variant, seed, param, compute, retain):
        return {
            "variant": variant,
            "seed": seed,
            "skip": {"param_rate": param, "net_compute_rate": compute},
            "retain": {"value": retain},
            "eval_meta": {"fingerprint": "f"},
        }

    records = [
        rec("a", 1, 0.12, 0.07, 60.0),
        rec("b", 1, 0.06, 0.058, 90.0),
        rec("b", 1, 0.12, 0.118, 50.0),
        rec("b", 2, 0.06, 0.058, 10.0),
        rec("b", 2, 0.12, 0.118, 10.0),
    ]
    (param,) = across_runs(records, {"variant": "a"}, {"variant": "b"}, "param")
    assert param["retain_b"] == pytest.approx(50.0) and param["difference"] == pytest.approx(10.0)
    (compute,) = across_runs(records, {"variant": "a"}, {"variant": "b"}, "compute")
    assert compute["retain_b"] == pytest.approx(90.0 - (0.07 - 0.058) / 0.06 * 40.0)
    records[0]["skip"]["param_rate"] = 0.2
    (outside,) = across_runs(records, {"variant": "a"}, {"variant": "b"}, "param")
    assert outside["retain_b"] is None and "outside" in outside["error"]


def test_across_runs_prefers_the_curve_of_one_trained_router():
    """Mutant killed: the curve ignored (B read between separately trained runs although one router covers it)."""
    from analysis.matched import across_runs

    def rec(variant, param, retain, curve=None):
        out = {
            "variant": variant,
            "seed": 1,
            "skip": {"param_rate": param, "net_compute_rate": param},
            "retain": {"value": retain},
            "eval_meta": {"fingerprint": "f"},
        }
        return out | ({"curve": curve} if curve else {})

    curve = [{"threshold": 0.8, "skip": {"param_rate": 0.2, "net_compute_rate": 0.2}, "retain": {"value": 70.0}}]
    records = [rec("a", 0.15, 80.0), rec("b", 0.1, 90.0, curve), rec("b", 0.3, 0.0)]
    (row,) = across_runs(records, {"variant": "a"}, {"variant": "b"}, "param")
    assert row["via"] == "curve" and row["retain_b"] == pytest.approx(80.0)
