"""Judgement sinks for trace backends: Phoenix annotations and Langfuse scores.

A sink's ``emit`` only queues; a daemon thread sends batches over HTTP. A backend that is down,
slow, or answers 401/500 never blocks or breaks the :class:`~ragaudit.Auditor`: the batch is retried
with exponential backoff a bounded number of times, then dropped and counted; each kind of failure
is logged once (then rate-limited). ``force_flush``/``shutdown`` follow the OpenTelemetry exporter
convention and return within their timeout.
"""

from __future__ import annotations

import base64
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._log import RateLimitedLog
from .._turn_metrics import turn_metrics
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


class HttpSink:
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
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(max_queue)
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._counts = {"sent": 0, "failed": 0, "dropped": 0, "retries": 0}
        self._log = RateLimitedLog(interval=300.0)
        self._busy = 0
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ragaudit-{type(self).__name__}", daemon=True)
        self._thread.start()

    # -- to implement -----------------------------------------------------------------------

    permanent_statuses: frozenset[int] = frozenset({400, 401, 403, 404, 422})
    """HTTP statuses that are not retried."""

    _recorder: Any = None
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
        """The policy texts go through: the Auditor's once bound; before, one from the environment."""
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
        """Queue what this judgement needs sent. Never blocks; a full queue drops and counts."""
        if self._closed:
            self._count("dropped")
            return
        for item in self.requests(turn, judgement):
            try:
                with self._lock:
                    self._busy += 1
                self._queue.put_nowait(item)
            except queue.Full:
                with self._idle:
                    self._busy -= 1
                    self._counts["dropped"] += 1
                self._log.warning(
                    "queue-full", "ragaudit: %s queue full; judgement dropped", type(self).__name__
                )

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued was sent or given up on; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush within *timeout_s*, then stop the thread. Items still queued are counted as failed."""
        if self._closed:
            return
        self._closed = True
        self.force_flush(timeout_s)
        self._stop.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # the thread sees _stop after its current batch
        self._thread.join(timeout=1.0)
        with self._idle:
            if self._busy:
                self._counts["failed"] += self._busy
                self._busy = 0
        self._client.close()

    def stats(self) -> dict[str, int]:
        """Counts: sent, failed, dropped, retries."""
        with self._lock:
            return dict(self._counts)

    @property
    def errors(self) -> int:
        """Items that never reached the backend (given up on or dropped)."""
        with self._lock:
            return self._counts["failed"] + self._counts["dropped"]

    # -- worker ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self._batch_size:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._stop.set()
                    break
                batch.append(nxt)
            by_path: dict[str, list[dict[str, Any]]] = {}
            for path, body in batch:
                by_path.setdefault(path, []).append(body)
            for path, bodies in by_path.items():
                try:
                    delivered = self.send(path, bodies)
                except Exception as exc:
                    self._log.warning(f"send:{type(exc).__name__}", "ragaudit: %s failed to send: %s",
                                      type(self).__name__, self.content.exception(exc))
                    delivered = 0
                with self._idle:
                    self._counts["sent"] += delivered
                    self._counts["failed"] += len(bodies) - delivered
                    self._busy -= len(bodies)
                    if not self._busy:
                        self._idle.notify_all()

    def _post(self, path: str, body: dict[str, Any]) -> bool:
        delay = self._backoff_s
        for attempt in range(self._max_retries + 1):
            if attempt:
                self._count("retries")
                if self._stop.wait(delay):
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

    def _count(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1


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
            if time.monotonic() >= deadline or self._stop.wait(0.05):
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
        recorder_environment = getattr(self._recorder, "environment", None)
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
        return out
