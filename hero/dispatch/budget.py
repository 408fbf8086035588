"""What a whole sweep costs before it is submitted: jobs, calibration trials, GPU-hours, launcher settings.

``plan_study(study, extra)`` (a ``sweeps/<name>.yaml``) and ``plan_command(argv)`` (a ``python train.py -m ...`` or
``calibrate.py ...`` command line) expand the sweep into its jobs the way Hydra's basic sweeper does, cost each
distinct job once (``hero.dispatch.cost.job_cost``; seeds share a cost) and add up:

    jobs                 the multirun's jobs (the study's grid, or the product of the command's comma lists)
    calibration trials   per (variant, target) a knob left at ``calibrated`` without an entry in its calibration
                         file: the mean trial count of the committed calibration files (``TRIALS_FROM``, the
                         monotone sampler's measured counts), each trial a training run of ``trial_fraction`` of its
                         updates; for ``calibrate.py`` every combination × target is one such study
    GPU-hours            Σ jobs (+ trials) × wall time × GPUs per job, at ``util`` of the device's dense peak
    launcher settings    GPUs per job (the launcher's tasks_per_node × nodes, else ``--gpus``), and a time limit
                         of the longest job × 1.25 + 10 min, beside the launcher's own ``timeout_min``

A job that does not fit the device is refused in one line naming the smallest change that fits
(``cost.smallest_fix``). ``print_plan`` writes the table ``python -m hero.dispatch plan`` prints.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from hero.dispatch.cost import (
    CONF_DIR,
    DEVICES,
    GIB,
    GPU_UTIL,
    PlanError,
    compose_job,
    fits,
    job_cost,
    update_seconds,
)
from hero.dispatch.studies import override_key, study_commands

REPO = Path(CONF_DIR).parent
TRIALS_FROM = "docs/studies/*/calibration.json"
MARGIN, MARGIN_MIN = 1.25, 10


def measured_trials(repo: Path = REPO) -> dict:
    """Trials per calibration study in the committed calibration files: mean, max, how many studies."""
    counts = []
    for path in sorted(repo.glob(TRIALS_FROM)):
        counts += [int(e["trials"]) for e in json.loads(path.read_text())["entries"] if e.get("trials")]
    if not counts:
        return {"mean": 6.0, "max": 12, "studies": 0}
    return {"mean": statistics.mean(counts), "max": max(counts), "studies": len(counts)}


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """One override list per job of a multirun (comma lists, ranges, choices), in Hydra's basic sweeper order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    batches = BasicSweeper.split_arguments(parsed, None)
    return [list(job) for batch in batches for job in batch]


def launcher_settings(overrides: Sequence[str], config_name: str = "train") -> dict:
    """The launcher the overrides name (``hydra/launcher=...``): GPUs per job, time limit, parallelism."""
    from hydra import compose, initialize_config_dir

    launcher = [
        o
        for o in overrides
        if override_key(o).startswith("hydra/launcher") or override_key(o).startswith("hydra.launcher")
    ]
    with initialize_config_dir(CONF_DIR, version_base=None):
        cfg = compose(config_name, overrides=launcher, return_hydra_config=True)
    lc = cfg.hydra.launcher
    name = next((o.split("=", 1)[1] for o in launcher if override_key(o) == "hydra/launcher"), "basic")
    gpus = lc.get("gpus_per_node")
    tasks, nodes = int(lc.get("tasks_per_node") or 1), int(lc.get("nodes") or 1)
    return {
        "name": name,
        "gpus_per_job": (tasks * nodes) if gpus else None,
        "timeout_min": lc.get("timeout_min"),
        "parallelism": lc.get("array_parallelism"),
    }


def _cost_key(spec) -> str:
    """What a job's cost depends on: its resolved config without seed, knob values and how it is named."""
    resolved = dict(spec.resolved)
    for k in ("seed", "alpha", "calibration", "objective", "force", "reuse_trained", "paths"):
        resolved.pop(k, None)
    method = dict(resolved.get("method") or {})
    resolved["method"] = {k: v for k, v in method.items() if not isinstance(v, float)}
    return json.dumps(resolved, sort_keys=True, default=str)


def plan_jobs(
    jobs: list[tuple[str, list[str]]],
    device,
    util: float,
    gpus: int | None,
    length: int | None,
    samples: int | None,
    config_name: str = "train",
    calibrations: int = 0,
) -> dict:
    """Cost every job (label, overrides); distinct configs are built once. ``calibrations``: calibrate.py studies."""
    costs: dict[str, dict] = {}
    trials = measured_trials()
    needs_cal: dict[str, dict] = {}
    for label, overrides in jobs:
        spec, missing = compose_job(overrides, config_name, report_missing=True)
        key = _cost_key(spec)
        if key not in costs:
            world = gpus or 1
            cost = job_cost(spec, world, length, samples)
            costs[key] = {"label": label, "spec": spec, "cost": cost, "jobs": 0, "overrides": overrides}
        elif label not in costs[key]["label"].split(","):  # variants whose jobs cost the same (e.g. curve points)
            costs[key]["label"] += f",{label}"
        costs[key]["jobs"] += 1
        if missing:  # a knob at `calibrated` with no entry yet: one calibration study per (config, target)
            fraction = float(spec.cfg.calibration.get("trial_fraction", 1.0))
            target = spec.cfg.calibration.get("target_skip")
            needs_cal.setdefault(f"{key}@{target}", {"key": key, "fraction": fraction})
    if config_name == "calibrate":
        for key, entry in costs.items():
            for _ in range(entry["jobs"]):
                needs_cal[f"{key}#{len(needs_cal)}"] = {
                    "key": key,
                    "fraction": float(entry["spec"].cfg.calibration.trial_fraction),
                }
            entry["fraction"] = float(entry["spec"].cfg.calibration.trial_fraction)
            entry["jobs"] = 0
    rows, total_s, total_gpu_h, longest = [], 0.0, 0.0, 0.0
    for entry in costs.values():
        cost = entry["cost"]
        seconds = cost.seconds(device, util)
        entry["seconds"] = seconds
        total_s += entry["jobs"] * seconds
        total_gpu_h += entry["jobs"] * seconds * cost.world / 3600
        longest = max(longest, seconds) if entry["jobs"] else longest
        rows.append(entry)
    trial_s = 0.0
    for cal in needs_cal.values():
        cost = costs[cal["key"]]["cost"]
        train_only = (
            cost.updates
            * update_seconds(cost.flops_update, cost.traffic_update, device, cost.precision, util)
            / cost.world
        )
        per_trial = train_only * cal["fraction"]
        trial_s += trials["mean"] * per_trial
        total_gpu_h += trials["mean"] * per_trial * cost.world / 3600
        longest = max(longest, per_trial)
    return {
        "device": device,
        "util": util,
        "rows": rows,
        "jobs": sum(e["jobs"] for e in rows),
        "calibration_studies": len(needs_cal),
        "trials": trials,
        "expected_trials": len(needs_cal) * trials["mean"],
        "job_seconds": total_s,
        "trial_seconds": trial_s,
        "gpu_hours": total_gpu_h,
        "longest_s": longest,
        "time_limit_min": math.ceil(longest * MARGIN / 60 + MARGIN_MIN),
    }


def study_jobs(study: dict, extra: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(variant, overrides) of every job of a study, in the order its multiruns launch them."""
    out = []
    for var, cmd in zip(study["variants"], study_commands(study, extra)):
        out += [(var["name"], job) for job in expand(cmd[3:])]
    return out


def command_jobs(argv: Sequence[str]) -> tuple[str, list[tuple[str, list[str]]], list[str]]:
    """(config name, jobs, overrides) of a ``[python] train.py [-m] ...`` or ``[python] calibrate.py ...`` line."""
    args = list(argv)
    while args and (args[0].startswith("python") or args[0].endswith("python")):
        args.pop(0)
    if not args or Path(args[0]).name not in ("train.py", "calibrate.py"):
        raise PlanError(f"{' '.join(argv) or '(nothing)'}: expected `python train.py [-m] ...` or `calibrate.py ...`")
    entry = Path(args.pop(0)).name
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    if entry == "calibrate.py":
        import importlib.util

        spec = importlib.util.spec_from_file_location("hero_calibrate_entry", REPO / "calibrate.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        combos = module.expand(overrides)
        jobs = []
        for combo in combos:
            targets = next((o.split("=", 1)[1] for o in combo if override_key(o) == "calibration.target_skip"), "[]")
            values = [t for t in targets.strip("[]").split(",") if t] or ["null"]
            fixed = [o for o in combo if override_key(o) != "calibration.target_skip"]
            jobs += [("calibrate", [*fixed, f"calibration.target_skip={t}"]) for t in values]
        return "calibrate", jobs, overrides
    return "train", [("main", job) for job in expand(overrides)], overrides


def gib(x: float | None) -> str:
    return "—" if x is None else f"{x / GIB:.2f}"


def hours(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 600 else f"{s:.0f} s"


def print_plan(plan: dict, launcher: dict, refuse: callable = None) -> list[str]:
    """Print the plan; returns the refusal lines (a job that does not fit the device)."""
    dev, util = plan["device"], plan["util"]
    print(
        f"device {dev.name} ({dev.note}), {dev.memory_gib:g} GB, usable {dev.usable_bytes() / GIB:.1f} GiB; "
        f"wall time at {util:.0%} of its dense peak"
    )
    refusals = []
    for e in plan["rows"]:
        c = e["cost"]
        m = c.memory
        ck = "on" if c.checkpointing else "off"
        what = f"{e['jobs']} job(s)" if e["jobs"] else "calibration trials"
        print(f"\n[{e['label']}] {what} like: {' '.join(o for o in e['overrides'] if not o.startswith('hydra'))}")
        print(
            f"  backbone {c.name}: {c.backbone_params:,} parameters; trainable {c.trainable_params:,}"
            + (f" (router + η {c.router_params:,})" if c.router_params else "")
            + f"; routable layers {c.routable_layers[0]}–{c.routable_layers[-1]}"
            if c.routable_layers
            else ""
        )
        other = sum(c.memory_other.values()) - m["activations"] - m["backward"] - m["lm_head"]
        print(
            f"  memory per GPU, GiB: frozen weights {gib(m['frozen_weights'])}, trainable + grads + AdamW "
            f"{gib(m['trainable_state'])}, activations {gib(m['activations'])} + backward {gib(m['backward'])} "
            f"+ LM head {gib(m['lm_head'])} (micro-batch {c.micro_batch} × {c.length}, checkpointing {ck}; "
            f"{'off' if c.checkpointing else 'on'}: {gib(sum(m.values()) + other)}) = {gib(sum(m.values()))}"
            + (f"; evaluation {gib(c.eval_memory)}" if c.eval_memory else "")
        )
        print(
            f"  FLOPs per update {c.flops_update:.3g} (global batch over {c.world} GPU(s), mean padded length "
            f"{c.mean_length:.0f} from {c.length_from}), {c.updates:,} updates"
            + (f"; per evaluation {c.flops_eval:.3g}" if c.flops_eval else "; evaluation not modelled")
        )
        if c.unmodelled:
            print(
                f"  not modelled: {', '.join(c.unmodelled)}: memory and FLOPs above are the full padded batch's (upper bounds)"
            )
        print(
            f"  wall time per job {hours(e['seconds'])} on {c.world} × {dev.name}"
            f" = {e['seconds'] * c.world / 3600:.2f} device-hours"
            + (f"; a calibration trial trains {e['fraction']:g} of it" if "fraction" in e else "")
        )
        if not fits(c, dev) and refuse is not None:
            fix = refuse(e)
            line = (
                f"REFUSED [{e['label']}]: needs {c.peak_bytes / GIB:.1f} GiB per GPU, {dev.name} has "
                f"{dev.usable_bytes() / GIB:.1f} GiB usable; smallest change that fits: {fix or 'none found'}"
            )
            refusals.append(line)
            print("  " + line)
    t = plan["trials"]
    print(
        f"\nstudy: {plan['jobs']} job(s), {hours(plan['job_seconds'])} of job time; "
        f"{plan['calibration_studies']} calibration stud(ies) to run, ~{plan['expected_trials']:.0f} trials "
        f"(mean {t['mean']:.1f}, max {t['max']} over {t['studies']} measured studies), {hours(plan['trial_seconds'])}"
    )
    unit = "CPU-hours (1 thread each)" if dev.name == "cpu" else "GPU-hours"
    print(f"total {plan['gpu_hours']:.1f} {unit} on {dev.name} at {util:.0%} of its peak")
    gpus = launcher.get("gpus_per_job")
    print(
        f"launcher {launcher['name']}: GPUs per job {gpus if gpus else '— (CPU)'}, time limit "
        f"{plan['time_limit_min']} min (longest job × {MARGIN} + {MARGIN_MIN} min)"
        + (
            f"; the launcher sets {launcher['timeout_min']} min"
            + (
                " — too short, raise hydra.launcher.timeout_min (a killed job requeues and resumes)"
                if launcher["timeout_min"] and launcher["timeout_min"] < plan["time_limit_min"]
                else ""
            )
            if launcher.get("timeout_min")
            else ""
        )
    )
    return refusals


def default_util(device) -> float:
    from hero.dispatch.cost import CPU_UTIL

    return CPU_UTIL if device.name == "cpu" else GPU_UTIL


def device_named(name: str, gflops: float | None = None):
    from hero.dispatch.cost import cpu_device, device_names

    if name == "cpu":
        from hero.dispatch.measure import host_rates

        rate, bandwidth = host_rates()
        return cpu_device(gflops or rate / 1e9, bandwidth / 1e9)
    if name not in DEVICES:
        raise PlanError(f"--device {name}: unknown; allowed: {device_names()}")
    return DEVICES[name]
