"""ragaudit's WARNINGs reach stderr in a process that configured no logging (issue 44).

A library conventionally adds only a ``NullHandler`` and leaves output to the application. But most
scripts, notebooks and small apps configure no logging at all, and there the "judging fails" warning
of a judge that fails on every turn was swallowed: the app printed its answers and exited 0 while
every judgement failed. The stdlib's own ``logging.lastResort`` (WARNING and above to stderr when no
handler is found) would print it, but any handler of ours, the ``NullHandler`` included, turns it off.

``StderrFallback`` is that last resort kept alive: the one handler on the ``ragaudit`` logger, it
writes a record (WARNING and above) to stderr only while nobody else would show it -- no handler on the
way from the record's logger to the root, and no logger on the way that stops propagation. Once the
application configures logging (``logging.basicConfig()``, a handler on ``ragaudit`` or the root,
``propagate = False``, a level above WARNING) it says nothing and the application's configuration
decides, exactly as before.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["StderrFallback", "install"]


class StderrFallback(logging.Handler):
    """WARNING and above of ragaudit's loggers to stderr, while the process has configured no logging."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _configured(record.name):
            return
        stream = sys.stderr
        if stream is None:  # pythonw, some daemons: nowhere to write
            return
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def _configured(name: str) -> bool:
    """True when the application decides where *name*'s records go: a handler (not ours, not a
    ``NullHandler``) on the way to the root, or a logger on the way that does not propagate."""
    log: logging.Logger | None = logging.getLogger(name)
    while log is not None:
        if any(not isinstance(h, (StderrFallback, logging.NullHandler)) for h in log.handlers):
            return True
        if not log.propagate:
            return True
        log = log.parent
    return False


def install(logger_name: str) -> None:
    """Give *logger_name* the fallback (once, whatever the number of calls)."""
    log = logging.getLogger(logger_name)
    if not any(isinstance(h, StderrFallback) for h in log.handlers):
        log.addHandler(StderrFallback())
