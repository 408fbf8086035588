"""What a sweep submitted and how its jobs ended: manifests, job states, summaries, collect.

Every launch writes ``<sweep dir>/manifests/<stamp>.json`` (job ids, overrides, output dirs, log
paths, config hashes: the plans of ``hero.dispatch.plan``). A waiting launch ends with
``<sweep dir>/summary.json`` (every job's state, failed jobs first, with their error line and
log). With ``wait: false`` the launch returns after writing the manifest, and later

    python -m hero.dispatch status  <manifest or sweep dir>   # states (sacct, submitit's result, records)
    python -m hero.dispatch collect <manifest or sweep dir>   # + records -> <sweep dir>/collected.json
    python -m hero.dispatch collect <sweep dir> --into docs/studies/<name>/records   # + a copy per record,
                                                              # named by record_name (method, variant, knob, seed)

A sweep made by another launcher (Hydra's basic one) has no manifest: ``NoManifest`` says so
in one line and names ``python -m analysis.report`` to read its records instead.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hero.dispatch.plan import JobPlan, JobState, record_of, task_overrides
from hero.dispatch.studies import override_value
from hero.knobs import KNOBS
from hero.results import ITEMS_FILENAME, is_completed, now_iso, read_record_or_none, write_atomic

log = logging.getLogger(__name__)

MANIFEST_DIRNAME = "manifests"
SUMMARY_FILENAME = "summary.json"
COLLECTED_FILENAME = "collected.json"
SCHED_WAITING = (
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "RESIZING",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
)
SCHED_FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED")


class NoManifest(ValueError):
    """The target of status/collect is not a manifest, nor a sweep dir with one (one-line message)."""


def write_manifest(sweep_dir: Path, stamp: str, cluster: str, submitit_folder: str, plans: list[JobPlan]) -> Path:
    """Record what this launch planned and submitted: ``<sweep dir>/manifests/<stamp>.json``."""
    manifest = {
        "created": now_iso(),
        "cluster": cluster,
        "sweep_dir": str(sweep_dir),
        "submitit_folder": submitit_folder,
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "launcher_pid": os.getpid(),
        "n_jobs": len(plans),
        "n_submitted": sum(p["state"] != JobState.SKIPPED for p in plans),
        "n_skipped": sum(p["state"] == JobState.SKIPPED for p in plans),
        "jobs": plans,
    }
    return write_atomic(sweep_dir / MANIFEST_DIRNAME / f"{stamp}.json", manifest)


def load_manifests(target: str | os.PathLike) -> tuple[Path, list[dict]]:
    """Jobs of one manifest file, or of every manifest of a sweep dir (latest entry per output
    dir wins: a relaunch supersedes the earlier submission of the same job)."""
    target = Path(target)
    if not target.exists():
        raise NoManifest(f"{target}: no such manifest file or sweep dir")
    files = sorted((target / MANIFEST_DIRNAME).glob("*.json")) if target.is_dir() else [target]
    if not files:
        raise NoManifest(
            f"{target}: no manifest ({MANIFEST_DIRNAME}/*.json) - this sweep did not run through the "
            "HeRo launcher (hydra/launcher=slurm|hero_local, e.g. with hydra.launcher.wait=false), so "
            f"there are no job ids to query; read its records with: python -m analysis.report {target}"
        )
    jobs: dict[str, dict] = {}
    manifests = []
    for f in files:
        m = read_record_or_none(f)
        if not isinstance(m, dict) or not isinstance(m.get("jobs"), list):
            raise NoManifest(
                f"{f}: not a HeRo manifest (a JSON file with a 'jobs' list, written under "
                f"<sweep dir>/{MANIFEST_DIRNAME}/ by the HeRo launcher)"
            )
        manifests.append(m)
        for j in m["jobs"]:
            j = dict(j, manifest=str(f), cluster=m.get("cluster", "slurm"), launcher_pid=m.get("launcher_pid"))
            prev = jobs.get(j["output_dir"])
            if prev is None or j.get("state") != JobState.SKIPPED or prev.get("state") == JobState.SKIPPED:
                jobs[j["output_dir"]] = j
    sweep_dir = Path(manifests[-1].get("sweep_dir", target if target.is_dir() else target.parent.parent))
    return sweep_dir, sorted(jobs.values(), key=lambda j: j["num"])


def _sacct_states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id -> SLURM state (latest attempt), via sacct; squeue as a fallback."""
    ids = [j for j in job_ids if j]
    out: dict[str, str] = {}
    if not ids:
        return out
    try:
        r = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(ids)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        for line in r.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 2:
                out[parts[0]] = parts[1].split()[0] if parts[1] else "UNKNOWN"
    except (OSError, subprocess.SubprocessError):
        pass
    missing = [j for j in ids if j not in out]
    if missing:
        try:
            r = subprocess.run(
                ["squeue", "-h", "-o", "%i|%T", "-j", ",".join(missing)], capture_output=True, text=True, timeout=60
            )
            for line in r.stdout.splitlines():
                jid, _, st = line.partition("|")
                out[jid.strip()] = st.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _result_pickle_state(job: dict) -> tuple[str | None, str | None]:
    """('COMPLETED'|'FAILED'|None, error) from submitit's result pickle of the job (rank 0)."""
    folder = job.get("stdout")
    if not folder:
        return None, None
    res = Path(folder).with_name(f"{job['job_id']}_0_result.pkl")
    if not res.exists():
        return None, None
    try:
        with open(res, "rb") as f:
            kind, payload = pickle.load(f)
    except Exception:  # noqa: BLE001
        return None, None
    if kind == "success":
        return "COMPLETED", None
    return "FAILED", error_line(str(payload))


def job_states(jobs: list[JobPlan]) -> list[JobPlan]:
    """Fill ``state`` (PENDING/RUNNING/COMPLETED/FAILED/SKIPPED/...), ``record`` and ``error`` of each job."""
    sacct = _sacct_states([j.get("job_id") for j in jobs if j.get("cluster", "slurm") == "slurm"])
    for j in jobs:
        if j.get("state") == JobState.SKIPPED:
            continue
        rec_path = record_of(j)
        rec = read_record_or_none(rec_path)
        pk_state, err = _result_pickle_state(j)
        sched = sacct.get(str(j.get("job_id")))
        j["slurm_state"] = sched
        if pk_state == "FAILED" or (rec and rec.get("status") == "failed"):
            j["state"], j["error"] = JobState.FAILED, err or (rec or {}).get("error")
        elif pk_state == "COMPLETED" and is_completed(rec):
            j["state"] = JobState.COMPLETED
        elif j.get("cluster") == "local":
            _local_state(j)
        elif sched in SCHED_WAITING:
            j["state"] = JobState.RUNNING if sched in ("RUNNING", "COMPLETING", "CONFIGURING") else JobState.PENDING
        elif sched in SCHED_FAILED:
            j["state"], j["error"] = JobState.FAILED, j.get("error") or f"SLURM state {sched}"
        elif is_completed(rec):
            j["state"] = JobState.COMPLETED
        elif sched == "COMPLETED":
            j["state"], j["error"] = JobState.FAILED, "job ended without a record"
        else:
            j["state"] = JobState.UNKNOWN
        if rec_path.exists():
            j["record"] = str(rec_path)
    return jobs


def _alive(pid: Any, marker: bytes) -> bool:
    """Whether process ``pid`` runs here with ``marker`` in its command line (``/proc``; elsewhere: exists)."""
    try:
        return marker in Path(f"/proc/{int(pid)}/cmdline").read_bytes()
    except (TypeError, ValueError):
        return False
    except OSError:
        if Path("/proc/self").exists():
            return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _local_state(job: JobPlan) -> None:
    """State of a local job without a result yet: it waits for a run slot while its launcher lives,
    runs while its submitit process lives; otherwise it ended without a record (killed)."""
    if not job.get("job_id"):
        if _alive(job.get("launcher_pid"), b"python"):
            job["state"] = JobState.PENDING
        else:
            job["state"] = JobState.FAILED
            job["error"] = f"never started: its launcher (pid {job.get('launcher_pid')}) ended first; rerun the sweep"
    elif _alive(job["job_id"], b"submitit"):
        job["state"] = JobState.RUNNING
    elif _result_pickle_state(job)[0] == "COMPLETED" and is_completed(read_record_or_none(record_of(job))):
        job["state"] = JobState.COMPLETED  # it ended between the first look and this one
    else:
        job["state"] = JobState.FAILED
        job["error"] = job.get("error") or f"process {job['job_id']} ended without a record (killed?); rerun the sweep"


def status(target: str | os.PathLike) -> dict:
    """The summary of a manifest's (or a sweep dir's) jobs now; rewrites ``<sweep dir>/summary.json``."""
    sweep_dir, jobs = load_manifests(target)
    jobs = job_states(jobs)
    return summarise(jobs, sweep_dir, Path(target) if Path(target).is_file() else None)


def collect(target: str | os.PathLike) -> dict:
    """States of the manifest's jobs plus their records, written to ``<sweep dir>/collected.json``."""
    summary = status(target)
    records = [
        e
        for j in summary["jobs"]
        if j.get("record") and j["state"] in (JobState.COMPLETED, JobState.SKIPPED)
        if (e := record_entry(j, j["record"])) is not None
    ]
    out = {
        "created": now_iso(),
        "sweep_dir": summary["sweep_dir"],
        "counts": summary["counts"],
        "failed": summary["failed"],
        "records": records,
    }
    write_atomic(Path(summary["sweep_dir"]) / COLLECTED_FILENAME, out)
    summary["records"] = records
    return summary


def record_entry(job: dict, path: str | os.PathLike) -> dict | None:
    """``{path, overrides, record}`` of a job's readable record at ``path`` (what ``collect`` lists), else None."""
    rec = read_record_or_none(path)
    return None if rec is None else {"path": str(path), "overrides": task_overrides(job["overrides"]), "record": rec}


# The knobs' config keys and their labels in record names (hero.knobs).
KNOB_LABELS = {knob.key: knob.tag for knob in KNOBS.values()}


def record_name(record: dict, overrides: Sequence[str], name_keys: Sequence[str] = ()) -> str:
    """A study record's readable name: ``<method>[-<variant>][-<knob>][-<key>=<value>...]-s<seed>``, the knob
    being the calibration knob the job's overrides set (``calibrated``, else label + value), then the value of
    each of ``name_keys`` the overrides set (a study that runs one variant at several values of a key the name
    would not show, e.g. ``calibration.target_skip``), e.g. ``hero-no_history-calibrated-s43``,
    ``hero-full-a0.002-s42``, ``random_skip-p0.1-s42``, ``dense-s42``,
    ``hero-full+u90-calibrated-target_skip=0.06-s42``."""
    parts = [str(record.get("method"))]
    if record.get("variant") not in (None, record.get("method")):
        parts.append(str(record["variant"]))
    knob = next(
        ((label, v) for key, label in KNOB_LABELS.items() if (v := override_value(overrides, key)) is not None), None
    )
    if knob:
        parts.append("calibrated" if knob[1] == "calibrated" else f"{knob[0]}{knob[1]}")
    for key in name_keys:
        if (value := override_value(overrides, key)) is not None:
            parts.append(f"{key.rsplit('.', 1)[-1]}={value}")
    parts.append(f"s{record.get('seed')}")
    return re.sub(r"[^A-Za-z0-9=,._+\-]", "_", "-".join(parts))


def collect_into(
    records: list[dict], into: str | os.PathLike, name_keys: Sequence[str] = ()
) -> tuple[list[Path], int, list[str]]:
    """Copy collected records (``collect``'s list) to ``<into>/<record_name>/results.json``, byte for
    byte, with their per-item outputs (``items.jsonl.gz``) where the run wrote them: (new files, count already
    there, conflicts). A name that holds another record is a conflict, reported and left as it was: nothing
    already collected is overwritten."""
    into = Path(into)
    new: list[Path] = []
    same, conflicts = 0, []
    for r in records:
        data = Path(r["path"]).read_bytes()
        dest = into / record_name(r["record"], r["overrides"], name_keys) / "results.json"
        if dest.exists():
            if dest.read_bytes() == data:
                same += 1
            else:
                conflicts.append(f"{dest} holds another record than {r['path']}; left as it was")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        items = Path(r["path"]).parent / ITEMS_FILENAME
        if items.is_file():  # first, so a collected record never names items its folder lacks
            shutil.copyfile(items, dest.parent / ITEMS_FILENAME)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        new.append(dest)
    return new, same, conflicts


_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Interrupt|Exit)\b:?")


def error_line(text: str) -> str:
    """The most telling line of a traceback / submitit error: the last 'SomeError: message' line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    hits = [ln for ln in lines if _EXC_LINE.match(ln)]
    return (hits[-1] if hits else (lines[-1] if lines else ""))[:400]


def summarise(plans: list[JobPlan], sweep_dir: Path, manifest_path: Path | None) -> dict:
    """Counts per state and every job (failed first), written to ``<sweep dir>/summary.json``."""
    order = {
        JobState.FAILED: 0,
        JobState.UNKNOWN: 1,
        JobState.RUNNING: 2,
        JobState.PENDING: 3,
        JobState.COMPLETED: 4,
        JobState.SKIPPED: 5,
    }
    jobs = sorted(plans, key=lambda p: (order.get(p["state"], 1), p["num"]))
    counts: dict[str, int] = {}
    for p in plans:
        counts[p["state"]] = counts.get(p["state"], 0) + 1
    summary = {
        "created": now_iso(),
        "sweep_dir": str(sweep_dir),
        "manifest": str(manifest_path) if manifest_path else None,
        "counts": counts,
        "failed": [
            {
                "num": p["num"],
                "job_id": p.get("job_id"),
                "overrides": p["overrides"],
                "output_dir": p["output_dir"],
                "log": p.get("log"),
                "error": p.get("error"),
            }
            for p in jobs
            if p["state"] == JobState.FAILED
        ],
        "jobs": [
            {
                k: p.get(k)
                for k in ("num", "job_id", "state", "slurm_state", "overrides", "output_dir", "record", "log", "error")
            }
            for p in jobs
        ],
    }
    write_atomic(sweep_dir / SUMMARY_FILENAME, summary)
    return summary


def print_summary(summary: dict, to_log: bool = False) -> None:
    """One line per job and, for each failed job, its error line and log path."""
    counts = ", ".join(f"{v} {k.lower()}" for k, v in sorted(summary["counts"].items()))
    lines = [f"== sweep summary: {counts} — {summary['sweep_dir']}/{SUMMARY_FILENAME}"]
    for j in summary["jobs"]:
        where = j.get("record") or j.get("output_dir")
        lines.append(
            f"  {j['state']:<9} #{j['num']:<3} {str(j.get('job_id') or '-'):<12} "
            f"{' '.join(task_overrides(j['overrides'])) or '(defaults)'}  {where}"
        )
    for f in summary["failed"]:
        lines.append(f"  FAILED job {f['job_id']} ({' '.join(task_overrides(f['overrides']))}): {f.get('error')}")
        lines.append(f"         log: {f['log']}")
    text = "\n".join(lines)
    if to_log:
        log.info(text)
    else:
        print(text, flush=True)
