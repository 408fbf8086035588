"""The dispatch CLI: follow up a fire-and-forget sweep, run a named study.

    python -m hero.dispatch status  <manifest or sweep dir> [--json]   # exit 0 done, 1 failures, 3 still running
    python -m hero.dispatch collect <manifest or sweep dir> [--json] [--into DIR]   # + records -> <sweep dir>/collected.json
    python -m hero.dispatch sweep sweeps/<study>.yaml [overrides] [--dry-run] [--wait] [--variants a,b]
    python -m hero.dispatch plan sweeps/<study>.yaml [overrides] [--device h100] [--util 0.4] [--gpus N]
    python -m hero.dispatch plan [options] -- python train.py -m ...    # or -- python calibrate.py ...

A target that is no manifest (or a sweep dir without one) ends in one line and exit 2. ``plan`` prints each
job's memory per GPU, FLOPs and wall time on a device and the study's GPU-hours (``hero.dispatch.budget``);
exit 0 when every job fits, 1 when one is refused, 2 for bad input (an unknown device, study file or override).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

from hero.dispatch.manifests import COLLECTED_FILENAME, NoManifest, collect, collect_into, print_summary, status
from hero.dispatch.plan import JobState
from hero.dispatch.studies import (
    load_study,
    override_key,
    override_value,
    select_variants,
    shared_slots,
    study_commands,
    study_size,
)


def _cli_status(args: argparse.Namespace, collect_records: bool) -> int:
    if collect_records and args.into and os.path.exists(args.into) and not os.path.isdir(args.into):
        print(
            f"ERROR: --into {args.into}: a file, not a directory (records go to <into>/<name>/results.json)",
            file=sys.stderr,
        )
        return 2
    try:
        summary = collect(args.target) if collect_records else status(args.target)
    except NoManifest as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 2
    conflicts: list[str] = []
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
        if collect_records:
            print(f"{len(summary['records'])} record(s) -> {summary['sweep_dir']}/{COLLECTED_FILENAME}")
    if collect_records and args.into:
        new, same, conflicts = collect_into(summary["records"], args.into, args.name_key)
        for path in new:
            print(f"new: {path}", file=sys.stderr if args.json else sys.stdout)
        print(f"{len(new)} new, {same} already there -> {args.into}", file=sys.stderr if args.json else sys.stdout)
        for c in conflicts:
            print(f"ERROR: {c}", file=sys.stderr)
    states = summary["counts"]
    if any(states.get(s) for s in (JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN)):
        return 3  # not final yet
    return 1 if states.get(JobState.FAILED) or conflicts else 0


def _cli_sweep(args: argparse.Namespace, prog: str) -> int:
    study = load_study(args.study)
    extra = list(args.overrides)
    launcher = override_value(extra, "hydra/launcher") or ""
    to_cluster = launcher.startswith("slurm") or launcher == "local"
    if to_cluster and not args.wait and not any(override_key(o) == "hydra.launcher.wait" for o in extra):
        extra.append("hydra.launcher.wait=false")  # submit every variant's array, then return
    n = study_size(study)
    expected = study.get("expected_jobs")
    if expected is not None and int(expected) != n:
        print(f"ERROR: the study lists {expected} jobs but its grid gives {n}", file=sys.stderr)
        return 2
    chosen = study
    if args.variants:
        try:
            chosen = select_variants(study, [v for v in args.variants.split(",") if v])
        except ValueError as err:
            print(f"ERROR: {err}", file=sys.stderr)
            return 2
    print(
        f"study {study['name']}: {len(study['variants'])} variant(s), {n} job(s)"
        + (f" (expected {expected})" if expected is not None else "")
    )
    if chosen is not study:
        print(f"running {len(chosen['variants'])} of them ({args.variants}): {study_size(chosen)} job(s)")
    study = chosen
    sweep_dir = f"{args.sweep_root}/{study['name']}"
    cmds = study_commands(study, extra, args.sweep_root)
    side_by_side = shared_slots(cmds, os.path.abspath(f"{sweep_dir}/.slots"))
    for cmd in side_by_side or cmds:
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if args.dry_run:
        rc = 0
    elif side_by_side:
        print(f"{len(side_by_side)} multirun(s) side by side, sharing the launcher's run slots", flush=True)
        procs = [subprocess.Popen(cmd) for cmd in side_by_side]
        rc = next((r for r in [p.wait() for p in procs] if r), 0)
    else:
        rc = next((r for r in [subprocess.call(cmd) for cmd in cmds] if r), 0)
    if to_cluster and not args.dry_run:
        print(f"state:   {prog} status {sweep_dir}\nrecords: {prog} collect {sweep_dir}")
    return rc


def _cli_plan(argv: list[str], prog: str) -> int:
    from hydra.errors import HydraException

    from hero.dispatch import budget, cost
    from hero.errors import ConfigError

    command = argv[argv.index("--") + 1 :] if "--" in argv else None
    head = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog=f"{prog} plan", description="What a sweep costs before it is submitted.")
    ap.add_argument("study", nargs="?", help="sweeps/<name>.yaml (or give a command line after --)")
    ap.add_argument("--device", default="h100", help=f"one of {cost.device_names()} (default h100)")
    ap.add_argument("--util", type=float, default=None, help="share of the dense peak reached (GPU default 0.4)")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs per job (default: the launcher's, else 1)")
    ap.add_argument("--length", type=int, default=None, help="padded tokens per sequence where the data is not here")
    ap.add_argument("--samples", type=int, default=None, help="training samples where the data is not here")
    ap.add_argument("--gflops", type=float, default=None, help="--device cpu: its SGEMM GFLOP/s (default: measure)")
    args, overrides = ap.parse_known_args(head)
    try:
        if args.util is not None and not 0.0 < args.util <= 1.0:
            raise cost.PlanError(f"--util {args.util}: must lie in (0, 1]")
        if args.study is None and command is None:
            raise cost.PlanError("plan: give sweeps/<name>.yaml or `-- python train.py -m ...`")
        device = budget.device_named(args.device, args.gflops)
        util = args.util or budget.default_util(device)
        if command is not None:
            if args.study is not None:
                overrides = [args.study, *overrides]
            config_name, jobs, cmd_overrides = budget.command_jobs(command)
            launcher_overrides = [*cmd_overrides, *overrides]
            jobs = [(label, [*job, *overrides]) for label, job in jobs]
        else:
            if not os.path.isfile(args.study):
                raise cost.PlanError(f"{args.study}: no such study file (sweeps/<name>.yaml)")
            study = load_study(args.study)
            config_name = "train"
            jobs = budget.study_jobs(study, overrides)
            launcher_overrides = [*study["overrides"], *overrides]
        launcher = budget.launcher_settings(launcher_overrides, config_name)
        gpus = args.gpus or launcher["gpus_per_job"] or 1
        with cost.quiet():
            plan = budget.plan_jobs(jobs, device, util, gpus, args.length, args.samples, config_name)
    except (ConfigError, HydraException) as err:
        print(f"ERROR: {' '.join(str(err).split('See https://')[0].split())}", file=sys.stderr)
        return 2

    def refuse(entry: dict) -> str | None:
        def replan(extra: list[str]):
            spec = cost.compose_job([*entry["overrides"], *extra], config_name)
            return cost.job_cost(spec, gpus, args.length, args.samples)

        with cost.quiet():
            return cost.smallest_fix(entry["cost"], device, replan)

    return 1 if budget.print_plan(plan, launcher, refuse) else 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m hero.dispatch") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"]:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        return _cli_plan(argv[1:], prog)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ap = argparse.ArgumentParser(prog=prog, description="Dispatch at scale: follow up sweeps, run named studies.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, helptext in (
        ("status", "state of a manifest's jobs"),
        ("collect", "states + records of a manifest's jobs (writes collected.json)"),
    ):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("target", help="a manifest file, or a sweep dir (all its manifests)")
        sp.add_argument("--json", action="store_true")
        if name == "collect":
            sp.add_argument(
                "--into",
                default="",
                help="also copy each record to INTO/<method>[-<variant>][-<knob>]"
                "-s<seed>/results.json (never overwriting another)",
            )
            sp.add_argument(
                "--name-key",
                action="append",
                default=[],
                metavar="KEY",
                help="add this override's value to the names (-<last part>=<value>), as the launcher's "
                "name_keys; repeatable, e.g. --name-key calibration.target_skip",
            )
    sub.add_parser("plan", help="memory, time and GPU-hours of a study or command line, before submitting it")
    sp = sub.add_parser("sweep", help="run a named study from sweeps/")
    sp.add_argument("study", help="sweeps/<name>.yaml")
    sp.add_argument("overrides", nargs="*", help="extra overrides, e.g. hydra/launcher=slurm hydra.launcher.wait=false")
    sp.add_argument("--dry-run", action="store_true", help="print the commands and the job count only")
    sp.add_argument(
        "--wait",
        action="store_true",
        help="with a SLURM launcher, wait for each variant's array (default: submit all and return)",
    )
    sp.add_argument(
        "--variants", default="", help="comma-separated variant names: run only these (default: every variant)"
    )
    sp.add_argument("--sweep-root", default="multirun/studies")
    args, unknown = ap.parse_known_args(argv)
    if unknown and args.cmd != "sweep":
        ap.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.cmd == "sweep":
        args.overrides = list(args.overrides) + unknown
    if args.cmd == "status":
        return _cli_status(args, collect_records=False)
    if args.cmd == "collect":
        return _cli_status(args, collect_records=True)
    return _cli_sweep(args, prog)


if __name__ == "__main__":
    sys.exit(main())
