"""The Auditor's process lifecycle: the exit hook and SIGTERM (``Auditor(handle_signals=True)``).

Fork is handled where the threads are (:mod:`ragaudit._worker` restarts every worker in the child)
and by the Auditor's own after-fork reset of its counts.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from .. import _fork
from .._worker import call_with_deadline, exit_deadline

if TYPE_CHECKING:
    from ._auditor import Auditor

__all__ = ["flush_on_sigterm", "report", "track"]

logger = logging.getLogger("ragaudit")

_EXIT_MARGIN_S = 0.5

_lock = _fork.lock()
# Weak: an Auditor nobody references is released (its threads stop, its file closes) and drops out
# of here; one exit hook serves every auditor instead of one closure per auditor.
_live: weakref.WeakSet[Auditor] = weakref.WeakSet()
_exit_registered = False


def report(message: str) -> None:
    """Tell the operator what could not be delivered (stderr: logging may be gone at exit). Never raises."""
    try:
        print(f"ragaudit: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed stderr must not turn a shortfall into an exception
        pass


def track(auditor: Auditor) -> None:
    """Have the exit hook shut *auditor* down (held weakly)."""
    global _exit_registered
    with _lock:
        _live.add(auditor)
        if not _exit_registered:
            _register_exit(_at_exit)
            _exit_registered = True


def _at_exit() -> None:
    # One deadline for all: exit takes at most the largest exit_timeout_s, not their sum.
    auditors = [a for a in list(_live) if not a._closed]
    if not auditors:
        return
    deadline = exit_deadline(max(a.exit_timeout_s for a in auditors))
    for auditor in auditors:
        try:
            auditor._exit(deadline)
        except Exception as exc:  # pragma: no cover - shutdown never raises; belt and braces at exit
            logger.debug("ragaudit: exit flush failed: %r", exc)


def _register_exit(callback: Any) -> None:
    # threading's exit hooks run before interpreter shutdown stops thread pools (which is what makes
    # asyncio.to_thread fail inside a plain atexit handler), and before non-daemon threads are joined.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(callback)
            return
        except RuntimeError:  # already shutting down
            pass
    import atexit

    atexit.register(callback)


_sigterm_auditors: weakref.WeakSet[Auditor] = weakref.WeakSet()
_sigterm_installed = False


def flush_on_sigterm(auditor: Auditor) -> None:
    """Have SIGTERM flush *auditor* before the process dies (``Auditor(handle_signals=True)``)."""
    global _sigterm_installed
    import signal

    with _lock:
        _sigterm_auditors.add(auditor)
        if _sigterm_installed and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            return
        _sigterm_installed = False
        if threading.current_thread() is not threading.main_thread():
            logger.warning("ragaudit: handle_signals=True needs the main thread (signal handlers can only be "
                           "set there); SIGTERM will not flush pending judgements")
            return
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL:
            logger.warning("ragaudit: the application has its own SIGTERM handler (%r); ragaudit leaves it in "
                           "place, and pending judgements are flushed only if it exits the interpreter "
                           "normally (sys.exit)", current)
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    import signal

    auditors = list(_sigterm_auditors)
    if auditors:
        # Flushed on worker threads, so a lock the interrupted main thread holds cannot deadlock
        # it; the wait is bounded by the auditors' exit timeouts.
        budget = max(a.exit_timeout_s for a in auditors)
        deadline = time.monotonic() + budget

        def flush_all() -> None:
            for auditor in auditors:
                auditor.shutdown(min(auditor.exit_timeout_s, max(0.0, deadline - time.monotonic())))

        finished, _ = call_with_deadline(flush_all, budget + _EXIT_MARGIN_S)
        if not finished:
            report("SIGTERM: the flush did not finish in time; judgements still pending were not recorded")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
