"""What ``calibrate.py`` does with its composed configs: check, plan the studies, run them, write the file."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hero.calibration.storage import mask_secrets, open_storage, storage_spec
from hero.calibration.study import Calibration, Outcome, Plan
from hero.calibration.trials import executor_kind, full_steps, make_executor, param_ceiling, trial_steps
from hero.calibration_file import backbone_key, finished_entry, layer_key, setup_hash, setup_of, write_entry
from hero.errors import ConfigError
from hero.knobs import knob_of


class CalibrationConfigError(ConfigError):
    """A variant or target cannot be calibrated."""


def targets_of(cfg: DictConfig) -> list[float]:
    raw = cfg.calibration.target_skip
    if raw is None:
        raise CalibrationConfigError(
            "calibration.target_skip is not set: give one or more targets, e.g. target_skip=0.2687"
        )
    values = list(raw) if OmegaConf.is_list(raw) else [raw]
    for value in values:
        if not isinstance(value, (int, float)) or not 0 < value < 1:
            raise CalibrationConfigError(f"target_skip={value!r}: must be a realized parameter skip rate in (0, 1)")
    return [float(v) for v in values]


def step_of(cfg: DictConfig) -> float | None:
    """``calibration.step``: the sampler's first step in the knob's x units; None: the knob's own."""
    raw = cfg.calibration.get("step")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw > 0:
        raise CalibrationConfigError(
            f"calibration.step={raw!r}: must be a positive step in the knob's x units (decades of α), "
            "or null for the knob's own"
        )
    return float(raw)


def plans_for(cfg: DictConfig) -> list[Plan]:
    """One plan per target of this variant config; bad variants and unreachable targets fail here."""
    from hero.spec import check

    check(cfg)
    knob = knob_of(cfg.method.name)
    if knob is None:
        raise CalibrationConfigError(
            f"method={cfg.method.name} (variant {cfg.variant}) has no routing: its skip rate "
            "does not depend on α, so there is nothing to calibrate (use method=hero, "
            "skipgpt_rt, static_drop or random_skip)"
        )
    targets = targets_of(cfg)
    step_of(cfg)
    ceiling, num_routable = param_ceiling(cfg, with_layers=True)
    for target in targets:
        if target >= ceiling:
            raise CalibrationConfigError(
                f"target_skip={target:g} is unreachable for layers={layer_key(cfg)} on {backbone_key(cfg)}: the routable "
                f"FFNs hold {100 * ceiling:.2f} % of the parameters, so the realized skip rate stays below {ceiling:.4f}"
            )
    setup = setup_of(cfg, knob.key)
    steps, full = trial_steps(cfg), full_steps(cfg)
    plans = []
    for target in targets:
        slug = f"{backbone_key(cfg)}/{layer_key(cfg)}/{cfg.variant}/skip={target:.4f}/{setup_hash(setup)[:8]}-s{cfg.seed}-n{steps}"
        plans.append(
            Plan(
                name=f"hero-calibrate/{slug}",
                variant=cfg.variant,
                target=target,
                cfg=cfg,
                steps=steps,
                full_steps=full,
                max_param_rate=ceiling,
                knob=knob,
                num_routable=num_routable,
                meta={
                    "slug": slug.replace(":", "-"),
                    "backbone": backbone_key(cfg),
                    "layer_set": layer_key(cfg),
                    "setup_hash": setup_hash(setup),
                    "max_param_rate": ceiling,
                },
            )
        )
    return plans


def calibrate(configs: list[DictConfig]) -> int:
    """Calibrate every (variant, target) of ``configs``; 0 when all reached their tolerance, else 1."""
    first = configs[0]
    ccfg = first.calibration
    plans = [plan for cfg in configs for plan in plans_for(cfg)]
    kept = [kept_outcome(plan, float(ccfg.tolerance)) for plan in plans] if ccfg.resume else [None] * len(plans)
    for outcome in filter(None, kept):
        plan = outcome.plan
        print(
            f"kept {plan.variant}@{plan.target:g}: {plan.knob.name}={outcome.alpha:.6g} gave skip {outcome.skip:.4f} "
            f"after {outcome.trials} trial(s), as {plan.cfg.calibration.file} says (calibration.resume=false "
            "calibrates it again)",
            flush=True,
        )
    plans = [plan for plan, outcome in zip(plans, kept) if outcome is None]
    kept = [outcome for outcome in kept if outcome is not None]
    outcomes, failed = run_studies(first, plans) if plans else ([], [])
    print(summary(kept + outcomes, float(ccfg.tolerance)), flush=True)
    print(f"calibration file: {first.calibration.file}", flush=True)
    for line in failed:
        print(f"error: {line}", flush=True)
    return 1 if failed else 0


def run_studies(first: DictConfig, plans: list[Plan]) -> tuple[list[Outcome], list[str]]:
    """Run the studies of ``plans``; each one that reaches a value is added to the calibration file as it ends.

    Returns the outcomes and one line per study that failed.
    """
    ccfg = first.calibration
    spec = storage_spec(ccfg.storage, ccfg.dir)
    launcher = first.hydra.get("launcher") if "hydra" in first else None
    kind = executor_kind(ccfg, launcher)
    print(
        OmegaConf.to_yaml(mask_secrets(OmegaConf.to_container(ccfg, resolve=True), (spec.secret() or "",))), flush=True
    )
    print(
        f"calibrating {len(plans)} study(ies) in {spec.display} ({kind} trials, {int(ccfg.parallel)} in flight); "
        f"inspect with: {spec.dashboard}",
        flush=True,
    )
    storage = open_storage(spec)
    executor = make_executor(kind, launcher, Path(str(ccfg.dir)) / "submitit")
    trials = str(Path(str(ccfg.dir)) / "trials")
    outcomes = Calibration(
        plans, storage, executor, ccfg, trials, on_outcome=lambda outcome: write_outcome(ccfg, spec.display, outcome)
    ).run()
    failed = [f"{o.plan.variant}@{o.plan.target:g}: {o.error}" for o in outcomes if o.error]
    return outcomes, failed


def write_outcome(ccfg: DictConfig, storage: str, outcome: Outcome) -> None:
    """Add a reached value to the calibration file, as soon as its study ends (the other studies may still run)."""
    if outcome.error:
        return
    plan = outcome.plan
    value = {"alpha": outcome.alpha} if plan.knob.name == "alpha" else {"knob": plan.knob.name, "value": outcome.alpha}
    write_entry(
        plan.cfg.calibration.file,
        {
            "backbone": plan.meta["backbone"],
            "layer_set": plan.meta["layer_set"],
            "variant": plan.variant,
            "target_skip": plan.target,
            **value,
            "realized_skip": outcome.skip,
            "abs_error": abs(outcome.skip - plan.target),
            "tolerance": float(ccfg.tolerance),
            "trials": outcome.trials,
            "study": plan.name,
            "storage": storage,
            "sampler": ccfg.sampler,
            "seed": int(plan.cfg.seed),
            "trial_steps": plan.steps,
            "full_steps": plan.full_steps,
            "max_param_rate": plan.max_param_rate,
            "setup_hash": plan.meta["setup_hash"],
            "setup": setup_of(plan.cfg, plan.knob.key),
        },
    )


def kept_outcome(plan: Plan, tolerance: float) -> Outcome | None:
    """The plan's outcome as the calibration file already holds it (``finished_entry``), or None."""
    key = {
        "backbone": plan.meta["backbone"],
        "layer_set": plan.meta["layer_set"],
        "variant": plan.variant,
        "target_skip": plan.target,
    }
    entry = finished_entry(
        plan.cfg.calibration.file, key, plan.meta["setup_hash"], int(plan.cfg.seed), plan.steps, tolerance
    )
    if entry is None:
        return None
    value = entry["alpha"] if plan.knob.name == "alpha" else entry["value"]
    return Outcome(plan, float(value), float(entry["realized_skip"]), int(entry["trials"]))


def summary(outcomes, tolerance: float) -> str:
    """A table: variant, target, α (or a Table 1 method's knob), the seed it was calibrated at, realized skip,
    deviation, trials, status.

    The α holds at that seed; other seeds land beside the target (the matched sweep's records and
    ``analysis.report``'s ``calibration.md`` show by how much).
    """
    lines = [
        f"{'variant':<20} {'target':>7} {'alpha/knob':>14} {'seed':>5} {'skip':>7} {'dev pp':>7} {'trials':>6}  status"
    ]
    for o in outcomes:
        prefix = "" if o.plan.knob.name == "alpha" else f"{o.plan.knob.name}="
        alpha = f"{prefix}{o.alpha:.4g}" if o.alpha is not None else "-"
        skip = f"{o.skip:.4f}" if o.skip is not None else "-"
        dev = f"{100 * (o.skip - o.plan.target):+.2f}" if o.skip is not None else "-"
        status = "ok" if not o.error else "FAILED"
        lines.append(
            f"{o.plan.variant:<20} {o.plan.target:>7.4f} {alpha:>14} {o.plan.cfg.seed:>5} {skip:>7} {dev:>7} "
            f"{o.trials:>6}  {status}"
            f" (±{100 * tolerance:.2f} pp, {o.plan.steps}-step trials)"
        )
    return "\n".join(lines)
