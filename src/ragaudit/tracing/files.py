"""JSONL files: finished spans ([`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter],
[`read_spans`][ragaudit.tracing.read_spans]) and the audit log ([`AuditLog`][ragaudit.tracing.AuditLog],
[`read_audit_log`][ragaudit.tracing.read_audit_log]), one JSON object per line.

The OpenTelemetry SDK is only imported when [`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter] is first used, so
the audit log works with the API alone.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _fork
from .._compat import current_audit_line, current_name
from .._export import ExportResult
from .._jsonl import read_jsonl
from .._log import RateLimitedLog
from .._worker import on_fork_in_child
from ..content import ContentPolicy
from ..errors import ConfigurationError, RagAuditError
from ..records import AuditRecord, Judgement, RagTurn, TurnAudit
from ..sessions import SessionRecord
from .conventions import retrieval_metric_key

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["MAX_RAW_OUTPUT_CHARS", "AuditLog", "JsonlSpanExporter", "read_audit_log", "read_spans", "span_to_dict"]

_logger = logging.getLogger("ragaudit")

PathLike = str | os.PathLike[str]


def _open_append(path: PathLike, what: str) -> int:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A descriptor of our own, unbuffered, appending: every byte the OS took is known, so a
        # failed write (a full disk) loses exactly the lines it did not take, counted once each,
        # and nothing stays in a buffer to be written (or fail) again later.
        return os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise ConfigurationError(f"cannot open {what} {str(target)!r} for appending: {exc}") from exc


def _encode(text: str) -> bytes:
    # backslashreplace: a lone surrogate (text decoded with surrogateescape, a broken PDF
    # extraction) cannot be encoded as UTF-8; inside a JSON string "\\udXXX" is its valid escape,
    # so the line is still written and reads back as the same text.
    return text.encode("utf-8", "backslashreplace")


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _read_jsonl(path: PathLike, what: str) -> list[dict[str, Any]]:
    # A cut-off last line (a writer interrupted mid-line) is skipped with a warning; a BOM is accepted.
    return [value for _, value in read_jsonl(path, what, error=RagAuditError, cut_tail=True, objects=False)]


# --- spans -------------------------------------------------------------------------------------
def _attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    if not attrs:
        return {}
    return {key: list(value) if isinstance(value, tuple) else value for key, value in attrs.items()}


def _hex_span_id(span_id: int) -> str:
    return f"{span_id:016x}"


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """One finished SDK span as the JSON-ready dict [`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter] writes."""
    ctx = span.context
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{ctx.trace_id:032x}" if ctx is not None else None,
        "span_id": _hex_span_id(ctx.span_id) if ctx is not None else None,
        "parent_span_id": _hex_span_id(parent.span_id) if parent is not None else None,
        "start_time_ns": span.start_time,
        "end_time_ns": span.end_time,
        "kind": span.kind.name,
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "attributes": _attributes(span.attributes),
        "events": [
            {"name": e.name, "timestamp_ns": e.timestamp, "attributes": _attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": _hex_span_id(link.context.span_id),
                "attributes": _attributes(link.attributes),
            }
            for link in span.links
        ],
        "resource": _attributes(span.resource.attributes) if span.resource is not None else {},
        "scope": span.instrumentation_scope.name if span.instrumentation_scope is not None else None,
    }


class _AppendFile:
    """A file opened for appending whole lines, under one lock, with every lost line counted once.

    With *lazy*, nothing is opened before the first write (so constructing the owner cannot fail on
    a read-only directory); an open that fails raises there, and is tried again at the next write.
    A write the OS cuts short (a full disk, a file size limit) keeps the rest of the line it was
    in, written first by the next write (so no line is left half written while the file lives);
    the lines after it are lost, and `lost` counts each line that never reached the file once.
    """

    def __init__(self, path: PathLike, what: str, *, lazy: bool = False) -> None:
        self.path = Path(path).absolute()  # the directory of now, even if the host chdir()s later
        self.what = what
        self._lock = _fork.lock()
        self._closed = False
        self._tail = b""  # the unwritten rest of a line a failed write cut short
        self.lost = 0
        self._fd: int | None = None if lazy else _open_append(self.path, what)
        on_fork_in_child(self._after_fork)

    def _after_fork(self) -> None:
        # A parent's thread may have held the lock at fork; the child has no such thread.
        self._lock = _fork.lock()

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def append(self, text: str) -> None:
        """Write *text* (whole lines); raises RagAuditError when closed or the file cannot be opened,
        OSError when the OS refuses (what was lost is counted in `lost` first)."""
        parts = text.split("\n")
        lines = [part + "\n" for part in parts[:-1]]
        if parts[-1]:
            lines.append(parts[-1])
        self.write_lines(lines)

    def write_lines(self, lines: Sequence[str]) -> int:
        """Write *lines* (each ending with a newline) in one go; returns how many reached the file.
        Raises as `append`; the lines that did not reach it are counted in `lost`."""
        with self._lock:
            if self._closed:
                self.lost += len(lines)
                raise RagAuditError(f"{self.what} {str(self.path)!r} is closed")
            if self._fd is None:
                try:
                    self._fd = _open_append(self.path, self.what)
                except ConfigurationError:
                    self.lost += len(lines)
                    raise
            encoded = [_encode(line) for line in lines]
            data = self._tail + b"".join(encoded)
            written = 0
            try:
                while written < len(data):
                    written += os.write(self._fd, data[written:])
            except OSError:
                self._account(written, encoded, data)
                raise
            self._tail = b""
            return len(lines)

    def _account(self, written: int, encoded: list[bytes], data: bytes) -> None:
        # Called with the lock held after a write stopped at byte *written* of *data*.
        offset = len(self._tail)
        if written < offset:  # still inside the earlier cut line: nothing new reached the file
            self._tail = self._tail[written:]
            self.lost += len(encoded)
            return
        end = offset
        for index, line in enumerate(encoded):
            start, end = end, end + len(line)
            if written < end:
                if written > start:  # this line was cut: keep its rest, lose the ones after it
                    self._tail = data[written:end]
                    self.lost += len(encoded) - index - 1
                else:
                    self._tail = b""
                    self.lost += len(encoded) - index
                return
        self._tail = b""

    def close(self) -> None:
        """Write the rest of a cut line (if any), then close; raises OSError when that rest cannot be
        written (the line is counted lost)."""
        with self._lock:
            self._closed = True
            fd, self._fd = self._fd, None
            if fd is None:
                return
            tail, self._tail = self._tail, b""
            try:
                written = 0
                while written < len(tail):
                    written += os.write(fd, tail[written:])
            except OSError:
                self.lost += 1
                raise
            finally:
                os.close(fd)


class _JsonlSpanWriter:
    """The SDK-free half of [`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter]: thread-safe appends of span
    lines."""

    def __init__(self, path: PathLike) -> None:
        self._out = _AppendFile(path, "span file")
        self.path = self._out.path

    def _write_spans(self, spans: Sequence[ReadableSpan]) -> bool:
        if not spans:
            return True
        try:
            self._out.write_lines([_dumps(span_to_dict(span)) + "\n" for span in spans])
        except (OSError, RagAuditError) as exc:
            _logger.warning("ragaudit: could not write %d spans to %s: %s", len(spans), self.path, exc)
            return False
        return True


def _build_exporter_class() -> type:
    try:
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    except ImportError as exc:
        raise ConfigurationError(
            "JsonlSpanExporter needs the OpenTelemetry SDK: pip install 'ragaudit[otlp]'"
        ) from exc

    class JsonlSpanExporter(_JsonlSpanWriter, SpanExporter):
        """An SDK ``SpanExporter`` appending one JSON object per finished span to *path*.

        Each line has name, trace_id, span_id, parent_span_id (hex), start_time_ns, end_time_ns,
        kind, status, attributes, events, links, resource and scope. Safe to share between
        threads; read the file back with [`read_spans`][ragaudit.tracing.read_spans].
        """

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            ok = self._write_spans(spans)
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True  # every export is flushed before it returns

        def shutdown(self) -> None:
            self._out.close()

        def __repr__(self) -> str:
            return f"JsonlSpanExporter({str(self.path)!r})"

    JsonlSpanExporter.__module__ = __name__
    JsonlSpanExporter.__qualname__ = "JsonlSpanExporter"
    return JsonlSpanExporter


if TYPE_CHECKING:

    class JsonlSpanExporter(_JsonlSpanWriter, SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult: ...
        def force_flush(self, timeout_millis: int = 30000) -> bool: ...
        def shutdown(self) -> None: ...


def __getattr__(name: str) -> Any:
    if name == "JsonlSpanExporter":
        cls = _build_exporter_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_spans(path: PathLike) -> list[dict[str, Any]]:
    """The spans a [`JsonlSpanExporter`][ragaudit.tracing.JsonlSpanExporter] wrote to *path*, as dicts, in file order.

    A truncated last line (an interrupted writer) is skipped with a warning; any other bad line
    raises [`RagAuditError`][ragaudit.RagAuditError]. A span written by 0.1.0 is read under today's
    attribute names (``ragaudit.retrieval.judged_*`` as ``ragaudit.retrieval.graded_*``).
    """
    return [_current_span(span) for span in _read_jsonl(path, "span file")]


def _current_span(span: Any) -> Any:
    attrs = span.get("attributes") if isinstance(span, dict) else None
    if not isinstance(attrs, dict):
        return span
    prefix = retrieval_metric_key("")
    if not any(key.startswith(prefix) and current_name(key, prefix) != key for key in attrs):
        return span
    return {**span, "attributes": {current_name(key, prefix): value for key, value in attrs.items()}}


# --- audit log ---------------------------------------------------------------------------------

def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _finite(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def _status(judgement: Judgement) -> int | None:
    return _status_of(judgement.details)


def _status_of(details: Mapping[str, Any]) -> int | None:
    status = details.get("status_code")
    return status if isinstance(status, int) and not isinstance(status, bool) else None


class AuditLog:
    """An append-only JSONL audit log: one line per judged turn; an [`Exporter`][ragaudit.Exporter] of
    [`AuditRecord`][ragaudit.AuditRecord]s (unjudged records get no line).

    Keys: ts, turn_id, trace_id, span_id, framework, model, query, answer, documents
    (``[{id, rank, score, source, metadata, content}]``), citations
    (``[{doc_id, rank, marker, method}]``), relevant_ids, retrieval_metrics, judge, judge_status,
    faithfulness, context_relevance, answer_relevance (None when the judge gave none), reason,
    raw_output, error, latency_s, usage; from a full audit: sentences (``[{index, text, verdict,
    supporting_ranks, supporting_doc_ids, start, end, method}]``), document_grades
    (``[{rank, doc_id, grade, method}]``), graded_metrics (``{"graded_ndcg@10": ...}`` or null; 0.1.0
    wrote ``judged_metrics``, [`read_audit_log`][ragaudit.tracing.read_audit_log] reads it as ``graded_metrics``),
    citation_checks (``[{sentence, doc_id, rank, marker, holds, verdict}]``), citation_precision and
    citation_recall (null when nothing is cited).

    A judged session ([`export_sessions`][ragaudit.tracing.AuditLog.export_sessions]) is one line with ``"kind":
    "session"`` (turn lines have no ``kind``): ts, session_id, the [`SessionJudgement`][ragaudit.SessionJudgement] keys
    (resolved, resolved_turn, contradictions with both sentences, repeated, groundedness, partial, missed,
    ended, counts, the judge's reason, error, usage, identity) and ``turns`` (``[{index, turn_id,
    trace_id, span_id, query, answer, scores, status, sentences}]``), texts under the same policy.

    Every text goes through a [`ContentPolicy`][ragaudit.content.ContentPolicy] (*content*, the Auditor's;
    else one made of *capture_content* and *redact*). With content capture off query, answer,
    document content and metadata, citation markers and reason are null (the reason is kept when the
    policy keeps judge reasons), ``query_chars``, ``answer_chars``, ``reason_chars`` and each
    document's ``content_chars`` give their sizes, an error is its type, HTTP status and a fixed
    message, and ``details`` keeps only numbers and flags. Known secrets are scrubbed always; *redact*
    is applied to every text written (also errors, sources and metadata keys); a text it fails on is
    withheld, never written as it was. Lines are written whole at once (no buffer); safe to share
    between threads. A line the disk refuses is lost and counted once in [`errors`][ragaudit.tracing.AuditLog.errors]
    (the Auditor's ``export_errors``); the rest of a line a full disk cut short is written first by the next write.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        capture_content: bool = True,
        redact: Callable[[str], str] | None = None,
        content: ContentPolicy | None = None,
        lazy: bool = False,
    ) -> None:
        self.content_policy = content if content is not None else ContentPolicy(capture_content=capture_content,
                                                                        redact=redact)
        self._out = _AppendFile(path, "audit log", lazy=lazy)
        self.path = self._out.path
        self.capture_content = self.content_policy.capture_content
        self._log = RateLimitedLog()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r}, capture_content={self.capture_content})"

    def record(
        self,
        turn: RagTurn,
        judgement: Judgement,
        *,
        judge_status: str,
        retrieval_metrics: Mapping[str, float] | None = None,
        content: ContentPolicy | None = None,
    ) -> dict[str, Any]:
        """The dict [`write`][ragaudit.tracing.AuditLog.write] would write for these arguments (*content*: the policy of
        this turn, e.g. its integration handler's; None: the log's own)."""
        from ..turn_audit import audit_turn

        audit = audit_turn(turn, judgement) if judgement.sentences or judgement.document_grades else None
        return self._line(turn, judgement, judge_status, retrieval_metrics, self.content_policy if content is None
                          else content, audit)

    def record_line(self, record: AuditRecord) -> dict[str, Any] | None:
        """The dict [`export`][ragaudit.tracing.AuditLog.export] writes for *record* (None for an unjudged one), from
        its derived values."""
        if record.judgement is None:
            return None
        return self._line(record.turn, record.judgement, record.status, record.ground_truth_metrics,
                          record.content_policy, record.audit)

    def _line(self, turn: RagTurn, judgement: Judgement, judge_status: str,
              retrieval_metrics: Mapping[str, float] | None, policy: ContentPolicy,
              audit: TurnAudit | None) -> dict[str, Any]:
        capture = policy.capture_content
        documents = []
        for doc in turn.documents:
            entry: dict[str, Any] = {
                "id": doc.id,
                "rank": doc.rank,
                "score": doc.score,
                "source": policy.identifier(doc.source),
                "metadata": policy.metadata(doc.metadata),
                "content": policy.captured(doc.content),
            }
            if not capture:
                entry["content_chars"] = len(doc.content)
            if doc.truncated:  # the part of the document that reached the model, as the judge saw it
                entry["truncated"] = True
            documents.append(entry)
        line: dict[str, Any] = {
            "ts": _utc_now(),
            "turn_id": turn.turn_id,
            "trace_id": turn.trace_id,
            "span_id": turn.span_id,
            "framework": turn.framework,
            "model": turn.model,
            "query": policy.captured(turn.query),
            "answer": policy.captured(turn.answer),
            "documents": documents,
            "citations": [
                {
                    "doc_id": cit.doc_id,
                    "rank": cit.rank,
                    "marker": policy.captured(cit.marker),
                    "method": cit.method,
                }
                for cit in turn.citations
            ],
            "relevant_ids": dict(turn.relevant_ids) if turn.relevant_ids is not None else None,
            "retrieval_metrics": (
                {k: _finite(float(v)) for k, v in retrieval_metrics.items() if v is not None}
                if retrieval_metrics
                else None
            ),
            "judge": judgement.judge,
            "judge_status": judge_status,
            "faithfulness": judgement.faithfulness,
            "context_relevance": judgement.context_relevance,
            "answer_relevance": judgement.answer_relevance,
            "reason": policy.reason(judgement.reason),
            "error": policy.error(judgement.error, status=_status(judgement)),
            "latency_s": judgement.latency_s,
            "usage": dict(judgement.usage),
            "judge_identity": judgement.identity.to_dict() if judgement.identity is not None else None,
            # the judge's own reply, capped: a 20 MB reply must not make a 20 MB line
            "raw_output": policy.captured(judgement.raw_output, MAX_RAW_OUTPUT_CHARS),
            # judge-specific extras (rule results, rubric criteria, distributions) quote the answer
            # and documents: with capture off only their numbers and flags are kept
            "details": policy.details(judgement.details, MAX_RAW_OUTPUT_CHARS),
        }
        line.update(self._full_audit(judgement, policy, audit))
        if not capture:
            line["query_chars"] = len(turn.query)
            line["answer_chars"] = len(turn.answer) if turn.answer is not None else None
            line["reason_chars"] = len(judgement.reason) if judgement.reason is not None else None
        return line

    def _full_audit(self, judgement: Judgement, policy: ContentPolicy, audit: TurnAudit | None) -> dict[str, Any]:
        """The full audit's keys: sentence verdicts (text follows content capture), document grades,
        graded retrieval metrics, citation checks and citation precision/recall."""
        sentences = []
        for sentence in judgement.sentences:
            entry = sentence.to_dict()
            entry["text"] = policy.captured(sentence.text)
            sentences.append(entry)
        checks = []
        for check in audit.citation_checks if audit is not None else ():
            entry = check.to_dict()
            entry["marker"] = policy.captured(check.marker)
            checks.append(entry)
        return {
            "sentences": sentences,
            "document_grades": [g.to_dict() for g in judgement.document_grades],
            "graded_metrics": dict(audit.metrics) if audit is not None and audit.metrics is not None else None,
            "citation_checks": checks,
            "citation_precision": audit.citation_precision if audit is not None else None,
            "citation_recall": audit.citation_recall if audit is not None else None,
        }

    def write(
        self,
        turn: RagTurn,
        judgement: Judgement,
        *,
        judge_status: str,
        retrieval_metrics: Mapping[str, float] | None = None,
        content: ContentPolicy | None = None,
    ) -> None:
        """Append one line for *turn* and its *judgement* and flush it (*content*: as
        [`record`][ragaudit.tracing.AuditLog.record]).

        Raises [`RagAuditError`][ragaudit.RagAuditError] when the log is closed or the line cannot be
        written (the caller, normally the Auditor, counts and logs it). A text *redact* fails on
        is written as ``[ragaudit: redact() failed, text withheld]``.
        """
        text = _dumps(
            self.record(turn, judgement, judge_status=judge_status, retrieval_metrics=retrieval_metrics,
                        content=content)
        )
        try:
            self._out.write_lines([text + "\n"])
        except OSError as exc:
            raise RagAuditError(f"cannot write to audit log {str(self.path)!r}: {exc}") from exc

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        """Append one line per judged record, all in one write. Never raises: a line that cannot be
        written is counted in [`errors`][ragaudit.tracing.AuditLog.errors] (once) and logged (rate-limited)."""
        lines = []
        policy = self.content_policy
        for record in records:
            line = self.record_line(record)
            if line is not None:
                lines.append(_dumps(line) + "\n")
                if not record.content_policy.capture_content:
                    policy = record.content_policy  # the log line about a failure follows the strictest
        return self._append(lines, policy)

    def _append(self, lines: list[str], policy: ContentPolicy) -> ExportResult:
        """Write *lines* at once; a failure is counted (once per line lost) and logged under *policy*."""
        if not lines:
            return ExportResult.SUCCESS
        lost_before = self._out.lost
        try:
            self._out.write_lines(lines)
        except (OSError, RagAuditError) as exc:
            self._log.warning(f"write:{type(exc).__name__}", "ragaudit: %d audit line(s) could not be written to "
                              "%s (counted in stats()['export_errors']): %s", self._out.lost - lost_before,
                              self.path, policy.exception(exc))
            return ExportResult.FAILURE
        return ExportResult.SUCCESS

    def session_line(self, record: SessionRecord) -> dict[str, Any]:
        """The dict [`export_sessions`][ragaudit.tracing.AuditLog.export_sessions] writes for *record* (texts through
        its content policy)."""
        policy = record.content_policy
        j = record.judgement
        v = j.verdict
        line: dict[str, Any] = {"ts": _utc_now(), "kind": "session", **j.to_dict()}
        line.update(reason=policy.reason(v.reason), error=policy.error(v.error, status=_status_of(v.details)),
                    raw_output=policy.captured(v.raw_output, MAX_RAW_OUTPUT_CHARS),
                    details=policy.details(v.details, MAX_RAW_OUTPUT_CHARS),
                    contradictions=[{**c.to_dict(), "first_text": policy.captured(c.first_text),
                                     "second_text": policy.captured(c.second_text)} for c in j.contradictions])
        turns = []
        for turn in record.request.turns:
            entry = turn.to_dict()
            entry.update(query=policy.captured(turn.query), answer=policy.captured(turn.answer),
                         sentences=[{**s.to_dict(), "text": policy.captured(s.text)} for s in turn.sentences])
            turns.append(entry)
        line["turns"] = turns
        return line

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        """Append one ``"kind": "session"`` line per judged session (see the class docstring)."""
        return self._append([_dumps(self.session_line(r)) + "\n" for r in records],
                            next((r.content_policy for r in records if not r.content_policy.capture_content),
                                 self.content_policy))

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Nothing is buffered (each line is written at once): True unless a cut line's rest waits."""
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """[`close`][ragaudit.tracing.AuditLog.close], never raising (a rest that cannot be written is counted lost)."""
        try:
            self.close()
        except OSError as exc:
            self._log.warning("close", "ragaudit: the last audit line could not be written to %s: %s", self.path,
                              self.content_policy.exception(exc))

    @property
    def errors(self) -> int:
        """Lines that never reached the file, each counted once."""
        return self._out.lost

    def close(self) -> None:
        """Close the file; later writes raise. Safe to call twice. Raises OSError when the rest of a
        line a full disk cut short still cannot be written (that line is counted lost)."""
        self._out.close()

    @property
    def closed(self) -> bool:
        """True after [`close`][ragaudit.tracing.AuditLog.close]."""
        return self._out.closed


MAX_RAW_OUTPUT_CHARS = 16_384
"""An audit line keeps at most this much of a judge's raw reply (and of any text in its details)."""




def read_audit_log(path: PathLike) -> list[dict[str, Any]]:
    """The lines of an audit log as dicts, in file order.

    A truncated last line (a process killed mid-write) is skipped with a warning; any other bad
    line raises [`RagAuditError`][ragaudit.RagAuditError]. A line written by 0.1.0 is read under today's
    keys (its ``judged_metrics`` as ``graded_metrics``, ``judged_<metric>`` as ``graded_<metric>``).
    """
    return [current_audit_line(line) if isinstance(line, dict) else line for line in _read_jsonl(path, "audit log")]
