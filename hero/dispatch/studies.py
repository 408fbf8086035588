"""Named studies: ``sweeps/<name>.yaml``, one Hydra multirun per variant into one sweep dir.

A study file holds ``name`` (default: file stem), ``entry`` (default ``train.py``), shared
``overrides``, a ``grid`` (key -> list of values, swept), ``variants`` (each with its own
``overrides`` and ``grid``) and ``expected_jobs`` (checked against the grid before anything
runs). ``study_commands`` turns it into one ``python train.py -m ...`` per variant; later
overrides replace earlier ones with the same key: study < variant < grid < command line.
Run one with ``python -m hero.dispatch sweep sweeps/<name>.yaml [overrides]``; ``--variants a,b``
runs only those variants (e.g. the baselines while the router variants are still being calibrated).
On the local launcher the variants run side by side, sharing one pool of run slots
(``shared_slots``): a variant with an odd number of jobs leaves no core idle.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml


def load_study(path: str | os.PathLike) -> dict:
    """A study file with its defaults filled in (name = file stem, entry = train.py beside sweeps/)."""
    with open(path) as f:
        study = yaml.safe_load(f)
    study.setdefault("name", Path(path).stem)
    study.setdefault("entry", "train.py")
    if not Path(study["entry"]).exists():  # studies live in <repo>/sweeps/, entries at <repo>/
        beside = Path(path).resolve().parent.parent / study["entry"]
        if beside.exists():
            study["entry"] = str(beside)
    study.setdefault("overrides", [])
    study.setdefault("grid", {})
    study.setdefault("variants", [{"name": "main", "overrides": []}])
    return study


def select_variants(study: dict, names: Sequence[str]) -> dict:
    """The study restricted to the named variants, in the study's order; an unknown name is a
    ValueError naming it and the variants the study has."""
    have = [v["name"] for v in study["variants"]]
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(
            f"--variants {','.join(unknown)}: not in study {study['name']}; its variants are {', '.join(have)}"
        )
    return {**study, "variants": [v for v in study["variants"] if v["name"] in names]}


def _grid_size(grid: dict) -> int:
    n = 1
    for v in grid.values():
        vals = v if isinstance(v, list) else str(v).split(",")
        n *= len(vals)
    return n


def override_key(override: str) -> str:
    """The key an override sets: ``+trainer.lr=1e-4`` -> ``trainer.lr``."""
    return override.split("=", 1)[0].lstrip("+~")


def override_value(overrides: Sequence[str], key: str) -> str | None:
    """The value the last override of ``key`` sets (later overrides win, as in ``study_commands``), or None."""
    return next((o.split("=", 1)[1] for o in reversed(overrides) if override_key(o) == key), None)


def study_commands(study: dict, extra: Sequence[str] = (), sweep_root: str = "multirun/studies") -> list[list[str]]:
    """One ``python train.py -m ...`` per variant of the study, all into one sweep dir
    (``<sweep_root>/<name>``). Later overrides replace earlier ones with the same key:
    study < variant < grid < ``extra`` (so ``model=tiny`` on the command line wins)."""
    cmds = []
    for var in study["variants"]:
        merged: dict[str, str] = {}
        grid = {**study["grid"], **(var.get("grid") or {})}
        items = list(study["overrides"]) + list(var.get("overrides") or [])
        for k, v in grid.items():
            vals = v if isinstance(v, list) else [v]
            items.append(f"{k}={','.join(str(x) for x in vals)}")
        items.append(f"hydra.sweep.dir={sweep_root}/{study['name']}")
        for o in [*items, *extra]:
            merged.pop(override_key(o), None)
            merged[override_key(o)] = o
        cmds.append([sys.executable, study["entry"], "-m", *merged.values()])
    return cmds


def shared_slots(cmds: list[list[str]], directory: str) -> list[list[str]] | None:
    """The commands with one run-slot pool (``hydra.launcher.slots``, kept if the command line names one)
    when every one of them uses the local launcher ``hero_local``, so they can run side by side; else None."""
    if not cmds or any(override_value(c, "hydra/launcher") != "hero_local" for c in cmds):
        return None
    return [c if override_value(c, "hydra.launcher.slots") else [*c, f"hydra.launcher.slots={directory}"] for c in cmds]


def command_size(cmd: Sequence[str]) -> int:
    """Jobs of one multirun command line (product of the comma-separated sweeps)."""
    n = 1
    for o in cmd[3:]:
        if "=" in o and not override_key(o).startswith("hydra"):
            val = o.split("=", 1)[1]
            if "," in val and not val.strip().startswith(("[", "{")):
                n *= len(val.split(","))
    return n


def study_size(study: dict) -> int:
    """Jobs of the whole study (sum over variants of the grid size)."""
    return sum(_grid_size({**study["grid"], **(v.get("grid") or {})}) for v in study["variants"])
