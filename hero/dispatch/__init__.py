"""Dispatch at scale: Hydra multiruns as submitit job arrays, on a laptop and on SLURM.

One concept per module:

    plan.py       what each job of a sweep is (overrides, config hash, stable output dir) and
                  whether it must run (a completed record makes it SKIPPED)
    job.py        the callable submitit pickles and runs on the node: fails for real, requeues
                  on USR2 / time limit after the training loop's save hooks (hero.preemption)
    launcher.py   the Hydra launcher (HeroSlurmLauncher / HeroLocalLauncher): plan, submit one
                  array, wait or return at once, summary
    slots.py      run slots for local jobs, shared by every launch naming one directory
    manifests.py  what a sweep submitted and how its jobs ended: manifests, status, collect
    studies.py    named studies, sweeps/<name>.yaml
    cost.py       what one job costs before it runs: parameters (built on the meta device), memory per GPU,
                  FLOPs, wall time on a named device
    budget.py     what a whole sweep costs: its jobs, calibration trials, GPU-hours, launcher settings
    measure.py    what a few real updates cost on this machine, beside the planner's figures for them
    __main__.py   the CLI: python -m hero.dispatch status|collect|sweep|plan

Not here: DDP (hero.distributed, with training), records and the config-hash index
(hero.results). ``hydra_plugins/hero_launcher`` is the shim through which Hydra finds the
launcher.
"""
