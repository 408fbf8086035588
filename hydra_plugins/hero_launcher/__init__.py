"""Hydra only instantiates launchers defined in the ``hydra_plugins`` namespace: this shim defines
the HeRo launchers there (the implementation is ``hero.launch``). conf/hydra/launcher/*.yaml use
``_target_: hydra_plugins.hero_launcher.HeroSlurmLauncher`` (or ``HeroLocalLauncher``).
Importable when the repository root is on ``sys.path`` (``python train.py`` from anywhere)."""
from hero import launch as _launch


class HeroSlurmLauncher(_launch.HeroSlurmLauncher):
    """SLURM job arrays through submitit, with HeRo's dispatch rules (see hero.launch)."""


class HeroLocalLauncher(_launch.HeroLocalLauncher):
    """Local submitit subprocesses, with HeRo's dispatch rules (see hero.launch)."""


__all__ = ["HeroLocalLauncher", "HeroSlurmLauncher"]
