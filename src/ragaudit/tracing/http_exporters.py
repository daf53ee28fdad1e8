"""Exporters to trace backends over HTTP: Phoenix annotations and Langfuse scores.

Each is an [`Exporter`][ragaudit.Exporter] of [`AuditRecord`][ragaudit.AuditRecord]s: its ``export`` only
queues what a record needs sent (scores, annotations: read from the record, never recomputed; texts
through the record's content policy); a thread of ragaudit's one batch worker sends batches over HTTP. A
backend that is down, slow, or answers 401/500 never blocks or breaks the [`Auditor`][ragaudit.Auditor]:
the batch is retried with exponential backoff a bounded number of times, then dropped and counted;
each kind of failure is logged once (then rate-limited). ``force_flush``/``shutdown`` follow the OpenTelemetry exporter
convention and return within their timeout.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _fork
from .._export import BaseExporter, ExportResult
from .._log import RateLimitedLog
from .._worker import BatchWorker
from ..content import ContentPolicy, register_headers, register_secret, register_url, scrub_url
from ..errors import ConfigurationError
from ..records import SCORE_NAMES, AuditRecord, Judgement, RagTurn, Retrieval
from ..sessions import SessionRecord
from ._responses import ResponseCheck, check_response
from .spans import LANGFUSE_ENVIRONMENT_ENV, environment_of

Item = tuple[str, dict[str, Any], ContentPolicy]
"""One queued delivery: the path, the JSON body, and the policy of the record it came from."""

__all__ = ["HttpExporter", "LangfuseExporter", "PhoenixExporter", "score_id"]

logger = logging.getLogger("ragaudit")

_DOCUMENTS_PATH = "/v1/document_annotations?sync=true"
_SCORE_ID_NAMESPACE = uuid.UUID("3f0c5a52-5b5e-4d0c-9a57-7261676175de")
"""Fixed: the same (trace, span, judge, score) gives the same score id in every process."""


class _BatchPolicy(threading.local):
    """Per sending thread: the content policy of the batch being sent (None between batches)."""

    policy: ContentPolicy | None = None


class HttpExporter(BaseExporter):
    """Base for exporters that POST JSON batches from a background thread.

    Subclasses implement [`record_requests`][ragaudit.tracing.HttpExporter.record_requests] (what to send for one
    record: ``(path, body)`` pairs) and may set [`response_check`][ragaudit.tracing.HttpExporter.response_check] (what a
    delivered answer looks like: a 2xx status with a JSON body is not enough for every backend; an HTML login page
    answered with 200 is a failure). ``stats()`` gives ``sent``, ``failed`` (items given up on), ``dropped`` (queue
    full), ``retries``, ``rejected`` (answers that did not look delivered); ``errors`` is ``failed + dropped`` (the
    Auditor adds it to its ``export_errors``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        max_queue: int = 10_000,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        batch_size: int = 100,
    ) -> None:
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise ConfigurationError(f"endpoint must be an http(s) URL, got {endpoint!r}")
        if timeout_s <= 0 or max_queue < 1 or max_retries < 0 or backoff_s < 0 or batch_size < 1:
            raise ConfigurationError(
                "timeout_s > 0, max_queue >= 1, max_retries >= 0, backoff_s >= 0 "
                "and batch_size >= 1 are required"
            )
        import httpx

        # The credentials in the URL and the headers are scrubbed from everything ragaudit records
        # (a backend's 401 body may echo them).
        register_url(endpoint)
        register_headers(headers)
        self.endpoint = endpoint.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s, headers=dict(headers or {}))
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._lock = _fork.lock()
        self._retries = 0
        self._rejected = 0
        self._batch_policy = _BatchPolicy()  # the policy log lines of the batch being sent follow
        self._log = RateLimitedLog(interval=300.0)
        self._closed = False
        ref = weakref.ref(self)

        def send_batch(batch: list[Item]) -> int:
            exporter = ref()
            return 0 if exporter is None else exporter._send_batch(batch)

        # The worker holds this exporter weakly: an exporter nobody references stops its thread.
        self._worker: BatchWorker[Item] = BatchWorker(
            type(self).__name__, send_batch, max_queue=max_queue, max_batch=batch_size)
        weakref.finalize(self, _release, self._worker, self._client)

    # -- to implement -----------------------------------------------------------------------

    permanent_statuses: frozenset[int] = frozenset({400, 401, 403, 404, 422})
    """HTTP statuses that are not retried."""

    response_check: ResponseCheck = ResponseCheck()
    """What an answer must look like to count as delivered (status and body shape)."""

    _content: ContentPolicy | None = None
    max_text_chars: int = 8192
    """Texts sent (the judge's reason) are cut to this many characters."""

    @property
    def content_policy(self) -> ContentPolicy:
        """The policy of texts that belong to no record (log lines outside a batch): one from the
        environment. A record's texts, and the log lines of its batch, follow the record's own policy."""
        policy = self._content
        if policy is None:
            policy = self._content = ContentPolicy()
        return policy

    def recorded_reason(self, judgement: Judgement, policy: ContentPolicy | None = None) -> str | None:
        """The judge's reason as *policy* (default [`content_policy`][ragaudit.tracing.HttpExporter.content_policy])
        lets it be recorded: None when it withholds reasons (content capture off), else scrubbed, redacted and cut to
        [`max_text_chars`][ragaudit.tracing.HttpExporter.max_text_chars]."""
        return (policy or self.content_policy).reason(judgement.reason, self.max_text_chars)

    def __repr__(self) -> str:  # never show a credential of the URL
        return f"{type(self).__name__}({scrub_url(self.endpoint)!r})"

    def record_requests(self, record: AuditRecord) -> list[tuple[str, dict[str, Any]]]:
        """The ``(path, json_body)`` items to send for one record (texts through
        ``record.content_policy``; usually nothing for an unjudged turn). To implement."""
        raise NotImplementedError

    def send(self, path: str, bodies: list[dict[str, Any]]) -> int:
        """POST a batch of items for *path*; returns how many were delivered (default: one POST each)."""
        return sum(self._post(path, body) for body in bodies)

    # -- Exporter ---------------------------------------------------------------------------

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        """Queue what each record needs sent. Never blocks; a full queue (or a shut-down exporter)
        drops and counts (FAILURE then)."""
        ok = True
        for record in records:
            ok = self._queue(self.record_requests(record), record.content_policy) and ok
        return ExportResult.SUCCESS if ok else ExportResult.FAILURE

    def _queue(self, items: list[tuple[str, dict[str, Any]]], policy: ContentPolicy) -> bool:
        """Queue *items* for sending; False when one was dropped (queue full, shut down), counted."""
        ok = True
        for path, body in items:
            if not self._worker.put((path, body, policy)):
                ok = False
                self._log.warning(
                    "queue-full", "ragaudit: %s queue full or shut down; judgement dropped", type(self).__name__
                )
        return ok

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued was sent or given up on; False on timeout."""
        return self._worker.force_flush(timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Flush within *timeout_s*, then stop. Never raises. Items not sent by then are counted as
        failed once (a request still running then is not counted again when it returns)."""
        if self._closed:
            return
        self._closed = True
        self._worker.shutdown(timeout_s)
        if not self._worker.started:
            self._client.close()
        # else a request may still be running on the worker's daemon thread: the client is
        # closed when the exporter is collected (or the process ends).

    def stats(self) -> dict[str, int]:
        """Counts: sent, failed (given up on, or still unsent at shutdown), dropped (queue full),
        retries, rejected (answers whose status or body did not look delivered, each try)."""
        worker = self._worker.stats()
        with self._lock:
            retries, rejected = self._retries, self._rejected
        return {"sent": worker["handled"], "failed": worker["failed"] + worker["abandoned"],
                "dropped": worker["dropped"], "retries": retries, "rejected": rejected}

    @property
    def errors(self) -> int:
        """Items that never reached the backend (given up on or dropped)."""
        stats = self.stats()
        return stats["failed"] + stats["dropped"]

    # -- worker ------------------------------------------------------------------------------

    def _send_batch(self, batch: list[Item]) -> int:
        """The worker's handler: send a batch grouped by path; returns how many items were delivered."""
        by_path: dict[str, list[dict[str, Any]]] = {}
        for path, body, policy in batch:
            by_path.setdefault(path, []).append(body)
            # Log lines of this batch follow its strictest policy (capture off first, then one that redacts).
            if _stricter(policy, self._batch_policy.policy):
                self._batch_policy.policy = policy
        delivered = 0
        try:
            for path, bodies in by_path.items():
                try:
                    delivered += self.send(path, bodies)
                except Exception as exc:
                    self._log.warning(f"send:{type(exc).__name__}", "ragaudit: %s failed to send: %s",
                                      type(self).__name__, self._log_policy().exception(exc))
        finally:
            self._batch_policy.policy = None
        return delivered

    def _log_policy(self) -> ContentPolicy:
        found = self._batch_policy.policy
        return found if found is not None else self.content_policy

    def _post(self, path: str, body: dict[str, Any]) -> bool:
        delay = self._backoff_s
        for attempt in range(self._max_retries + 1):
            if attempt:
                with self._lock:
                    self._retries += 1
                if self._worker.stopping.wait(delay):  # shut down: give up instead of waiting
                    return False
                delay *= 2
            try:
                response = self._client.post(self.endpoint + path, json=body)
            except Exception as exc:  # connection refused, timeout, ...
                self._log.warning(
                    f"transport:{type(exc).__name__}",
                    "ragaudit: %s cannot reach %s: %s",
                    type(self).__name__,
                    scrub_url(self.endpoint),
                    self._log_policy().exception(exc),
                )
                continue
            problem = check_response(response, self.response_check)
            if problem is None:
                return True
            if response.status_code < 300:
                # Answered "OK" with something that is not the backend's answer (a login page, a
                # proxy's error page): not delivered, and not retried (the same page comes back).
                with self._lock:
                    self._rejected += 1
                self._log.warning(
                    f"body:{problem}", "ragaudit: %s got HTTP %d from %s%s but %s; counted as not delivered "
                    "(check the endpoint URL and any proxy or login in front of it)",
                    type(self).__name__, response.status_code, scrub_url(self.endpoint), path, problem)
                return False
            self._log.warning(
                f"http:{response.status_code}",
                "ragaudit: %s got HTTP %d from %s%s: %s",
                type(self).__name__,
                response.status_code,
                scrub_url(self.endpoint),
                path,
                # a backend's error body may echo what it was sent (a key, the reason): it follows
                # content capture like any other text
                self._log_policy().body(response.text, status=response.status_code),
            )
            if response.status_code in self.permanent_statuses:
                return False  # retrying will not help
        return False


def _stricter(policy: ContentPolicy, than: ContentPolicy | None) -> bool:
    """Whether log lines should follow *policy* rather than *than* (None: any policy is stricter)."""
    if than is None:
        return True
    return (not policy.capture_content, policy.redact is not None) > (not than.capture_content, than.redact is not None)


def _release(worker: BatchWorker[Any], client: Any) -> None:
    worker.shutdown(0)
    try:
        client.close()
    except Exception:  # a request may still hold it; the process end frees it
        pass


def _label(score: float | None, threshold: float) -> str:
    if score is None:
        return "missing"
    return "pass" if score >= threshold else "fail"


class PhoenixExporter(HttpExporter):
    """Posts each judgement to Phoenix as span annotations on the turn span.

    One annotation per score (annotator kind ``LLM``, label ``pass``/``fail`` at *threshold*,
    score, the judge's reason as explanation) through ``POST /v1/span_annotations``, so Phoenix's
    own evaluation views show them. A score the judge did not give is not sent (never 0). When the
    turn has ground-truth relevance labels and the retrieval span ids are known (on the record's
    turn), each retrieved document also gets a ``relevance`` document annotation
    (``POST /v1/document_annotations``).

    *endpoint* defaults to ``$PHOENIX_COLLECTOR_ENDPOINT`` or ``http://localhost:6006``;
    *api_key* to ``$PHOENIX_API_KEY`` (sent as a Bearer token). Phoenix answers 404 for a span
    it has not received yet (span export is batched, typically every 5 s), so 404 is retried, with
    backoff, for about half a minute by default (``max_retries=6``, ``backoff_s=0.5``).
    """

    permanent_statuses = frozenset({400, 401, 403, 422})

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        api_key: str | None = None,
        threshold: float = 0.5,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("max_retries", 6)
        self.resolve_timeout_s = 5.0
        endpoint = endpoint or os.environ.get("PHOENIX_COLLECTOR_ENDPOINT") or "http://localhost:6006"
        endpoint = endpoint.rstrip("/").removesuffix("/v1/traces")
        api_key = api_key or os.environ.get("PHOENIX_API_KEY")
        register_secret(api_key)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(endpoint, headers=headers, **kwargs)
        self.threshold = threshold

    def record_requests(self, record: AuditRecord) -> list[tuple[str, dict[str, Any]]]:
        turn, judgement = record.turn, record.judgement
        if not turn.span_id or judgement is None:
            return []
        reason = self.recorded_reason(judgement, record.content_policy)
        out: list[tuple[str, dict[str, Any]]] = []
        scores = judgement.scores()
        for name in SCORE_NAMES:
            score = scores[name]
            if score is None:
                continue
            out.append(
                (
                    "/v1/span_annotations?sync=true",
                    {
                        "span_id": turn.span_id,
                        "name": name,
                        "annotator_kind": "LLM",
                        "identifier": f"ragaudit:{judgement.judge}",
                        "result": {
                            "label": _label(score, self.threshold),
                            "score": score,
                            "explanation": reason,
                        },
                        "metadata": {"judge": judgement.judge, "turn_id": turn.turn_id},
                    },
                )
            )
        if turn.relevant_ids is None and not judgement.document_grades:
            return out
        # Document annotations go on the retrieval spans, whose ids are on the record's turn.
        span_ids = turn.retrieval_span_ids
        if not span_ids:
            self._log.warning("no-span-ids", "ragaudit: PhoenixExporter found no retrieval span for turn %s; "
                              "its document annotations are not sent", turn.turn_id)
            return out
        if turn.relevant_ids is not None:
            retrievals = turn.retrievals or (Retrieval(name="", documents=turn.documents),)
            for index, retrieval in enumerate(retrievals[: len(span_ids)]):
                for position, doc in enumerate(retrieval.documents):
                    label = turn.relevant_ids.get(doc.id, 0)
                    out.append((_DOCUMENTS_PATH, {
                        "span_id": span_ids[index],
                        "document_position": position,
                        "name": "relevance",
                        "annotator_kind": "HUMAN",
                        "result": {"label": "relevant" if label > 0 else "irrelevant", "score": float(label)},
                        "metadata": {"doc_id": doc.id},
                    }))
        if judgement.document_grades:
            out.extend(_graded_document_annotations(turn, judgement, span_ids))
        return out

    def send(self, path: str, bodies: list[dict[str, Any]]) -> int:
        return len(bodies) if self._post(path, {"data": bodies}) else 0


def score_id(trace_id: str, observation_id: str | None, judge: str, name: str) -> str:
    """The Langfuse score id of score *name* by *judge* on one turn: a UUID derived from them, so
    that sending the same score again (a retry after a timeout whose first attempt was stored)
    updates it instead of adding a second one."""
    return str(uuid.uuid5(_SCORE_ID_NAMESPACE, "\x1f".join((trace_id, observation_id or "", judge, name))))


class LangfuseExporter(HttpExporter):
    """Sends each judgement to Langfuse as scores on the turn's trace and observation.

    Three ``NUMERIC`` scores (``faithfulness``, ``context_relevance``, ``answer_relevance``) with
    the judge's reason as comment, plus one score per retrieval metric, keyed by the OTel trace id
    and the turn span's id as observation id — the ids Langfuse gives spans it receives over OTLP.
    Sent to Langfuse's public scores API (``POST /api/public/scores``, Basic auth with the public
    and secret key) from a background thread. A score the judge did not give is not sent; a turn
    whose span was not recorded (sampled out) gets no scores.

    Each score's ``id`` is `score_id` (trace, span, judge, score name), so a retry never
    duplicates a score. Its ``environment`` is *environment*, else that of the record's tracer provider (the
    traces' ``$LANGFUSE_TRACING_ENVIRONMENT`` or resource ``deployment.environment[.name]``), else
    ``$LANGFUSE_TRACING_ENVIRONMENT``; none: Langfuse's ``default``. Keys default to
    ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY``; the host is resolved as
    [`ragaudit.tracing.configure`][ragaudit.tracing.configure] resolves it (*host*, ``LANGFUSE_BASE_URL``,
    ``LANGFUSE_HOST``, ``https://cloud.langfuse.com``).
    """

    def __init__(
        self,
        host: str | None = None,
        *,
        public_key: str | None = None,
        secret_key: str | None = None,
        environment: str | None = None,
        **kwargs: Any,
    ) -> None:
        from .setup import langfuse_host

        host = langfuse_host(host)
        self.environment = environment
        public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
        secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
        if not public_key or not secret_key:
            raise ConfigurationError(
                "LangfuseExporter needs public_key and secret_key (or LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY)"
            )
        register_secret(public_key)
        register_secret(secret_key)
        token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        super().__init__(host, headers={"Authorization": f"Basic {token}"}, **kwargs)

    def __repr__(self) -> str:  # never show the keys
        return f"LangfuseExporter(host={scrub_url(self.endpoint)!r})"

    def _environment(self, record: AuditRecord | SessionRecord) -> str | None:
        if self.environment:
            return self.environment
        found = environment_of(record.tracer_provider)
        if found:
            return found
        return os.environ.get(LANGFUSE_ENVIRONMENT_ENV, "").strip() or None

    def record_requests(self, record: AuditRecord) -> list[tuple[str, dict[str, Any]]]:
        turn, judgement = record.turn, record.judgement
        trace_id = turn.trace_id
        if not trace_id or judgement is None:  # never traced, or sampled out: there is no trace to score
            return []
        base: dict[str, Any] = {"traceId": trace_id, "dataType": "NUMERIC"}
        if turn.span_id:
            base["observationId"] = turn.span_id
        environment = self._environment(record)
        if environment:
            base["environment"] = environment
        reason = self.recorded_reason(judgement, record.content_policy)
        out = []
        scores = judgement.scores()
        for name in SCORE_NAMES:
            score = scores[name]
            if score is not None:
                out.append(
                    (
                        "/api/public/scores",
                        {
                            "id": score_id(trace_id, turn.span_id, judgement.judge, name),
                            **base,
                            "name": name,
                            "value": score,
                            "comment": reason,
                            "metadata": {"judge": judgement.judge},
                        },
                    )
                )
        for metric, value in (record.ground_truth_metrics or {}).items():
            name = f"retrieval.{metric}"
            out.append(("/api/public/scores", {"id": score_id(trace_id, turn.span_id, "ragaudit", name),
                                               **base, "name": name, "value": value}))
        for graded in _graded_scores(record, judgement):
            out.append(("/api/public/scores", {"id": score_id(trace_id, turn.span_id, judgement.judge, graded["name"]),
                                               **base, **graded}))
        return out

    def session_requests(self, record: SessionRecord) -> list[tuple[str, dict[str, Any]]]:
        """Langfuse **session** scores (``sessionId``) of a judged session: ``session.resolved`` (1 yes,
        0.5 partly, 0 no), ``session.groundedness``, ``session.contradictions``, ``session.repeated_turns``;
        a number the judge did not give is not sent. Ids derived as for turns (a retry updates)."""
        j = record.judgement
        verdict = j.verdict
        base: dict[str, Any] = {"sessionId": record.session_id, "dataType": "NUMERIC"}
        environment = self._environment(record)
        if environment:
            base["environment"] = environment
        reason = record.content_policy.reason(verdict.reason, self.max_text_chars)
        metadata = {"judge": verdict.judge, "resolved": j.resolved, "partial": j.partial, "turns": j.turns,
                    **({"missed": dict(j.missed)} if j.partial else {})}
        return [("/api/public/scores", {"id": score_id(f"session:{record.session_id}", None, verdict.judge, name),
                                        **base, "name": name, "value": value, "comment": reason,
                                        "metadata": metadata})
                for name, value in j.scores().items() if value is not None]

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        """Queue the session scores of every judged session (see
        [`session_requests`][ragaudit.tracing.LangfuseExporter.session_requests])."""
        ok = True
        for record in records:
            ok = self._queue(self.session_requests(record), record.content_policy) and ok
        return ExportResult.SUCCESS if ok else ExportResult.FAILURE


def _graded_document_annotations(turn: RagTurn, judgement: Judgement,
                                 span_ids: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """Phoenix document annotations ``graded_relevance`` from the judge's grades (LLM annotator; the
    ground-truth ``relevance`` annotations stay HUMAN). A document the judge did not grade gets none."""
    from ..records import DOCUMENT_GRADES

    grades = {g.doc_id: g for g in judgement.document_grades if g.grade is not None}
    out: list[tuple[str, dict[str, Any]]] = []
    retrievals = turn.retrievals or (Retrieval(name="", documents=turn.documents),)
    for index, retrieval in enumerate(retrievals[: len(span_ids)]):
        for position, doc in enumerate(retrieval.documents):
            grade = grades.get(doc.id)
            if grade is None or grade.grade is None:
                continue
            body = {
                "span_id": span_ids[index],
                "document_position": position,
                "name": "graded_relevance",
                "annotator_kind": "LLM" if grade.method == "llm" else "CODE",
                "result": {"label": DOCUMENT_GRADES[grade.grade], "score": float(grade.grade)},
                "metadata": {"doc_id": doc.id, "judge": judgement.judge, "method": grade.method},
            }
            out.append((_DOCUMENTS_PATH, body))
    return out


def _graded_scores(record: AuditRecord, judgement: Judgement) -> list[dict[str, Any]]:
    """Langfuse scores for the graded retrieval metrics and citation precision/recall (absent ones are not sent)."""
    audit = record.audit
    if audit is None:
        return []
    scores = [{"name": f"retrieval.{name}", "value": value} for name, value in (audit.metrics or {}).items()]
    for name, value in (("citation_precision", audit.citation_precision),
                        ("citation_recall", audit.citation_recall)):
        if value is not None:
            scores.append({"name": name, "value": value})
    for score in scores:
        score["metadata"] = {"judge": judgement.judge}
    return scores
