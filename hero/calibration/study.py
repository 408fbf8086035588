"""One Optuna study per (variant, target, backbone, layer set); an ask/tell loop over all of them.

A study searches one knob (``hero.calibration.search_space``): α for a HeRo variant, the cost knob
of a Table 1 method; "α" below stands for either.

``calibrate(plans, ...)`` keeps ``parallel`` trials in flight across every study and starts
the next one as soon as any finishes (no synchronous batches). A study stops when a finished
trial's realized skip rate is within ``tolerance`` of its target; it fails, with what it
reached, when the trial budget runs out, when α at a bound of ``alpha_bounds`` cannot reach
the target, or when the bracket has collapsed onto a jump of the response. The studies of one variant at several
targets share their finished trials' points (``hero.calibration.sampler.sibling_points``), so the
second target starts from what the first one measured.

Trials carry user attributes ``skip`` (realized rate), ``record`` (path of the trial's
results.json), ``driver`` (host:pid of the calibrating process) and ``heartbeat``. A rerun
after the calibrating process was killed loads the same studies (``load_if_exists``); each
trial still marked RUNNING whose driver is gone (same host, dead pid, or no heartbeat for
``grace_s``) is failed and re-enqueued with the same α, and that rerun finds the trial's
finished record or its checkpoint through the pipeline's config-hash index.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from dataclasses import dataclass, field

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState

from hero.calibration.sampler import (
    SKIP_ATTR,
    TARGET_ATTR,
    TOLERANCE_ATTR,
    MonotoneSampler,
    bracket,
    finished_points,
)
from hero.calibration.search_space import bounds, distribution, start, to_x
from hero.calibration.trials import run_trial, trial_config
from hero.errors import ConfigError
from hero.knobs import ALPHA, Knob

SAMPLERS = ("monotone", "tpe")
HEARTBEAT_ATTR = "heartbeat"
# The loop records heartbeats itself (ask/tell, not Study.optimize), which is what Optuna warns about.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


@dataclass
class Plan:
    """One study: a variant's config at one target skip rate."""

    name: str
    variant: str
    target: float
    cfg: object  # the composed DictConfig of this variant (calibrate.yaml)
    steps: int
    full_steps: int
    max_param_rate: float
    meta: dict = field(default_factory=dict)
    knob: Knob = ALPHA
    num_routable: int = 0


@dataclass
class Outcome:
    """How a study ended: ``alpha`` (the knob's value) / ``skip`` of the trial closest to the target, ``error`` if it failed."""

    plan: Plan
    alpha: float | None
    skip: float | None
    trials: int
    error: str | None = None


def make_sampler(
    kind: str, x0: float, parallel: int, seed: int, knob: Knob = ALPHA, storage=None, step: float | None = None
) -> optuna.samplers.BaseSampler:
    """The study's sampler; ``storage`` lets the monotone one read the studies of the other targets; ``step``
    (``calibration.step``) replaces the knob's first step."""
    if kind == "monotone":
        step = knob.step if step is None else float(step)
        return MonotoneSampler(x0=x0, parallel=parallel, step=step, param=knob.name, storage=storage)
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=parallel > 1)
    raise ConfigError(f"calibration.sampler={kind!r}: allowed values are {', '.join(SAMPLERS)}")


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _driver_gone(driver: str | None) -> bool:
    if not driver:
        return True
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def orphaned(trial: optuna.trial.FrozenTrial, grace_s: float, now: float) -> bool:
    """A RUNNING trial nobody drives: its calibrating process is gone, or it has not beaten for ``grace_s``."""
    return (
        _driver_gone(trial.user_attrs.get("driver")) or now - float(trial.user_attrs.get(HEARTBEAT_ATTR, 0.0)) > grace_s
    )


def reclaim_orphans(study: optuna.Study, grace_s: float, param: str = ALPHA.name) -> int:
    """Fail the RUNNING trials of a dead calibrating process and re-enqueue their α; returns how many.

    An interrupted driver (a killed process, a session's end, a preempted job) is not a failed trial: the same α
    runs again, resuming from its checkpoint, without spending one of its ``storage.max_retry`` retries, which
    count trials that raised (``_failed``). So a long trial interrupted any number of times still finishes."""
    now = time.time()
    reclaimed = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not orphaned(t, grace_s, now):
            continue
        study.tell(t.number, state=TrialState.FAIL)
        if param in t.params:
            retries = int(t.user_attrs.get("retries", 0))
            study.enqueue_trial({param: t.params[param]}, user_attrs={"retries": retries, "retry_of": t.number})
        reclaimed += 1
    return reclaimed


def closest(study: optuna.Study, target: float, param: str = ALPHA.name) -> tuple[float, float] | None:
    """(α, skip) of the finished trial nearest the target."""
    points = finished_points(study, param)
    if not points:
        return None
    best = min(points, key=lambda p: abs(p.skip - target))
    return best.value, best.skip


def trials_used(study: optuna.Study) -> int:
    """Trials that trained (finished or cut off when the study had reached its tolerance)."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


class Calibration:
    """The ask/tell loop over several studies sharing ``parallel`` trial slots."""

    def __init__(self, plans: list[Plan], storage, executor, ccfg, trials_dir: str, log=print, on_outcome=None) -> None:
        """``on_outcome(outcome)`` is called as each study ends, while the others may still run (the CLI writes a
        reached value to the calibration file then, so seeded runs at it can start before the last study ends)."""
        self.plans, self.storage, self.executor, self.ccfg = plans, storage, executor, ccfg
        self.trials_dir, self.log = trials_dir, log
        self.on_outcome = on_outcome or (lambda _outcome: None)
        self.parallel = max(1, int(ccfg.parallel))
        self.tolerance, self.max_trials = float(ccfg.tolerance), int(ccfg.max_trials)
        lo, hi = (float(b) for b in ccfg.alpha_bounds)
        if not 0 < lo < hi:
            raise ConfigError(f"calibration.alpha_bounds={[lo, hi]}: need 0 < low < high (α is searched in log scale)")
        self.distributions = {
            p.name: distribution(p.knob, *bounds(p.knob, ccfg.alpha_bounds, p.num_routable)) for p in plans
        }
        self.studies: dict[str, optuna.Study] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.in_flight: list[tuple[object, Plan, optuna.trial.Trial]] = []
        self._beaten_at = 0.0  # when the trials in flight last beat (a new trial beats as it starts)
        self.driver = driver_id()
        self._native_heartbeat = isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None

    def _open(self, plan: Plan) -> optuna.Study:
        knob, distribution = plan.knob, self.distributions[plan.name]
        configured = plan.cfg.alpha if knob is ALPHA else None
        first = start(
            knob, configured, plan.target, plan.max_param_rate, plan.num_routable, distribution.low, distribution.high
        )
        sampler = make_sampler(
            self.ccfg.sampler,
            to_x(first, distribution),
            self.parallel,
            int(plan.cfg.seed),
            knob,
            self.storage,
            self.ccfg.get("step"),
        )
        study = optuna.create_study(
            study_name=plan.name, storage=self.storage, sampler=sampler, direction="minimize", load_if_exists=True
        )
        for key, value in {
            TARGET_ATTR: plan.target,
            "variant": plan.variant,
            "sampler": self.ccfg.sampler,
            "trial_steps": plan.steps,
            "full_steps": plan.full_steps,
            "seed": int(plan.cfg.seed),
            TOLERANCE_ATTR: self.tolerance,
            "knob": knob.name,
            **plan.meta,
        }.items():
            study.set_user_attr(key, value)
        if self._native_heartbeat:
            optuna.storages.fail_stale_trials(study)
        reclaimed = reclaim_orphans(study, float(self.ccfg.storage.grace_s), knob.name)
        done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        resumed = (
            f" (resumed: {done} finished trial(s), {reclaimed} orphaned trial(s) re-enqueued)"
            if done or reclaimed
            else ""
        )
        self.log(f"study {plan.name}: target {plan.target:.4f}, {plan.steps}-step trials{resumed}")
        return study

    def run(self) -> list[Outcome]:
        """Run every study to its end; the outcomes in plan order."""
        for plan in self.plans:
            self.studies[plan.name] = self._open(plan)
        while True:
            self._update()
            self._cancel_finished()
            self._fill()
            if not self.in_flight:
                break
            self._wait()
        return [self.outcomes[p.name] for p in self.plans]

    def _update(self) -> None:
        for plan in self.plans:
            if plan.name not in self.outcomes:
                self._check(plan)

    def _running(self, plan: Plan) -> int:
        return sum(1 for _, p, _ in self.in_flight if p is plan)

    def _check(self, plan: Plan) -> None:
        """Decide whether ``plan``'s study is done (reached, or failed with what it reached)."""
        study = self.studies[plan.name]
        best = closest(study, plan.target, plan.knob.name)
        used = trials_used(study)
        if best is not None and abs(best[1] - plan.target) <= self.tolerance:
            self.outcomes[plan.name] = Outcome(plan, best[0], best[1], used)
            self.log(
                f"study {plan.name}: reached {plan.knob.label}={best[0]:.4g} → skip {best[1]:.4f} "
                f"(target {plan.target:.4f} ± {self.tolerance:g}) after {used} trial(s)"
            )
            self.on_outcome(self.outcomes[plan.name])
            return
        error = self._dead_end(plan, study, best, used)
        if error:
            self.outcomes[plan.name] = Outcome(plan, best[0] if best else None, best[1] if best else None, used, error)
            self.log(f"study {plan.name}: FAILED — {error}")
            self.on_outcome(self.outcomes[plan.name])

    def _dead_end(self, plan: Plan, study: optuna.Study, best, used: int) -> str | None:
        if self._running(plan):
            return None
        failed = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if "error" in t.user_attrs and int(t.user_attrs.get("retries", 0)) >= int(self.ccfg.storage.max_retry)
        ]
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        knob, distribution = plan.knob, self.distributions[plan.name]
        name = knob.label
        if failed and not waiting:
            return (
                f"trial {failed[-1].number} ({name}={failed[-1].params.get(knob.name, float('nan')):.4g}) failed "
                f"{int(failed[-1].user_attrs.get('retries', 0)) + 1} time(s): {failed[-1].user_attrs.get('error')}"
            )
        reached = (
            (
                f"closest {name}={best[0]:.4g} gave skip {best[1]:.4f} (target {plan.target:.4f}, off by "
                f"{100 * abs(best[1] - plan.target):.2f} pp)"
            )
            if best
            else "no trial finished"
        )
        points = finished_points(study, knob.name)
        lo_b, hi_b = to_x(distribution.low, distribution), to_x(distribution.high, distribution)
        widen = (
            "raise calibration.alpha_bounds or the training budget" if knob is ALPHA else "raise the training budget"
        )
        top = [p for p in points if p.x >= hi_b - 1e-9]
        if top and top[0].skip < plan.target - self.tolerance:
            return (
                f"{name} at the upper bound {distribution.high:g} gives skip {top[0].skip:.4f} < target "
                f"{plan.target:.4f} (ceiling {plan.max_param_rate:.4f}); {widen}, or lower the target"
            )
        bottom = [p for p in points if p.x <= lo_b + 1e-9]
        if bottom and bottom[0].skip > plan.target + self.tolerance:
            lower = "lower calibration.alpha_bounds or raise the target" if knob is ALPHA else "raise the target"
            return (
                f"{name} at the lower bound {distribution.low:g} already gives skip {bottom[0].skip:.4f} > target "
                f"{plan.target:.4f}; {lower}"
            )
        lo, hi = bracket(points, plan.target)
        if lo is not None and hi is not None and hi.x - lo.x < knob.min_bracket:
            return (
                f"tolerance ±{100 * self.tolerance:.2f} pp unreachable: skip jumps from {lo.skip:.4f} at "
                f"{name}={lo.value:.4g} to {hi.skip:.4f} at {name}={hi.value:.4g}; {reached}"
            )
        if used >= self.max_trials:
            return (
                f"tolerance ±{100 * self.tolerance:.2f} pp not reached after {used} trials "
                f"(calibration.max_trials={self.max_trials}): {reached}"
            )
        return None

    def _cancel_finished(self) -> None:
        """Stop the trials of studies that are done; their slots go to the studies still searching."""
        keep = []
        for job, plan, trial in self.in_flight:
            if plan.name in self.outcomes and not job.done():
                job.cancel()
                self.studies[plan.name].tell(trial, state=TrialState.PRUNED)
            else:
                keep.append((job, plan, trial))
        self.in_flight = keep

    def _next_plan(self) -> Plan | None:
        open_plans = [
            p
            for p in self.plans
            if p.name not in self.outcomes and trials_used(self.studies[p.name]) + self._running(p) < self.max_trials
        ]
        return min(open_plans, key=lambda p: (self._running(p), trials_used(self.studies[p.name])), default=None)

    def _fill(self) -> None:
        while len(self.in_flight) < self.parallel:
            self._update()
            plan = self._next_plan()
            if plan is None:
                return
            study = self.studies[plan.name]
            knob = plan.knob
            trial = study.ask({knob.name: self.distributions[plan.name]})
            alpha = trial.params[knob.name]
            self._beat(trial, driver=True)
            config = trial_config(plan.cfg, alpha, plan.name, plan.steps, plan.target, knob.key)
            run_dir = f"{self.trials_dir}/{plan.meta['slug']}/{knob.name}={alpha:.6g}"
            self.log(f"study {plan.name}: trial {trial.number} {knob.label}={alpha:.4g} started ({run_dir})")
            job = self.executor.submit(run_trial, config, run_dir)
            self.in_flight.append((job, plan, trial))
            if job.done():
                self._collect()

    def _wait(self) -> None:
        """Poll every ``poll_s`` until a trial finishes; beat every ``storage.heartbeat_s`` (each beat is a write,
        one line per trial in a journal: beating at every poll grew a committed journal by 1,500 lines a trial)."""
        poll, every = float(self.ccfg.poll_s), float(self.ccfg.storage.get("heartbeat_s", 60))
        while not any(job.done() for job, _, _ in self.in_flight):
            if time.time() - self._beaten_at >= every:
                for _, _, trial in self.in_flight:
                    self._beat(trial)
                self._beaten_at = time.time()
            time.sleep(poll)
        self._collect()

    def _beat(self, trial: optuna.trial.Trial, driver: bool = False) -> None:
        """Mark a trial in flight as alive (Optuna's heartbeat on RDB storages, a user attribute everywhere)."""
        if driver:
            trial.set_user_attr("driver", self.driver)
        trial.set_user_attr(HEARTBEAT_ATTR, time.time())
        if self._native_heartbeat:
            self.storage.record_heartbeat(trial._trial_id)

    def _collect(self) -> None:
        """Tell the studies the results of every finished trial."""
        keep = []
        for job, plan, trial in self.in_flight:
            if not job.done():
                keep.append((job, plan, trial))
                continue
            study = self.studies[plan.name]
            try:
                result = job.result()
            except Exception as err:  # noqa: BLE001 - a failed trial is recorded and retried, not fatal
                self._failed(study, trial, err, plan.knob.name)
                continue
            trial.set_user_attr(SKIP_ATTR, float(result["skip"]))
            trial.set_user_attr("record", result["record"])
            study.tell(trial, abs(float(result["skip"]) - plan.target))
            self.log(
                f"study {plan.name}: trial {trial.number} {plan.knob.label}={trial.params[plan.knob.name]:.4g} "
                f"→ skip {result['skip']:.4f}"
            )
        self.in_flight = keep

    def _failed(self, study: optuna.Study, trial: optuna.trial.Trial, err: Exception, param: str) -> None:
        message = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
        retries = int(trial.user_attrs.get("retries", 0))
        trial.set_user_attr("error", message)
        study.tell(trial, state=TrialState.FAIL)
        self.log(f"study {study.study_name}: trial {trial.number} failed: {message}")
        if retries < int(self.ccfg.storage.max_retry):
            study.enqueue_trial(
                {param: trial.params[param]}, user_attrs={"retries": retries + 1, "retry_of": trial.number}
            )
