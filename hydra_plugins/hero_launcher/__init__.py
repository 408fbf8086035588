"""Hydra only instantiates launchers defined in the ``hydra_plugins`` namespace: this shim defines
the HeRo launchers there (the implementation is ``hero.dispatch.launcher``). conf/hydra/launcher/*.yaml
use ``_target_: hydra_plugins.hero_launcher.HeroSlurmLauncher`` (or ``HeroLocalLauncher``).
Importable when the repository root is on ``sys.path`` (``python train.py`` from anywhere)."""

from hero.dispatch import launcher as _launcher


class HeroSlurmLauncher(_launcher.HeroSlurmLauncher):
    """SLURM job arrays through submitit, with HeRo's dispatch rules (see hero.dispatch)."""


class HeroLocalLauncher(_launcher.HeroLocalLauncher):
    """Local submitit subprocesses, with HeRo's dispatch rules (see hero.dispatch)."""


__all__ = ["HeroLocalLauncher", "HeroSlurmLauncher"]
