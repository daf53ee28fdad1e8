"""The process lifecycle of the turn pipeline: the exit hook and SIGTERM (``Auditor(handle_signals=...)``).

What is shut down at exit (and flushed on SIGTERM) are *stages*: each Auditor. The Auditor's own
``force_flush()`` / ``shutdown()`` have what is registered above it (the integrations' turn closer,
[`ragaudit.auditor.Upstream`][ragaudit.auditor.Upstream]) hand its last turns down first, so the walk goes the way the
turns flow. This module knows no stage's code: it calls the members of `Stage` only.

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from . import _fork
from ._worker import call_with_deadline, exit_deadline

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["Stage", "flush_on_sigterm", "install_sigterm_handler", "keep_sigterm_handler", "report", "shut_down_all",
           "track"]

logger = logging.getLogger("ragaudit")

_EXIT_MARGIN_S = 0.5



class Stage(Protocol):
    """What the exit hook and SIGTERM handle: an Auditor."""

    exit_timeout_s: float

    @property
    def closed(self) -> bool: ...

    def stats(self) -> Mapping[str, int]: ...

    def force_flush(self, timeout_s: float | None = 30.0) -> bool: ...

    def shutdown(self, timeout_s: float | None = None) -> bool: ...


_lock = _fork.lock()
# Weak: an Auditor nobody references is released (its threads stop, its file closes) and drops out
# of here; one exit hook serves every stage instead of one closure per stage.
_live: weakref.WeakSet[Stage] = weakref.WeakSet()
_exit_registered = False


def report(message: str) -> None:
    """Tell the operator what could not be delivered (stderr: logging may be gone at exit). Never raises."""
    try:
        print(f"ragaudit: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed stderr must not turn a shortfall into an exception
        pass


def track(stage: Stage) -> None:
    """Have the exit hook shut *stage* down (held weakly)."""
    global _exit_registered
    with _lock:
        _live.add(stage)
        if not _exit_registered:
            _register_exit(_at_exit)
            _exit_registered = True


def _open(stages: weakref.WeakSet[Stage]) -> list[Stage]:
    return [s for s in list(stages) if not s.closed]


# While the exit hook shuts the Auditors down (bounded by their exit_timeout_s), a SIGTERM is kept for
# after it (`_on_sigterm`): the signal that came then (an int), or None.
_exiting = False
_deferred: int | None = None


def _at_exit() -> None:
    global _exiting
    _exiting = True
    try:
        _shut_down_at_exit()
    finally:
        _exiting = False
        _release()  # a SIGTERM held back while the server shut down ends the process now, as it meant
        _redeliver()


def shut_down_all() -> None:
    """Shut every Auditor down now, as the exit hook does (a server's worker-exit hook). Never raises."""
    _at_exit()


def _shut_down_at_exit() -> None:
    # One deadline for all: exit takes at most the largest exit_timeout_s, not their sum.
    stages = _open(_live)
    if not stages:
        return
    deadline = exit_deadline(max(s.exit_timeout_s for s in stages))
    for stage in stages:
        try:
            if stage.closed:
                continue
            waiting = {k: v for k, v in stage.stats().items() if k in ("pending", "closing") and v}
            if waiting:
                logger.info("ragaudit: flushing at exit: %s", waiting)
            stage.shutdown(min(stage.exit_timeout_s, max(0.0, deadline - time.monotonic())))
        except Exception as exc:  # pragma: no cover - shutdown never raises; belt and braces at exit
            logger.debug("ragaudit: exit flush failed: %r", exc)


def _register_exit(callback: Callable[[], object]) -> None:
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
# Whether the next turn handed over on the main thread checks that ragaudit's handler is still the
# one installed (once per process, and again in each forked child): see keep_sigterm_handler().
_recheck = True
# When ragaudit's handler, chaining to a server's, held SIGTERM back on the main thread (see
# _hold_reraise); None: not held.
_held_since: float | None = None


def flush_on_sigterm(stage: Stage, *, asked: bool = False) -> None:
    """Have SIGTERM flush *stage* before the process goes on to what SIGTERM did before.

    Installed by the first Auditor made on the main thread (Python sets signal handlers there only).
    It chains: the disposition found then (the application's own handler, or the default) still runs
    after the flush, so an application handler installed *before* keeps working. A handler installed
    *after* (a server's, in its worker) replaces ragaudit's until the process hands its first turn
    over on the main thread (`keep_sigterm_handler`); then ragaudit's is put back in front, chaining to
    it. A forked child starts over (its server resets the signals it inherited). *asked*: the caller
    passed ``handle_signals=True`` (then a handler that cannot be installed is worth a warning).
    """
    with _lock:
        _sigterm_stages.add(stage)
        if _sigterm_state == "installed":
            return
        if threading.current_thread() is not threading.main_thread():
            if asked:
                logger.warning("ragaudit: handle_signals=True needs the main thread (signal handlers can only be "
                               "set there); SIGTERM will not flush pending judgements")
            return
        _install()


def _install() -> bool:
    """Put ragaudit's handler in front of SIGTERM's disposition now (on the main thread, the lock
    held); False when that is ignored, not Python's, or cannot be set."""
    global _sigterm_previous, _sigterm_state
    import signal

    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        _sigterm_state = "installed"
        return True
    if current is signal.SIG_IGN or current is None:  # ignored, or a handler not set from Python
        _sigterm_state = "declined"
        return False
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError) as exc:  # an embedded interpreter without signals
        logger.debug("ragaudit: could not install the SIGTERM handler: %r", exc)
        return False
    _sigterm_previous = current
    _sigterm_state = "installed"
    return True


def keep_sigterm_handler() -> None:
    """Called as a turn starts (the sources) and is handed over (the closer's ``defer``): the first
    time this happens on the main thread of a process, put ragaudit's SIGTERM handler back in front if
    something replaced it.

    Servers set their own signal handlers in each worker after the app is imported (gunicorn's
    workers, uvicorn's ``Server``, which also re-raises SIGTERM with the default disposition at the
    end), so the handler an Auditor installed at import is gone by the time requests come. The first
    turn comes after that, and before the signal that would find its request in flight. Also lets
    go a SIGTERM held back longer than a flush takes (`_release_if_stale`). Costs two global
    reads per turn otherwise. Never raises.
    """
    global _recheck
    if not (_recheck or _held_since is not None) or threading.current_thread() is not threading.main_thread():
        return
    try:
        if _recheck:
            _recheck = False
            with _lock:
                if _sigterm_stages and _sigterm_state != "declined":
                    _install()
        _release_if_stale()
    except Exception as exc:  # never into the host
        logger.debug("ragaudit: checking the SIGTERM handler failed: %r", exc)


def install_sigterm_handler() -> bool:
    """Put ragaudit's SIGTERM handler in front of whatever SIGTERM does now, on the main thread
    (a server's worker hook, ``ragaudit.gunicorn.post_worker_init``). True when it is installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        return bool(_sigterm_stages) and _install()


def _after_fork_in_child() -> None:
    # A forked child (a gunicorn or Celery worker, multiprocessing's fork) has its own signals to
    # keep: the parent's flag said "installed" for the parent. Install now (what the child inherited
    # is chained), and check again at the child's first turn, after its server set its handlers.
    global _recheck, _exiting, _deferred
    _recheck = True
    _exiting, _deferred = False, None  # a fork during the parent's exit hook: the child is not exiting
    _release()  # the child inherits the forking thread's signal mask
    if _sigterm_state == "installed" and threading.current_thread() is threading.main_thread():
        _install()


_fork.on_fork_in_child(_after_fork_in_child)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    import signal

    global _deferred
    if _exiting:
        # The process is on its way out and the exit hook is recording its last turns (its
        # Auditors are already closed, so this handler would find none open and die at once): a
        # server terminating its workers one by one (hypercorn's master, when the first exits)
        # must not cut that short. The signal takes effect when the hook is done (`_redeliver`).
        _deferred = signum
        return
    previous = _sigterm_previous
    auditors = _open(_sigterm_stages)
    if auditors:
        # Each Auditor hands down its closer's turns first. No lock here: the interrupted main
        # thread may hold it.
        _flush_for_sigterm(auditors, shut_down=not callable(previous))
    if callable(previous) and previous is not _on_sigterm:
        previous(signum, frame)  # the application's or server's own handler: its decision what happens next
        if auditors:
            _hold_reraise(signum)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _hold_reraise(signum: int) -> None:
    """The handler chained to returned: the process shuts down gracefully (a server finishes its
    requests) and the turns of those requests are still to be recorded. A server may end by
    re-raising SIGTERM with the default disposition (uvicorn does, in gunicorn's workers too), which
    kills the process before any exit hook. So SIGTERM is held back on this (the main) thread: that
    re-raise waits, the process exits normally, the exit hook records everything, then lets the held
    signal go (`_release`), and the process dies by SIGTERM as the server meant. A SIGTERM sent
    to the process meanwhile still reaches it through any other thread."""
    global _held_since
    import signal

    if _held_since is not None or not hasattr(signal, "pthread_sigmask"):
        return
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    except (ValueError, OSError):
        return
    _held_since = time.monotonic()


def _release() -> None:
    """Let a SIGTERM held back by `_hold_reraise` go (it is delivered now, if one came)."""
    global _held_since
    import signal

    if _held_since is None or threading.current_thread() is not threading.main_thread():
        return
    _held_since = None
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    except (ValueError, OSError):
        pass


def _redeliver() -> None:
    """Send the SIGTERM that came during the exit hook again, now that the hook is done: it does
    what it would have done (the handler chained to, or the default disposition)."""
    global _deferred
    signum, _deferred = _deferred, None
    if signum is not None:
        try:
            os.kill(os.getpid(), signum)
        except OSError:  # pragma: no cover - signalling oneself does not fail
            pass


def _release_if_stale() -> None:
    # The process did not exit after the handler chained to returned (an application handler that
    # goes on): a SIGTERM must not stay held back on the main thread for longer than a flush takes.
    if _held_since is not None:
        budget = max((s.exit_timeout_s for s in _open(_sigterm_stages)), default=0.0) + _EXIT_MARGIN_S
        if time.monotonic() - _held_since > budget:
            _release()


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
