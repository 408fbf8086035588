"""Calibrate α per variant to matched realized skip rates; writes the calibration file. See conf/calibrate.yaml.

    python calibrate.py ablation=full,no_history,no_memory_read target_skip=0.2687
    python calibrate.py ablation=full,no_memory_read target_skip=0.1,0.2,0.27 calibration.trial_fraction=0.5
    python calibrate.py ablation=full target_skip=0.2687 hydra/launcher=slurm_1gpu calibration.parallel=8
    python train.py -m ablation=full,no_history seed=42,43,44 alpha=calibrated calibration.target_skip=0.2687

Comma lists of a config group or key (ablation=a,b, model=…, layers=…) calibrate every
combination; a comma list of targets is one study per target. Every train.py override
applies to the trials. Exit code 0 when every study reached its tolerance, 1 when some did
not (the calibration file still gets the ones that did), 2 for bad input.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

CONF = Path(__file__).resolve().parent / "conf"
TARGET_KEYS = ("target_skip", "calibration.target_skip")


def expand(argv: list[str]) -> list[list[str]]:
    """One override list per combination of the swept (comma-separated) overrides; targets stay a list."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fixed: list[str] = []
    swept: list[list[str]] = []
    for override, text in zip(OverridesParser.create().parse_overrides(argv), argv):
        key = override.get_key_element()
        if key in TARGET_KEYS:
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
            fixed.append(f"calibration.target_skip=[{','.join(str(v) for v in values)}]")
        elif override.is_sweep_override():
            swept.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            fixed.append(text)
    return [fixed + list(combo) for combo in itertools.product(*swept)]


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from hero.calibration.cli import calibrate
    from hero.errors import ConfigError

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            configs = [compose(config_name="calibrate", overrides=o, return_hydra_config=True) for o in expand(argv)]
        return calibrate(configs)
    except (ConfigError, HydraException) as err:
        print(f"error: {str(err).strip().splitlines()[0]}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
