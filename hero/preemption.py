"""Preemption of a training job: the save hook the loop registers, the signal the job raises.

The contract between the training loop (``hero.training``) and the job submitit runs on the node
(``hero.dispatch.job``): the loop registers a function that saves its last completed update;
on USR2 / time limit submitit calls the job's ``checkpoint()``, which runs the registered hooks
(``run_checkpoint_fns``) and requeues the job, which resumes from that checkpoint.

The handler runs between two Python bytecodes of the main thread, wherever the loop is. A loop whose state
moves in several statements (an optimizer step, then the step count the hook saves with) runs them under
``preemption_deferred()``, so that the hook never sees half of an update.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

# submitit's preemption signal: USR2 unless its environment variable names another (``submitit.JobEnvironment``).
PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"

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


def preemption_signal() -> signal.Signals | None:
    """The signal submitit checkpoints and requeues on (``SIGUSR2`` by default)."""
    return getattr(signal, "SIG" + os.environ.get(PREEMPT_SIGNAL_ENV, "USR2"), None)


@contextmanager
def preemption_deferred() -> Iterator[None]:
    """Hold the preemption signal's handler while the block runs: a signal that arrives meanwhile is handled (the
    save hooks run, the job requeues) as soon as the block ends, so the hooks see the state before or after it.

    Main thread only (where Python runs signal handlers); elsewhere, or when the signal's handler was not set from
    Python, the block runs as is."""
    sig = preemption_signal()
    if sig is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(sig)
    if previous is None:
        yield
        return
    caught: list[Any] = []
    signal.signal(sig, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(sig, previous)
        if caught and callable(previous):
            previous(sig, caught[0])
        elif caught and previous == signal.SIG_DFL:
            os.kill(os.getpid(), sig)  # the default action, now
