"""Train, evaluate and record one HeRo run (or a multirun with -m). See conf/train.yaml.

python train.py                                            # embedded tiny testbed on CPU
python train.py -m ablation=no_memory_read seed=42,43,44   # three seeds of one ablation
"""

import sys

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    from hero.logs import capture_warnings

    capture_warnings()  # into the run's log file (conf/hydra/job_logging/hero.yaml), not the terminal
    from hero.errors import ConfigError
    from hero.pipeline import discard_run_dir, run

    try:
        return run(cfg)
    except ConfigError as err:
        discard_run_dir()
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
