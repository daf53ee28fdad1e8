"""Saying when judging is failing: the first judge failure at once, then a summary at most once a minute.

A judge that fails on every turn (an endpoint that is not a judge, a wrong model name, a revoked key)
must not be silent: its failures are otherwise only in the audit log. The lines name how many
judgements failed, the last error's type and HTTP status (never its text: it may quote the content),
what to check for that kind of failure, the judge (its ``repr``: model and scrubbed URL), whether
``OPENAI_API_KEY`` is set, and where each error is recorded (the audit log when one is written, else
``Auditor.stats()`` and the ``ragaudit.judge`` span). They reach stderr even in a process that
configured no logging (ragaudit._last_resort).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable

from .. import _fork
from ..content import scrub
from ..records import Judgement

__all__ = ["JudgeFailureLog", "failure_hint", "judge_context"]

logger = logging.getLogger("ragaudit")

SUMMARY_INTERVAL_S = 60.0
"""While failures go on, at most one summary line per this many seconds."""

# Errors raised inside the client (no HTTP answer involved): an incompatible or incomplete SDK install.
_CLIENT_ERRORS = frozenset({"ModuleNotFoundError", "ImportError", "AttributeError", "TypeError", "RuntimeError"})
_TYPE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?::|\s|$)")


def _error_type(judgement: Judgement) -> str:
    found = _TYPE.match(judgement.error or "")
    return found.group(1) if found else "error"


def _status(judgement: Judgement) -> int | None:
    status = judgement.details.get("status_code")
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def failure_hint(error_type: str, status: int | None) -> str:
    """What to check for a judge failure of *error_type* with HTTP *status* (None: no response)."""
    if status in (401, 403):
        return "check the judge's API key (OPENAI_API_KEY or api_key=) and its permissions"
    if status == 404:
        return "check the judge's base URL (it must serve /chat/completions) and the model name"
    if status in (400, 422):
        return "check the model name and that the endpoint supports chat completions"
    if status == 429:
        return "the judge endpoint is rate limiting: lower max_concurrency or sample_rate, or raise the quota"
    if status is not None and status >= 500:
        return "the judge endpoint is failing on its side: check its health and logs"
    if error_type == "timeout" or "Timeout" in error_type:
        return "the judge did not answer within timeout_s: check the endpoint is reachable, or raise timeout_s"
    if "Connect" in error_type or "Network" in error_type:
        return "the judge endpoint cannot be reached: check its URL and that it is running"
    if error_type.rsplit(".", 1)[-1] in _CLIENT_ERRORS:
        return ("no answer from the endpoint was read: the error is inside the client (check that the installed "
                "openai package is a supported version: pip show openai)")
    return "check the judge's endpoint URL, model name and API key"


def judge_context(judge: object, audit_log_path: object | None) -> str:
    """Which judge (its ``repr``: model and scrubbed URL for an LLM judge), whether ``OPENAI_API_KEY``
    is set (never its value), and where each error is recorded."""
    shown = scrub(repr(judge))
    shown = shown if len(shown) <= 300 else shown[:297] + "..."
    key = "set" if os.environ.get("OPENAI_API_KEY") else "not set"
    where = (f"the audit log {audit_log_path} (judge_status \"failed\", the error in judgement.error; "
             "`ragaudit report` reads it)" if audit_log_path is not None
             else "Auditor.stats()[\"failed\"] and the error status of each ragaudit.judge span "
                  "(no audit log is written: audit_log=None)")
    return f"judge {shown}; OPENAI_API_KEY {key} in the environment; each error is recorded in {where}"


class JudgeFailureLog:
    """Counts judge failures of one Auditor and logs them at WARNING: the first at once, then one
    summary per `SUMMARY_INTERVAL_S` while failures go on (none while judging succeeds)."""

    def __init__(self, interval_s: float = SUMMARY_INTERVAL_S, on_first: Callable[[], None] | None = None,
                 context: Callable[[], str] | None = None) -> None:
        self.interval_s = interval_s
        self._on_first = on_first  # called once, with the first judgement that succeeded
        self._context = context  # the judge, its key, where errors go (judge_context), asked per line
        self._lock = _fork.lock()
        self.failures = 0
        self._since_summary = 0
        self._next_summary = 0.0

    def note(self, judgement: Judgement) -> None:
        """Record *judgement* (a failed one is counted and maybe logged). Never raises."""
        if judgement.error is None:
            if self._on_first is not None:
                on_first, self._on_first = self._on_first, None
                try:
                    on_first()
                except Exception:  # saying where things are must not cost the judgement
                    pass
            return
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            self._since_summary += 1
            first = self.failures == 1
            due = not first and now >= self._next_summary
            if first or due:
                count, self._since_summary = self._since_summary, 0
                self._next_summary = now + self.interval_s
        if not (first or due):
            return
        error_type, status = _error_type(judgement), _status(judgement)
        shown = f"{error_type}" + (f" (HTTP {status})" if status is not None else "")
        hint = failure_hint(error_type, status)
        try:
            context = self._context() if self._context is not None else f"judge {judgement.judge}"
            if first:
                logger.warning("ragaudit: judging failed (judge %s): %s; %s. Context: %s. Further failures are "
                               "summarised at most once every %gs.", judgement.judge, shown, hint, context,
                               self.interval_s)
            else:
                logger.warning("ragaudit: judging is failing: %d more judgement(s) failed since the last report (%d in "
                               "all); last error: %s (judge %s); %s. Context: %s.", count, self.failures, shown,
                               judgement.judge, hint, context)
        except Exception:  # a broken logging handler must not cost the judgement
            pass

    def reset(self) -> None:
        """Start over (in a forked child)."""
        self._lock = _fork.lock()
        self.failures = self._since_summary = 0
        self._next_summary = 0.0
