"""Judgement sinks for trace backends: Phoenix annotations and Langfuse scores.

A sink's ``emit`` only queues; a thread of ragaudit's one batch worker sends batches over HTTP. A
backend that is down, slow, or answers 401/500 never blocks or breaks the :class:`~ragaudit.Auditor`:
the batch is retried with exponential backoff a bounded number of times, then dropped and counted;
each kind of failure is logged once (then rate-limited). ``force_flush``/``shutdown`` follow the OpenTelemetry exporter
convention and return within their timeout.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import _fork
from .._log import RateLimitedLog
from .._sink import BaseJudgementSink
from .._turn_metrics import turn_metrics
from .._worker import BatchWorker
from ..content import ContentPolicy, register_headers, register_secret, register_url, scrub_url
from ..errors import ConfigurationError
from ..records import SCORE_NAMES, Judgement, RagTurn, Retrieval
from .spans import LANGFUSE_ENVIRONMENT_ENV

__all__ = ["HttpSink", "LangfuseSink", "PhoenixSink", "score_id"]

logger = logging.getLogger("ragaudit")

_DOCUMENTS_PATH = "/v1/document_annotations?sync=true"
_SCORE_ID_NAMESPACE = uuid.UUID("3f0c5a52-5b5e-4d0c-9a57-7261676175de")
"""Fixed: the same (trace, span, judge, score) gives the same score id in every process."""

SpanIdResolver = Callable[[str], "Sequence[str] | None"]


class HttpSink(BaseJudgementSink):
    """Base for sinks that POST JSON batches from a background thread.

    Subclasses implement :meth:`requests` (what to send for one judgement: ``(path, body)``
    pairs). ``stats()`` gives ``sent``, ``failed`` (items given up on), ``dropped`` (queue full),
    ``retries``; ``errors`` is ``failed + dropped`` (the Auditor adds it to its ``sink_errors``).
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
        self._log = RateLimitedLog(interval=300.0)
        self._closed = False
        ref = weakref.ref(self)

        def send_batch(batch: list[tuple[str, dict[str, Any]]]) -> int:
            sink = ref()
            return 0 if sink is None else sink._send_batch(batch)

        # The worker holds this sink weakly: a sink nobody references stops its thread.
        self._worker: BatchWorker[tuple[str, dict[str, Any]]] = BatchWorker(
            type(self).__name__, send_batch, max_queue=max_queue, max_batch=batch_size)
        weakref.finalize(self, _release, self._worker, self._client)

    # -- to implement -----------------------------------------------------------------------

    permanent_statuses: frozenset[int] = frozenset({400, 401, 403, 404, 422})
    """HTTP statuses that are not retried."""

    _content: ContentPolicy | None = None
    max_text_chars: int = 8192
    """Texts sent (the judge's reason) are cut to this many characters."""

    def bind_recorder(self, recorder: Any) -> None:
        """Called by the Auditor with its span recorder: texts are sent the way it records them,
        through the Auditor's :class:`~ragaudit.content.ContentPolicy` (``recorder.content``)."""
        self._recorder = recorder
        policy = getattr(recorder, "content", None)
        if isinstance(policy, ContentPolicy):
            self._content = policy

    @property
    def content(self) -> ContentPolicy:
        """The policy texts go through: during :meth:`emit`, that turn's (:attr:`recorder`); else the
        Auditor's once bound; before, one from the environment."""
        current = self.recorder
        if current is not self._recorder:
            turn_policy = getattr(current, "content", None)
            if isinstance(turn_policy, ContentPolicy):
                return turn_policy
        policy = self._content
        if policy is None:
            policy = self._content = ContentPolicy()
        return policy

    def recorded_reason(self, judgement: Judgement) -> str | None:
        """The judge's reason as the policy lets it be recorded: None when it withholds reasons (content
        capture off), else scrubbed, redacted and cut to :attr:`max_text_chars`."""
        return self.content.reason(judgement.reason, self.max_text_chars)

    def __repr__(self) -> str:  # never show a credential of the URL
        return f"{type(self).__name__}({scrub_url(self.endpoint)!r})"

    def requests(self, turn: RagTurn, judgement: Judgement) -> list[tuple[str, dict[str, Any]]]:
        """The ``(path, json_body)`` items to send for one judgement."""
        raise NotImplementedError

    def send(self, path: str, bodies: list[dict[str, Any]]) -> int:
        """POST a batch of items for *path*; returns how many were delivered (default: one POST each)."""
        return sum(self._post(path, body) for body in bodies)

    # -- JudgementSink ----------------------------------------------------------------------

    def emit(self, turn: RagTurn, judgement: Judgement) -> None:
        """Queue what this judgement needs sent. Never blocks; a full queue (or a shut-down sink)
        drops and counts."""
        for item in self.requests(turn, judgement):
            if not self._worker.put(item):
                self._log.warning(
                    "queue-full", "ragaudit: %s queue full or shut down; judgement dropped", type(self).__name__
                )

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued was sent or given up on; False on timeout."""
        return self._worker.flush(timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush within *timeout_s*, then stop. Never raises. Items not sent by then are counted as
        failed once (a request still running then is not counted again when it returns)."""
        if self._closed:
            return
        self._closed = True
        self._worker.shutdown(timeout_s)
        if not self._worker.started:
            self._client.close()
        # else a request may still be running on the worker's daemon thread: the client is
        # closed when the sink is collected (or the process ends).

    def stats(self) -> dict[str, int]:
        """Counts: sent, failed (given up on, or still unsent at shutdown), dropped (queue full),
        retries."""
        worker = self._worker.stats()
        with self._lock:
            retries = self._retries
        return {"sent": worker["handled"], "failed": worker["failed"] + worker["abandoned"],
                "dropped": worker["dropped"], "retries": retries}

    @property
    def errors(self) -> int:
        """Items that never reached the backend (given up on or dropped)."""
        stats = self.stats()
        return stats["failed"] + stats["dropped"]

    # -- worker ------------------------------------------------------------------------------

    def _send_batch(self, batch: list[tuple[str, dict[str, Any]]]) -> int:
        """The worker's handler: send a batch grouped by path; returns how many items were delivered."""
        by_path: dict[str, list[dict[str, Any]]] = {}
        for path, body in batch:
            by_path.setdefault(path, []).append(body)
        delivered = 0
        for path, bodies in by_path.items():
            try:
                delivered += self.send(path, bodies)
            except Exception as exc:
                self._log.warning(f"send:{type(exc).__name__}", "ragaudit: %s failed to send: %s",
                                  type(self).__name__, self.content.exception(exc))
        return delivered

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
                    self.content.exception(exc),
                )
                continue
            if response.status_code < 300:
                return True
            self._log.warning(
                f"http:{response.status_code}",
                "ragaudit: %s got HTTP %d from %s%s: %s",
                type(self).__name__,
                response.status_code,
                scrub_url(self.endpoint),
                path,
                # a backend's error body may echo what it was sent (a key, the reason): it follows
                # content capture like any other text
                self.content.body(response.text, status=response.status_code),
            )
            if response.status_code in self.permanent_statuses:
                return False  # retrying will not help
        return False



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


class PhoenixSink(HttpSink):
    """Posts each judgement to Phoenix as span annotations on the turn span.

    One annotation per score (annotator kind ``LLM``, label ``pass``/``fail`` at *threshold*,
    score, the judge's reason as explanation) through ``POST /v1/span_annotations``, so Phoenix's
    own evaluation views show them. A score the judge did not give is not sent (never 0). When the
    turn has ground-truth relevance labels and the retrieval span ids are known (the Auditor binds
    the sink to its span recorder), each retrieved document also gets a ``relevance`` document
    annotation (``POST /v1/document_annotations``).

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
        self._resolve_retrieval_spans: SpanIdResolver | None = None

    def bind_recorder(self, recorder: Any) -> None:
        """Called by the Auditor: lets the sink find the retrieval span ids of a turn, and send the
        reason the way the recorder records texts."""
        super().bind_recorder(recorder)
        self._resolve_retrieval_spans = getattr(recorder, "retrieval_span_ids", None)

    def requests(self, turn: RagTurn, judgement: Judgement) -> list[tuple[str, dict[str, Any]]]:
        if not turn.span_id:
            return []
        reason = self.recorded_reason(judgement)
        out: list[tuple[str, dict[str, Any]]] = []
        for name in SCORE_NAMES:
            score = getattr(judgement, name)
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
        if turn.relevant_ids is not None and self._resolve_retrieval_spans is not None:
            # The retrieval span ids may not be known yet (the turn span can end after the judge
            # returns), so they are looked up in send(), on the sink's thread.
            retrievals = turn.retrievals or (Retrieval(name="", documents=turn.documents),)
            for index, retrieval in enumerate(retrievals):
                for position, doc in enumerate(retrieval.documents):
                    label = turn.relevant_ids.get(doc.id, 0)
                    body = {
                        "span_id": None,
                        "document_position": position,
                        "name": "relevance",
                        "annotator_kind": "HUMAN",
                        "result": {"label": "relevant" if label > 0 else "irrelevant", "score": float(label)},
                        "metadata": {"doc_id": doc.id},
                    }
                    out.append((_DOCUMENTS_PATH, {"body": body, "turn_id": turn.turn_id, "retrieval": index}))
        if judgement.document_grades and self._resolve_retrieval_spans is not None:
            out.extend(_judged_document_annotations(turn, judgement))
        return out

    def send(self, path: str, bodies: list[dict[str, Any]]) -> int:
        if path == _DOCUMENTS_PATH:
            bodies = [body for body in map(self._resolve_document, bodies) if body is not None]
            if not bodies:
                return 0
        return len(bodies) if self._post(path, {"data": bodies}) else 0

    def _resolve_document(self, item: dict[str, Any]) -> dict[str, Any] | None:
        resolve = self._resolve_retrieval_spans
        deadline = time.monotonic() + self.resolve_timeout_s
        while resolve is not None:
            span_ids = resolve(item["turn_id"])
            if span_ids is not None:
                if item["retrieval"] < len(span_ids):
                    return {**item["body"], "span_id": span_ids[item["retrieval"]]}
                return None
            if time.monotonic() >= deadline or self._worker.stopping.wait(0.05):
                break
        self._log.warning("no-span-ids", "ragaudit: PhoenixSink found no retrieval span for turn %s; "
                       "its document annotations are dropped", item["turn_id"])
        return None


def score_id(trace_id: str, observation_id: str | None, judge: str, name: str) -> str:
    """The Langfuse score id of score *name* by *judge* on one turn: a UUID derived from them, so
    that sending the same score again (a retry after a timeout whose first attempt was stored)
    updates it instead of adding a second one."""
    return str(uuid.uuid5(_SCORE_ID_NAMESPACE, "\x1f".join((trace_id, observation_id or "", judge, name))))


class LangfuseSink(HttpSink):
    """Sends each judgement to Langfuse as scores on the turn's trace and observation.

    Three ``NUMERIC`` scores (``faithfulness``, ``context_relevance``, ``answer_relevance``) with
    the judge's reason as comment, plus one score per retrieval metric, keyed by the OTel trace id
    and the turn span's id as observation id — the ids Langfuse gives spans it receives over OTLP.
    Sent to Langfuse's public scores API (``POST /api/public/scores``, Basic auth with the public
    and secret key) from a background thread. A score the judge did not give is not sent; a turn
    whose span was not recorded (sampled out) gets no scores.

    Each score's ``id`` is :func:`score_id` (trace, span, judge, score name), so a retry never
    duplicates a score. Its ``environment`` is *environment*, else the bound span recorder's (the
    traces' ``$LANGFUSE_TRACING_ENVIRONMENT`` or resource ``deployment.environment[.name]``), else
    ``$LANGFUSE_TRACING_ENVIRONMENT``; none: Langfuse's ``default``. Keys default to
    ``LANGFUSE_PUBLIC_KEY`` / ``LANGFUSE_SECRET_KEY``; the host is resolved as
    :func:`ragaudit.tracing.configure` resolves it (*host*, ``LANGFUSE_BASE_URL``,
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
                "LangfuseSink needs public_key and secret_key (or LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY)"
            )
        register_secret(public_key)
        register_secret(secret_key)
        token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        super().__init__(host, headers={"Authorization": f"Basic {token}"}, **kwargs)

    def __repr__(self) -> str:  # never show the keys
        return f"LangfuseSink(host={scrub_url(self.endpoint)!r})"

    def _environment(self) -> str | None:
        if self.environment:
            return self.environment
        recorder_environment = getattr(self.recorder, "environment", None)
        if isinstance(recorder_environment, str) and recorder_environment:
            return recorder_environment
        return os.environ.get(LANGFUSE_ENVIRONMENT_ENV, "").strip() or None

    def requests(self, turn: RagTurn, judgement: Judgement) -> list[tuple[str, dict[str, Any]]]:
        trace_id = turn.trace_id
        if not trace_id:  # never traced, or sampled out: there is no trace to score
            return []
        base: dict[str, Any] = {"traceId": trace_id, "dataType": "NUMERIC"}
        if turn.span_id:
            base["observationId"] = turn.span_id
        environment = self._environment()
        if environment:
            base["environment"] = environment
        reason = self.recorded_reason(judgement)
        out = []
        for name in SCORE_NAMES:
            score = getattr(judgement, name)
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
        for metric, value in (turn_metrics(turn) or {}).items():
            name = f"retrieval.{metric}"
            out.append(("/api/public/scores", {"id": score_id(trace_id, turn.span_id, "ragaudit", name),
                                               **base, "name": name, "value": value}))
        for score in _judged_scores(turn, judgement):
            out.append(("/api/public/scores", {"id": score_id(trace_id, turn.span_id, judgement.judge, score["name"]),
                                               **base, **score}))
        return out


def _judged_document_annotations(turn: RagTurn, judgement: Judgement) -> list[tuple[str, dict[str, Any]]]:
    """Phoenix document annotations ``judged_relevance`` from the judge's grades (LLM annotator; the
    ground-truth ``relevance`` annotations stay HUMAN). A document the judge did not grade gets none."""
    from ..records import DOCUMENT_GRADES

    grades = {g.doc_id: g for g in judgement.document_grades if g.grade is not None}
    out: list[tuple[str, dict[str, Any]]] = []
    retrievals = turn.retrievals or (Retrieval(name="", documents=turn.documents),)
    for index, retrieval in enumerate(retrievals):
        for position, doc in enumerate(retrieval.documents):
            grade = grades.get(doc.id)
            if grade is None or grade.grade is None:
                continue
            body = {
                "span_id": None,
                "document_position": position,
                "name": "judged_relevance",
                "annotator_kind": "LLM" if grade.method == "llm" else "CODE",
                "result": {"label": DOCUMENT_GRADES[grade.grade], "score": float(grade.grade)},
                "metadata": {"doc_id": doc.id, "judge": judgement.judge, "method": grade.method},
            }
            out.append((_DOCUMENTS_PATH, {"body": body, "turn_id": turn.turn_id, "retrieval": index}))
    return out


def _judged_scores(turn: RagTurn, judgement: Judgement) -> list[dict[str, Any]]:
    """Langfuse scores for the judged retrieval metrics and citation precision/recall (absent ones are not sent)."""
    if not judgement.sentences and not judgement.document_grades:
        return []
    from ..judged import audit_turn

    audit = audit_turn(turn, judgement)
    scores = [{"name": f"retrieval.{name}", "value": value} for name, value in (audit.metrics or {}).items()]
    for name, value in (("citation_precision", audit.citation_precision),
                        ("citation_recall", audit.citation_recall)):
        if value is not None:
            scores.append({"name": name, "value": value})
    for score in scores:
        score["metadata"] = {"judge": judgement.judge}
    return scores
