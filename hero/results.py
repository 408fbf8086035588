"""Run records on disk: atomic writes, the config hash, and the index that finds a finished run again.

The record's fields are the type ``hero.records.RunRecord`` (its docstring is the schema).

Where records live, and how a finished run is found again (this module is their one home):
``<run dir>/results.json`` is the record; ``<paths.root>/index/<config_hash>.json`` is the
config-hash index entry (status running/completed/failed, path of the record, run dir) that
makes a relaunch of the same config a no-op. ``completed_record`` and ``indexed_record`` read
that index (the pipeline before running, the launcher before submitting, ``status`` after),
``index_records`` scans a tree for completed records by hash (the launcher's ``records_root``).
``trained_records`` finds, through the same index, the finished runs that trained what a new config
would train (``training_hash``: the config hash without how the run is scored).
Importing this module does not import torch (``hero/__init__`` is lazy), so the launcher and
its CLI stay light.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULTS_FILENAME = "results.json"
ITEMS_FILENAME = "items.jsonl.gz"  # per-item outputs beside a record (``write_items``)

# Keys of the resolved config that do not change what a run computes.
RUN_LOCAL_KEYS = (
    "logger",
    "hydra",
    "paths",
    "force",
    "calibration.file",
    "trainer.checkpoint_every",
    "trainer.progress",
    "trainer.prefix_cache_dir",
    "reuse_trained",
    # evaluation's reuse of the frozen prefix's states: the same batches through the same layers (exact)
    "eval.prefix_cache",
    "eval.prefix_cache_dir",
    # the LM head only where lm-eval reads it (hero.evaluation.harness): the same values
    "eval.labelled_logits",
)

# Keys that decide how a run is scored and reported, not what it trains: two configs equal but for these train
# the same tensors (same ``training_hash``), so the later run reuses the earlier one's trained state
# (``hero.pipeline``), e.g. a seeded run at a calibrated α and the calibration trial that found it.
SCORING_KEYS = ("eval", "objective", "calibration", "intervention")

# Options added after records were first written, with the value that reproduces the earlier behaviour.
# At that value a key is left out of the hash (and of the calibration setup, ``hero.calibration_file``), so
# every config that predates the option keeps its hash; any other value enters it. A group that is left
# empty by this (``intervention`` at its defaults) goes too.
DEFAULTED_KEYS: dict[str, object] = {
    "intervention.force_execute": [],
    "intervention.unscaled": False,
    "intervention.identity_adapter": False,
    "router.layer_gate_bias": False,
    "router.straight_through": False,
    "trainer.alpha_warmup_frac": 0.0,
    "trainer.skip_loss_positions": "all",
    # SkipGPT-RT's official-code options (hero/methods/skipgpt_rt.py)
    "method.router": "linear",
    "method.eval_gate": "argmax",
    "method.temperature_final": None,
    # speed options (docs/speed/training.md): same samples, loss and routing up to float order; a run with
    # one of them on is still another run, hence hashed
    "trainer.labelled_logits": False,
    "trainer.pad_waste": 1.0,
    "trainer.prefix_cache": False,
    # every task of the suite scored, diagnostics included (false: Retain's tasks only; issue 59)
    "eval.diagnostics": True,
    # scoring at several evaluation thresholds beside the trained one (hero.scoring.score_curve)
    "eval.thresholds": None,
}


def _drop(cfg: dict, dotted: str) -> None:
    head, _, rest = dotted.partition(".")
    if head not in cfg:
        return
    if rest:
        if isinstance(cfg[head], dict):
            _drop(cfg[head], rest)
    else:
        del cfg[head]


def drop_defaults(cfg: dict, prefix: str = "") -> dict:
    """``cfg`` (a resolved config, or its ``prefix`` group) without the ``DEFAULTED_KEYS`` at their default
    value, and without a group those leave empty; modified in place and returned."""
    for dotted, default in DEFAULTED_KEYS.items():
        if prefix and not dotted.startswith(prefix + "."):
            continue
        path = dotted[len(prefix) + 1 :].split(".") if prefix else dotted.split(".")
        parents, node = [], cfg
        for key in path[:-1]:
            if not isinstance(node, dict) or key not in node:
                break
            parents.append((node, key))
            node = node[key]
        else:
            if isinstance(node, dict) and path[-1] in node and node[path[-1]] == default:
                del node[path[-1]]
                for parent, key in reversed(parents):
                    if parent[key] == {}:
                        del parent[key]
    return cfg


def config_hash(config: dict) -> str:
    """Stable 16-hex hash of a resolved config, ignoring run-local keys (output dirs, logger, force) and
    options at the default that predates them (``DEFAULTED_KEYS``)."""
    cfg = json.loads(json.dumps(config, sort_keys=True, default=str))
    for key in RUN_LOCAL_KEYS:
        _drop(cfg, key)
    drop_defaults(cfg)
    blob = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def git_commit(cwd: str | os.PathLike | None = None) -> str:
    """The commit of the code that ran (``unknown`` outside a git checkout), ``+dirty`` if modified."""
    here = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True
        ).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    """Versions of the packages whose changes move results, from their installed metadata (equal to their
    ``__version__``; reading it imports none of them)."""
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "lm_eval", "peft"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    from hero import __version__

    out["hero"] = __version__
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_atomic(path: str | os.PathLike, payload: Any) -> Path:
    """Write JSON to ``path`` via a temp file in the same directory and ``os.replace``.

    A reader never sees a half-written record, and a crash mid-write leaves the old file intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=False, default=_json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_items(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Per-item rows as gzip'd JSON Lines, atomically, byte for byte the same for the same rows (no time or name in
    the gzip header): a record's ``items.jsonl.gz`` (``hero.evaluation.harness.item_rows``)."""
    import gzip

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            for row in rows:
                f.write((json.dumps(row, separators=(",", ":"), default=_json_default) + "\n").encode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_items(path: str | os.PathLike) -> list[dict]:
    """The rows ``write_items`` wrote."""
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_record(path: str | os.PathLike) -> dict:
    with open(path) as f:
        return json.load(f)


def read_record_or_none(path: str | os.PathLike | None) -> dict | None:
    """The JSON at ``path``, or None when it is missing or unreadable (a half-copied file, a typo)."""
    if not path:
        return None
    try:
        return read_record(path)
    except (OSError, ValueError):
        return None


def is_completed(record: dict | None) -> bool:
    """A record of a finished run (a record without ``status`` predates the field: completed)."""
    return bool(record) and record.get("status", "completed") == "completed"


def training_hash(config: dict) -> str:
    """``config_hash`` of the config without its ``SCORING_KEYS``: equal for runs that train the same tensors."""
    cfg = json.loads(json.dumps(config, sort_keys=True, default=str))
    for key in SCORING_KEYS:
        _drop(cfg, key)
    return config_hash(cfg)


def index_file(root: str | os.PathLike, chash: str) -> Path:
    """The config-hash index entry of a run: ``<paths.root>/index/<config_hash>.json``."""
    return Path(root) / "index" / f"{chash}.json"


def write_index(
    root: str | os.PathLike,
    chash: str,
    status: str,
    run_dir: str | os.PathLike,
    record: str | os.PathLike | None = None,
) -> Path:
    """Point the index entry of ``chash`` at this run (status running / completed / failed)."""
    entry = {
        "status": status,
        **({"record": str(record)} if record is not None else {}),
        "run_dir": str(run_dir),
        "updated": now_iso(),
    }
    return write_atomic(index_file(root, chash), entry)


def _indexed(entry_path: str | os.PathLike | None) -> tuple[Path, dict] | None:
    """(path, record) of the completed record an index entry points at, or None (no entry, running, failed,
    record gone)."""
    entry = read_record_or_none(entry_path) or {}
    path = entry.get("record")
    record = read_record_or_none(path) if entry.get("status") == "completed" and path else None
    return (Path(path), record) if is_completed(record) else None


def indexed_record(entry_path: str | os.PathLike | None) -> Path | None:
    """The completed record an index entry points at, or None (no entry, running, failed, record gone)."""
    found = _indexed(entry_path)
    return found[0] if found else None


def completed_record(root: str | os.PathLike, chash: str) -> Path | None:
    """The record of a completed run with this config hash under ``root``, if one exists on disk."""
    return indexed_record(index_file(root, chash))


def trained_records(root: str | os.PathLike, thash: str) -> list[tuple[Path, dict]]:
    """(path, record) of the completed records in ``root``'s config-hash index whose training hash is ``thash``,
    newest first."""
    found = [_indexed(entry) for entry in sorted((Path(root) / "index").glob("*.json"))]
    found = [
        (path, record) for path, record in filter(None, found) if training_hash(record.get("config") or {}) == thash
    ]
    return sorted(found, key=lambda hit: hit[1].get("created", ""), reverse=True)


def index_records(root: str | os.PathLike) -> dict[str, Path]:
    """config_hash (and launch_hash) -> path of a completed ``results.json``, for every record under ``root``."""
    out: dict[str, Path] = {}
    root = Path(root)
    if not root.exists():
        return out
    for path in root.rglob(RESULTS_FILENAME):
        record = read_record_or_none(path)
        if is_completed(record):
            for key in ("config_hash", "launch_hash"):
                if record.get(key):
                    out.setdefault(str(record[key]), path)
    return out
