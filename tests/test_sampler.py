"""MonotoneSampler (hero/calibration/sampler.py) helper by helper, each against values computed by hand.

Pure Python and in-memory Optuna studies: no training. The points use skip rates and positions that are exact
in binary wherever a comparison is strict (``<`` against ``<=``), so the expected values are exact too.
"""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from hero.calibration.sampler import (
    SKIP_ATTR,
    TARGET_ATTR,
    TOLERANCE_ATTR,
    MonotoneSampler,
    Point,
    bracket,
    finished_points,
    secant,
    sibling_points,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

P = Point
LOG_ALPHA = FloatDistribution(1e-6, 10.0, log=True)
WIDE = (-6.0, 1.0)


def approx(values):
    return pytest.approx(values, abs=1e-12)


def add(study, params: dict, skip=None, state=TrialState.COMPLETE, dists=None):
    """A trial with the given params (α on LOG_ALPHA unless ``dists`` says otherwise) and realized ``skip``."""
    dists = dists or {name: LOG_ALPHA for name in params}
    study.add_trial(
        create_trial(
            params=params,
            distributions=dists,
            user_attrs={} if skip is None else {SKIP_ATTR: skip},
            value=None if state != TrialState.COMPLETE else 0.0,
            state=state,
        )
    )


def new_study(sampler, target=None, tolerance=None, name=None, storage=None):
    study = optuna.create_study(sampler=sampler, study_name=name, storage=storage)
    if target is not None:
        study.set_user_attr(TARGET_ATTR, target)
    if tolerance is not None:
        study.set_user_attr(TOLERANCE_ATTR, tolerance)
    return study


# ---------------------------------------------------------------- bracket


def test_bracket_leaves_points_at_the_target_out_of_both_sides():
    points = [P(-4.0, 0.05), P(-3.0, 0.1), P(-2.0, 0.1), P(-1.0, 0.2), P(0.0, 0.3)]
    assert bracket(points, 0.1) == (P(-4.0, 0.05), P(-1.0, 0.2))


def test_bracket_is_the_largest_below_and_the_smallest_above_whatever_the_order():
    points = [P(0.0, 0.3), P(-4.0, 0.05), P(-1.0, 0.2), P(-5.0, 0.01), P(-0.5, 0.25)]
    assert bracket(points, 0.1) == (P(-4.0, 0.05), P(-1.0, 0.2))


def test_bracket_with_one_side_or_none():
    assert bracket([P(-5.0, 0.01), P(-4.0, 0.05)], 0.1) == (P(-4.0, 0.05), None)
    assert bracket([P(-1.0, 0.2), P(0.0, 0.3)], 0.1) == (None, P(-1.0, 0.2))
    assert bracket([], 0.1) == (None, None)
    assert bracket([P(-3.0, 0.1), P(-2.0, 0.1)], 0.1) == (None, None)


def test_bracket_of_a_non_monotone_response_keeps_below_under_above():
    # the largest α under the target (-1) lies past the smallest over it (-2): the largest under it left of -2
    points = [P(-3.0, 0.02), P(-2.0, 0.2), P(-1.0, 0.05)]
    assert bracket(points, 0.1) == (P(-3.0, 0.02), P(-2.0, 0.2))
    # the same x below and above: not a bracket either
    points = [P(-3.0, 0.02), P(-2.0, 0.05), P(-2.0, 0.2)]
    assert bracket(points, 0.1) == (P(-3.0, 0.02), P(-2.0, 0.2))
    # of several under the target left of it, the largest
    points = [P(-4.0, 0.01), P(-3.0, 0.02), P(-2.0, 0.2), P(-1.0, 0.05)]
    assert bracket(points, 0.1) == (P(-3.0, 0.02), P(-2.0, 0.2))
    # nothing under the target left of the smallest α over it
    assert bracket([P(-2.0, 0.2), P(-1.0, 0.05)], 0.1) == (None, P(-2.0, 0.2))
    assert bracket([P(-2.0, 0.2), P(-2.0, 0.05)], 0.1) == (None, P(-2.0, 0.2))


# ---------------------------------------------------------------- secant


def test_secant_through_the_first_two_points():
    # slope (0.75 - 0.25) / 2 = 0.25 per unit; 0.625 is 0.375 above 0.25: 1.5 past -3
    assert secant([P(-3.0, 0.25), P(-1.0, 0.75)], 0.625) == -1.5
    assert secant([P(-1.0, 0.75), P(-3.0, 0.25)], 0.625) == -1.5
    assert secant([P(-3.0, 0.25), P(-1.0, 0.75)], 0.125) == -3.5
    # a third point does not enter it
    assert secant([P(-3.0, 0.25), P(-1.0, 0.75), P(0.0, 0.0)], 0.625) == -1.5


def test_secant_without_a_rising_slope_is_none():
    assert secant([], 0.5) is None
    assert secant([P(-3.0, 0.25)], 0.5) is None
    assert secant([P(-3.0, 0.25), P(-3.0, 0.75)], 0.5) is None  # no width
    assert secant([P(-3.0, 0.25), P(-1.0, 0.25)], 0.5) is None  # flat
    assert secant([P(-3.0, 0.75), P(-1.0, 0.25)], 0.5) is None  # falling


# ---------------------------------------------------------------- finished_points


def test_finished_points_are_complete_trials_with_the_param_and_a_skip_sorted_by_x_then_skip():
    study = new_study(MonotoneSampler(x0=-3.0), target=0.1)
    add(study, {"alpha": 1e-2}, 0.3)  # 0
    add(study, {"alpha": 1e-4}, 0.1)  # 1
    add(study, {"alpha": 1e-3})  # 2: no skip
    add(study, {"other": 1e-3}, 0.2)  # 3: no α
    add(study, {"alpha": 1e-3}, 0.2, state=TrialState.FAIL)  # 4
    add(study, {"alpha": 1e-3}, 0.2, state=TrialState.PRUNED)  # 5
    add(study, {"alpha": 1e-4}, 0)  # 6: the same α, a lower skip: first
    study.enqueue_trial({"alpha": 1e-3})
    running = study.ask({"alpha": LOG_ALPHA})  # 7: running, with a skip already
    running.set_user_attr(SKIP_ATTR, 0.2)
    points = finished_points(study)
    assert points == [P(-4.0, 0.0, 1e-4, 6), P(-4.0, 0.1, 1e-4, 1), P(-2.0, 0.3, 1e-2, 0)]
    assert all(type(p.skip) is float for p in points)
    assert finished_points(study, "other") == [P(-3.0, 0.2, 1e-3, 3)]


def test_finished_points_of_a_linear_knob_are_its_values():
    study = new_study(MonotoneSampler(x0=3.0, param="k"), target=0.1)
    k = IntDistribution(0, 12)
    add(study, {"k": 7}, 0.25, dists={"k": k})
    add(study, {"k": 3}, 0.125, dists={"k": k})
    add(study, {"alpha": 1e-3}, 0.5)
    assert finished_points(study, "k") == [P(3.0, 0.125, 3, 1), P(7.0, 0.25, 7, 0)]


# ---------------------------------------------------------------- sibling_points

SLUG = "hero-calibrate/tiny/second_half/full/skip={}/abcd1234-s{}-n40"


def test_sibling_points_are_the_finished_trials_of_the_same_setup_at_other_targets():
    storage = optuna.storages.InMemoryStorage()
    a = new_study(None, name=SLUG.format("0.1000", 42), storage=storage)
    add(a, {"alpha": 1e-3}, 0.08)  # a's 0
    add(a, {"alpha": 1e-2}, 0.2)  # a's 1
    me = new_study(None, name=SLUG.format("0.2000", 42), storage=storage)
    add(me, {"alpha": 1e-4}, 0.01)  # its own: not a sibling's
    c = new_study(None, name=SLUG.format("0.3000", 42), storage=storage)
    add(c, {"alpha": 1e-1}, 0.4)  # c's 0
    add(c, {"alpha": 1e-3}, 0.07)  # c's 1: a's α, a lower skip
    add(c, {"alpha": 1e-5})  # no skip
    other_seed = new_study(None, name=SLUG.format("0.1000", 43), storage=storage)
    add(other_seed, {"alpha": 1e-5}, 0.0)

    assert sibling_points(storage, SLUG.format("0.2000", 42)) == [
        P(-3.0, 0.07, 1e-3, 1),
        P(-3.0, 0.08, 1e-3, 0),
        P(-2.0, 0.2, 1e-2, 1),
        P(-1.0, 0.4, 1e-1, 0),
    ]
    assert sibling_points(storage, SLUG.format("0.9000", 42)) == [
        P(-4.0, 0.01, 1e-4, 0),
        P(-3.0, 0.07, 1e-3, 1),
        P(-3.0, 0.08, 1e-3, 0),
        P(-2.0, 0.2, 1e-2, 1),
        P(-1.0, 0.4, 1e-1, 0),
    ]
    # a name without a target segment has no siblings (the study "…/skip=…/…" would otherwise match it)
    assert sibling_points(storage, "hero-calibrate/tiny/second_half/full/abcd1234-s42-n40") == []
    # another parameter: only trials that have it
    assert sibling_points(storage, SLUG.format("0.2000", 42), "k") == []
    k = IntDistribution(0, 12)
    add(a, {"k": 5}, 0.125, dists={"k": k})
    assert sibling_points(storage, SLUG.format("0.2000", 42), "k") == [P(5.0, 0.125, 5, 2)]


# ---------------------------------------------------------------- __init__


def test_defaults_and_a_parallelism_of_at_least_one():
    s = MonotoneSampler(x0=-3)
    assert (s.x0, s.step, s.parallel, s.margin, s.min_expand, s.param, s.storage) == (
        -3.0,
        1.0,
        1,
        0.1,
        0.25,
        "alpha",
        None,
    )
    assert all(type(v) is float for v in (s.x0, s.step, s.margin, s.min_expand))
    storage = optuna.storages.InMemoryStorage()
    s = MonotoneSampler(x0=2, step=3, parallel=4.0, margin=0, min_expand=1, param="k", storage=storage)
    assert (s.x0, s.step, s.parallel, s.margin, s.min_expand, s.param, s.storage) == (
        2.0,
        3.0,
        4,
        0.0,
        1.0,
        "k",
        storage,
    )
    assert type(s.parallel) is int
    assert MonotoneSampler(x0=0, parallel=0).parallel == 1
    assert MonotoneSampler(x0=0, parallel=-3).parallel == 1


# ---------------------------------------------------------------- _candidates: no finished point


def test_first_candidates_spread_out_from_x0_by_whole_steps():
    s = MonotoneSampler(x0=-3.0)
    # 2·1 + 2 = 4 candidates a side (x0 and k = 1, 2, 3 both ways); spacing: step, at most a quarter of the range
    assert s._candidates([], 0.1, WIDE) == ([-3.0, -2.0, -4.0, -1.0, -5.0, 0.0, -6.0], 1.0)
    assert s._candidates([], 0.1, (-4.0, -2.0)) == ([-3.0, -2.0, -4.0, -1.0, -5.0, 0.0, -6.0], 0.5)
    two = MonotoneSampler(x0=-3.0, parallel=2, step=0.5)
    assert two._candidates([], 0.1, WIDE) == (
        [-3.0, -2.5, -3.5, -2.0, -4.0, -1.5, -4.5, -1.0, -5.0, -0.5, -5.5],
        0.5,
    )


# ---------------------------------------------------------------- _candidates: a bracket


def test_regula_falsi_in_a_bracket_and_candidates_strictly_inside_it():
    s = MonotoneSampler(x0=0.0)
    points = [P(-4.0, 0.125, number=0), P(-2.0, 0.625, number=1)]
    # -4 + (0.25 - 0.125) · 2 / 0.5 = -3.5; δ = 2 / 4; -4 and -2 themselves are not inside
    assert s._candidates(points, 0.25, WIDE) == ([-3.5, -3.0, -2.5], 0.5)
    three = MonotoneSampler(x0=0.0, parallel=3)
    # δ = 2 / 8, seven steps each way, those strictly inside the bracket in order of preference
    assert three._candidates(points, 0.25, WIDE) == ([-3.5, -3.25, -3.75, -3.0, -2.75, -2.5, -2.25], 0.25)


def test_the_estimate_keeps_a_margin_from_the_bracket_ends():
    s = MonotoneSampler(x0=0.0)
    points = [P(-4.0, 0.125, number=0), P(-2.0, 0.625, number=1)]
    # regula falsi would say -3.98: clamped to -4 + 0.1 · 2
    candidates, delta = s._candidates(points, 0.13, WIDE)
    assert (candidates, delta) == (approx([-3.8, -3.3, -2.8, -2.3]), 0.5)
    # and -2.02 to -2 - 0.1 · 2
    candidates, delta = s._candidates(points, 0.62, WIDE)
    assert (candidates, delta) == (approx([-2.2, -2.7, -3.2, -3.7]), 0.5)
    wide = MonotoneSampler(x0=0.0, margin=0.25)
    assert wide._candidates(points, 0.13, WIDE)[0][0] == -3.5


def test_bisection_when_the_last_two_own_trials_fell_on_the_same_side():
    s = MonotoneSampler(x0=0.0)
    # by trial number the last two (-4 and -3) are both under 0.25; by x the last two are not
    points = [P(-4.0, 0.125, number=1), P(-3.0, 0.2, number=2), P(-2.0, 0.625, number=0)]
    assert s._candidates(points, 0.25, WIDE) == ([-2.5, -2.25, -2.75], 0.25)
    # the last two differ: regula falsi, -3 + 0.05 / 0.425
    regula = [P(-4.0, 0.125, number=0), P(-3.0, 0.2, number=2), P(-2.0, 0.625, number=1)]
    candidates, delta = s._candidates(regula, 0.25, WIDE)
    assert candidates[0] == pytest.approx(-3.0 + 0.05 / 0.425)
    # only the last two count: the first two on the same side do not bisect
    later = [P(-4.0, 0.125, number=0), P(-3.0, 0.2, number=1), P(-2.0, 0.625, number=2)]
    assert s._candidates(later, 0.25, WIDE)[0][0] == pytest.approx(-3.0 + 0.05 / 0.425)


def test_a_trial_at_the_target_counts_as_not_below_it():
    s = MonotoneSampler(x0=0.0)
    # the last two: at 0.25 (not under it) and over it: the same side, so bisection of [-4, -2]
    points = [P(-4.0, 0.125, number=0), P(-3.5, 0.25, number=1), P(-2.0, 0.625, number=2)]
    assert s._candidates(points, 0.25, WIDE) == ([-3.0, -2.5, -3.5], 0.5)
    # over it, then at it: the same side again
    points = [P(-4.0, 0.125, number=0), P(-3.5, 0.25, number=2), P(-2.0, 0.625, number=1)]
    assert s._candidates(points, 0.25, WIDE) == ([-3.0, -2.5, -3.5], 0.5)
    # at it and under it: different sides, regula falsi
    points = [P(-4.0, 0.125, number=2), P(-3.5, 0.25, number=1), P(-2.0, 0.625, number=0)]
    assert s._candidates(points, 0.25, WIDE) == ([-3.5, -3.0, -2.5], 0.5)


def test_only_the_studys_own_trials_decide_bisection():
    s = MonotoneSampler(x0=0.0)
    own = [P(-2.0, 0.625, number=0), P(-4.0, 0.125, number=1)]
    sibling = P(-3.0, 0.2, number=5)
    everything = sorted([*own, sibling], key=lambda p: p.x)
    # own: above then below, regula falsi in the bracket [-3, -2] the sibling tightened
    assert s._candidates(everything, 0.25, WIDE, own)[0][0] == pytest.approx(-3.0 + 0.05 / 0.425)
    # without ``own``, every point is the study's: the last two (numbers 1 and 5) are both below
    assert s._candidates(everything, 0.25, WIDE)[0][0] == -2.5
    # one own trial: no pair to compare, regula falsi
    assert s._candidates([P(-4.0, 0.125, number=0), P(-2.0, 0.625, number=3)], 0.25, WIDE, own[1:]) == (
        [-3.5, -3.0, -2.5],
        0.5,
    )


# ---------------------------------------------------------------- _expand


def test_expansion_follows_the_secant_stretched_by_a_fifth():
    s = MonotoneSampler(x0=0.0)
    below = [P(-3.0, 0.125), P(-2.0, 0.25)]
    # the secant reaches 0.3125 at -1.5, 0.5 past the edge -2: 0.6 past it, then 0.6 apart
    candidates, span = s._expand(below, 0.3125, below=True, misses=2)
    assert (candidates, span) == (approx([-1.4, -0.8, -0.2, 0.4]), pytest.approx(0.6))
    above = [P(-3.0, 0.375), P(-2.0, 0.5)]
    # the secant reaches 0.3125 at -3.5, 0.5 under the edge -3: 0.6 under it
    candidates, span = s._expand(above, 0.3125, below=False, misses=2)
    assert (candidates, span) == (approx([-3.6, -4.2, -4.8, -5.4]), pytest.approx(0.6))
    # through _candidates: all under the target is "below"; the misses are the points
    assert s._candidates(below, 0.3125, WIDE)[0] == approx([-1.4, -0.8, -0.2, 0.4])
    assert s._candidates(above, 0.3125, WIDE)[0] == approx([-3.6, -4.2, -4.8, -5.4])


def test_expansion_is_at_least_min_expand_and_at_most_the_step():
    s = MonotoneSampler(x0=0.0)
    below = [P(-3.0, 0.125), P(-2.0, 0.25)]
    # the secant says 0.08 past the edge (0.096 stretched): min_expand 0.25
    assert s._expand(below, 0.26, below=True, misses=2) == ([-1.75, -1.5, -1.25, -1.0], 0.25)
    assert MonotoneSampler(x0=0.0, min_expand=0.5)._expand(below, 0.26, True, 2) == ([-1.5, -1.0, -0.5, 0.0], 0.5)
    # the secant says 2 past the edge (2.4 stretched): the step, 1 · 2^(misses − 1)
    assert s._expand(below, 0.5, below=True, misses=1) == ([-1.0, 0.0, 1.0, 2.0], 1.0)
    assert s._expand(below, 0.5, below=True, misses=2) == ([0.0, 2.0, 4.0, 6.0], 2.0)
    candidates, span = s._expand(below, 0.5, below=True, misses=3)
    assert (candidates, span) == (approx([0.4, 2.8, 5.2, 7.6]), pytest.approx(2.4))


def test_expansion_without_a_rising_slope_takes_the_doubled_step():
    s = MonotoneSampler(x0=0.0)
    one = [P(-3.0, 0.125)]
    assert s._expand(one, 0.5, below=True, misses=0) == ([-2.0, -1.0, 0.0, 1.0], 1.0)
    assert s._expand(one, 0.5, below=True, misses=1) == ([-2.0, -1.0, 0.0, 1.0], 1.0)
    assert s._expand(one, 0.5, below=True, misses=3) == ([1.0, 5.0, 9.0, 13.0], 4.0)
    assert s._expand(one, 0.0625, below=False, misses=2) == ([-5.0, -7.0, -9.0, -11.0], 2.0)
    falling = [P(-3.0, 0.25), P(-2.0, 0.125)]
    # edges: the largest x going up, the smallest going down
    assert s._expand(falling, 0.5, below=True, misses=2) == ([0.0, 2.0, 4.0, 6.0], 2.0)
    assert s._expand(falling, 0.0625, below=False, misses=1) == ([-4.0, -5.0, -6.0, -7.0], 1.0)
    half = MonotoneSampler(x0=0.0, step=0.5, parallel=2)
    # 2·2 + 2 = 6 candidates, step 0.5 · 2²
    assert half._expand(one, 0.5, below=True, misses=3) == ([-1.0, 1.0, 3.0, 5.0, 7.0, 9.0], 2.0)


def test_expansion_uses_the_two_points_nearest_the_target():
    s = MonotoneSampler(x0=0.0)
    # nearest 0.3125: 0.25 at -2 and 0.125 at -3 (secant: -1.5), not the first two by x (-4 and -3: secant at 0)
    points = [P(-4.0, 0.0625), P(-3.0, 0.125), P(-2.0, 0.25)]
    candidates, span = s._expand(points, 0.3125, below=True, misses=3)
    assert (candidates, span) == (approx([-1.4, -0.8, -0.2, 0.4]), pytest.approx(0.6))
    # going down from -4 the nearest are the other end: 0.5 and 0.375 (secant: -4.5 for 0.3125)
    points = [P(-2.0, 0.75), P(-4.0, 0.5), P(-3.0, 0.625)]
    candidates, span = s._expand(points, 0.3125, below=False, misses=3)
    assert candidates[0] == pytest.approx(-4.0 - 1.5 * 1.2)


def test_a_study_without_own_trials_steps_once():
    s = MonotoneSampler(x0=0.0)
    # all of a sibling's points under the target, none of the study's own: a first step, not a doubled one
    shared = [P(-3.0, 0.125), P(-3.0, 0.25)]
    assert s._candidates(shared, 0.5, WIDE, []) == ([-2.0, -1.0, 0.0, 1.0], 1.0)
    assert s._candidates(shared, 0.5, WIDE) == ([-1.0, 1.0, 3.0, 5.0], 2.0)


# ---------------------------------------------------------------- propose


def test_propose_takes_the_next_candidate_at_least_half_a_spacing_from_every_trial():
    s = MonotoneSampler(x0=-3.0)
    assert s.propose([], 0.1, [], WIDE) == -3.0
    assert s.propose([], 0.1, [-3.0], WIDE) == -2.0
    assert s.propose([], 0.1, [-3.0, -2.0], WIDE) == -4.0
    # exactly half a spacing (0.5) from -2.5 is taken: -3 and -2 are not free, -4 is
    assert s.propose([], 0.1, [-2.5], WIDE) == -4.0
    assert s.propose([], 0.1, [-2.6], WIDE) == -2.0
    # every candidate taken: the first
    assert s.propose([], 0.1, [-3.0, -2.0, -4.0, -1.0, -5.0, 0.0, -6.0], WIDE) == -3.0


def test_propose_spreads_trials_in_flight_inside_the_bracket():
    s = MonotoneSampler(x0=0.0)
    points = [P(-4.0, 0.125, number=0), P(-2.0, 0.625, number=1)]
    assert s.propose(points, 0.25, [], WIDE) == -3.5
    assert s.propose(points, 0.25, [-3.5], WIDE) == -3.0
    assert s.propose(points, 0.25, [-3.5, -3.0], WIDE) == -2.5
    assert s.propose(points, 0.25, [-3.5, -3.0, -2.5], WIDE) == -3.5
    # a finished trial is taken too: one at the target where regula falsi lands (-3.5)
    at_target = [P(-4.0, 0.125, number=1), P(-3.5, 0.25, number=0), P(-2.0, 0.625, number=2)]
    assert s.propose(at_target, 0.25, [], WIDE) == -3.0


def test_propose_clips_to_the_bounds():
    s = MonotoneSampler(x0=-3.0)
    assert s.propose([], 0.1, [], (-2.5, 1.0)) == -2.5
    assert s.propose([], 0.1, [], (-6.0, -4.0)) == -4.0
    # spacing min(1, 3.5 / 4) = 0.875: -2 is 0.5 from -2.5, more than 0.4375
    assert s.propose([], 0.1, [-2.5], (-2.5, 1.0)) == -2.0


def test_propose_rounds_an_integer_knob_and_keeps_whole_numbers_apart():
    s = MonotoneSampler(x0=2.4)
    # candidates 2.4, 3.4, 1.4, 4.4, 0.4, 5.4, -0.6 → 2, 3, 1, 4, 0, 5, 0
    assert s.propose([], 0.1, [], (0.0, 12.0), integer=True) == 2.0
    assert s.propose([], 0.1, [2.0], (0.0, 12.0), integer=True) == 3.0
    assert s.propose([], 0.1, [2.0, 3.0, 1.0], (0.0, 12.0), integer=True) == 4.0
    fine = MonotoneSampler(x0=2.4, step=0.4)
    # candidates 2.4, 2.8, 2.0, 3.2, 1.6, 3.6, 1.2 → 2, 3, 2, 3, 2, 4, 1; a spacing of at least 1: 3 is free of 2
    assert fine.propose([], 0.1, [2.0], (0.0, 12.0), integer=True) == 3.0
    assert fine.propose([], 0.1, [2.0, 3.0], (0.0, 12.0), integer=True) == 4.0
    # a fraction in flight 0.4 from 3 (x in flight need not be whole): within half of 1, so 3 is taken
    assert fine.propose([], 0.1, [2.0, 3.4], (0.0, 12.0), integer=True) == 4.0


def test_propose_reuses_a_siblings_trial_within_the_tolerance():
    s = MonotoneSampler(x0=0.0)
    shared = [P(-3.0, 0.25, 1e-3), P(-1.0, 0.75, 1e-1)]
    # both exactly 0.25 from 0.5, the tolerance: the smaller x
    assert s.propose([], 0.5, [], WIDE, shared=shared, tolerance=0.25) == -3.0
    # one in flight is not proposed again
    assert s.propose([], 0.5, [-3.0], WIDE, shared=shared, tolerance=0.25) == -1.0
    # the nearest to the target first
    closer = [*shared, P(-1.5, 0.625, 10**-1.5)]
    assert s.propose([], 0.5, [], WIDE, shared=closer, tolerance=0.25) == -1.5
    # outside the tolerance, or none given: regula falsi through the siblings, -3 + 0.25 · 2 / 0.5
    assert s.propose([], 0.5, [], WIDE, shared=shared, tolerance=0.125) == -2.0
    assert s.propose([], 0.5, [], WIDE, shared=shared) == -2.0
    assert s.propose([], 0.5, [], WIDE, shared=shared, tolerance=0) == -2.0
    assert s.propose([], 0.75, [], WIDE, shared=shared, tolerance=0) == -1.0
    # a sibling point at an α the study tried itself is the study's own point, never reused: the other one is
    own = [P(-3.0, 0.375, 1e-3, number=0)]
    assert s.propose(own, 0.5, [], WIDE, shared=shared, tolerance=0.25) == -1.0
    # nor does it bracket: [-3 (own, 0.375), -1 (0.75)], -3 + 0.125 · 2 / 0.375 (with it: -3 + 0.25 · 2 / 0.5)
    assert s.propose(own, 0.5, [], WIDE, shared=shared, tolerance=0.125) == pytest.approx(-3.0 + 0.25 / 0.375)


def test_propose_brackets_on_own_and_sibling_points_together():
    s = MonotoneSampler(x0=0.0)
    own = [P(-4.0, 0.125, number=0)]
    shared = [P(-2.0, 0.625, number=7)]
    assert s.propose(own, 0.25, [], WIDE, shared=shared) == -3.5
    # the sibling's point at the same α with another skip rate is dropped: the study's own counts
    assert s.propose(own, 0.25, [], WIDE, shared=[*shared, P(-4.0, 0.0, number=8)]) == -3.5
    # ties at one x sort by skip: the lower skip of two siblings at -2 would be the bracket's upper end
    two = [P(-2.0, 0.375, number=7), P(-2.0, 0.625, number=8)]
    assert s.propose(own, 0.25, [], WIDE, shared=list(reversed(two))) == -3.0


# ---------------------------------------------------------------- sample_independent


def ask_alpha(study, dist=LOG_ALPHA, name="alpha"):
    trial = study.ask()
    if isinstance(dist, IntDistribution):
        return trial, trial.suggest_int(name, dist.low, dist.high)
    return trial, trial.suggest_float(name, dist.low, dist.high, log=dist.log)


def test_sample_independent_interpolates_the_studys_finished_trials():
    study = new_study(MonotoneSampler(x0=0.0), target=0.25)
    add(study, {"alpha": 1e-4}, 0.125)
    add(study, {"alpha": 1e-2}, 0.625)
    add(study, {"alpha": 1e-3}, 0.5, state=TrialState.FAIL)
    assert ask_alpha(study)[1] == 10.0**-3.5


def test_sample_independent_spreads_over_the_running_trials():
    study = new_study(MonotoneSampler(x0=-3.0, parallel=3), target=0.1)
    study.ask()  # running without α: ignored
    assert ask_alpha(study)[1] == 10.0**-3
    assert ask_alpha(study)[1] == 10.0**-2
    assert ask_alpha(study)[1] == 10.0**-4
    add(study, {"alpha": 10.0**-1}, 0.2, state=TrialState.FAIL)  # not in flight
    assert ask_alpha(study)[1] == 10.0**-1


def test_sample_independent_clips_to_the_distributions_range():
    study = new_study(MonotoneSampler(x0=-3.0), target=0.1)
    assert ask_alpha(study, FloatDistribution(1e-6, 1e-4, log=True))[1] == 10.0**-4
    study = new_study(MonotoneSampler(x0=-3.0), target=0.1)
    assert ask_alpha(study, FloatDistribution(1e-2, 1.0, log=True))[1] == 10.0**-2
    study = new_study(MonotoneSampler(x0=0.5, param="p"), target=0.1)
    # linear: x is the value; the spacing min(1, 0.25 / 4) does not clip the candidates
    assert ask_alpha(study, FloatDistribution(0.0, 0.25), "p")[1] == 0.25


def test_sample_independent_for_an_integer_knob():
    study = new_study(MonotoneSampler(x0=4.4, param="k", parallel=2), target=0.1)
    k = IntDistribution(0, 12)
    trial, first = ask_alpha(study, k, "k")
    assert (first, type(first)) == (4, int)
    assert ask_alpha(study, k, "k")[1] == 5  # 4 in flight
    assert ask_alpha(study, k, "k")[1] == 3
    # steps of 0.4 (4.4, 4.8, 4.0, 5.2, 3.6, 5.6, …) round to 4, 5, 4, 5, 4, 6: whole numbers a spacing of 1 apart
    study = new_study(MonotoneSampler(x0=4.4, step=0.4, param="k", parallel=2), target=0.1)
    assert [ask_alpha(study, k, "k")[1] for _ in range(3)] == [4, 5, 6]
    study = new_study(MonotoneSampler(x0=0.0, param="k"), target=0.25)
    add(study, {"k": 2}, 0.125, dists={"k": k})
    add(study, {"k": 10}, 0.625, dists={"k": k})
    # regula falsi: 2 + 0.125 · 8 / 0.5 = 4
    assert ask_alpha(study, k, "k")[1] == 4


def test_sample_independent_reads_siblings_and_reuses_their_alpha_exactly():
    storage = optuna.storages.InMemoryStorage()
    sibling = new_study(None, name=SLUG.format("0.1000", 42), storage=storage)
    add(sibling, {"alpha": 2e-3}, 0.123)
    add(sibling, {"alpha": 1e-5}, 0.0)
    assert 10.0 ** math.log10(2e-3) != 2e-3  # the round trip through x would not be the same α
    sampler = MonotoneSampler(x0=0.0, storage=storage)
    study = new_study(sampler, target=0.125, tolerance=0.005, name=SLUG.format("0.1250", 42), storage=storage)
    assert ask_alpha(study)[1] == 2e-3
    # without a tolerance the sibling's point only brackets: expansion upwards from x = log10 2e-3
    study = new_study(sampler, target=0.125, name=SLUG.format("0.1251", 42), storage=storage)
    alpha = ask_alpha(study)[1]
    edge = math.log10(2e-3)
    assert alpha == pytest.approx(10 ** (edge + 0.25))
    # not reading the storage: alone, x0
    alone = new_study(MonotoneSampler(x0=-3.0), target=0.125, tolerance=0.005, name=SLUG.format("0.1252", 42))
    assert ask_alpha(alone)[1] == 10.0**-3


def test_sample_independent_reads_the_siblings_points_of_its_own_parameter():
    storage = optuna.storages.InMemoryStorage()
    k = IntDistribution(0, 12)
    sibling = new_study(None, name=SLUG.format("0.1000", 42), storage=storage)
    add(sibling, {"k": 7}, 0.125, dists={"k": k})
    add(sibling, {"alpha": 1e-3}, 0.125)
    study = new_study(
        MonotoneSampler(x0=3.0, param="k", storage=storage),
        target=0.125,
        tolerance=0.005,
        name=SLUG.format("0.1250", 42),
        storage=storage,
    )
    assert ask_alpha(study, k, "k")[1] == 7


def test_other_parameters_go_to_a_random_sampler_seeded_at_zero():
    study = new_study(MonotoneSampler(x0=-3.0), target=0.1)
    trial = study.ask()
    reference = optuna.samplers.RandomSampler(seed=0)
    frozen = study.get_trials(deepcopy=False)[-1]
    other = FloatDistribution(0.0, 1.0)
    expected = reference.sample_independent(study, frozen, "other", other)
    assert expected == 0.5488135039273248  # numpy's RandomState(0).uniform()
    assert trial.suggest_float("other", 0.0, 1.0) == expected
    # the sampled α itself is the monotone one
    assert trial.suggest_float("alpha", 1e-6, 10.0, log=True) == 10.0**-3
    # α with a distribution that is not a number range also goes to the random sampler
    study = new_study(MonotoneSampler(x0=-3.0), target=0.1)
    trial = study.ask()
    choices = CategoricalDistribution([1e-4, 1e-3, 1e-2, 1e-1, 1.0])
    fresh = optuna.samplers.RandomSampler(seed=0)
    expected = choices.to_external_repr(
        choices.to_internal_repr(fresh.sample_independent(study, frozen, "alpha", choices))
    )
    assert trial.suggest_categorical("alpha", [1e-4, 1e-3, 1e-2, 1e-1, 1.0]) == expected
    # a sampler for another knob sends α to the random sampler too
    study = new_study(MonotoneSampler(x0=-3.0, param="k"), target=0.1)
    trial = study.ask()
    expected = optuna.samplers.RandomSampler(seed=0).sample_independent(study, frozen, "alpha", LOG_ALPHA)
    assert trial.suggest_float("alpha", 1e-6, 10.0, log=True) == expected != 10.0**-3
