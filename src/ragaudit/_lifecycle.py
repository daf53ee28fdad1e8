"""The process lifecycle of the turn pipeline: the exit hook and SIGTERM (``Auditor(handle_signals=...)``).

What is shut down at exit (and flushed on SIGTERM) are *stages*: each Auditor, and above it, the
integrations' turn closers (`ragaudit.integrations._closing`). A stage registered ``upstream``
is handled before every other, and shuts down what is below it itself, so the walk goes the way the
turns flow: closers first (their sources' last turns handed down), then the Auditors. This module
knows no stage's code: it calls the members of `Stage` only, top down.

Fork is handled where the threads are (`ragaudit._worker` restarts every worker in the child)
and by the Auditor's own after-fork reset of its counts.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, Protocol

from . import _fork
from ._worker import call_with_deadline, exit_deadline

__all__ = ["Stage", "flush_on_sigterm", "report", "track"]

logger = logging.getLogger("ragaudit")

_EXIT_MARGIN_S = 0.5



class Stage(Protocol):
    """What the exit hook and SIGTERM handle: an Auditor, or a turn closer above one."""

    exit_timeout_s: float

    @property
    def closed(self) -> bool: ...

    def stats(self) -> Mapping[str, int]: ...

    def force_flush(self, timeout_s: float | None = 30.0) -> bool: ...

    def shutdown(self, timeout_s: float | None = None) -> bool: ...


_lock = _fork.lock()
# Weak: an Auditor nobody references is released (its threads stop, its file closes) and drops out
# of here; one exit hook serves every stage instead of one closure per stage. Upstream stages (turn
# closers) first: each hands its last turns down before the stage below stops taking them.
_upstream: weakref.WeakSet[Stage] = weakref.WeakSet()
_live: weakref.WeakSet[Stage] = weakref.WeakSet()
_above: weakref.WeakKeyDictionary[Stage, weakref.WeakSet[Stage]] = weakref.WeakKeyDictionary()
_exit_registered = False


def report(message: str) -> None:
    """Tell the operator what could not be delivered (stderr: logging may be gone at exit). Never raises."""
    try:
        print(f"ragaudit: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed stderr must not turn a shortfall into an exception
        pass


def track(stage: Stage, *, above: Stage | None = None) -> None:
    """Have the exit hook shut *stage* down (held weakly). A stage *above* another (a turn closer
    above its Auditor) goes before every other stage, and on SIGTERM before the one below it."""
    global _exit_registered
    with _lock:
        if above is None:
            _live.add(stage)
        else:
            _upstream.add(stage)
            _above.setdefault(above, weakref.WeakSet()).add(stage)
        if not _exit_registered:
            _register_exit(_at_exit)
            _exit_registered = True


def _open(stages: weakref.WeakSet[Stage]) -> list[Stage]:
    return [s for s in list(stages) if not s.closed]


def _at_exit() -> None:
    # One deadline for all: exit takes at most the largest exit_timeout_s, not their sum.
    stages = _open(_upstream) + _open(_live)
    if not stages:
        return
    deadline = exit_deadline(max(s.exit_timeout_s for s in stages))
    for stage in stages:
        try:
            if stage.closed:  # shut down by a stage above it
                continue
            waiting = {k: v for k, v in stage.stats().items() if k in ("pending", "closing") and v}
            if waiting:
                logger.info("ragaudit: flushing at exit: %s", waiting)
            stage.shutdown(min(stage.exit_timeout_s, max(0.0, deadline - time.monotonic())))
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


_sigterm_stages: weakref.WeakSet[Stage] = weakref.WeakSet()
# The disposition ragaudit's handler chains to (what SIGTERM did before it); None: not installed.
_sigterm_previous: Any = None
_sigterm_state = "never"  # "never" installed, "installed", or "declined" (no main thread / not Python's)


def flush_on_sigterm(stage: Stage, *, asked: bool = False) -> None:
    """Have SIGTERM flush *stage* before the process goes on to what SIGTERM did before.

    Installed once per process, by the first Auditor made on the main thread (Python sets signal
    handlers there only). It chains: the disposition found then (the application's own handler, or
    the default) still runs after the flush, so an application handler installed *before* keeps
    working; one installed *after* replaces ragaudit's, which then stays off (never reinstalled).
    *asked*: the caller passed ``handle_signals=True`` (then a handler that cannot be installed is
    worth a warning).
    """
    global _sigterm_previous, _sigterm_state
    import signal

    with _lock:
        _sigterm_stages.add(stage)
        if _sigterm_state == "installed":
            return
        if threading.current_thread() is not threading.main_thread():
            if asked:
                logger.warning("ragaudit: handle_signals=True needs the main thread (signal handlers can only be "
                               "set there); SIGTERM will not flush pending judgements")
            return
        current = signal.getsignal(signal.SIGTERM)
        if current is signal.SIG_IGN or current is None:  # ignored, or a handler not set from Python
            _sigterm_state = "declined"
            return
        if _sigterm_state == "declined" and current is not signal.SIG_DFL:
            return
        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError) as exc:  # an embedded interpreter without signals
            logger.debug("ragaudit: could not install the SIGTERM handler: %r", exc)
            return
        _sigterm_previous = current
        _sigterm_state = "installed"


def _on_sigterm(signum: int, frame: Any) -> None:
    import signal

    previous = _sigterm_previous
    auditors = _open(_sigterm_stages)
    if auditors:
        # Their closers first (the turns they still hold go down to them), then the auditors. No
        # lock here: the interrupted main thread may hold it.
        above = [s for a in auditors if (closers := _above.get(a)) is not None for s in _open(closers)]
        _flush_for_sigterm(above + auditors, shut_down=not callable(previous))
    if callable(previous) and previous is not _on_sigterm:
        previous(signum, frame)  # the application's own handler: its decision what happens next
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _flush_for_sigterm(stages: list[Stage], *, shut_down: bool) -> None:
    # On worker threads, so a lock the interrupted main thread holds cannot deadlock it; the wait
    # is bounded by the auditors' exit timeouts. Before the default disposition (the process dies
    # next) each stage is shut down, which says on stderr what it lost; before an application's
    # handler (the process may go on, or exit normally and flush again) it is only flushed.
    budget = max(a.exit_timeout_s for a in stages)
    deadline = time.monotonic() + budget

    def flush_all() -> None:
        for stage in stages:
            left = min(stage.exit_timeout_s, max(0.0, deadline - time.monotonic()))
            if shut_down:
                stage.shutdown(left)
            else:
                stage.force_flush(left)

    finished, _ = call_with_deadline(flush_all, budget + _EXIT_MARGIN_S)
    if shut_down and finished:
        return
    pending = sum(a.stats().get("pending", 0) for a in stages)
    if shut_down:
        report(f"SIGTERM: the flush did not finish in {budget:g} s; {pending} judgement(s) still pending "
               "were not recorded")
    elif pending or not finished:
        report(f"SIGTERM: {pending} judgement(s) still pending after {budget:g} s; the application's SIGTERM "
               "handler runs now (they are recorded only if the process goes on or exits normally)")
