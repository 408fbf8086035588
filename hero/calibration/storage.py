"""Where the Optuna studies live: SQLite (default), any RDB URL, or Optuna's journal file.

``calibration.storage`` picks one:

    kind: sqlite    path: <file>                     one file, one calibrating process (laptop, one node)
    kind: rdb       url: postgresql+psycopg2://user@host:5432/db   many processes / nodes (clusters)
    kind: journal   path: <file>                     Optuna's append-only journal, safe on NFS

A password never sits in the config: ``password_env`` names the environment variable
that holds it and ``open_storage`` inserts it into the URL it hands to SQLAlchemy. Every
URL that is printed, logged or recorded goes through ``mask_url`` first, which also hides a
password someone did write into ``url``. Both RDB kinds run Optuna's heartbeat (a trial
whose calibrating process stopped beating is failed and re-enqueued with the same α by
``RetryHeartbeatStaleTrialCallback``); ``hero.calibration.study`` does the same for journal files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import optuna

from hero.errors import ConfigError

KINDS = ("sqlite", "rdb", "journal")
_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s]*)(?P<tail>@)")
MASK = "***"


class StorageConfigError(ConfigError):
    """``calibration.storage`` cannot be opened as configured."""


def mask_url(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` in it replaced by ***."""
    return _PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['tail']}", str(text))


def mask_secrets(value, secrets: tuple[str, ...] = ()):
    """A copy of a (nested) config/record with URL passwords and the given secret strings masked."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_secrets(v, secrets) for v in value]
    if isinstance(value, str):
        masked = mask_url(value)
        for secret in secrets:
            if secret:
                masked = masked.replace(secret, MASK)
        return masked
    return value


@dataclass(frozen=True)
class StorageSpec:
    """A resolved storage choice: the URL or file Optuna opens, and how to print it."""

    kind: str
    url: str
    password_env: str | None = None
    heartbeat_s: int = 60
    grace_s: int = 180
    max_retry: int = 2

    @property
    def display(self) -> str:
        """The storage as it may be printed (password masked)."""
        return mask_url(self.url)

    @property
    def dashboard(self) -> str:
        """The command that opens the studies in optuna-dashboard."""
        target = self.url if self.kind != "rdb" else self.display
        return f"optuna-dashboard {target}"

    def secret(self) -> str | None:
        return os.environ.get(self.password_env) if self.password_env else None


def storage_spec(scfg, default_dir: str | os.PathLike) -> StorageSpec:
    """Validate ``calibration.storage`` and resolve its URL (no connection yet)."""
    kind = scfg.kind
    if kind not in KINDS:
        raise StorageConfigError(f"calibration.storage.kind={kind!r}: allowed values are {', '.join(KINDS)}")
    common = dict(
        password_env=scfg.get("password_env"),
        heartbeat_s=int(scfg.get("heartbeat_s", 60)),
        grace_s=int(scfg.get("grace_s", 180)),
        max_retry=int(scfg.get("max_retry", 2)),
    )
    if kind == "rdb":
        if not scfg.get("url"):
            raise StorageConfigError(
                "calibration.storage.kind=rdb needs calibration.storage.url, e.g. "
                "postgresql+psycopg2://user@host:5432/optuna (password from password_env)"
            )
        return StorageSpec(kind, str(scfg.url), **common)
    path = Path(scfg.get("path") or Path(default_dir) / ("optuna.db" if kind == "sqlite" else "optuna.journal"))
    path = path.expanduser().absolute()
    return StorageSpec(kind, f"sqlite:///{path}" if kind == "sqlite" else str(path), **common)


def _with_password(spec: StorageSpec) -> str:
    if spec.kind != "rdb" or not spec.password_env:
        return spec.url
    secret = spec.secret()
    if secret is None:
        raise StorageConfigError(
            f"calibration.storage.password_env={spec.password_env}: the environment variable "
            f"is not set (the password of {spec.display} is read from it)"
        )
    from sqlalchemy.engine import make_url

    return make_url(spec.url).set(password=secret).render_as_string(hide_password=False)


def open_storage(spec: StorageSpec) -> optuna.storages.BaseStorage:
    """The Optuna storage for ``spec``; connection errors are re-raised with the password masked."""
    if spec.kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        Path(spec.url).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(spec.url, lock_obj=JournalFileOpenLock(spec.url)))
    if spec.kind == "sqlite":
        Path(spec.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs = {"pool_pre_ping": True} if spec.kind == "rdb" else {}
    try:
        return optuna.storages.RDBStorage(
            _with_password(spec),
            engine_kwargs=engine_kwargs,
            heartbeat_interval=spec.heartbeat_s,
            grace_period=spec.grace_s,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(spec.max_retry),
        )
    except StorageConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - driver errors may echo the URL with its password
        message = mask_secrets(str(err).splitlines()[0] if str(err) else type(err).__name__, (spec.secret() or "",))
        raise StorageConfigError(f"calibration.storage: cannot open {spec.display}: {message}") from None
