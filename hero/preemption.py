"""Preemption of a training job: the save hook the loop registers, the signal the job raises.

The contract between the training loop (``hero.training``) and the job submitit runs on the node
(``hero.dispatch.job``): the loop registers a function that saves its last completed update;
on USR2 / time limit submitit calls the job's ``checkpoint()``, which runs the registered hooks
(``run_checkpoint_fns``) and requeues the job, which resumes from that checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_PREEMPTED = threading.Event()
_CHECKPOINT_FNS: list[Callable[[], Any]] = []


def register_checkpoint_fn(fn: Callable[[], Any]) -> Callable[[], None]:
    """Register ``fn()`` to be called when the job is preempted or about to time out (submitit's
    ``checkpoint()``, on USR2), just before the job is requeued. ``fn`` must save a resumable
    state as of the last COMPLETED optimizer step (it runs inside a signal handler, possibly
    mid-step). Returns an unregister function. Only rank 0 is called."""
    _CHECKPOINT_FNS.append(fn)
    return lambda: _CHECKPOINT_FNS.remove(fn) if fn in _CHECKPOINT_FNS else None


def preemption_requested() -> bool:
    """True once a preemption/timeout signal reached this job (loops may poll it at step ends)."""
    return _PREEMPTED.is_set()


def run_checkpoint_fns() -> None:
    """Mark the job preempted and run every registered save hook (a failing one is logged)."""
    _PREEMPTED.set()
    for fn in list(_CHECKPOINT_FNS):
        try:
            fn()
        except Exception:  # noqa: BLE001 - a failing save must not stop the requeue
            log.exception("checkpoint hook %r failed; the requeued job resumes from the previous checkpoint", fn)
