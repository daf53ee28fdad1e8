"""The Auditor's process lifecycle: the exit hook and SIGTERM (``Auditor(handle_signals=True)``)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._auditor import Auditor

__all__ = ["flush_on_sigterm", "register_exit"]

logger = logging.getLogger("ragaudit")


def register_exit(callback: Callable[[], None]) -> None:
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


_sigterm_lock = threading.Lock()
_sigterm_auditors: weakref.WeakSet[Auditor] = weakref.WeakSet()
_sigterm_installed = False


def flush_on_sigterm(auditor: Auditor) -> None:
    """Have SIGTERM flush *auditor* before the process dies (``Auditor(handle_signals=True)``)."""
    global _sigterm_installed
    import signal

    with _sigterm_lock:
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
        # Flushed from threads of their own, so a lock the interrupted main thread holds cannot
        # deadlock it; the wait is bounded by the auditors' exit timeouts.
        threads = [threading.Thread(target=auditor.shutdown, name="ragaudit-sigterm-flush", daemon=True)
                   for auditor in auditors]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + max(a.exit_timeout_s for a in auditors) + 1.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            print("ragaudit: SIGTERM: the flush did not finish in time; judgements still pending were "
                  "not recorded", file=sys.stderr)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


