"""Audit records for exporter tests: the record the Auditor hands its exporters, made the same way."""

from __future__ import annotations

from ragaudit.content import ContentPolicy
from ragaudit.records import AuditRecord, Judgement, RagTurn
from ragaudit.tracing import SpanRecorder
from ragaudit.turn_audit import audit_record

__all__ = ["judged"]


def judged(turn: RagTurn, judgement: Judgement, recorder: SpanRecorder | None = None) -> AuditRecord:
    """The [`AuditRecord`][ragaudit.AuditRecord] of *turn* judged *judgement*, as the Auditor makes it: texts
    through *recorder*'s content policy, *recorder*'s tracer provider (None: a policy from the environment,
    no provider)."""
    if recorder is None:
        return audit_record(turn, judgement, ContentPolicy())
    return audit_record(turn, judgement, recorder.content_policy, tracer_provider=recorder.tracer_provider)
