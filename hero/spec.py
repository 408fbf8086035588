"""A run's spec: everything one run is, resolved once from the composed config, before any compute.

``RunSpec.resolve(cfg)`` is the one place a run's config is read: every check of every group and of their
pairings (bed ↔ data ↔ eval ↔ method ↔ intervention), the method's own options (``Method.options``), its cost knob
and where the value came from (given, or read once from the calibration file), the layer choice, the
evaluation-only intervention, the resolved config the record keeps and its hash. A bad value raises one
``ConfigError`` line naming it, and nothing is printed before: no config dump precedes an error. Everything
downstream — ``hero.pipeline``, ``hero.scoring``, ``hero.rescore``, each method's ``prepare`` — takes the spec and
never parses the config again; ``RunSpec.load`` builds what it names (the bed, the backbone, the routable layers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hero import backbones, methods
from hero.backbones import BEDS, Backbone
from hero.bed import Bed
from hero.calibration_file import knob_setting, resolved_config
from hero.data.sft import check_data
from hero.errors import ConfigError
from hero.evaluation import check_config as check_eval_config
from hero.knobs import KnobSetting
from hero.methods import Method
from hero.model.attach import LAYER_SETS, resolve_layers
from hero.model.intervention import Intervention
from hero.records import RunRecord
from hero.results import config_hash, training_hash
from hero.tracking import check_config as check_logger_config
from hero.training import check_config as check_trainer_config


class SpecError(ConfigError):
    """The composed config cannot be run."""


@dataclass(frozen=True)
class Loaded:
    """What a spec names, built: the bed (None for a hub backbone), the frozen backbone, the routable layers."""

    bed: Bed | None
    backbone: Backbone
    layers: list[int]


@dataclass(frozen=True)
class RunSpec:
    """One run, resolved (module docstring). ``cfg`` is the composed config its groups are read from (``model``,
    ``data``, ``trainer``, ``eval``, ``logger``, ``paths``: each checked here); the rest is parsed once."""

    cfg: DictConfig
    method: Method
    options: Mapping[str, Any]  # the method's own options, checked (``Method.options``)
    knob: KnobSetting | None  # the method's cost knob as used (α for HeRo); None: nothing moves its skip rate
    alpha: float  # the skip-loss weight α (eq 17), a number
    intervention: Intervention
    resolved: dict  # the resolved config the record keeps and hashes, knob values as numbers
    config_hash: str

    @classmethod
    def resolve(cls, cfg: DictConfig) -> RunSpec:
        """The spec of ``cfg``, every check run and the calibration file read at most once; raises ``ConfigError``."""
        method, options, intervention = check(cfg)
        knob = knob_setting(cfg)
        resolved = resolved_config(cfg, knob)
        return cls(
            cfg=cfg,
            method=method,
            options=MappingProxyType(options),
            knob=knob,
            alpha=resolved["alpha"],
            intervention=intervention,
            resolved=resolved,
            config_hash=config_hash(resolved),
        )

    @property
    def seed(self) -> int:
        return self.cfg.seed

    @property
    def variant(self) -> str:
        """The variant as the record names it: the ablation or method variant, with the intervention's suffix."""
        return self.cfg.variant + self.intervention.suffix

    @property
    def layer_set(self) -> str:
        return self.cfg.layers.name

    @property
    def layer_choice(self) -> str | list[int]:
        return layer_choice(self.cfg.layers)

    @property
    def model(self) -> DictConfig:
        return self.cfg.model

    @property
    def data(self) -> DictConfig:
        return self.cfg.data

    @property
    def trainer(self) -> DictConfig:
        return self.cfg.trainer

    @property
    def eval(self) -> DictConfig:
        return self.cfg.eval

    @property
    def evaluates(self) -> bool:
        """The run is scored on a suite (``eval=none`` scores nothing)."""
        return self.cfg.eval.suite != "none"

    @property
    def root(self) -> Path:
        """``paths.root``: runs, the config-hash index, checkpoints, the dense records."""
        return Path(self.cfg.paths.root)

    @property
    def cache(self) -> str:
        """``paths.cache``: beds and the dense baselines' scores."""
        return str(self.cfg.paths.cache)

    @property
    def training_hash(self) -> str:
        """The config hash without how the run is scored (``hero.results.training_hash``)."""
        return training_hash(self.resolved)

    @property
    def force(self) -> bool:
        """``force=true``: rerun even when a completed record with this config hash exists."""
        return bool(self.cfg.force)

    @property
    def reuses_trained(self) -> bool:
        """A finished run that trained the same tensors may lend them (``reuse_trained``, not under ``force``)."""
        return not self.force and self.cfg.get("reuse_trained", True)

    @property
    def objective(self) -> str | None:
        """The dotted path into the record a sweeper or a calibration trial gets back (``objective``)."""
        return self.cfg.objective

    @property
    def memory_dim(self) -> int:
        return self.cfg.router.memory_dim

    @property
    def calibration_file(self) -> str:
        return str(self.cfg.calibration.file)

    def headline(self) -> str:
        """The one line a run prints before it starts: what it is and where its config is kept."""
        knob = "" if self.knob is None else f" {self.knob.knob.label}={self.knob.value:g}"
        if self.knob is not None and self.knob.calibrated:
            knob += f" (calibrated, target {self.cfg.calibration.target_skip:g})"
        return (
            f"run {self.config_hash}: method={self.method.name} variant={self.variant}{knob} seed={self.seed} "
            f"model={self.model.name} layers={self.layer_set} data={self.data.name} eval={self.eval.suite} "
            f"precision={self.cfg.trainer.precision}"
        )

    def identity(self, **fields) -> RunRecord:
        """A record with the fields that name the run (method, variant, backbone, seed, α, layers, hash)."""
        return RunRecord(
            method=self.method.name,
            variant=self.variant,
            backbone=self.model.name,
            seed=self.seed,
            alpha=self.resolved.get("alpha"),
            layer_set=self.layer_set,
            memory_dim=self.memory_dim,
            config_hash=self.config_hash,
            **fields,
        )

    def load(self, device: str = "cpu") -> Loaded:
        """The bed (built once and cached), the routable layers, the frozen backbone; an intervention's forced layers
        checked against the layers before anything trains."""
        bed = backbones.bed(self.model, self.cache)
        layers = resolve_layers(self.layer_choice, backbones.num_layers(self.model, bed))
        if self.intervention.active:
            self.intervention.check_layers(layers)
        return Loaded(bed, backbones.load(self.model, bed, device=device), layers)


def layer_choice(layers_cfg) -> str | list[int]:
    """The ``layers=`` choice as ``hero.model.attach.resolve_layers`` takes it: a set's name or the indices."""
    return list(layers_cfg.indices) if layers_cfg.name == "explicit" else layers_cfg.name


def check(cfg: DictConfig) -> tuple[Method, dict, Intervention]:
    """Every check that needs no model weights, in one place; (method, its options, the intervention).

    Raises one ``ConfigError`` line naming the bad value. ``calibrate.py`` runs it on a variant's config before
    any trial; ``RunSpec.resolve`` before any run.
    """
    method = methods.get(cfg.method.name)
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool):
        raise SpecError(f"seed={cfg.seed!r}: must be an integer")
    if cfg.alpha != "calibrated" and (not isinstance(cfg.alpha, (int, float)) or cfg.alpha < 0):
        raise SpecError(f"alpha={cfg.alpha!r}: must be a non-negative number or 'calibrated'")
    options = method.options(cfg)
    if cfg.layers.name not in (*LAYER_SETS, "explicit"):
        raise SpecError(f"layers={cfg.layers.name!r}: allowed are {', '.join(LAYER_SETS)}, explicit")
    if cfg.layers.name == "explicit" and not OmegaConf.is_list(cfg.layers.indices):
        raise SpecError(f"layers.indices={cfg.layers.indices!r}: layers=explicit needs a list such as [4,5,6,7]")
    backbones.check(cfg.model)
    check_data(cfg.data)
    if cfg.model.source in BEDS and cfg.data.source == BEDS[cfg.model.source].data_source:
        BEDS[cfg.model.source].check_data(cfg.data)
    if not isinstance(cfg.data.max_length, int) or cfg.data.max_length < 2:
        raise SpecError(f"data.max_length={cfg.data.max_length!r}: must be an integer ≥ 2")
    check_trainer_config(cfg.trainer)
    check_eval_config(cfg.eval)
    check_bed_pairing(cfg)
    check_logger_config(cfg.logger)
    options_of = cfg.get("intervention")
    intervention = Intervention.from_config(
        OmegaConf.to_container(options_of, resolve=True) if options_of is not None else None
    )
    if intervention.active and not method.routes:
        raise SpecError(
            f"intervention{intervention.suffix}: interventions change routed blocks; "
            f"method={method.name} routes nothing"
        )
    check_thresholds(cfg, method)
    return method, options, intervention


def check_thresholds(cfg: DictConfig, method: Method) -> None:
    """``eval.thresholds``: null, or a list of distinct numbers in (0, 1) for a method with an evaluation threshold
    (``Method.threshold``) on an evaluated run."""
    thresholds = cfg.eval.get("thresholds")
    if thresholds is None:
        return
    values = list(thresholds) if OmegaConf.is_list(thresholds) else None
    if (
        not values
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v < 1.0 for v in values)
        or len(set(values)) != len(values)
    ):
        raise SpecError(f"eval.thresholds={thresholds!r}: must be null or a list of distinct numbers in (0, 1)")
    if method.threshold is None:
        raise SpecError(
            f"eval.thresholds={thresholds!r}: method={method.name} has no evaluation threshold; "
            "methods with one: hero (router.tau), skipgpt_rt (P(execute))"
        )
    if cfg.eval.suite == "none":
        raise SpecError(f"eval.thresholds={thresholds!r}: eval=none scores nothing")
    if cfg.method.get("eval_gate") == "gumbel":
        raise SpecError(f"eval.thresholds={thresholds!r}: method.eval_gate=gumbel samples its gate; use argmax")


def check_bed_pairing(cfg: DictConfig) -> None:
    """Data and suites generated by a bed run only on that bed's backbone, and a bed's backbone is scored only on
    the suites it can take (``Bed.scored_on``: the testbed's 256-token toy cannot take the paper's suites)."""
    own = BEDS.get(cfg.model.source)
    for key, value, kind in (("data", cfg.data.source, "data_source"), ("eval", cfg.eval.suite, "suite")):
        makers = [bed for bed in BEDS.values() if getattr(bed, kind) == value]
        if makers and own not in makers:
            pairs = ", ".join(f"{key}={getattr(bed, kind)} with model.source={bed.name}" for bed in BEDS.values())
            raise SpecError(
                f"{key}={cfg[key].get('name', value)} with model={cfg.model.name}: a bed's data "
                f"and suite go with its own backbone ({pairs})"
            )
    if own is not None and cfg.eval.suite not in own.scored_on:
        raise SpecError(
            f"eval={cfg.eval.suite} with model={cfg.model.name}: the {own.name} bed's backbone is scored on "
            f"{', '.join(f'eval={s}' for s in own.scored_on)}"
        )
