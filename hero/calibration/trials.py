"""How one calibration trial runs: a real training run of the variant at a proposed α.

A trial is ``hero.pipeline.run`` of the variant's train config with ``alpha=<proposed>`` (or
a Table 1 method's knob, ``method.p=<proposed>``, … — ``hero.calibration.search_space``),
``objective=skip.param_rate``, ``trainer.max_steps`` shortened to ``trial_fraction`` of the
training budget, the study's fixed seed, and its record written under
``<calibration.dir>/trials/<study>/alpha=<α>``. No ``force``: the pipeline's config-hash
index makes a trial that already finished (e.g. before the calibrating process was killed)
return its record at once, and one that was cut short resume from its checkpoint.

Where it runs follows ``calibration.executor``:

    inline   in the calibrating process, one at a time (tests, debugging)
    local    a subprocess per trial (submitit LocalExecutor)
    slurm    a SLURM job per trial (submitit SlurmExecutor)
    auto     from ``hydra/launcher=…``: the HeRo SLURM launchers → slurm with the same
             partition / GPUs / time / setup as training jobs; hero_local → local;
             Hydra's basic launcher → inline when parallel = 1, else local
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from hero.errors import ConfigError
from hero.results import RESULTS_FILENAME

EXECUTORS = ("auto", "inline", "local", "slurm")
# Launcher keys that describe the sweep, not one job's resources.
LAUNCHER_ONLY = (
    "_target_",
    "submitit_folder",
    "name",
    "skip_existing",
    "wait",
    "records_root",
    "job_dir",
    "slots",
    "collect_into",
    "name_keys",
    "poll_s",
    "array_parallelism",
    "max_num_timeout",
)
DEFAULT_TIMEOUT_MIN = 720
"""A trial's time limit when the launcher config gives none (submitit's own default, 5 minutes, kills a
CPU trial of the embedded testbed half way)."""
GENERIC = ("timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "stderr_to_stdout")


class TrialConfigError(ConfigError):
    """The trial settings (executor, fraction) cannot be used."""


def full_steps(cfg: DictConfig) -> int:
    """The optimizer updates of the variant's full training run (``trainer.max_steps`` or one pass of the data)."""
    if cfg.trainer.max_steps:
        return int(cfg.trainer.max_steps)
    from hero import backbones
    from hero.data import load_conversations
    from hero.training import total_updates

    bed = backbones.bed(cfg.model, str(cfg.paths.cache))
    return total_updates(cfg.trainer, len(load_conversations(cfg.data, bed)))


def trial_steps(cfg: DictConfig) -> int:
    fraction = float(cfg.calibration.trial_fraction)
    if not 0 < fraction <= 1:
        raise TrialConfigError(f"calibration.trial_fraction={fraction!r}: must lie in (0, 1]")
    return max(1, round(fraction * full_steps(cfg)))


def trial_config(cfg: DictConfig, alpha: float, study: str, steps: int, target: float, key: str = "alpha") -> dict:
    """The resolved train config of one trial (calibration-only keys dropped: no storage URL in any record).

    ``key`` is the config key the proposed value sets: ``alpha``, or a Table 1 method's knob (``method.p``, …).
    """
    trial = copy.deepcopy(cfg)
    with open_dict(trial):
        trial.pop("hydra", None)
        OmegaConf.update(trial, key, alpha if isinstance(alpha, int) and key != "alpha" else float(alpha), merge=False)
        trial.objective = "skip.param_rate"
        trial.force = False
        trial.trainer.max_steps = int(steps)
        trial.calibration = {"file": cfg.calibration.file, "target_skip": float(target), "study": study}
    return OmegaConf.to_container(trial, resolve=True)


def run_trial(config: dict, run_dir: str) -> dict:
    """Train one trial and return its realized skip rate (runs wherever the executor put it)."""
    from hero.logs import logged_to
    from hero.pipeline import run

    with logged_to(Path(run_dir) / "train.log"):  # what libraries log goes there, not to the terminal
        skip = run(OmegaConf.create(config), run_dir=run_dir)
    record = Path(run_dir) / RESULTS_FILENAME
    return {"skip": skip, "record": str(record) if record.is_file() else None}


class InlineJob:
    """A trial already run in this process (the same interface as a submitit job)."""

    def __init__(self, fn, *args) -> None:
        self.job_id = "inline"
        try:
            self._value, self._error = fn(*args), None
        except Exception as err:  # noqa: BLE001 - reported like a failed submitit job
            self._value, self._error = None, err

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> None:
        """Nothing to cancel: the trial has run."""


class InlineExecutor:
    def submit(self, fn, *args) -> InlineJob:
        return InlineJob(fn, *args)


def executor_kind(ccfg: DictConfig, launcher: DictConfig | None) -> str:
    """inline / local / slurm from ``calibration.executor`` and the Hydra launcher config."""
    kind = ccfg.executor
    if kind not in EXECUTORS:
        raise TrialConfigError(f"calibration.executor={kind!r}: allowed values are {', '.join(EXECUTORS)}")
    if kind != "auto":
        return kind
    target = str(launcher.get("_target_", "")) if launcher is not None else ""
    if "Slurm" in target:
        return "slurm"
    if "Local" in target:
        return "local"
    return "inline" if int(ccfg.parallel) == 1 else "local"


def make_executor(kind: str, launcher: DictConfig | None, folder: str | Path):
    """An executor with a ``submit(fn, *args)`` that returns a job (``done``, ``result``, ``cancel``).

    For local / slurm the job resources come from the launcher config (``hydra/launcher=…``), the
    same keys that the HeRo launcher (hero.dispatch.launcher) passes to submitit for training jobs.
    """
    if kind == "inline":
        return InlineExecutor()
    import submitit

    params: dict = {}
    if launcher is not None and "hero_launcher" in str(launcher.get("_target_", "")):
        params = {
            k: v
            for k, v in OmegaConf.to_container(launcher, resolve=False).items()
            if k not in LAUNCHER_ONLY and v is not None and not (isinstance(v, str) and "${" in v)
        }
    params.setdefault("timeout_min", DEFAULT_TIMEOUT_MIN)
    executor = submitit.AutoExecutor(folder=str(Path(folder) / "%j"), cluster=kind)
    executor.update_parameters(
        name="hero-calibrate", **{(k if k in GENERIC else f"{kind}_{k}"): v for k, v in params.items()}
    )
    return executor


def param_ceiling(cfg: DictConfig, with_layers: bool = False) -> float | tuple[float, int]:
    """The highest parameter skip rate the layer set allows: routable FFN parameters / backbone parameters.

    Counted on a weightless (meta-device) copy of the backbone built from its config.
    ``with_layers``: also return the number of routable layers.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from hero import backbones
    from hero.model.attach import decoder_layers, resolve_layers
    from hero.spec import layer_choice

    bed = backbones.bed(cfg.model, str(cfg.paths.cache))
    config = AutoConfig.from_pretrained(backbones.resolve_path(cfg.model, bed))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = resolve_layers(layer_choice(cfg.layers), config.num_hidden_layers)
    blocks = decoder_layers(model)
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    ceiling = sum(p.numel() for i in layers for p in blocks[i].mlp.parameters()) / total
    return (ceiling, len(layers)) if with_layers else ceiling
