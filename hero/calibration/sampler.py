"""``MonotoneSampler``: an Optuna sampler for a response that rises with its one parameter.

Calibration searches the α (or a Table 1 method's cost knob, ``hero.calibration.search_space``) at which
the realized skip rate hits a target. The skip rate rises with it, so the search is root
finding, not black-box optimisation. The sampler works in x = log10 α (a log-scale
parameter) or x = the value (a linear one; an integer parameter is rounded) and reads the realized skip rate that each finished trial stored
as the user attribute ``skip`` and the target the study stored as ``target_skip``:

* no finished trial: start at ``x0`` (α₀ of the config) and, for trials already in
  flight, spread outwards from it in steps of ``step`` decades;
* all finished trials on one side of the target: extrapolate along the secant of the two
  points nearest the target (at least ``min_expand`` and at most ``step`` decades past the
  explored range, doubling ``step`` after each of the study's own misses), or step by ``step``
  when there is no rising slope; parallel proposals continue further out in the same direction, spaced as far
  apart as the first proposal is from the explored range;
* a bracket [x_lo, x_hi] with skip(x_lo) < target < skip(x_hi): the secant through the
  bracket ends (regula falsi), or the midpoint (bisection) when the last two finished trials
  fell on the same side of the target (regula falsi stagnating), kept at least ``margin`` ×
  width from the ends; a parallel proposal takes the next free point of x*, x* ± δ,
  x* ± 2δ, … (δ = width / (2·parallel + 2)) inside the bracket, so several trials in
  flight cut the bracket at once instead of duplicating each other.

Studies that differ only in their target (``skip=`` in the study name: the same variant, setup,
seed and trial length, so the same training at each α) share their points: with ``storage``
given, a study brackets and interpolates on its siblings' finished trials too (``sibling_points``),
and when a sibling's trial already lies within the study's ``tolerance`` of its target, the sampler
proposes that trial's α exactly, which the pipeline then scores without training again
(``reuse_trained``). Only the study's own trials decide bisection and when it ends.

Proposals are a pure function of the finished and running trials (no random state), so
a resumed study proposes what the killed one would have. A trial whose skip rate is
within ``tolerance`` of the target ends the search: the sampler then refines around it,
but ``hero.calibration.study`` stops asking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from hero.calibration.search_space import from_x, to_x

PARAM = "alpha"
SKIP_ATTR = "skip"
TARGET_ATTR = "target_skip"
TOLERANCE_ATTR = "tolerance"
TARGET_SEGMENT = re.compile(r"/skip=[^/]+/")


@dataclass(frozen=True)
class Point:
    """One finished trial: x (log10 α, or the knob's value), its realized skip rate, the value itself, the trial number."""

    x: float
    skip: float
    value: float | None = None
    number: int = 0


def finished_points(study: Study, param: str = PARAM) -> list[Point]:
    """Finished trials with a realized skip rate, sorted by the parameter ``param``."""
    points = [
        Point(to_x(t.params[param], t.distributions[param]), float(t.user_attrs[SKIP_ATTR]), t.params[param], t.number)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if param in t.params and SKIP_ATTR in t.user_attrs
    ]
    return sorted(points, key=lambda p: (p.x, p.skip))


def sibling_points(storage, study_name: str, param: str = PARAM) -> list[Point]:
    """Finished trials of the studies in ``storage`` whose name differs from ``study_name`` only in the target."""
    key = TARGET_SEGMENT.sub("/", study_name)
    if key == study_name:
        return []
    points = []
    for name in optuna.get_all_study_names(storage):
        if name != study_name and TARGET_SEGMENT.sub("/", name) == key:
            points += finished_points(optuna.load_study(study_name=name, storage=storage), param)
    return sorted(points, key=lambda p: (p.x, p.skip))


def bracket(points: list[Point], target: float) -> tuple[Point | None, Point | None]:
    """The tightest (below, above) pair: the largest α under the target and the smallest α over it."""
    below = [p for p in points if p.skip < target]
    above = [p for p in points if p.skip > target]
    lo = max(below, key=lambda p: p.x) if below else None
    hi = min(above, key=lambda p: p.x) if above else None
    if lo is not None and hi is not None and lo.x >= hi.x:
        lo = max((p for p in below if p.x < hi.x), key=lambda p: p.x, default=None)
    return lo, hi


def secant(points: list[Point], target: float) -> float | None:
    """Where the line through two points (rising) reaches the target; None without a rising slope."""
    if len(points) < 2 or points[0].x == points[1].x:
        return None
    slope = (points[1].skip - points[0].skip) / (points[1].x - points[0].x)
    return points[0].x + (target - points[0].skip) / slope if slope > 0 else None


class MonotoneSampler(BaseSampler):
    """Bracket in log α (or the knob), then secant / bisection; parallel proposals spread inside the bracket.

    ``param``: the parameter it proposes (others go to a random sampler); ``x0`` and ``step``
    are in its x coordinate; ``storage``: where to find sibling studies (None: none are read).
    """

    def __init__(
        self,
        x0: float,
        step: float = 1.0,
        parallel: int = 1,
        margin: float = 0.1,
        min_expand: float = 0.25,
        param: str = PARAM,
        storage=None,
    ) -> None:
        self.param, self.storage = param, storage
        self.x0, self.step, self.parallel = float(x0), float(step), max(1, int(parallel))
        self.margin, self.min_expand = float(margin), float(min_expand)
        self._fallback = optuna.samplers.RandomSampler(seed=0)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict:
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> float:
        if param_name != self.param or not isinstance(param_distribution, (FloatDistribution, IntDistribution)):
            return self._fallback.sample_independent(study, trial, param_name, param_distribution)
        lo, hi = to_x(param_distribution.low, param_distribution), to_x(param_distribution.high, param_distribution)
        running = [
            to_x(t.params[self.param], t.distributions[self.param])
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != trial.number and self.param in t.params
        ]
        shared = sibling_points(self.storage, study.study_name, self.param) if self.storage is not None else []
        x = self.propose(
            finished_points(study, self.param),
            float(study.user_attrs[TARGET_ATTR]),
            running,
            (lo, hi),
            integer=isinstance(param_distribution, IntDistribution),
            shared=shared,
            tolerance=study.user_attrs.get(TOLERANCE_ATTR),
        )
        same = [p.value for p in shared if p.x == x]  # a sibling's α itself, not its round trip through x
        return same[0] if same else from_x(x, param_distribution)

    def propose(
        self,
        points: list[Point],
        target: float,
        running: list[float],
        bounds: tuple[float, float],
        integer: bool = False,
        shared: list[Point] = (),
        tolerance: float | None = None,
    ) -> float:
        """The next x (log10 α, or the knob) given finished points, the target and the x of trials in flight.

        ``integer``: proposals are rounded to whole numbers, and a number already tried or in
        flight is not proposed again while another candidate is free. ``shared``: sibling studies'
        points (``sibling_points``); one within ``tolerance`` of the target is proposed as it is.
        """
        lo_b, hi_b = bounds
        own = {p.x for p in points}
        shared = [p for p in shared if p.x not in own]
        if tolerance is not None:
            hits = [p for p in shared if abs(p.skip - target) <= float(tolerance) and p.x not in running]
            if hits:
                return min(hits, key=lambda p: (abs(p.skip - target), p.x)).x
        candidates, spacing = self._candidates(
            sorted(points + shared, key=lambda p: (p.x, p.skip)), target, bounds, points
        )
        clipped = [min(max(c, lo_b), hi_b) for c in candidates]
        if integer:
            clipped, spacing = [float(round(c)) for c in clipped], max(spacing, 1.0)
        taken = set(running) | {p.x for p in points}
        for c in clipped:
            if all(abs(c - r) > spacing / 2 for r in taken):
                return c
        return clipped[0]

    def _candidates(
        self, points: list[Point], target: float, bounds: tuple[float, float], own: list[Point] | None = None
    ) -> tuple[list[float], float]:
        """Proposals in order of preference, and how far apart trials in flight must stay; ``own``: the study's
        own points among ``points`` (its last two decide regula falsi or bisection; default: all of them)."""
        n = max(self.parallel, 1) * 2 + 2
        if not points:
            step = min(self.step, (bounds[1] - bounds[0]) / 4)
            return [self.x0] + [self.x0 + sign * k * self.step for k in range(1, n) for sign in (1, -1)], step
        lo, hi = bracket(points, target)
        if lo is not None and hi is not None:
            width = hi.x - lo.x
            x = lo.x + (target - lo.skip) * width / (hi.skip - lo.skip)
            last = sorted(points if own is None else own, key=lambda p: p.number)[-2:]
            if len(last) == 2 and (last[0].skip < target) == (last[1].skip < target):
                x = (lo.x + hi.x) / 2
            x = min(max(x, lo.x + self.margin * width), hi.x - self.margin * width)
            delta = width / (2 * self.parallel + 2)
            inside = [x + sign * k * delta for k in range(1, n) for sign in (1, -1)]
            return [x] + [c for c in inside if lo.x < c < hi.x], delta
        return self._expand(points, target, below=hi is None, misses=len(points if own is None else own))

    def _expand(self, points: list[Point], target: float, below: bool, misses: int) -> tuple[list[float], float]:
        """Every finished skip rate is under the target (``below``) or over it: step outwards, ``step`` doubled
        for each of the study's own ``misses`` after the first (a sibling's trial is not a step this study took)."""
        direction = 1.0 if below else -1.0
        edge = max(p.x for p in points) if below else min(p.x for p in points)
        step = self.step * 2.0 ** max(0, misses - 1)
        first = edge + direction * step
        guess = secant(sorted(points, key=lambda p: abs(p.skip - target))[:2], target)
        if guess is not None:
            first = edge + direction * min(max((guess - edge) * direction * 1.2, self.min_expand), step)
        span = abs(first - edge)
        return [first + direction * k * span for k in range(2 * self.parallel + 2)], span
