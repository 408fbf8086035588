"""analysis.contrasts: every variant against one reference, per yardstick and cost axis, read by the study's rule."""

from __future__ import annotations

import json

import pytest

from analysis.contrasts import main, pooled, resolution
from tests.test_paired import write_run


def curve(lo, hi):
    return [
        {"threshold": 0.05, "skip": {"param_rate": lo, "net_compute_rate": lo / 2}, "eval": {}, "retain": None},
        {"threshold": 0.95, "skip": {"param_rate": hi, "net_compute_rate": hi / 2}, "eval": {}, "retain": None},
    ]


ENDS = {0.05: [1, 1, 1, 1], 0.95: [0, 0, 0, 0]}


def _study(root):
    """Seed 1: A's curve [0.2, 0.4] misses B's trained 0.1, so the pair is read at 0.2: A's trained skip, 10 pp from
    B's (off-point through B). Seed 2: read at B's trained 0.3, 5 pp from A's trained 0.35 (off-point through A).
    Seeds 3 and 4: read at the trained 0.3 of both (on-point)."""
    ours = root / "ours"
    for seed, a_skip, b_scores, b_skip in (
        (1, 0.2, [1, 1, 1, 0], 0.1),
        (2, 0.35, [1, 0, 0, 0], 0.3),
        (3, 0.3, [1, 0, 0, 0], 0.3),
        (4, 0.3, [1, 1, 1, 0], 0.3),
    ):
        write_run(ours, f"a-{seed}", seed, [1, 1, 0, 0], curve=curve(0.2, 0.4), skip=a_skip, threshold_scores=ENDS)
        write_run(ours, f"b-{seed}", seed, b_scores, curve=curve(0.0, 0.4), skip=b_skip, threshold_scores=ENDS)
    (ours / "dense.json").write_text(json.dumps({"eval": {"qa": {"acc": 1.0}}}))
    other = root / "other"  # only the reference scored there yet
    write_run(other, "b-1", 1, [1, 0, 0, 0], curve=curve(0.0, 0.4), skip=0.1, threshold_scores=ENDS)
    return ["--b", "variant=b", "--a", "variant=a", "--yardstick", f"ours={ours}", "--yardstick", f"other={other}"]


def test_each_cell_pairs_by_seed_flags_off_point_seeds_and_reads_d_without_them(tmp_path, capsys):
    """Mutants killed: an off-point seed not flagged, whether through B's trained skip (seed 1) or A's (seed 2), or
    on-point seeds flagged (3, 4); D without the off-point seeds computed over all of them; the compute axis read on
    parameter skip (there seed 2 is 2.5 pp from A's trained 17.5 %: on-point); a yardstick without the variant
    stopping the table instead of showing its cell; the file differing from what is printed."""
    args = _study(tmp_path)
    out_file = tmp_path / "contrasts.md"
    assert main([*args, "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in out.splitlines() if line.startswith("| a")}
    param, compute = rows[("a", "ours", "parameter")], rows[("a", "ours", "net compute")]
    assert "| 1, 2, 3, 4 | +10.42 ± " in param
    assert "1: +0.00 (20.00), 2: +41.67 (30.00), 3: +25.00 (30.00), 4: -25.00 (30.00) | 1, 2 | +0.00 ± " in param
    assert "1: +0.00 (10.00), 2: +41.67 (15.00), 3: +25.00 (15.00), 4: -25.00 (15.00) | 1 | +13.89 ± " in compute
    assert "no shared seed scored" in rows[("a", "other", "parameter")]
    assert out_file.read_text() == out


def test_off_point_distance_is_the_option_and_exclusive(tmp_path, capsys):
    """Seed 1 lies exactly 10 pp from B's trained skip: more than 10 pp is off-point, 10 is not (mutant: ≥)."""
    args = _study(tmp_path)
    assert main([*args, "--off-point", "10", "--axis", "param"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| a | ours"))
    assert row.endswith("| none | – |")


def test_a_selector_matching_nothing_or_a_bad_yardstick_is_refused_in_one_line(tmp_path, capsys):
    args = _study(tmp_path)
    assert main([*args, "--a", "variant=typo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'variant=typo' matches no record" in err[0]
    assert main([*args, "--yardstick", f"x={tmp_path / 'nowhere'}"]) == 2
    assert "expected NAME=DIR" in capsys.readouterr().err


def test_pooled_components_weigh_each_contrasts_seed_variance_by_its_degrees_of_freedom():
    """Mutants killed: a plain mean of the seed variances (7 instead of 6), a one-seed contrast (no seed variance)
    taken in, the pooled degrees of freedom left at one contrast's."""
    from analysis.paired import Components

    def comp(seeds, seed_var, item):
        return Components(["qa"], {"qa": 100.0}, {"qa": 50}, {"qa": item}, {"qa": 0.0}, seed_var, seeds, "items")

    out = pooled([comp(3, 4.0, 0.01), comp(2, 10.0, 0.03), comp(1, float("nan"), 0.5)])
    assert out.seed_var == pytest.approx(6.0) and out.seed_df == 3
    assert out.item_var["qa"] == pytest.approx(0.02)
    assert pooled([comp(1, float("nan"), 0.5)]) is None


def test_the_design_row_is_the_fewest_seeds_whose_half_width_reaches_the_target():
    """Mutants killed: the half-width at --seeds taken from the measured seeds' degrees of freedom instead of the
    planned study's (seeds − 1), the search starting above the answer, a yardstick without a two-seed contrast
    given a number."""
    from analysis.paired import Components

    def comp(seeds, seed_var):
        return Components(["qa"], {"qa": 100.0}, {"qa": 400}, {"qa": 1e-4}, {"qa": 1e-4}, seed_var, seeds, "items")

    cells = [
        ("x", "ours", "param", {"components": comp(3, 9.0)}),
        ("y", "ours", "param", {"components": comp(4, 11.0)}),
        ("x", "other", "param", {"components": comp(1, float("nan"))}),
    ]
    text = resolution(cells, 3.0, 5)
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| o")]
    both = pooled([comp(3, 9.0), comp(4, 11.0)])
    assert rows[0][:4] == ["ours", "parameter", "3, 4", "10.20 (5)"]
    assert rows[0][5] == f"±{both.half_width(5):.2f}" and both.half_width(5) > both.half_width(5, seed_df=5)
    fewest = next(n for n in range(2, 61) if both.half_width(n) <= 3.0)
    assert int(rows[0][6]) == fewest and both.half_width(fewest - 1) > 3.0
    assert rows[1][3] == "–" and "needs a contrast with ≥ 2 seeds" in rows[1][6]
    loose = next(line for line in resolution(cells, 100.0, 5).splitlines() if line.startswith("| ours"))
    assert loose.rstrip().endswith("| 2 |")  # two seeds already reach ±100
