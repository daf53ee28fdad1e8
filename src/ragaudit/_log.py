"""The ``ragaudit`` logger and a rate-limited warning, shared by the Auditor, integrations and exporters."""

from __future__ import annotations

import logging
import time
from typing import Any

# Importing content installs its filter on the "ragaudit" logger: known secrets are scrubbed from
# every record of ours, whichever module logs first.
from . import _fork
from . import content as _content  # noqa: F401

__all__ = ["RateLimitedLog", "logger"]

logger = logging.getLogger("ragaudit")


class RateLimitedLog:
    """Log a kind of problem once, then at most every *interval* seconds, with a count.

    Code inside a host pipeline reports failures this way: a problem that repeats on every turn
    must not flood the host's logs.
    """

    def __init__(self, interval: float = 60.0) -> None:
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = _fork.lock()

    def warning(self, kind: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return
            suppressed = self._suppressed.pop(kind, 0)
            self._last[kind] = now
        suffix = f" ({suppressed} more since the last message)" if suppressed else ""
        logger.warning(message + suffix, *args)
