"""Dispatch against a REAL single-node SLURM (scripts/slurm/up.sh; `make test` starts and stops it).

Each test runs a Hydra multirun of a small app (tests/slurm_fixtures.py: same record/checkpoint
contract as train.py) through conf/hydra/launcher/slurm_testbed.yaml and checks what SLURM, the
launcher and the records say. Skipped when no test cluster answers, FAILED instead when
HERO_SLURM_REQUIRED=1 (as `make test` sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_fixtures import (
    REPO,
    app_env,
    records,
    run_app,
    sacct_states,
    slurm_env,
    wait_for,  # noqa: E402
    write_app,
)

pytestmark = pytest.mark.slurm

LAUNCHER = "hydra/launcher=slurm_testbed"


@pytest.fixture
def cluster():
    slurm_env()
    yield
    # Leave nothing of ours queued (ids come from this test's manifests).


@pytest.fixture
def app(tmp_path, cluster):
    sweep = tmp_path / "sweep"
    return write_app(tmp_path / "app", sweep), sweep


def _summary(sweep: Path) -> dict:
    return json.loads((sweep / "summary.json").read_text())


def _manifest(sweep: Path) -> dict:
    files = sorted((sweep / "manifests").glob("*.json"))
    assert files, "no manifest written"
    return json.loads(files[-1].read_text())


def test_three_seed_multirun_is_one_array_with_three_records(app):
    app_py, sweep = app
    t0 = time.time()
    r = run_app(app_py, "seed=42,43,44", LAUNCHER)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = records(sweep)
    assert sorted(rec["seed"] for rec in recs.values()) == [42, 43, 44]
    assert all(rec["status"] == "completed" for rec in recs.values())
    jobs = _manifest(sweep)["jobs"]
    array_ids = {j["job_id"].split("_")[0] for j in jobs}
    assert len(array_ids) == 1, f"expected one job array, got {array_ids}"
    states = sacct_states([j["job_id"] for j in jobs])
    assert all(states[j["job_id"]] == ["COMPLETED"] for j in jobs), states
    assert _summary(sweep)["counts"] == {"COMPLETED": 3}
    print(f"3-seed array on SLURM: {time.time() - t0:.1f} s")


def test_failure_is_a_failure_and_relaunch_reruns_only_it(app):
    app_py, sweep = app
    r = run_app(app_py, "seed=1,2,3", LAUNCHER, env=app_env({"APP_FAIL_SEEDS": "2"}))
    out = r.stdout + r.stderr
    assert r.returncode != 0, "a sweep with a failed job must exit non-zero"
    summary = _summary(sweep)
    assert summary["counts"] == {"COMPLETED": 2, "FAILED": 1}
    (failed,) = summary["failed"]
    assert "seed=2" in failed["overrides"]
    assert "deliberate failure (seed 2)" in failed["error"]
    assert Path(failed["log"]).exists() and "deliberate failure" in Path(failed["log"]).read_text()
    assert failed["log"] in out, "the summary printed by the launcher names the failed job's log"
    states = sacct_states([j["job_id"] for j in summary["jobs"]])
    assert states[failed["job_id"]] == ["FAILED"], states
    assert sorted(states.values()) == [["COMPLETED"], ["COMPLETED"], ["FAILED"]]
    first = records(sweep)
    assert sorted(rec["seed"] for rec in first.values()) == [1, 3]
    mtimes = {k: (sweep / k / "results.json").stat().st_mtime_ns for k in first}
    dirs_before = sorted(p.name for p in sweep.iterdir() if p.is_dir() and "=" in p.name)

    # Relaunch the same sweep: only the failed job runs again, in its own dir; nothing is overwritten.
    r = run_app(app_py, "seed=1,2,3", LAUNCHER)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = _manifest(sweep)
    assert m["n_submitted"] == 1 and m["n_skipped"] == 2
    (resubmitted,) = [j for j in m["jobs"] if j["state"] != "SKIPPED"]
    assert "seed=2" in resubmitted["overrides"]
    assert resubmitted["job_id"] != failed["job_id"]
    recs = records(sweep)
    assert sorted(rec["seed"] for rec in recs.values()) == [1, 2, 3]
    assert {k: (sweep / k / "results.json").stat().st_mtime_ns for k in first} == mtimes
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and "=" in p.name) == dirs_before

    # A third launch has nothing to do.
    r = run_app(app_py, "seed=1,2,3", LAUNCHER)
    assert r.returncode == 0
    assert _manifest(sweep)["n_submitted"] == 0


def test_usr2_requeues_and_resumes_to_the_same_record(app, tmp_path):
    app_py, sweep = app
    steps = ["steps=40", "step_s=0.25", "checkpoint_every=4", "seed=7"]
    proc = subprocess.Popen(
        [sys.executable, str(app_py), "-m", *steps, LAUNCHER],
        cwd=app_py.parent,
        env=app_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def running_past_a_checkpoint():
            for d in sweep.glob("*seed=7*"):
                if (d / "checkpoints" / "latest.json").exists():
                    step = json.loads((d / "checkpoints" / "latest.json").read_text())["step"]
                    if step >= 8:
                        return d
            return None

        job_dir = wait_for(running_past_a_checkpoint, 120, what="the job to pass step 8")
        (job,) = _manifest(sweep)["jobs"]
        t_sig = time.time()
        subprocess.run(["scancel", "--signal=USR2", job["job_id"]], check=True)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    wall = time.time() - t_sig
    interrupted = records(sweep)[job_dir.name]
    starts = (job_dir / "starts.txt").read_text().split()
    # two starts: the first from step 0, the requeued one from a checkpoint (not from scratch)
    assert len(starts) == 6, starts
    assert starts[2] == "0" and int(starts[5]) >= 8 and starts[4] == "1", starts
    attempts = sacct_states([job["job_id"]], all_attempts=True)[job["job_id"]]
    assert attempts == ["REQUEUED", "COMPLETED"], attempts

    # The same config, uninterrupted, in another sweep dir: identical training record.
    ref_sweep = tmp_path / "ref"
    r = run_app(app_py, *steps, "step_s=0.0", LAUNCHER, f"hydra.sweep.dir={ref_sweep}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (reference,) = records(ref_sweep).values()
    assert interrupted["train"] == reference["train"]
    assert interrupted["restarts"] == 1 and reference["restarts"] == 0
    print(f"USR2 -> requeue -> resumed and finished in {wall:.1f} s")


def test_fire_and_forget_submit_status_collect(app):
    app_py, sweep = app
    t0 = time.time()
    r = run_app(
        app_py,
        "seed=5,6",
        "steps=12",
        "step_s=0.5",
        LAUNCHER,
        "hydra.launcher.wait=false",
        env=app_env({"APP_FAIL_SEEDS": "6"}),
    )
    submit_s = time.time() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest_files = sorted((sweep / "manifests").glob("*.json"))
    assert len(manifest_files) == 1
    manifest = json.loads(manifest_files[0].read_text())
    assert [j["state"] for j in manifest["jobs"]] == ["SUBMITTED", "SUBMITTED"]
    assert all(j["job_id"] and j["output_dir"] and j["overrides"] for j in manifest["jobs"])
    assert not records(sweep), "returned before the jobs finished"

    cli = [sys.executable, "-m", "hero.dispatch"]
    st = subprocess.run([*cli, "status", str(manifest_files[0])], capture_output=True, text=True, cwd=REPO)
    assert st.returncode == 3, st.stdout + st.stderr  # 3: still pending/running

    def finished():
        s = subprocess.run([*cli, "status", str(sweep), "--json"], capture_output=True, text=True, cwd=REPO)
        return s if s.returncode in (0, 1) else None

    s = wait_for(finished, 180, every=2, what="the submitted jobs to finish")
    status = json.loads(s.stdout)
    assert status["counts"] == {"COMPLETED": 1, "FAILED": 1}, status
    assert "deliberate failure (seed 6)" in status["failed"][0]["error"]

    c = subprocess.run([*cli, "collect", str(manifest_files[0])], capture_output=True, text=True, cwd=REPO)
    assert c.returncode == 1, c.stdout + c.stderr  # 1: a job failed
    assert "FAILED" in c.stdout and status["failed"][0]["log"] in c.stdout
    collected = json.loads((sweep / "collected.json").read_text())
    assert [rec["record"]["seed"] for rec in collected["records"]] == [5]
    print(f"fire-and-forget: submit returned in {submit_s:.1f} s")


def test_train_py_three_seeds_on_slurm_then_relaunch_is_a_noop(cluster, micro_cache, tmp_path):
    """The user's command, unchanged, on the cluster: python train.py -m ... hydra/launcher=<preset>."""
    root = tmp_path / "outputs"
    args = [
        "ablation=no_memory_read",
        "seed=42,43,44",
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        f"paths.root={root}",
        "trainer.max_steps=3",
        "trainer.global_batch=4",
        "trainer.micro_batch=2",
        "trainer.checkpoint_every=1",
        "trainer.progress=false",
        "logger=none",
        "eval=none",
        LAUNCHER,
    ]
    env = app_env({"OMP_NUM_THREADS": "1"})
    t0 = time.time()
    r = subprocess.run(
        [sys.executable, "train.py", "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in root.rglob("results.json")]
    assert sorted(rec["seed"] for rec in recs) == [42, 43, 44]
    assert {rec["status"] for rec in recs} == {"completed"} and {rec["variant"] for rec in recs} == {"no_memory_read"}
    (sweep,) = {p.parent.parent for p in root.rglob("manifests/*.json")}
    jobs = _manifest(sweep)["jobs"]
    assert len({j["job_id"].split("_")[0] for j in jobs}) == 1
    # the launcher's config hash is the pipeline's: the relaunch skips all three without submitting
    assert sorted(j["launch_hash"] for j in jobs) == sorted(rec["config_hash"] for rec in recs)
    r = subprocess.run(
        [sys.executable, "train.py", "-m", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifests = sorted(root.rglob("manifests/*.json"))
    last = json.loads(manifests[-1].read_text())
    assert (last["n_submitted"], last["n_skipped"]) == (0, 3)
    print(f"train.py 3 seeds on SLURM + no-op relaunch: {time.time() - t0:.1f} s")


def _ddp_probe():
    import torch
    import torch.distributed as dist

    from hero import distributed

    rank, world = distributed.init_distributed()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    out = {
        "rank": rank,
        "world": world,
        "sum": float(t),
        "main": distributed.is_main_process(),
        "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"],
    }
    distributed.destroy_distributed()
    return out


def test_ddp_tasks_per_node_2_under_slurm(cluster, tmp_path, monkeypatch):
    import submitit

    # the job unpickles _ddp_probe from this module: make tests/ importable there (sbatch exports env)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    ex.update_parameters(slurm_partition="debug", tasks_per_node=2, cpus_per_task=1, timeout_min=5, mem_gb=2)
    job = ex.submit(_ddp_probe)
    res = job.results()
    assert [r["rank"] for r in res] == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 for r in res)
    assert [r["main"] for r in res] == [True, False]
    assert res[0]["master"] == res[1]["master"]
    wait_for(lambda: sacct_states([job.job_id]).get(job.job_id) == ["COMPLETED"], 60, what="sacct COMPLETED")
