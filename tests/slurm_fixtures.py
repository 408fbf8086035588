"""Helpers for the dispatch tests: the real single-node SLURM (scripts/slurm/) and a small Hydra app.

The app follows the same contract as ``train.py`` (hero.pipeline): it writes ``results.json``
atomically into its Hydra output dir, keeps checkpoints, resumes from the latest one when rerun in
the same dir, raises for ``fail=true``, and its result depends only on its config (so a run that
was interrupted and resumed must produce the same record as an uninterrupted one). It is small on
purpose: the tests measure dispatch, not training.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLURM_DIR = Path(os.environ.get("HERO_SLURM_DIR", "/tmp/hero-slurm"))
SLURM_CONF = SLURM_DIR / "etc" / "slurm.conf"

APP = r"""
import json, os, time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(version_base="1.3", config_path=".", config_name="app")
def main(cfg) -> float:
    from omegaconf import OmegaConf
    from hero.results import config_hash, write_atomic

    out = Path(HydraConfig.get().runtime.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    fail_env = [int(x) for x in os.environ.get("APP_FAIL_SEEDS", "").split(",") if x.strip()]
    if cfg.fail or cfg.seed in cfg.fail_seeds or cfg.seed in fail_env:
        raise RuntimeError(f"deliberate failure (seed {cfg.seed})")
    ckpt = out / "checkpoints" / "latest.json"
    state = {"step": 0, "x": int(cfg.seed)}
    if ckpt.exists():
        state = json.loads(ckpt.read_text())
        print(f"resumed from {ckpt} (step {state['step']})", flush=True)
    starts = out / "starts.txt"
    with open(starts, "a") as f:
        f.write(f"{os.environ.get('SLURM_JOB_ID', os.getpid())} {os.environ.get('SLURM_RESTART_COUNT', '0')} {state['step']}\n")
    while state["step"] < cfg.steps:
        state["x"] = (state["x"] * 1103515245 + 12345) % 2**31
        state["step"] += 1
        if state["step"] % cfg.checkpoint_every == 0:
            write_atomic(ckpt, state)
        print(f"step {state['step']}", flush=True)
        time.sleep(cfg.step_s)
    record = {"schema_version": 1, "status": "completed", "method": "app", "variant": "app", "seed": cfg.seed,
              "train": {"final": state["x"], "steps": state["step"]}, "config": resolved, "config_hash": config_hash(resolved),
              "restarts": len(starts.read_text().splitlines()) - 1}
    write_atomic(out / "results.json", record)
    return float(state["x"])


if __name__ == "__main__":
    main()
"""

APP_YAML = """
defaults:
  - _self_
seed: 0
fail: false
fail_seeds: []
force: false
steps: 6
step_s: 0.05
checkpoint_every: 2
hydra:
  searchpath:
    - file://{repo}/conf
  sweep:
    dir: {sweep_dir}
  job:
    chdir: false
"""


def write_app(dirpath: Path, sweep_dir: Path) -> Path:
    """Write the app (app.py + app.yaml) into ``dirpath``; returns app.py."""
    dirpath.mkdir(parents=True, exist_ok=True)
    (dirpath / "app.py").write_text(APP)
    (dirpath / "app.yaml").write_text(APP_YAML.format(repo=REPO, sweep_dir=sweep_dir))
    return dirpath / "app.py"


def app_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # hydra_plugins/hero_launcher (the launcher shim) lives at the repo root.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["SLURM_CONF"] = str(SLURM_CONF)
    env.setdefault("WANDB_MODE", "disabled")
    env.update(extra or {})
    return env


def run_app(app: Path, *args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python app.py -m <args>`` from the app's dir; returns the finished process (output captured)."""
    cmd = [sys.executable, str(app), "-m", *args]
    return subprocess.run(cmd, cwd=app.parent, env=env or app_env(), capture_output=True, text=True, timeout=timeout)


def records(sweep_dir: Path) -> dict[str, dict]:
    """subdir name -> record, for every results.json under the sweep dir."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob("*/results.json"))}


# ------------------------------------------------------------------------------------------ SLURM


def slurm_alive() -> bool:
    if not SLURM_CONF.exists() or shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%t"],
            capture_output=True,
            text=True,
            timeout=15,
            env={**os.environ, "SLURM_CONF": str(SLURM_CONF)},
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix", "alloc"))


def slurm_env() -> None:
    """Point this process (and the children it starts) at the test cluster, or skip/fail."""
    if not slurm_alive():
        msg = f"no SLURM test cluster answering ({SLURM_CONF}); run `make slurm-up` (or `make test`)"
        if os.environ.get("HERO_SLURM_REQUIRED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    os.environ["SLURM_CONF"] = str(SLURM_CONF)


SACCT_UNSETTLED = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING")


def sacct_states(job_ids: list[str], all_attempts: bool = False, timeout: float = 60) -> dict[str, list[str]]:
    """job id -> states (one per attempt with ``all_attempts``: -D lists requeued attempts).

    slurmdbd writes accounting rows asynchronously (on a brand-new cluster the first job's row can
    lag its end by seconds), so this polls, up to ``timeout`` s, until every id has a row and none
    is still in a transient state or ends in a requeue; then (or at the timeout) returns what
    sacct says."""
    cmd = ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(job_ids)]
    if all_attempts:
        cmd.insert(1, "-D")
    t0 = time.time()
    while True:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        states: dict[str, list[str]] = {}
        for line in out.splitlines():
            jid, _, st = line.partition("|")
            states.setdefault(jid, []).append(st.split()[0] if st else "")
        settled = [
            j
            for j in job_ids
            if states.get(j) and states[j][-1] != "REQUEUED" and not set(states[j]) & set(SACCT_UNSETTLED)
        ]
        if len(settled) == len(job_ids) or time.time() - t0 > timeout:
            return states
        time.sleep(1)


def wait_for(pred, timeout: float, every: float = 0.5, what: str = "condition"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
