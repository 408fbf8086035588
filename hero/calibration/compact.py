"""Compact a calibration journal: drop every heartbeat line but each trial's last.

    python -m hero.calibration.compact docs/studies/budget_smollm2/calibration.journal

A journal file (``calibration.storage.kind=journal``) is Optuna's append-only log, and each
heartbeat of a trial in flight (``hero.calibration.study``) is one line of it: a 900-update
trial beating once a minute writes about 50, and a study's committed journal is mostly beats.
Only a trial's last beat is ever read (``reclaim_orphans`` compares it with ``grace_s``), so
the others can go. The compacted file keeps every other line byte for byte, in order; it
replaces the original only after Optuna has replayed both files to the same studies and trials
(every state, value, parameter, attribute and timestamp). A journal with a trial in flight (a
live driver, or a beat within ``grace_s``) is refused: its calibrating process holds a read
cursor into the file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileOpenLock
from optuna.storages.journal._storage import JournalOperation  # the journal's own op codes
from optuna.trial import TrialState

from hero.calibration.storage import StorageSpec, open_storage
from hero.calibration.study import HEARTBEAT_ATTR, orphaned
from hero.errors import ConfigError


class JournalError(ConfigError):
    """The journal cannot be compacted as asked."""


def _is_beat(op: dict) -> bool:
    return op.get("op_code") == JournalOperation.SET_TRIAL_USER_ATTR and set(op.get("user_attr", {})) == {
        HEARTBEAT_ATTR
    }


def compacted_lines(lines: list[bytes], path: Path) -> list[bytes]:
    """``lines`` without the heartbeat lines that a later heartbeat of the same trial supersedes."""
    ops = []
    for number, line in enumerate(lines, 1):
        try:
            ops.append(json.loads(line))
        except ValueError:
            raise JournalError(f"{path}:{number}: not a journal record ({line[:60]!r}); nothing was changed") from None
    last_beat = {op["trial_id"]: i for i, op in enumerate(ops) if _is_beat(op)}
    return [line for i, (line, op) in enumerate(zip(lines, ops)) if not _is_beat(op) or last_beat[op["trial_id"]] == i]


def _in_flight(storage: optuna.storages.JournalStorage, grace_s: float) -> list[str]:
    now, busy = time.time(), []
    for summary in storage.get_all_studies():
        for t in storage.get_all_trials(summary._study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            if not orphaned(t, grace_s, now):
                busy.append(f"trial {t.number} of {summary.study_name} (driver {t.user_attrs.get('driver')})")
    return busy


def _snapshot(storage: optuna.storages.JournalStorage) -> list:
    """Everything a study load reads back: names, directions, attributes, and every trial."""
    return [
        (
            s.study_name,
            s.directions,
            s.user_attrs,
            s.system_attrs,
            [t.__dict__ for t in storage.get_all_trials(s._study_id, deepcopy=False)],
        )
        for s in sorted(storage.get_all_studies(), key=lambda s: s._study_id)
    ]


def compact(path: str | os.PathLike, grace_s: float | None = None) -> tuple[int, int]:
    """Compact the journal at ``path`` in place; returns (lines before, lines after).
    ``grace_s``: a beat this recent marks a trial in flight (None: ``calibration.storage.grace_s``'s default)."""
    path = Path(path)
    if not path.is_file():
        raise JournalError(f"{path}: no such journal file")
    spec = StorageSpec("journal", str(path))
    original = open_storage(spec)
    busy = _in_flight(original, spec.grace_s if grace_s is None else grace_s)
    if busy:
        raise JournalError(f"{path}: {busy[0]} is in flight; stop its calibrate.py first (nothing was changed)")
    lock = JournalFileOpenLock(str(path))
    lock.acquire()
    try:
        lines = path.read_bytes().splitlines(keepends=True)
        kept = compacted_lines(lines, path)
        if len(kept) == len(lines):
            return len(lines), len(kept)
        tmp = path.with_name(path.name + ".compacting")
        tmp.write_bytes(b"".join(kept))
        if _snapshot(open_storage(StorageSpec("journal", str(tmp)))) != _snapshot(original):
            tmp.unlink()
            raise JournalError(f"{path}: the compacted journal replays to different trials; nothing was changed")
        os.replace(tmp, path)
    finally:
        lock.release()
    return len(lines), len(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hero.calibration.compact", description=__doc__.splitlines()[0])
    parser.add_argument("journal", nargs="+", help="journal file(s) of calibration.storage.kind=journal")
    parser.add_argument(
        "--grace-s",
        type=float,
        default=None,
        help="a beat this recent means a trial in flight (default: storage.grace_s's, 180)",
    )
    args = parser.parse_args(argv)
    try:
        for journal in args.journal:
            size = Path(journal).stat().st_size if Path(journal).is_file() else 0
            before, after = compact(journal, args.grace_s)
            print(
                f"{journal}: {before:,} -> {after:,} lines, {size:,} -> {Path(journal).stat().st_size:,} bytes "
                f"({before - after:,} superseded heartbeats dropped; studies and trials read back identical)"
                if after < before
                else f"{journal}: {before:,} lines, no superseded heartbeat; unchanged"
            )
    except JournalError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
