"""Dispatch without a cluster: submitit-local multiruns, DDP on CPU (gloo, 2 processes), the DDP env
under torchrun / srun / submitit-local, job identity, W&B run ids, presets and named studies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_fixtures import REPO, app_env, records, run_app, write_app  # noqa: E402

from hero import distributed, preemption, tracking  # noqa: E402
from hero.dispatch import plan, studies  # noqa: E402
from hero.dispatch.job import HydraJob  # noqa: E402

# ----------------------------------------------------------------------------- submitit local


def test_submitit_local_multirun_records_summary_and_skip(tmp_path):
    sweep = tmp_path / "sweep"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(app, "seed=1,2", "hydra/launcher=hero_local")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = records(sweep)
    assert sorted(rec["seed"] for rec in recs.values()) == [1, 2]
    assert sorted(recs) == sorted(
        plan.job_key([f"seed={s}"], rec["config_hash"]) for s, rec in ((rec["seed"], rec) for rec in recs.values())
    )
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["counts"] == {"COMPLETED": 2}
    # relaunch with one more seed: the two finished jobs are skipped, only seed 3 runs
    r = run_app(app, "seed=1,2,3", "hydra/launcher=hero_local")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads(sorted((sweep / "manifests").glob("*.json"))[-1].read_text())
    assert (manifest["n_submitted"], manifest["n_skipped"]) == (1, 2)
    assert sorted(rec["seed"] for rec in records(sweep).values()) == [1, 2, 3]


def _spans(*sweeps: Path) -> list[tuple[float, float]]:
    """(start, end) of every finished job in the sweeps: its starts.txt and its record's write times."""
    return sorted(
        (p.parent.joinpath("starts.txt").stat().st_mtime, p.stat().st_mtime)
        for sweep in sweeps
        for p in sweep.glob("*/results.json")
    )


def test_submitit_local_runs_at_most_array_parallelism_jobs_at_once(tmp_path):
    """array_parallelism=1: each job starts after the previous one wrote its record (all 3 are run)."""
    sweep = tmp_path / "sweep"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(app, "seed=1,2,3", "step_s=0.2", "hydra/launcher=hero_local", "hydra.launcher.array_parallelism=1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    spans = _spans(sweep)
    assert len(spans) == 3
    assert all(start >= end for (_, end), (start, _) in zip(spans, spans[1:])), spans


def test_concurrent_local_multiruns_naming_one_slot_dir_share_its_slots(tmp_path):
    """Two multiruns at once, one shared slot: the four jobs run one after another, none side by side."""
    app = write_app(tmp_path / "app", tmp_path / "unused")
    shared = [
        "step_s=0.2",
        "hydra/launcher=hero_local",
        "hydra.launcher.array_parallelism=1",
        f"hydra.launcher.slots={tmp_path / 'slots'}",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, str(app), "-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / name}", *shared],
            cwd=app.parent,
            env=app_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("a", "b")
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    spans = _spans(tmp_path / "a", tmp_path / "b")
    assert len(spans) == 4
    assert all(start >= end for (_, end), (start, _) in zip(spans, spans[1:])), spans


def test_slot_pool_hands_out_size_slots_and_takes_them_back(tmp_path):
    from hero.dispatch.slots import SlotPool

    first, second = SlotPool(tmp_path, 2), SlotPool(tmp_path, 2)  # two processes' views of one directory
    held = [first.try_acquire(), second.try_acquire()]
    assert None not in held and second.try_acquire() is None and first.try_acquire() is None
    SlotPool.release(held[0])
    assert (fd := second.try_acquire()) is not None
    SlotPool.release(fd)
    SlotPool.release(held[1])
    with pytest.raises(ValueError, match="size 0 must be at least 1"):
        SlotPool(tmp_path, 0)
    private = SlotPool(None, 1)  # a launch without `slots`: its own pool, removed with it
    held, where = private.try_acquire(), private.directory
    assert held is not None and where.is_dir()
    del private
    assert not where.exists()
    SlotPool.release(held)


def _status(target: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "hero.dispatch", "status", str(target), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=app_env(),
        timeout=120,
    )
    return json.loads(r.stdout)


def test_status_follows_a_local_launch_and_a_killed_launch_resumes(tmp_path):
    """One run slot, two jobs: while the launch runs, status shows one RUNNING and one PENDING (its
    manifest is written before the first job starts); killed, one reads FAILED as killed and one as
    never started; the same command then finishes both."""
    sweep = tmp_path / "sweep"
    app = write_app(tmp_path / "app", sweep)
    args = ["seed=1,2", "steps=100", "step_s=0.05", "hydra/launcher=hero_local", "hydra.launcher.array_parallelism=1"]
    launch = subprocess.Popen(
        [sys.executable, str(app), "-m", *args],
        cwd=app.parent,
        env=app_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while not (sweep / "manifests").is_dir() or _status(sweep)["counts"] != {"RUNNING": 1, "PENDING": 1}:
        assert launch.poll() is None and time.time() < deadline, "never saw one job running, one pending"
        time.sleep(0.2)
    os.killpg(launch.pid, signal.SIGKILL)
    launch.wait()
    running = next(j["job_id"] for j in _status(sweep)["jobs"] if j.get("job_id"))
    while Path(f"/proc/{running}").exists():
        assert time.time() < deadline
        time.sleep(0.2)
    after = _status(sweep)
    assert after["counts"] == {"FAILED": 2}
    errors = sorted(f["error"] for f in after["failed"])
    assert "never started" in errors[0] and "ended without a record" in errors[1], errors
    r = run_app(app, *args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _status(sweep)["counts"] == {"COMPLETED": 2}
    assert sorted(rec["seed"] for rec in records(sweep).values()) == [1, 2]


def test_record_names_say_method_variant_knob_and_seed():
    from hero.dispatch.manifests import KNOB_LABELS, record_name

    # the tags in the committed studies' record names (docs/studies/*/records)
    assert KNOB_LABELS == {"alpha": "a", "method.p": "p", "method.k": "k", "method.target_ratio": "r"}
    hero = {"method": "hero", "variant": "no_history", "seed": 43}
    assert record_name(hero, ["ablation=no_history", "alpha=calibrated", "seed=43"]) == "hero-no_history-calibrated-s43"
    assert record_name(hero, ["alpha=0.002", "alpha=0.0003"]) == "hero-no_history-a0.0003-s43"  # the last one wins
    assert record_name(hero, []) == "hero-no_history-s43"
    rs = {"method": "random_skip", "variant": "random_skip", "seed": 42}
    assert record_name(rs, ["method=random_skip", "method.p=0.1"]) == "random_skip-p0.1-s42"
    assert record_name({"method": "dense", "variant": "dense", "seed": 42}, ["method=dense"]) == "dense-s42"
    budget = {"method": "hero", "variant": "full+u90", "seed": 42}
    levels = {
        record_name(budget, ["alpha=calibrated", f"calibration.target_skip={t}"], ["calibration.target_skip"])
        for t in (0.06, 0.12)
    }
    assert levels == {"hero-full+u90-calibrated-target_skip=0.06-s42", "hero-full+u90-calibrated-target_skip=0.12-s42"}
    assert record_name(budget, ["alpha=calibrated"], ["calibration.target_skip"]) == "hero-full+u90-calibrated-s42"


def test_collect_into_copies_records_under_their_names_and_never_overwrites(tmp_path):
    sweep, into = tmp_path / "sweep", tmp_path / "records"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(app, "seed=1,2", "hydra/launcher=hero_local")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cmd = [sys.executable, "-m", "hero.dispatch", "collect", str(sweep), "--into", str(into)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=app_env())
    assert r.returncode == 0 and "2 new, 0 already there" in r.stdout, r.stdout + r.stderr
    by_name = {p.parent.name: p.read_bytes() for p in into.glob("*/results.json")}
    assert sorted(by_name) == ["app-s1", "app-s2"]
    assert by_name == {
        f"app-s{rec['seed']}": p.read_bytes()
        for p, rec in ((p, json.loads(p.read_text())) for p in sweep.glob("*/results.json"))
    }
    (into / "app-s1" / "results.json").write_text("{}")  # someone else's record under that name
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=app_env())
    assert r.returncode == 1 and "0 new, 1 already there" in r.stdout, r.stdout + r.stderr
    assert "app-s1/results.json holds another record" in r.stderr
    assert (into / "app-s1" / "results.json").read_text() == "{}"
    r = subprocess.run(
        [*cmd[:-1], str(into / "app-s2" / "results.json")], capture_output=True, text=True, cwd=REPO, env=app_env()
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "a file, not a directory" in r.stderr, r.stderr


def test_the_launcher_collects_each_record_into_a_directory_as_its_job_ends(tmp_path):
    """collect_into, one run slot: seed 1's record is in the directory before seed 2's job has finished."""
    sweep, into = tmp_path / "sweep", tmp_path / "records"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(
        app,
        "seed=1,2",
        "step_s=0.3",
        "hydra/launcher=hero_local",
        "hydra.launcher.array_parallelism=1",
        f"hydra.launcher.collect_into={into}",
        "hydra.launcher.name_keys=[step_s]",  # the names carry the value of a key the study varies
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    made = {json.loads(p.read_text())["seed"]: p for p in sweep.glob("*/results.json")}
    assert sorted(p.parent.name for p in into.glob("*/results.json")) == ["app-step_s=0.3-s1", "app-step_s=0.3-s2"]
    assert (into / "app-step_s=0.3-s1" / "results.json").read_bytes() == made[1].read_bytes()
    assert (into / "app-step_s=0.3-s1" / "results.json").stat().st_mtime < made[2].stat().st_mtime


def test_calibration_trials_drop_every_hero_launcher_key():
    """Trials reuse the sweep's launcher config for submitit; a HeRo-only key passed on would be an unknown
    submitit parameter (this drifted once, when `slots` was added)."""
    from hero.calibration.trials import LAUNCHER_ONLY
    from hero.dispatch.launcher import HERO_KEYS

    assert set(HERO_KEYS) <= set(LAUNCHER_ONLY)


def test_study_variants_run_side_by_side_on_the_local_launcher(tmp_path):
    """Two one-job variants, two slots: the second variant's job starts before the first one ends."""
    app = write_app(tmp_path / "app", tmp_path / "unused")
    study = tmp_path / "pair.yaml"
    study.write_text(
        f"name: pair\nentry: {app}\noverrides: [hydra/launcher=hero_local, step_s=0.5]\n"
        "variants:\n  - {name: one, overrides: [seed=1]}\n  - {name: two, overrides: [seed=2]}\n"
        "expected_jobs: 2\n"
    )
    cmd = [sys.executable, "-m", "hero.dispatch", "sweep", str(study), "--sweep-root", str(tmp_path / "studies")]
    r = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, cwd=REPO, env=app_env())
    slots = f"hydra.launcher.slots={tmp_path / 'studies' / 'pair' / '.slots'}"
    cmds = [line for line in r.stdout.splitlines() if line.startswith("$ ")]
    assert r.returncode == 0 and [c.endswith(slots) for c in cmds] == [True, True]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=app_env(), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 multirun(s) side by side" in r.stdout
    (start1, end1), (start2, end2) = _spans(tmp_path / "studies" / "pair")
    assert start2 < end1, ((start1, end1), (start2, end2))


def test_submitit_local_failure_is_reported_and_the_rest_finishes(tmp_path):
    sweep = tmp_path / "sweep"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(app, "seed=1,2", "hydra/launcher=hero_local", env=app_env({"APP_FAIL_SEEDS": "1"}))
    assert r.returncode != 0
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["counts"] == {"COMPLETED": 1, "FAILED": 1}
    assert "deliberate failure (seed 1)" in summary["failed"][0]["error"]
    assert Path(summary["failed"][0]["log"]).exists()
    assert [rec["seed"] for rec in records(sweep).values()] == [2]


def test_status_and_collect_on_a_sweep_without_manifest_say_so_in_one_line(tmp_path):
    """A multirun made with Hydra's basic launcher has records but no manifest: one line, exit 2."""
    sweep = tmp_path / "sweep"
    app = write_app(tmp_path / "app", sweep)
    r = run_app(app, "seed=1,2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(records(sweep)) == 2 and not (sweep / "manifests").exists()
    for module, command in (("hero.dispatch", "status"), ("hero.dispatch", "collect")):
        c = subprocess.run(
            [sys.executable, "-m", module, command, str(sweep)], capture_output=True, text=True, cwd=REPO, env=app_env()
        )
        lines = (c.stdout + c.stderr).strip().splitlines()
        assert c.returncode == 2 and len(lines) == 1, (c.returncode, c.stdout, c.stderr)
        assert "no manifest" in lines[0] and "did not run through the HeRo launcher" in lines[0]
        assert "hydra.launcher.wait=false" in lines[0] and f"python -m analysis.report {sweep}" in lines[0]
    c = subprocess.run(
        [sys.executable, "-m", "hero.dispatch", "status", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=app_env(),
    )
    assert c.returncode == 2 and (c.stdout + c.stderr).strip().count("\n") == 0 and "nowhere" in c.stderr


# ----------------------------------------------------------------------------- DDP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    m[0].requires_grad_(False)  # the frozen "backbone", replicated on every rank
    m.unused = torch.nn.Parameter(torch.ones(3))  # trainable but never in the graph: grad stays None
    return m


def _batches(steps: int, global_batch: int):
    g = torch.Generator().manual_seed(123)
    return [
        (torch.randn(global_batch, 8, generator=g), torch.randn(global_batch, 4, generator=g)) for _ in range(steps)
    ]


def _train(rank: int, world: int, steps: int = 5, global_batch: int = 8) -> dict:
    model = _model()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01)
    for x, y in _batches(steps, global_batch):
        xs, ys = distributed.shard(x, rank, world), distributed.shard(y, rank, world)
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        distributed.allreduce_gradients(model.parameters())
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()} | {"unused": model.unused.detach().clone()}


def _ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    r, w = distributed.init_distributed()
    assert (r, w) == (rank, world)
    assert distributed.init_distributed() == (rank, world)  # idempotent
    state = _train(r, w)
    if distributed.is_main_process():  # rank 0 writes
        torch.save(state, out)
    distributed.barrier()
    distributed.destroy_distributed()


def test_ddp_two_gloo_processes_match_single_process_on_the_same_global_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    ddp = torch.load(out)
    single = _train(0, 1)
    assert set(ddp) == set(single)
    for k in single:
        torch.testing.assert_close(ddp[k], single[k], rtol=1e-5, atol=1e-6, msg=f"{k} differs")
    assert torch.equal(ddp["unused"], torch.ones(3)), "a parameter no rank used must not be updated"
    assert not torch.equal(ddp["2.weight"], _model().state_dict()["2.weight"]), "training did nothing"


def test_init_distributed_is_a_noop_for_one_process(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "SLURM_STEP_NUM_TASKS", "SUBMITIT_LOCAL_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    assert distributed.init_distributed() == (0, 1)
    assert distributed.is_main_process() and distributed.get_world_size() == 1


def test_distributed_env_from_torchrun_srun_and_submitit_local(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "SUBMITIT_")) or k in (
            "WORLD_SIZE",
            "RANK",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(k, raising=False)
    assert distributed.distributed_env() == {}
    # srun step with 2 tasks (submitit tasks_per_node=2 under SLURM)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[003-005,007]")
    monkeypatch.setattr(distributed.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no scontrol")))
    env = distributed.distributed_env()
    assert env == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "gpu003",
        "MASTER_PORT": str(distributed._port_for("4242")),
    }
    # a python started directly in a 2-task batch script (no srun step) is NOT a 2-process world
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS")
    assert distributed.distributed_env() == {}
    # submitit local tasks
    monkeypatch.setenv("SUBMITIT_LOCAL_NTASKS", "2")
    monkeypatch.setenv("SUBMITIT_LOCAL_GLOBALID", "0")
    monkeypatch.setenv("SUBMITIT_LOCAL_LOCALID", "0")
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "777")
    assert distributed.distributed_env()["WORLD_SIZE"] == "2"
    # torchrun wins
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert distributed.distributed_env()["RANK"] == "3"


def test_first_host_parsing(monkeypatch):
    monkeypatch.setattr(distributed.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(OSError("no scontrol")))
    assert distributed._first_host("vm") == "vm"
    assert distributed._first_host("node[01-04],cpu7") == "node01"
    assert distributed._first_host("a1,a2") == "a1"
    assert distributed._first_host(None) == "127.0.0.1"


# ----------------------------------------------------------------------------- identity, W&B


def test_job_key_is_stable_safe_and_ignores_hydra_overrides():
    a = plan.job_key(["seed=42", "ablation=no_memory_read"], "0123456789abcdef")
    b = plan.job_key(["ablation=no_memory_read", "seed=42", "hydra.launcher.wait=false"], "0123456789abcdef")
    assert a == b == "ablation=no_memory_read,seed=42__01234567"
    assert "/" not in plan.job_key(["model=org/name", "layers.indices=[1,2]"], "f" * 16)
    long = plan.job_key([f"router.k{i}=v{i}" for i in range(40)], "a" * 16)
    assert len(long) < 120 and long.endswith("__aaaaaaaa")


def test_wandb_run_id_is_created_once_per_run_dir(tmp_path):
    rid = tracking.wandb_run_id(tmp_path / "run")
    assert rid == tracking.wandb_run_id(tmp_path / "run")
    assert rid != tracking.wandb_run_id(tmp_path / "other")


def test_checkpoint_hooks_run_on_preemption_and_requeue_same_call():
    saved = []
    undo = preemption.register_checkpoint_fn(lambda: saved.append("saved"))
    try:
        job = HydraJob(None, None, None)
        delayed = job.checkpoint(["seed=1"], "hydra.sweep.dir", 0, "seed=1__x", {})
        assert saved == ["saved"] and preemption.preemption_requested()
        assert delayed.function is job and delayed.args[0] == ["seed=1"]
    finally:
        undo()
        preemption._PREEMPTED.clear()


# ----------------------------------------------------------------------------- presets and studies


PRESETS = sorted(p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml") if p.stem != "local")


@pytest.mark.parametrize("preset", PRESETS)
def test_launcher_presets_compose(preset):
    from hydra import compose, initialize_config_dir

    name = preset if preset != "local.example" else None
    if name is None:
        pytest.skip("template (copied to local.yaml by users)")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    lc = cfg.hydra.launcher
    assert lc._target_.startswith("hydra_plugins.hero_launcher.Hero")
    assert lc.skip_existing is True and "max_num_timeout" in lc
    if "slurm" in name:
        assert lc.signal_delay_s > 0 and lc.array_parallelism >= 1


STUDIES = sorted((REPO / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("study_path", STUDIES, ids=[p.stem for p in STUDIES])
def test_studies_count_their_jobs_and_compose(study_path):
    from hydra import compose, initialize_config_dir

    study = studies.load_study(study_path)
    assert study.get("expected_jobs") == studies.study_size(study), "expected_jobs must match the grid"
    cmds = studies.study_commands(study)
    assert sum(studies.command_size(c) for c in cmds) == study["expected_jobs"]
    assert all(any(o.startswith("hydra.sweep.dir=") for o in c) for c in cmds)
    # the first point of every variant composes with the real config tree
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for cmd in cmds:
            point = [
                o.split(",")[0] if ("," in o and not o.split("=", 1)[1].startswith("[")) else o
                for o in cmd[3:]
                if not o.startswith("hydra.")
            ]
            compose(config_name="train", overrides=point)


PAPER_SCALE = ["model=llama3_1_8b", "data=tulu3", "trainer=paper", "eval=paper7", "hydra/launcher=slurm_4gpu_ddp"]


@pytest.mark.parametrize("name", ["router_memory", "router_memory_smollm2"])
def test_a_cpu_study_plus_the_paper_overrides_composes_the_paper_setup(name):
    """The README's paper-scale command: the study's own CPU setup (model, data, suite and trainer, also
    when an experiment sets them) gives way to the paper's in every job."""
    from hydra import compose, initialize_config_dir

    study = studies.load_study(REPO / "sweeps" / f"{name}.yaml")
    cmds = studies.study_commands(study, PAPER_SCALE)
    assert sum(studies.command_size(c) for c in cmds) == study["expected_jobs"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for cmd in cmds:
            point = [
                o.split(",")[0] if ("," in o and not o.split("=", 1)[1].startswith("[")) else o
                for o in cmd[3:]
                if not o.startswith("hydra.")
            ]
            cfg = compose(config_name="train", overrides=point)
            assert (cfg.model.name, cfg.data.name, cfg.eval.suite) == ("llama3_1_8b", "tulu3", "paper7"), point
            assert (cfg.trainer.max_steps, cfg.trainer.global_batch, cfg.trainer.precision) == (None, 128, "bf16")


def test_sweep_runner_dry_run_prints_commands_and_count():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "hero.dispatch",
            "sweep",
            str(REPO / "sweeps" / "table2.yaml"),
            "--dry-run",
            "hydra/launcher=slurm_testbed",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    assert "12 job(s) (expected 12)" in r.stdout
    assert "alpha=1e-4,3e-4,5e-4,1e-3" in r.stdout and "hydra.launcher.wait=false" in r.stdout


def test_sweep_runs_only_the_named_variants_and_names_the_choices_on_a_typo():
    study = str(REPO / "sweeps" / "router_memory_smollm2.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "hero.dispatch", "sweep", study, "--dry-run", "--variants", "dense,lora"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    assert "44 job(s) (expected 44)" in r.stdout and "running 2 of them (dense,lora): 4 job(s)" in r.stdout
    cmds = [line for line in r.stdout.splitlines() if line.startswith("$ ")]
    assert [("method=lora" in c, "method=dense" in c) for c in cmds] == [(True, False), (False, True)]  # study order
    r = subprocess.run(
        [sys.executable, "-m", "hero.dispatch", "sweep", study, "--dry-run", "--variants", "lora,dens"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "ERROR: --variants dens: not in study router_memory_smollm2; its variants "
        "are matched, curves, random_skip, random_skip_curve, skipgpt_rt, "
        "static_drop, lora, dense"
    ]


# ----------------------------------------------------------------------------- DDP through train.py


def test_train_py_under_torchrun_two_gloo_processes_matches_single_process(micro_cache, tmp_path):
    """The real pipeline: torchrun --nproc_per_node 2 (rank 0 writes) vs one process, same global batch."""
    common = [
        "model.recipe=micro",
        f"paths.cache={micro_cache}",
        "trainer.max_steps=3",
        "trainer.global_batch=4",
        "trainer.micro_batch=2",
        "trainer.checkpoint_every=1",
        "trainer.progress=false",
        "logger=none",
        "eval=none",
        "seed=45",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    single = subprocess.run(
        [
            sys.executable,
            "train.py",
            *common,
            f"paths.root={tmp_path / 'single'}",
            f"hydra.run.dir={tmp_path / 'single' / 'run'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stdout[-2000:] + single.stderr[-2000:]
    ddp = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(_free_port()),
            "train.py",
            *common,
            f"paths.root={tmp_path / 'ddp'}",
            f"hydra.run.dir={tmp_path / 'ddp' / 'run'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ddp.returncode == 0, ddp.stdout[-2000:] + ddp.stderr[-2000:]
    a = json.loads((tmp_path / "single" / "run" / "results.json").read_text())
    b = json.loads((tmp_path / "ddp" / "run" / "results.json").read_text())
    for key in ("final_loss", "final_lm_loss", "final_skip_loss", "steps"):
        assert b["train"][key] == pytest.approx(a["train"][key], rel=1e-5, abs=1e-6), key
    assert b["skip"]["param_rate"] == pytest.approx(a["skip"]["param_rate"], abs=1e-6)
    assert b["rho"].keys() == a["rho"].keys()
    for layer in a["rho"]:
        assert b["rho"][layer] == pytest.approx(a["rho"][layer], abs=1e-6), f"rho of layer {layer}"
    # rank 0 alone wrote the record and the checkpoints
    assert len(list((tmp_path / "ddp").rglob("results.json"))) == 1


def test_collect_into_carries_the_per_item_outputs(tmp_path):
    """Mutant killed: only results.json copied (a collected study would lose every item it scored)."""
    from hero.dispatch.manifests import collect_into
    from hero.results import ITEMS_FILENAME, read_items, write_items

    run = tmp_path / "run"
    run.mkdir()
    record = {"method": "hero", "variant": "full", "seed": 1}
    (run / "results.json").write_text(json.dumps(record))
    write_items(run / ITEMS_FILENAME, [{"task": "t", "item": 0}])
    new, same, conflicts = collect_into(
        [{"path": str(run / "results.json"), "record": record, "overrides": []}], tmp_path / "into"
    )
    assert len(new) == 1 and not conflicts
    assert read_items(new[0].parent / ITEMS_FILENAME) == [{"task": "t", "item": 0}]
