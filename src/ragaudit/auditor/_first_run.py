"""The first judgement of a process says where things are, once, at INFO (private).

A newcomer's first question after adding the callback is "where do I look?": the judge in use, the
audit log (which ``ragaudit report`` reads) and whether the spans are going anywhere — without a
tracer provider the OpenTelemetry API drops them silently.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import _fork

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ..tracing.files import AuditLog

__all__ = ["say_where_things_are"]

logger = logging.getLogger("ragaudit")

_said = False
_lock = _fork.lock()


def _spans(provider: TracerProvider | None) -> str:
    if provider is None:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
    name = type(provider).__name__
    if name in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return ("spans are not exported: no OpenTelemetry tracer provider is set (call ragaudit.tracing.configure(), "
                "or set up your application's own)")
    return f"spans go to the {name} in use"


def say_where_things_are(judge: str, audit_log: AuditLog | None, tracer_provider: TracerProvider | None) -> None:
    """Log, the first time in this process, the judge, the audit log's path and where the spans go."""
    global _said
    with _lock:
        if _said:
            return
        _said = True
    try:
        log = (f"audit log {audit_log.path} (read it with `ragaudit report`)" if audit_log is not None
               else "no audit log (audit_log=None)")
        logger.info("ragaudit: first judgement of this process: judge %s; %s; %s.", judge, log,
                    _spans(tracer_provider))
    except Exception:  # a broken logging handler must not cost the judgement
        pass
