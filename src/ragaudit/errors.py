"""The exception hierarchy: one root, [`RagAuditError`][ragaudit.RagAuditError], for everything ragaudit raises."""

from __future__ import annotations

__all__ = ["ConfigurationError", "JudgeError", "MetricError", "RagAuditError"]


class RagAuditError(Exception):
    """Root of every exception ragaudit raises on purpose."""


class ConfigurationError(RagAuditError, ValueError):
    """A constructor or function was given an argument it cannot work with.

    Raised at construction time where possible, never from inside a host pipeline's callbacks.
    """


class JudgeError(RagAuditError):
    """A judge could not produce a judgement (transport failure, unusable output).

    Judges return a [`Judgement`][ragaudit.Judgement] with ``error`` set instead of raising, unless the
    caller asked for ``raise_on_error=True``. The original exception is kept as ``__cause__``.
    """


class MetricError(RagAuditError, ValueError):
    """Bad input to a retrieval metric: unknown metric name, NaN score, negative cut-off, ..."""
