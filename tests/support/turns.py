"""Checks of the turns an integration recorded, in an in-memory span exporter and the audit log.

:class:`AuditedRun` is an :class:`~ragaudit.Auditor` whose default judge is :func:`doc_ids_judge`
(a FakeJudge that writes the ids of the documents it was shown into its reason, so the audit log
proves what the judge saw). :meth:`AuditedRun.check` asserts that each question got one turn with
exactly its own documents and answer, and one judgement. Integration tests subclass it with their
``framework`` name and, in :meth:`AuditedRun.check_turn`, their own checks of each turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragaudit import Auditor, FakeJudge, JudgeRequest
from ragaudit.integrations import closer_for
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log

__all__ = ["AuditedRun", "TopicKB", "children", "doc_ids_judge"]


class TopicKB(Protocol):
    """A knowledge base that knows, per question, the document ids retrieved and the answer given."""

    expected: dict[str, list[str]]
    answers: dict[str, str]


def doc_ids_judge(request: JudgeRequest) -> dict[str, Any]:
    """FakeJudge scores 1.0 / 0.5 / 0.75 with the ids of the request's documents, comma-joined, as reason."""
    return {"faithfulness": 1.0, "context_relevance": 0.5, "answer_relevance": 0.75,
            "reason": ",".join(d.id for d in request.documents)}


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """The spans of *spans* whose parent is *parent*."""
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


class AuditedRun:
    """An Auditor (keyword arguments as for :class:`~ragaudit.Auditor`; ``judge`` defaults to a
    FakeJudge of :func:`doc_ids_judge`) exporting to *exporter* through *provider* and logging to *log*."""

    framework: ClassVar[str]

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider, log: Path, **kw: Any) -> None:
        self.exporter = exporter
        self.log = log
        self.auditor = Auditor(kw.pop("judge", None) or FakeJudge(doc_ids_judge), audit_log=log,
                               tracer_provider=provider, **kw)

    def force_flush(self, timeout_s: float = 15) -> bool:
        """The turn pipeline flushed top down: the closer above the Auditor (the turns the handlers
        handed over built and submitted), then the Auditor."""
        return closer_for(self.auditor).force_flush(timeout_s)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Every finished span (or those called *name*) once the turn pipeline has flushed."""
        assert self.force_flush(15)
        spans = list(self.exporter.get_finished_spans())
        return spans if name is None else [s for s in spans if s.name == name]

    def check(self, kb: TopicKB, questions: Sequence[str], answers: Mapping[str, str] | None = None,
              expected: Mapping[str, list[str]] | None = None) -> list[ReadableSpan]:
        """Each question has one turn with exactly its own documents and answer, and one judgement.

        *answers* and *expected* (document ids) default to *kb*'s; returns the turn spans.
        """
        answers = answers if answers is not None else kb.answers
        expected = expected or kb.expected
        spans = self.spans()
        turns = [s for s in spans if s.name == c.SPAN_TURN]
        assert sorted(str(t.attributes[c.INPUT_VALUE]) for t in turns) == sorted(questions)
        judges = Counter(s.parent.span_id for s in spans if s.name == c.SPAN_JUDGE and s.parent)
        audit = {line["turn_id"]: line for line in read_audit_log(self.log)}
        assert len(audit) == len(questions)
        for turn in turns:
            q = str(turn.attributes[c.INPUT_VALUE])
            assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == expected[q], q
            assert turn.attributes[c.OUTPUT_VALUE] == answers[q]
            assert turn.attributes[c.ATTR_FRAMEWORK] == self.framework
            assert turn.status.status_code != StatusCode.ERROR
            assert judges[turn.context.span_id] == 1, q
            line = audit[turn.attributes[c.ATTR_TURN_ID]]
            assert line["query"] == q and line["answer"] == answers[q]
            assert [d["id"] for d in line["documents"]] == expected[q]
            assert line["reason"] == ",".join(expected[q])  # what the judge was shown
            assert line["trace_id"] == f"{turn.context.trace_id:032x}"
            assert line["span_id"] == f"{turn.context.span_id:016x}"
            self.check_turn(turn, spans)
        assert sum(judges.values()) == len(questions)
        return turns

    def check_turn(self, turn: ReadableSpan, spans: list[ReadableSpan]) -> None:
        """More checks of one *turn* of :meth:`check` (*spans*: all finished spans); none here."""
