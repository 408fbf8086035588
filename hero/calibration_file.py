"""The calibration file: (backbone, layer set, variant, target skip) → α, and how it was found.

A Table 1 method's entry holds its cost knob instead of α (``"knob": "p", "value": 0.31``;
``hero.knobs``), read by ``train.py method=random_skip method.p=calibrated …``. Each lookup names
the config key of the knob it reads (``knob_key``: ``"alpha"`` or e.g. ``"method.p"``), so this
module needs nothing above it. ``resolved_config`` is the config a run records and hashes, with the
calibrated values as numbers: a launcher computes it for every job it plans without loading any
model code.

``calibrate.py`` writes it, ``train.py alpha=calibrated calibration.target_skip=<t>`` reads
it. JSON, written atomically (``hero.results.write_atomic``) under a lock so that several
calibrating processes can add entries to one file::

    {"schema_version": 1, "entries": [
      {"backbone": "tiny", "layer_set": "second_half", "variant": "full", "target_skip": 0.2687,
       "alpha": 0.0041, "realized_skip": 0.2671, "abs_error": 0.0016, "tolerance": 0.005,
       "trials": 5, "study": "...", "storage": "sqlite:///...", "sampler": "monotone",
       "seed": 42, "trial_steps": 75, "full_steps": 150, "setup_hash": "...", "setup": {...},
       "created": "..."}, ...]}

``setup`` is everything besides α, seed and training length that moves the α → skip
response (backbone, layer set, method, router, data, trainer recipe). A lookup must match
the key AND the setup, so an α calibrated for one router or recipe is never used for
another; the error then names the keys that differ.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hero.errors import ConfigError
from hero.knobs import ALPHA, KnobSetting, knob_of
from hero.results import drop_defaults, now_iso, read_record, write_atomic

SCHEMA_VERSION = 1
# Trainer keys that do not change what an α does (length is calibrated separately via trial_fraction), and the
# exact speed options (same loss and routing up to float order, docs/speed/training.md) with their cache's place.
TRAINER_RUN_KEYS = (
    "max_steps",
    "epochs",
    "progress",
    "checkpoint_every",
    "keep_checkpoints",
    "log_every",
    "num_threads",
    "labelled_logits",
    "pad_waste",
    "prefix_cache",
    "prefix_cache_dir",  # where the machine keeps the frozen prefix (a path under paths.cache), not how it trains
)


class CalibrationLookupError(ConfigError):
    """``alpha=calibrated`` cannot find an α for this variant and target."""


def backbone_key(cfg: DictConfig) -> str:
    """The backbone name, with a bed's recipe when it is not the default one (``model.recipe=micro``)."""
    recipe = cfg.model.get("recipe")
    return f"{cfg.model.name}:{recipe}" if recipe not in (None, "full") else cfg.model.name


def layer_key(cfg: DictConfig) -> str:
    """The layer-set name; an explicit set is spelled with its indices."""
    if cfg.layers.name == "explicit":
        return "explicit:" + ",".join(str(i) for i in cfg.layers.indices)
    return str(cfg.layers.name)


def target_key(target: float) -> float:
    return round(float(target), 6)


def setup_of(cfg: DictConfig, knob_key: str | None = "alpha") -> dict:
    """What besides the knob (``knob_key``: α, or a Table 1 method's ``method.<knob>``), seed and length moves the
    knob → skip response of a run; HeRo's method is its name, a Table 1 method's its other options."""
    trainer = {k: v for k, v in OmegaConf.to_container(cfg.trainer, resolve=True).items() if k not in TRAINER_RUN_KEYS}
    method = cfg.method.name
    if knob_key != "alpha":
        method = {
            k: v for k, v in OmegaConf.to_container(cfg.method, resolve=True).items() if f"method.{k}" != knob_key
        }
    setup = {
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "layers": layer_key(cfg),
        "method": method,
        "router": OmegaConf.to_container(cfg.router, resolve=True),
        "data": OmegaConf.to_container(cfg.data, resolve=True),
        "trainer": trainer,
    }
    # options added later, at the value that predates them, leave the setup (and its hash) as it was
    return drop_defaults(setup)


def _without_run_keys(setup: dict) -> dict:
    """A stored setup as ``setup_of`` writes it now: entries calibrated while ``trainer.prefix_cache_dir`` (a path of
    the calibrating machine's cache) was part of the setup still match on another machine or cache."""
    trainer = {k: v for k, v in setup.get("trainer", {}).items() if k not in TRAINER_RUN_KEYS}
    return setup | {"trainer": trainer} if "trainer" in setup else setup


def setup_hash(setup: dict) -> str:
    return hashlib.sha256(json.dumps(setup, sort_keys=True, default=str).encode()).hexdigest()[:12]


def entry_setup_hash(entry: dict) -> str:
    """The setup hash of a file's entry as ``setup_of`` computes it today: an entry written while a key of
    ``TRAINER_RUN_KEYS`` was still part of the setup (e.g. ``trainer.prefix_cache_dir``, a machine's path, or
    the speed options) matches the runs it was calibrated for. Entries without a stored setup keep their hash."""
    setup = entry.get("setup")
    if not isinstance(setup, dict):
        return entry["setup_hash"]
    setup = json.loads(json.dumps(setup))
    trainer = setup.get("trainer")
    if isinstance(trainer, dict):
        setup["trainer"] = {k: v for k, v in trainer.items() if k not in TRAINER_RUN_KEYS}
    return setup_hash(drop_defaults(setup))


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_entries(path: str | Path) -> list[dict]:
    """The entries of a calibration file ([] when it does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    data = read_record(path)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CalibrationLookupError(
            f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}"
        )
    return list(data["entries"])


def _same_key(a: dict, b: dict) -> bool:
    return (a["backbone"], a["layer_set"], a["variant"], target_key(a["target_skip"])) == (
        b["backbone"],
        b["layer_set"],
        b["variant"],
        target_key(b["target_skip"]),
    )


def write_entry(path: str | Path, entry: dict) -> Path:
    """Add ``entry`` to the file, replacing the entry with the same key and setup."""
    path = Path(path)
    entry = {**entry, "created": now_iso()}
    with _locked(path):
        kept = [
            e for e in read_entries(path) if not (_same_key(e, entry) and entry_setup_hash(e) == entry["setup_hash"])
        ]
        return write_atomic(path, {"schema_version": SCHEMA_VERSION, "entries": [*kept, entry]})


def finished_entry(
    path: str | Path, key: dict, setup_hash_: str, seed: int, trial_steps: int, tolerance: float
) -> dict | None:
    """The entry that makes calibrating ``key`` again unnecessary, or None.

    It must match the key (backbone, layer set, variant, target), the setup, the seed and the trial
    length, and lie within ``tolerance`` of the target: a rerun of a study's calibrate command then
    keeps what the committed file already holds instead of training its trials again.
    """
    for entry in reversed(read_entries(path)):
        if (
            _same_key(entry, key)
            and entry_setup_hash(entry) == setup_hash_
            and entry["seed"] == seed
            and entry["trial_steps"] == trial_steps
            and entry["abs_error"] <= tolerance
        ):
            return entry
    return None


def _describe(entries: list[dict]) -> str:
    if not entries:
        return "nothing"
    return "; ".join(f"{e['variant']}@{e['target_skip']:g} ({e['backbone']}, {e['layer_set']})" for e in entries)


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append(f"{prefix}{key} ({y!r} there, {x!r} here)")
    return out


def lookup(cfg: DictConfig, knob_key: str | None = "alpha") -> dict:
    """The calibration entry for this run's variant, target, backbone, layer set and setup."""
    path = Path(cfg.calibration.file)
    target = cfg.calibration.get("target_skip")
    if target is None or OmegaConf.is_list(target):
        raise CalibrationLookupError(f"alpha=calibrated needs one calibration.target_skip (a number), got {target!r}")
    wanted = {"backbone": backbone_key(cfg), "layer_set": layer_key(cfg), "variant": cfg.variant, "target_skip": target}
    entries = read_entries(path)
    matches = [e for e in entries if _same_key(e, wanted)]
    what = f"variant={cfg.variant} target_skip={target:g} backbone={wanted['backbone']} layers={wanted['layer_set']}"
    if not matches:
        hero = knob_key == "alpha"
        command = f"ablation={cfg.variant}" if hero else f"method={cfg.method.name}"
        raise CalibrationLookupError(
            f"{knob_key}=calibrated: {path} has no {'α' if hero else 'value'} for "
            f"{what}; it holds: {_describe(entries)} "
            f"(python calibrate.py {command} target_skip={target:g} adds it)"
        )
    setup = setup_of(cfg, knob_key)
    for entry in matches:
        if entry_setup_hash(entry) == setup_hash(setup):
            return entry
    diff = _differences(setup, _without_run_keys(matches[-1]["setup"]))
    value = "α" if knob_key == "alpha" else "value"
    raise CalibrationLookupError(
        f"{knob_key}=calibrated: the {value} for {what} in {path} was calibrated "
        f"with a different setup: {', '.join(diff[:4])}"
    )


def knob_setting(cfg: DictConfig) -> KnobSetting | None:
    """The run's cost knob (α for HeRo, a Table 1 method's ``method.<knob>``) with its value, read from the calibration
    file once when the config says ``calibrated``; None for a method whose skip rate nothing moves."""
    knob = knob_of(cfg.method.name)
    if knob is None:
        return None
    value = cfg.alpha if knob is ALPHA else cfg.method[knob.name]
    if value != "calibrated":
        return KnobSetting(knob, value, "given")
    entry = lookup(cfg, knob.key)
    return KnobSetting(knob, knob.cast(entry["alpha"] if knob is ALPHA else entry["value"]), "calibrated", entry)


def calibrated_alpha(cfg: DictConfig) -> float:
    """α for ``alpha=calibrated``: the calibrated α of this variant at ``calibration.target_skip``."""
    return float(lookup(cfg)["alpha"])


def resolved_config(cfg: DictConfig, knob: KnobSetting | None = None) -> dict:
    """The config a run records and hashes: resolved, with α and a Table 1 method's cost knob as numbers (read
    from the calibration file when ``calibrated``, unless ``knob`` is the setting already read), so that a
    calibrated run has the hash of its value."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    knob = knob or knob_setting(cfg)
    if knob is not None and knob.knob is not ALPHA:
        resolved["method"][knob.knob.name] = knob.value
    alpha = knob.value if knob is not None and knob.knob is ALPHA else cfg.alpha
    resolved["alpha"] = calibrated_alpha(cfg) if alpha == "calibrated" else float(alpha)
    return resolved


def transfer_report(knob: KnobSetting, file: str, realized: float) -> dict:
    """The ``calibration`` section of a final run's record: realized skip against the target of the calibration
    entry the run's ``knob`` was read from.

    Prints one line; says so when the run missed the target by more than the calibration
    tolerance (e.g. a calibration with shortened trials that did not transfer).
    """
    entry = knob.entry
    target = float(entry["target_skip"])
    name = entry.get("knob", "alpha")
    value = entry["alpha"] if name == "alpha" else entry["value"]
    report = {
        "target": target,
        name: value,
        "calibrated_skip": entry["realized_skip"],
        "realized_skip": realized,
        "deviation": realized - target,
        "tolerance": entry["tolerance"],
        "within_tolerance": abs(realized - target) <= entry["tolerance"],
        "study": entry["study"],
        "trial_steps": entry["trial_steps"],
        "file": str(file),
    }
    verdict = "within" if report["within_tolerance"] else "OUTSIDE"
    print(
        f"calibration: realized skip {realized:.4f} vs target {target:.4f} ({100 * (realized - target):+.2f} pp, "
        f"{verdict} ±{100 * entry['tolerance']:.2f} pp); {'α' if name == 'alpha' else name}={value:.4g} gave {entry['realized_skip']:.4f} "
        f"in {entry['trial_steps']}-step trials (study {entry['study']})",
        flush=True,
    )
    return report
