"""Read back an offline W&B run file (``run-<id>.wandb``) without the W&B service.

wandb 0.31 ships no Python reader for offline runs. The file is a LevelDB-style
log: a 7-byte header, then 32 KiB blocks of chunks (4-byte checksum, 2-byte
length, 1-byte type: FULL, FIRST, MIDDLE, LAST), each record a protobuf
``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

HEADER_LEN = 7
BLOCK_LEN = 32768
CHUNK_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def iter_records(path: str | Path) -> Iterator:
    """Every ``Record`` in the file, in write order."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file (bad magic {data[:4]!r})")
    pos, pending = HEADER_LEN, b""
    while pos + CHUNK_HEADER.size <= len(data):
        left = BLOCK_LEN - pos % BLOCK_LEN
        if left < CHUNK_HEADER.size:
            pos += left
            continue
        _, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + CHUNK_HEADER.size : pos + CHUNK_HEADER.size + length]
        pos += CHUNK_HEADER.size + length
        if kind == FULL:
            yield Record.FromString(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield Record.FromString(pending + chunk)
            pending = b""


def run_file(run_dir: str | Path) -> Path:
    """The single ``run-*.wandb`` file under an offline run directory tree."""
    found = sorted(Path(run_dir).rglob("run-*.wandb"))
    if len(found) != 1:
        raise FileNotFoundError(f"{run_dir}: expected one run-*.wandb file, found {len(found)}")
    return found[0]


def history(path: str | Path) -> list[dict]:
    """The logged history rows (``run.log`` calls) as dicts of decoded JSON values."""
    rows = []
    for record in iter_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def run_info(path: str | Path) -> dict:
    """Group, job type, tags, config (as logged at init) and exit code of the run."""
    info: dict = {"config": {}, "exit_code": None}
    for record in iter_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            info.update(
                run_id=record.run.run_id,
                group=record.run.run_group,
                job_type=record.run.job_type,
                tags=list(record.run.tags),
            )
            for item in record.run.config.update:
                info["config"]["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                info["config"]["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
        elif kind == "exit":
            info["exit_code"] = record.exit.exit_code
    return info
