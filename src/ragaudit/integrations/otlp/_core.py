"""The [`Worker`][ragaudit.integrations.otlp.Worker]: OTLP traces in, turns through the Auditor, judgements out as
OTLP."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ... import _fork
from ..._export import Exporter
from ..._numbers import check_number
from ..._worker import BatchWorker, run_jobs
from ...errors import ConfigurationError
from ...judges.base import RagJudge
from ...records import UNSUBMITTED_REASONS, Judgement, RagTurn
from .._assembler import ClosedTurn
from .._source import TurnSource
from ._buffer import PendingTrace, TraceBuffer
from ._decode import SpanData, decode_traces
from ._output import WORKER_SERVICE, Outputs, build_outputs
from ._security import BearerToken, ConnectionLimits, ServerTLS
from ._turns import WorkerTurn, turns_of

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import TracerProvider

    from ...auditor import Auditor, CostControl, Sessions
    from ._server import HttpServer

__all__ = ["IngestOutcome", "Worker"]

logger = logging.getLogger("ragaudit")

_COUNTERS = (
    "requests", "requests_bad", "requests_unsupported_media_type", "requests_refused_full",
    "requests_refused_stopping", "requests_unauthorized", "requests_too_large", "requests_timed_out",
    "connections_closed_header_timeout", "connections_evicted", "connections_refused", "spans_received",
    "spans_rejected", "spans_refused", "spans_own",
    "traces_assembled", "traces_own", "traces_already_judged", "traces_no_model_call", "turns_found",
    "turns_submitted", "turns_judged", "turns_judge_failed",
    *(f"turns_unjudged_{reason}" for reason in UNSUBMITTED_REASONS),  # the assembler's reasons, one list
    "turns_not_submitted", "assembly_errors",
)


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What [`Worker.ingest`][ragaudit.integrations.otlp.Worker.ingest] did with one request: spans *accepted*,
    *rejected* (invalid ids: the response's ``partial_success``), or the whole request *refused* (full: answer 503)."""

    accepted: int
    rejected: int = 0
    refused: bool = False
    message: str = ""


class Worker(TurnSource):
    """Judges the RAG turns of any app that sends OTLP traces (``ragaudit worker``).

    Receives OTLP/HTTP traces on *host*:*port* (``port=0``: a free one, see
    [`port`][ragaudit.integrations.otlp.Worker.port]), waits for each trace to be ready (root span received and
    *quiet_s* without a new span, at most *max_wait_s* after its first), reads its spans by convention into turns, and
    submits them to an [`Auditor`][ragaudit.Auditor] (sampling, judging, budgets), which writes each judgement as a
    ``ragaudit.judge`` span in the evaluated trace plus ``gen_ai.evaluation.result`` log records
    (`EvaluationLogExporter`) to *otlp_endpoint* (None: the
    ``OTEL_EXPORTER_OTLP_*`` variables).

    Bounds: at most *max_traces* traces wait (the oldest is dropped, counted), at most *max_spans*
    spans and *max_inflight_bytes* bytes are held: the spans buffered (each counted as its share of
    its request's bytes plus the Python objects of its attributes) and the request bodies being
    read. A request past either is refused with 503 and ``Retry-After`` and the sender retries, as
    with the Collector's ``memory_limiter``. At most *max_queue* turns wait for the judge (past that,
    requests are refused the same way). A request body is at most *max_request_bytes* once
    decompressed (413).
    ``stats()`` counts every span and turn; ``/stats`` serves it as JSON and the same counters go
    out as OTel metrics.

    As a network service: *auth_token* (a [`BearerToken`][ragaudit.integrations.otlp.BearerToken] or the token itself;
    None: no check) is required of every sender, OTLP/HTTP and gRPC, and of ``/stats`` (``/healthz`` and ``/readyz``
    stay open for probes); *tls* ([`ServerTLS`][ragaudit.integrations.otlp.ServerTLS]) serves both over TLS; *limits*
    ([`ConnectionLimits`][ragaudit.integrations.otlp.ConnectionLimits]) bounds the time of headers and bodies and the
    open connections.

    *judge*: any [`RagJudge`][ragaudit.RagJudge] (None: the default, ``ChatRagJudge`` when
    ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` is set, else ``LexicalJudge``). *auditor*: an Auditor
    of your own instead (then *judge*, *sample_rate*, *exporters*, *audit_log* and the output
    endpoint are its business). *cost*: the Auditor's cost control ([`CostControl`][ragaudit.CostControl]:
    budgets, rate, ...; ``CostControl(store="redis://...")`` shares the budget and the rate with every
    worker and app that names the same store). *grpc_port*: also serve OTLP/gRPC there (the ``worker-grpc``
    extra). *clock*: monotonic seconds (tests step it by hand and call
    [`tick`][ragaudit.integrations.otlp.Worker.tick]).

    *sessions*: judge conversations as a whole (``True`` or a
    [`Sessions`][ragaudit.Sessions]; True uses *clock* as the session clock). The turns of a
    session arrive in many traces; one worker sees a whole session only when the Collector routes by
    the session attribute (``load_balancing`` with ``routing_key: attributes``, see the scale guide);
    otherwise each worker judges the part it saw, flagged partial.

    The worker is a [`TurnSource`][ragaudit.integrations.TurnSource]: each turn of a trace is closed the way an
    in-process source closes it ([`close_turn`][ragaudit.integrations.TurnSource.close_turn], on the worker's own
    thread, with no span of its own: the trace has them), and every finished turn ends as an `AuditRecord`, judged
    or not (``turns_unjudged_<reason>``).
    """

    def __init__(
        self,
        judge: RagJudge | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        otlp_endpoint: str | None = None,
        otlp_headers: Mapping[str, str] | None = None,
        quiet_s: float = 2.0,
        max_wait_s: float = 30.0,
        max_traces: int = 10_000,
        max_spans: int = 1_000_000,
        max_queue: int = 10_000,
        max_request_bytes: int = 32 * 1024 * 1024,
        max_inflight_bytes: int = 256 * 1024 * 1024,
        sample_rate: float = 1.0,
        timeout_s: float = 60.0,
        audit_log: str | None = None,
        exporters: Iterable[Exporter] = (),
        cost: CostControl | None = None,
        auditor: Auditor | None = None,
        shutdown_timeout_s: float = 30.0,
        metrics_interval_s: float = 10.0,
        tick_s: float = 0.1,
        grpc_port: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sessions: Sessions | bool | None = None,
        auth_token: BearerToken | str | None = None,
        tls: ServerTLS | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        _check_settings(port, grpc_port, max_spans, max_request_bytes, max_inflight_bytes, tls,
                        shutdown_timeout_s=shutdown_timeout_s, metrics_interval_s=metrics_interval_s, tick_s=tick_s)
        if auditor is not None and cost is not None:
            raise ConfigurationError("cost is for the Auditor the worker makes; with auditor=..., give it to that "
                                     "Auditor")
        self._serve(host, port, grpc_port, auth_token, tls, limits, max_request_bytes, max_inflight_bytes)
        self._clock = clock
        self._buffer = TraceBuffer(quiet_s=quiet_s, max_wait_s=max_wait_s, max_traces=max_traces, clock=clock)
        self.max_spans = max_spans
        self.max_queue = max_queue
        self.shutdown_timeout_s = float(shutdown_timeout_s)
        self.tick_s = tick_s
        self.retry_after_s = max(1, round(quiet_s))
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._lock = _fork.lock()
        self._judge_latency_s = 0.0
        self._latency: Histogram | None = None  # the judge-latency histogram, with the OTLP outputs
        self._ready_delay_s: list[float] = []
        self._accepting = True
        self._outputs: Outputs | None = None
        if auditor is None:
            self._outputs = build_outputs(otlp_endpoint, otlp_headers, metrics_interval_s=metrics_interval_s)
            auditor = self._make_auditor(judge, sample_rate, timeout_s, audit_log, exporters, sessions, cost)
        self.auditor = auditor
        if self._outputs is not None:
            self._register_metrics(self._outputs.meter_provider)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: BatchWorker[Callable[[], None]] | None = None
        self._started = threading.Event()
        self._stopped = threading.Event()
        self._start_error: BaseException | None = None
        TurnSource.__init__(self, auditor, None)  # the source base: closing, memory, force_flush

    # -- construction helpers ---------------------------------------------------------------------

    def __repr__(self) -> str:  # never the token
        return f"Worker(url={self.url!r}, auth={'bearer' if self.auth_token else 'none'}, tls={self.tls is not None})"

    def _serve(self, host: str, port: int, grpc_port: int | None, auth_token: BearerToken | str | None,
               tls: ServerTLS | None, limits: ConnectionLimits | None, max_request_bytes: int,
               max_inflight_bytes: int) -> None:
        """The service's transport: where it listens, who may send, its connection and byte bounds."""
        self.host = host
        self._port = port
        self._grpc_port = grpc_port
        self.auth_token = BearerToken(auth_token) if isinstance(auth_token, str) else auth_token
        self.tls, self.max_inflight_bytes, self.max_request_bytes = tls, max_inflight_bytes, max_request_bytes
        self.limits = limits if limits is not None else ConnectionLimits()
        self._reading_bytes = 0  # request bodies being read (their reservations; the event loop's)
        self._http: HttpServer | None = None

    def _make_auditor(self, judge: RagJudge | None, sample_rate: float, timeout_s: float, audit_log: str | None,
                      exporters: Iterable[Exporter], sessions: Sessions | bool | None = None,
                      cost: CostControl | None = None) -> Auditor:
        """The Auditor the worker judges with (True *sessions*: a `Sessions` on the worker's clock)."""
        from ...auditor import Auditor, Limits, Sessions
        from ...tracing.evaluation_logs import EvaluationLogExporter

        assert self._outputs is not None
        sessions = Sessions(clock=self._clock) if sessions is True else sessions
        logs = EvaluationLogExporter(self._outputs.logger_provider)
        # The worker's process is there to judge: no share of its CPU is kept for a host (max_cpu_share=None).
        limits = Limits(max_queue=self.max_queue, timeout_s=timeout_s, exit_timeout_s=self.shutdown_timeout_s,
                        max_cpu_share=None)
        provider = cast("TracerProvider", self._outputs.tracer_provider)  # one by what it does (get_tracer, flush)
        return Auditor(judge, tracer_provider=provider, exporters=[logs, *exporters],
                       meter_provider=self._outputs.meter_provider, audit_log=audit_log, sample_rate=sample_rate,
                       limits=limits, cost=cost, sessions=sessions, on_judgement=self._judged, judge_trace="turn")

    def _register_metrics(self, meter_provider: MeterProvider) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        meter = meter_provider.get_meter("ragaudit.worker")

        def observe(key: str) -> Callable[[CallbackOptions], list[Observation]]:
            return lambda options: [Observation(self.stats()[key])]

        for key in ("spans_received", "spans_rejected", "spans_refused", "spans_own", "late_spans",
                    "traces_assembled", "turns_found", "turns_submitted", "turns_judged", "turns_judge_failed",
                    "dropped_evicted_traces", "dropped_evicted_spans", "judge_dropped", "requests_unauthorized",
                    "requests_too_large", "requests_bad", "connections_closed_header_timeout", "connections_evicted"):
            meter.create_observable_counter(f"ragaudit.worker.{key}", callbacks=[observe(key)])
        for key in ("traces_in_flight", "spans_in_flight", "judge_pending", "inflight_bytes", "connections_open"):
            meter.create_observable_gauge(f"ragaudit.worker.{key}", callbacks=[observe(key)])
        self._latency = meter.create_histogram("ragaudit.worker.judge_latency", unit="s")

    def prometheus_text(self) -> tuple[bytes, str] | None:
        """``/metrics``: the worker's metrics in Prometheus's text format (None: no exporter, or an
        Auditor of your own, whose metrics are its business)."""
        return self._outputs.prometheus_text() if self._outputs is not None else None

    # -- counting -----------------------------------------------------------------------------------

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _judged(self, turn: RagTurn, judgement: Judgement) -> None:
        latency = judgement.latency_s or 0.0
        with self._lock:
            self._counts["turns_judged" if judgement.error is None else "turns_judge_failed"] += 1
            self._judge_latency_s += latency
        if self._latency is not None:
            self._latency.record(latency)

    def stats(self) -> dict[str, Any]:
        """Every counter (a consistent snapshot of the worker's own; the auditor's beside it)."""
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            judged = out["turns_judged"] + out["turns_judge_failed"]
            out["judge_latency_mean_s"] = self._judge_latency_s / judged if judged else None
            delays = sorted(self._ready_delay_s)
        buffer = self._buffer
        out.update(late_spans=buffer.late_spans, dropped_evicted_traces=buffer.evicted_traces,
                   dropped_evicted_spans=buffer.evicted_spans, traces_in_flight=len(buffer),
                   spans_in_flight=buffer.spans_buffered)
        out["ready_delay_p50_s"] = delays[len(delays) // 2] if delays else None
        out["ready_delay_max_s"] = delays[-1] if delays else None
        try:
            auditor = self.auditor.stats()
        except Exception:
            auditor = {}
        out["judge_pending"] = auditor.get("pending", 0)
        out["judge_dropped"] = auditor.get("dropped", 0)
        out["judge_sampled_out"] = auditor.get("sampled_out", 0)
        out["auditor"] = auditor
        out["accepting"] = self._accepting
        out["inflight_bytes"] = buffer.bytes_buffered + self._reading_bytes
        out["max_inflight_bytes"] = self.max_inflight_bytes
        out["connections_open"] = self._http.open_connections if self._http is not None else 0
        return out

    # -- ingest and readiness (the event loop's thread) ---------------------------------------------

    @property
    def accepting(self) -> bool:
        return self._accepting

    def ready(self) -> tuple[bool, str]:
        """Whether to take traffic (``/readyz``) and why not."""
        if not self._accepting:
            return False, "stopping"
        if self._buffer.spans_buffered >= self.max_spans:
            return False, "span buffer full"
        if self._buffer.bytes_buffered + self._reading_bytes >= self.max_inflight_bytes:
            return False, "in-flight memory full"
        if self._judge_backlog():
            return False, "judge queue full"
        return True, "ok"

    def _judge_backlog(self) -> bool:
        try:
            return int(self.auditor.stats().get("pending", 0)) >= self.max_queue
        except Exception:
            return False

    def ingest(self, body: bytes, *, json_body: bool = False) -> IngestOutcome:
        """Decode one OTLP request body and buffer its spans. Raises `DecodeError`."""
        spans, rejected = self.decode(body, json_body=json_body)
        return self.add_spans(spans, rejected)

    def decode(self, body: bytes | bytearray, *, json_body: bool = False) -> tuple[list[SpanData], int]:
        """``(spans, rejected)`` of one OTLP request body (counted in ``requests``). Raises `DecodeError`."""
        self.count("requests")
        return decode_traces(body, json_body)

    def reserve_bytes(self, n: int) -> bool:
        """Hold *n* bytes of a request body being read in the in-flight budget; False when it is full."""
        if self._buffer.bytes_buffered + self._reading_bytes + n > self.max_inflight_bytes:
            return False
        self._reading_bytes += n
        return True

    def release_bytes(self, n: int) -> None:
        self._reading_bytes -= n

    def add_spans(self, spans: list[SpanData], rejected: int = 0) -> IngestOutcome:
        """Buffer decoded *spans* (or refuse them all when full; see the class docstring)."""
        full = None
        held = self._buffer.bytes_buffered + self._reading_bytes
        if self._buffer.spans_buffered + len(spans) > self.max_spans:
            full = f"span buffer full ({self.max_spans} spans in flight)"
        elif held + sum(span.size for span in spans) > self.max_inflight_bytes:
            full = f"in-flight memory full ({self.max_inflight_bytes} bytes)"
        elif self._judge_backlog():
            full = f"judge queue full ({self.max_queue} turns waiting)"
        if full is not None:
            with self._lock:
                self._counts["requests_refused_full"] += 1
                self._counts["spans_refused"] += len(spans)
            return IngestOutcome(0, rejected, refused=True, message=full)
        with self._lock:
            self._counts["spans_received"] += len(spans)
            self._counts["spans_rejected"] += rejected
        self._buffer.add(spans, self._clock())
        message = f"{rejected} span(s) with invalid trace or span ids" if rejected else ""
        return IngestOutcome(len(spans), rejected, message=message)

    def tick(self, now: float | None = None) -> int:
        """Assemble and submit every trace ready at *now*; returns how many."""
        now = self._clock() if now is None else now
        ready = self._buffer.due(now)
        for pending in ready:
            self._assemble(pending, now)
        return len(ready)

    def _assemble(self, pending: PendingTrace, now: float) -> None:
        try:
            found = turns_of(pending, WORKER_SERVICE)
        except Exception as exc:
            self.count("assembly_errors")
            logger.warning("ragaudit worker: could not read trace %s: %s", pending.trace_id, exc)
            return
        with self._lock:
            self._counts["traces_assembled"] += 1
            self._counts["spans_own"] += found.own_spans
            if found.skipped is not None:
                self._counts[f"traces_{found.skipped}"] += 1
            if pending.root_at is not None:
                self._ready_delay_s.append(now - pending.root_at)
                if len(self._ready_delay_s) > 10_000:
                    del self._ready_delay_s[:5_000]
        for turn in found.turns:
            self._submit(turn, pending.trace_id)

    def _submit(self, found: WorkerTurn, trace_id: str) -> None:
        from ...tracing.spans import TurnHandle

        self.count("turns_found")
        self.closed_turns += 1
        self.close_turn(found.steps, closed_at=None, root_id=found.root_span_id, framework=found.convention,
                        handle=TurnHandle(trace_id, found.root_span_id))

    def turn_closed(self, closed: ClosedTurn) -> None:
        """Count the turn: ``turns_unjudged_<reason>`` (recorded with its reason, as in-process), else
        ``turns_submitted`` or ``turns_not_submitted``."""
        if closed.unjudged is not None:
            self.count(f"turns_unjudged_{closed.unjudged}")
        else:
            self.count("turns_submitted" if closed.accepted else "turns_not_submitted")

    def drain(self) -> int:
        """Assemble and submit every trace still waiting, ready or not (shutdown)."""
        pending = self._buffer.drain()
        now = self._clock()
        for trace in pending:
            self._assemble(trace, now)
        return len(pending)

    # -- serving ------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the real one once started with ``port=0``)."""
        return self._port

    @property
    def grpc_port(self) -> int | None:
        """The OTLP/gRPC port (the real one once started with ``grpc_port=0``), None: no gRPC."""
        return self._grpc_port

    @property
    def url(self) -> str:
        """``http(s)://host:port`` (what a sender's ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self._port}"

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Serve until [`stop`][ragaudit.integrations.otlp.Worker.stop] (or a signal in
        [`run`][ragaudit.integrations.otlp.Worker.run]), then shut down gracefully."""
        from ._server import HttpServer

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        http = HttpServer(self)
        self._port = await http.start(self.host, self._port)
        self._http = http
        grpc_server = None
        if self._grpc_port is not None:
            from ._grpc import start_grpc

            try:
                grpc_server, self._grpc_port = await start_grpc(self, self.host, self._grpc_port)
            except BaseException:
                await http.stop()
                raise
        # DEBUG: `ragaudit worker` prints its own start line (addresses, judge, outputs, sampling).
        logger.debug("ragaudit worker: listening on %s%s%s", self.url,
                    f" (OTLP/gRPC on port {self._grpc_port})" if grpc_server is not None else "",
                    "; a bearer token is required" if self.auth_token is not None else "")
        if ready is not None:
            ready()
        ticker = asyncio.ensure_future(self._tick_forever())
        try:
            await self._stop.wait()
        finally:
            deadline = time.monotonic() + self.shutdown_timeout_s
            self._accepting = False
            if grpc_server is not None:
                await grpc_server.stop(min(5.0, self.shutdown_timeout_s))
            await http.stop()
            ticker.cancel()
            self.drain()
            await asyncio.get_running_loop().run_in_executor(None, self._finish, deadline)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                self.tick()
            except Exception as exc:  # never stop ticking: a stuck buffer would hold every trace
                logger.warning("ragaudit worker: tick failed: %s", exc)

    def _finish(self, deadline: float) -> None:
        remaining = max(0.0, deadline - time.monotonic())
        self.auditor.shutdown(remaining)
        if self._outputs is not None:
            self._outputs.force_flush(max(0.5, deadline - time.monotonic()))
            self._outputs.shutdown()

    def run(self, ready: Callable[[], None] | None = None) -> None:
        """Serve in this thread until SIGTERM or SIGINT (the ``ragaudit worker`` command); *ready* is
        called once listening (the real ports known)."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._request_stop)
            await self.serve(ready)

        asyncio.run(main())

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def start(self, timeout_s: float = 30.0) -> Worker:
        """Serve on a thread of its own; returns once listening. Raises what failed to start it."""
        if self._server is not None:
            raise ConfigurationError("this Worker was started already")

        # The server is one job on a one-thread BatchWorker of its own (every background thread of
        # ragaudit is a BatchWorker's); asyncio.run gives it a loop that is closed when it ends.
        server = self._server = BatchWorker("otlp-worker", run_jobs, max_queue=1, max_batch=1)

        def target() -> None:
            try:
                asyncio.run(self.serve(ready=self._started.set))
            except BaseException as exc:
                self._start_error = exc
                self._started.set()
            finally:
                # From its own thread: ends the thread once this job returns (the job is the
                # one "abandoned" in the worker's private counts; nothing is lost).
                server.shutdown(0.0)
                self._stopped.set()

        if not server.put(target):
            raise ConfigurationError("the worker could not start a thread (interpreter shutting down?)")
        if not self._started.wait(timeout_s):
            raise ConfigurationError(f"the worker did not start listening within {timeout_s}s")
        if self._start_error is not None:
            raise ConfigurationError(f"the worker could not start: {self._start_error}") from self._start_error
        return self

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop accepting, judge (or count) what is in flight, flush, within *timeout_s* (default
        *shutdown_timeout_s*). True when it all ended in time."""
        if self._loop is None or self._server is None or self._stopped.is_set():
            return True
        if timeout_s is not None:
            self.shutdown_timeout_s = float(timeout_s)
        try:
            self._loop.call_soon_threadsafe(self._request_stop)
        except RuntimeError:  # the loop ended meanwhile
            return True
        self._stopped.wait(self.shutdown_timeout_s + 5.0)
        return self._stopped.is_set()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_settings(port: object, grpc_port: object, max_spans: object, max_request_bytes: int,
                    max_inflight_bytes: object, tls: object, **seconds: float) -> None:
    """The Worker's own settings (its Auditor's are checked by their values): a ConfigurationError names the one."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigurationError(f"port must be an int in [0, 65535], got {port!r}")
    for name, value in (("max_spans", max_spans), ("max_request_bytes", max_request_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    check_number("shutdown_timeout_s", seconds["shutdown_timeout_s"], 0)  # a NaN here once judged nothing at SIGTERM
    check_number("metrics_interval_s", seconds["metrics_interval_s"], 0, low_open=True)
    check_number("tick_s", seconds["tick_s"], 0, low_open=True)
    if grpc_port is not None and (isinstance(grpc_port, bool) or not isinstance(grpc_port, int)
                                  or not 0 <= grpc_port <= 65535):
        raise ConfigurationError(f"grpc_port must be None or an int in [0, 65535], got {grpc_port!r}")
    _check_service(max_request_bytes, max_inflight_bytes, tls)


def _check_service(max_request_bytes: int, max_inflight_bytes: object, tls: object) -> None:
    if tls is not None:
        if not isinstance(tls, ServerTLS):
            raise ConfigurationError(f"tls must be a ServerTLS or None, got {type(tls).__name__}")
        tls.ssl_context()  # files that will not load are said now, not when the server starts
    if isinstance(max_inflight_bytes, bool) or not isinstance(max_inflight_bytes, int) or max_inflight_bytes < 1:
        raise ConfigurationError(f"max_inflight_bytes must be an int >= 1, got {max_inflight_bytes!r}")
    if max_request_bytes > max_inflight_bytes:
        raise ConfigurationError(f"max_request_bytes ({max_request_bytes}) must be <= max_inflight_bytes "
                                 f"({max_inflight_bytes}): a request that large could never be taken")
