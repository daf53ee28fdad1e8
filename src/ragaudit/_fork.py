"""Fork safety: every lock ragaudit owns works in a forked child, and its owners can start over there.

A ``fork()`` copies the process with one thread, the one that forked. A lock another thread held at
that moment (a host thread inside a callback of ours, a worker writing an audit line) stays held in
the child forever, and the child's first use of it hangs (gunicorn ``--preload``, Celery prefork and
``multiprocessing``'s fork start method all fork busy processes). As the OpenTelemetry SDK does,
ragaudit re-initialises what it owns in the child with ``os.register_at_fork(after_in_child=...)``:

- `lock` / `rlock` make the locks: each is held weakly here and reset in the child
  (``_at_fork_reinit``, as ``logging`` does for its handlers), so its identity, and every reference
  to it, stays valid; nothing is kept for a lock that is gone.
- `on_fork_in_child` registers what an owner must redo there (empty its queues, drop the
  parent's in-flight state); a bound method is held weakly, so an object nobody references is not
  kept alive by its hook and its entry goes with it.

Floor 1 with no ragaudit imports: every module may use it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["lock", "on_fork_in_child", "rlock"]

logger = logging.getLogger("ragaudit")

_locks: weakref.WeakSet[Any] = weakref.WeakSet()
# key -> (weak reference to the owner, function) for bound methods; key -> callable otherwise.
_hooks: dict[int, Any] = {}
_keys = itertools.count()


def lock() -> threading.Lock:
    """A ``threading.Lock`` that is released (re-initialised) in a forked child."""
    made = threading.Lock()
    _locks.add(made)
    return made


def rlock() -> threading.RLock:
    """A ``threading.RLock`` that is released (re-initialised) in a forked child."""
    made = threading.RLock()
    _locks.add(made)
    return made


def on_fork_in_child(callback: Callable[[], None]) -> None:
    """Call *callback* in the child after ``os.fork()``, after every lock of `lock` is reset.

    A bound method is held through a weak reference to its object, and forgotten when the object
    goes. Not ``weakref.WeakMethod``: on Python < 3.13 its internal callback raises (``Exception
    ignored ... WeakMethod``, printed at interpreter exit) when the method's object and the
    WeakMethod are freed in the same collection, which is what happens at exit.
    """
    owner = getattr(callback, "__self__", None)
    func = getattr(callback, "__func__", None)
    key = next(_keys)  # atomic: hooks may be registered from several threads
    if owner is None or func is None:
        _hooks[key] = callback
        return
    hooks = _hooks  # held by the closure: the module's globals may be gone when it runs at exit

    def forget(_: object) -> None:
        hooks.pop(key, None)

    try:
        _hooks[key] = (weakref.ref(owner, forget), func)
    except TypeError:  # an owner without weak references: held for the process's life
        _hooks[key] = callback


def _after_fork_in_child() -> None:
    # The child has one thread (this one): whichever thread held a lock of ours is not here.
    for held in list(_locks):
        held._at_fork_reinit()
    for entry in list(_hooks.values()):
        if isinstance(entry, tuple):
            owner = entry[0]()
            if owner is None:
                continue
            callback: Callable[[], None] = entry[1].__get__(owner)
        else:
            callback = entry
        try:
            callback()
        except Exception as exc:  # never break the child
            logger.debug("ragaudit: an after-fork hook failed: %s", type(exc).__name__)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
