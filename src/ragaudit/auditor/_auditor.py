"""The [`Auditor`][ragaudit.Auditor]: takes finished turns and judges them off the host's hot path.

A turn's walk through here: [`Auditor.admit_turn`][ragaudit.Auditor.admit_turn] at hand-off (`_admission`:
sampling, the backlog's bound) → [`Auditor.submit`][ragaudit.Auditor.submit] (`_submitting`: the submit strategy of
``mode``: sampling, the queue bound) → the judging loop (`_submitting.TurnJudging`: cost control, the judge, then
the one [`AuditRecord`][ragaudit.AuditRecord]) → the export stage (`_exporting`: every exporter, in batches) →
counted (`_ledger`). Flush and shutdown are the drain's (`_draining`), sessions the session part's
(`_session_part`): parts the Auditor makes and owns, each given what it needs; none holds the Auditor.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast

from .._export import Exporter
from .._lifecycle import flush_on_sigterm, track
from .._log import RateLimitedLog
from .._numbers import check_number
from .._turn_metrics import turn_metrics
from .._worker import BatchWorker, on_fork_in_child, run_jobs
from ..content import ContentPolicy, log_exception
from ..errors import ConfigurationError
from ..judges.base import RagJudge
from ..records import Judgement, RagTurn
from ..turn_audit import COMPUTE, audit_record
from ._admission import Admission, CpuShare
from ._draining import Drain, Upstream
from ._exporting import ExportStage, OnJudgementExporter
from ._first_run import say_where_things_are
from ._governor import CostControl, CostGate
from ._judge_health import JudgeFailureLog, judge_context
from ._ledger import Ledger
from ._limits import Limits
from ._policies import PolicyBook
from ._session_part import SessionJudging, session_tracking
from ._sessions import Sessions
from ._submitting import SUBMIT_STRATEGIES, Job, Submission, SubmitStatus, SubmitStrategy, TurnJudging, job_handler
from ._worker_mode import WorkerModeJudge, check_worker_mode

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ..tracing._judge_spans import JudgeSpanExporter
    from ..tracing.files import AuditLog
    from ..tracing.spans import SpanRecorder
    from ._submitting import JudgingJob

__all__ = ["Auditor", "OnJudgement", "Submission", "SubmitStatus"]

logger = logging.getLogger("ragaudit")

OnJudgement = Callable[[RagTurn, Judgement], None]


class _Stoppable(Protocol):
    """A worker `_release` stops (a `BatchWorker` of any job type)."""

    def shutdown(self, timeout_s: float | None = ...) -> object: ...


def _check_arguments(mode: str, sample_rate: float, on_judgement: object, limits: object, cost: object,
                     content: object) -> None:
    """The Auditor's own arguments; its parts (`Limits`, `CostControl`, `ContentPolicy`, `Sessions`) check theirs
    when made, so here only that each part is of its type."""
    if mode not in ("background", "inline", "worker"):
        raise ConfigurationError(f"mode must be 'background', 'inline' or 'worker', got {mode!r}")
    check_number("sample_rate", sample_rate, 0, 1)
    if on_judgement is not None and not callable(on_judgement):
        raise ConfigurationError("on_judgement must be callable(turn, judgement)")
    for name, value, kind in (("limits", limits, Limits), ("cost", cost, CostControl),
                              ("content", content, ContentPolicy)):
        if value is not None and not isinstance(value, kind):
            raise ConfigurationError(f"{name} must be a ragaudit.{kind.__name__} or None, got {type(value).__name__}")


def _resolve_judge(judge: RagJudge | None) -> RagJudge:
    """*judge*, or the default judge for None; a ConfigurationError for anything that is no RagJudge."""
    if judge is None:
        from ..judges import default_judge

        judge = default_judge()
    if not isinstance(judge, RagJudge):
        raise ConfigurationError(f"judge must implement RagJudge (name, judge, ajudge, blocking, aclose_loop, "
                                 f"config_key, close, calls_per_judgement, timeout_s): "
                                 f"derive it from ragaudit.BaseRagJudge; got {type(judge).__name__}")
    return judge


def _metrics(turn: RagTurn, policy: ContentPolicy) -> dict[str, float] | None:
    try:
        return turn_metrics(turn)
    except Exception as exc:
        logger.warning("ragaudit: computing the retrieval metrics of turn %s failed: %s", turn.turn_id,
                       policy.exception(exc))
        return None


def _as_exporters(given: Iterable[object]) -> list[Exporter]:
    """*given* as exporters; anything that is not one is a ConfigurationError naming what to implement."""
    out: list[Exporter] = []
    for exporter in given:
        if isinstance(exporter, Exporter):
            out.append(exporter)
            continue
        missing = ", ".join(name for name in ("export", "force_flush", "shutdown", "errors")
                            if not hasattr(exporter, name))
        old = (" (emit(turn, judgement) is not part of it: export gets a batch of AuditRecords, each with its .turn "
               "and .judgement)") if hasattr(exporter, "emit") else ""
        raise ConfigurationError(f"exporters: {exporter!r} is not an Exporter (missing {missing}){old}; derive it "
                                 "from ragaudit.BaseExporter and implement export(records) -> ExportResult")
    return out


class Auditor:
    """Judges finished [`RagTurn`][ragaudit.RagTurn]s in the background and sends the judgements on.

    A `BatchWorker` runs the judging (an asyncio loop on one thread, sync
    judges on threads of a second one); [`submit`][ragaudit.Auditor.submit] hands it a turn without blocking and
    without raising. Constructing an Auditor starts no thread and opens no file: threads start
    with the first turn, the audit log opens with its first line (a failure there is counted in
    ``export_errors`` and logged once, and the traces still flow). An Auditor nobody references any
    more stops its threads and closes its file (its worker threads hold it weakly).

    Its parts are values, each validated when made (a [`ConfigurationError`][ragaudit.ConfigurationError] names the
    field): *limits* ([`Limits`][ragaudit.Limits]: queue, concurrency, timeouts), *cost*
    ([`CostControl`][ragaudit.CostControl]: budgets, rate, store, pause, prices, ``judge_if``, feedback retention),
    *content* ([`ContentPolicy`][ragaudit.content.ContentPolicy]: what text is recorded) and *sessions*
    ([`Sessions`][ragaudit.Sessions]). At most ``limits.max_queue`` turns wait or are being judged; past that a
    turn is **dropped and counted**, never lost silently. At most ``limits.max_concurrency`` judgements run at
    once, each bounded by ``limits.timeout_s``. *sample_rate* keeps a deterministic share of turns (by turn id).
    ``mode="inline"`` judges before [`submit`][ragaudit.Auditor.submit] returns (for scripts and tests);
    ``mode="worker"`` judges nothing here: the turns' traces go out over OTLP and ``ragaudit
    worker`` judges them (see `ragaudit.auditor._worker_mode`, counted ``to_worker``). A judge that
    fails is said at WARNING: the first failure at once, then a summary at most once a minute
    while failures go on (how many, the last error's type and HTTP status, what to check).
    Integrations build their turns on a closing thread of their own, above the Auditor
    (`ragaudit.integrations._closing`, one per Auditor); at most ``limits.max_closing`` wait there to be
    recorded (a burst past that drops whole turns, spans included, counted in
    ``stats()["close_dropped"]``), a bound separate from ``max_queue`` so that a small judging queue
    never costs traces. Before that, at hand-off, [`admit_turn`][ragaudit.Auditor.admit_turn] decides sampling and
    sheds turns past the backlog's bound (``stats()["backlog_bound"]``: ``max_queue``, or what the judge finishes
    within half of ``limits.exit_timeout_s`` at its measured pace) or past ``limits.max_cpu_share`` of a CPU-saturated
    process's CPU, each for the price of a counter.

    Each finished turn becomes one [`AuditRecord`][ragaudit.AuditRecord] (made once on the judging
    thread: the judgement and every derived value), and every exporter gets the same record, in
    batches, on the export thread ([`Exporter`][ragaudit.Exporter]): the OTel judge span (through
    *tracer_provider* or the global one; a child of the turn's span, or with
    ``judge_trace="separate"`` the root of its own trace linked to the turn, so the turn's trace
    lasts as long as the answer did), the JSONL *audit_log* (``None`` to disable), every *exporters*
    entry (each an [`Exporter`][ragaudit.Exporter]; derive yours from [`BaseExporter`][ragaudit.BaseExporter]),
    and *on_judgement(turn, judgement)*. A judge or exporter that fails is recorded
    (judgement ``error``, ``stats()["export_errors"]``), never raised.

    Every text recorded (spans, audit log, exporters, ragaudit's log lines) goes through one
    [`ContentPolicy`][ragaudit.content.ContentPolicy], [`content_policy`][ragaudit.Auditor.content_policy]: *content*,
    or None: ``ContentPolicy()`` (capture as the ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` setting, no
    *redact* hook). A *content* given binds every turn submitted here; the default leaves each handler's own
    settings in charge. A turn an integration
    handler submits carries the handler's content policy and tracer provider
    ([`content_policy_for`][ragaudit.Auditor.content_policy_for], [`submit`][ragaudit.Auditor.submit]); that turn's
    record, hence its judge span, audit-log line, exports and log lines, follow them, so handlers with different
    settings share one Auditor (one set of threads, one file) and none of them has its texts recorded more
    loosely than it asked. Known secrets (API keys,
    credential headers and URL parts of the judge client and exporters, key-like environment variables,
    OTLP headers) are scrubbed always; a *redact* that raises withholds the text, never the turn.

    Pending judgements are flushed at normal interpreter exit (within ``limits.exit_timeout_s``); a
    shortfall is written to stderr. ``stats()`` always satisfies ``submitted == judged + failed +
    dropped + sampled_out + pending`` plus the turns not sent (see [`stats`][ragaudit.Auditor.stats]).

    SIGTERM (``docker stop``, Kubernetes) kills a Python process without running exit hooks. So
    by default (*handle_signals* None or True) the first Auditor made on the main thread installs
    a SIGTERM handler that flushes every such auditor (one deadline: the largest ``exit_timeout_s``)
    and then hands over to what SIGTERM did before: the application's own handler, if it installed
    one before (called with the same arguments; the auditors are only flushed, not shut down, so
    the application decides whether the process goes on), else the default (the auditors are shut
    down, then the process dies by SIGTERM). What could not be recorded is said on stderr. A handler
    installed *after* (a server's, in its worker) is chained the same way from the process's first
    turn on its main thread; when it returns, SIGTERM is held back on the main thread until the exit
    hook has recorded what the graceful shutdown finished (a server that re-raises SIGTERM, as
    uvicorn does, then ends the process as it meant). A forked child installs its own. See the
    serving guide (gunicorn, uvicorn). An ignored SIGTERM (``SIG_IGN``) is left alone. Off
    the main thread no handler can be installed (with ``handle_signals=True`` a warning says so);
    ``handle_signals=False`` leaves this auditor out.

    *sessions* (True or a [`Sessions`][ragaudit.Sessions]) also judges each conversation as a whole,
    in one judge call, once idle, ended (`end_session`) or at shutdown (see the sessions guide).

    Every record's scores, sentence verdicts, citation checks and outcome also go out as OpenTelemetry
    metrics ([`ScoreMetricsExporter`][ragaudit.tracing.ScoreMetricsExporter]) through *meter_provider*
    or, None, the global one: a no-op until the application configures a metrics SDK, as with any
    OpenTelemetry instrumentation (names and attributes: the alerts guide).
    """

    def __init__(
        self,
        judge: RagJudge | None = None,
        *,
        mode: Literal["background", "inline", "worker"] = "background",
        sample_rate: float = 1.0,
        exporters: Iterable[Exporter] = (),
        audit_log: str | os.PathLike[str] | None = "ragaudit-audit.jsonl",
        limits: Limits | None = None,
        cost: CostControl | None = None,
        content: ContentPolicy | None = None,
        sessions: Sessions | bool | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        on_judgement: OnJudgement | None = None,
        judge_trace: Literal["turn", "separate"] | None = None,
        handle_signals: bool | None = None,
    ) -> None:
        _check_arguments(mode, sample_rate, on_judgement, limits, cost, content)
        if mode == "worker":
            check_worker_mode({"judge": judge is not None, "sample_rate": sample_rate != 1.0,
                               "exporters": bool(exporters), "on_judgement": on_judgement is not None,
                               "cost": cost is not None and cost != CostControl()})
        judge = _resolve_judge(judge) if mode != "worker" else WorkerModeJudge()
        self.limits = limits = limits if limits is not None else Limits()
        self.cost = cost = cost if cost is not None else CostControl()
        self._cost = CostGate(judge, cost)  # budgets, rate, pause, judge_if, feedback
        given = _as_exporters(exporters)

        from ..tracing.spans import SpanRecorder

        self.judge = judge
        self.mode = mode
        self.sample_rate = float(sample_rate)
        self.max_queue = limits.max_queue
        self.max_closing = limits.max_closing
        self.max_concurrency = limits.max_concurrency
        self.timeout_s = float(limits.timeout_s)
        self.max_context_chars = limits.max_context_chars
        self.exit_timeout_s = float(limits.exit_timeout_s)
        self.max_cpu_share = limits.max_cpu_share
        # The one policy for every text this auditor and its exporters record; one given binds every
        # turn submitted here, the default (the environment's capture setting, no hook) leaves handlers in charge.
        self._content_policy = content if content is not None else ContentPolicy()
        self._policies = PolicyBook(self._content_policy, content is not None)
        self._recorder = SpanRecorder(tracer_provider, content=self._content_policy, judge_trace=judge_trace)
        self._ledger = Ledger()  # the counts, pending and closed, shared by the parts below
        self._log = RateLimitedLog()
        self._job_failed = _FailureLog(self._log, self._content_policy)
        self._sessions = _session_part(session_tracking(sessions), judge, self._cost, self.timeout_s, self._ledger,
                                       self._job_failed)
        self._spans, self._audit_log, stage = _exporters(self._recorder, self._content_policy, audit_log, given,
                                                         on_judgement, meter_provider, judge.name, self._sessions)
        parts = _assemble(self, stage, SUBMIT_STRATEGIES[mode])  # the one place mode is looked at
        self._judging, self._blocking, self._export = parts.judging, parts.blocking, parts.export
        self._submitter, self._drain, self._admission = parts.submitter, parts.drain, parts.admission
        self._judge_failures = parts.judge_failures
        workers = [w for w in (self._judging, self._blocking, self._export.worker) if w is not None]
        weakref.finalize(self, _release, workers, self._audit_log)
        track(self)
        on_fork_in_child(self._after_fork)
        if handle_signals is not False:
            flush_on_sigterm(self, asked=handle_signals is True)

    # -- public API -------------------------------------------------------------------------

    @property
    def recorder(self) -> SpanRecorder:
        """The [`SpanRecorder`][ragaudit.tracing.SpanRecorder] of this auditor's provider and policy."""
        return self._recorder

    @property
    def content_policy(self) -> ContentPolicy:
        """The [`ContentPolicy`][ragaudit.content.ContentPolicy] of every text this auditor records."""
        return self._content_policy

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The tracer provider given (None: the global one)."""
        return self._recorder.tracer_provider

    @property
    def redact(self) -> Callable[[str], str] | None:
        """The redaction hook applied to every text this auditor records (None: none)."""
        return self._content_policy.redact

    @property
    def closed(self) -> bool:
        """True once `shutdown` has begun: turns submitted from then on are dropped."""
        return self._ledger.closed

    def content_policy_for(self, capture_content: bool | None = None,
                           redact: Callable[[str], str] | None = None) -> ContentPolicy:
        """The policy of an integration handler with these settings that submits here.

        With none given, this auditor's own. Else the handler's settings; when this auditor was
        given content settings itself, the stricter of both for each text (capture only when both
        capture, the reason only when both keep it, the handler's *redact* and then the auditor's).
        Pass it to [`submit`][ragaudit.Auditor.submit] with the turn: that turn's record follows it.
        """
        return self._policies.for_handler(capture_content, redact)

    def recorder_for(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> SpanRecorder:
        """A span recorder for an integration handler: [`content_policy_for`][ragaudit.Auditor.content_policy_for] of
        its settings, on *tracer_provider* (None: this auditor's). With none given, this auditor's
        [`recorder`][ragaudit.Auditor.recorder]. No thread, no file."""
        if tracer_provider is None and capture_content is None and redact is None:
            return self._recorder
        from ..tracing.spans import SpanRecorder

        policy = self.content_policy_for(capture_content, redact)
        provider = tracer_provider if tracer_provider is not None else self._recorder.tracer_provider
        return SpanRecorder(provider, content=policy, judge_trace=self._recorder.judge_trace,
                            max_attribute_chars=self._recorder.max_attribute_chars,
                            max_documents=self._recorder.max_documents)

    def submit(self, turn: RagTurn, *, content_policy: ContentPolicy | None = None,
               tracer_provider: TracerProvider | None = None) -> SubmitStatus:
        """Hand *turn* over for judging. Never blocks (except in inline mode) and never raises.

        *content_policy* and *tracer_provider*: how the turn was traced (an integration handler's,
        from [`content_policy_for`][ragaudit.Auditor.content_policy_for]); its record (judge span, audit-log line,
        exports, log lines) follows them. None: this auditor's.

        Returns ``"queued"``, ``"sampled_out"`` or ``"dropped"`` (queue full or auditor shut
        down); in inline mode ``"judged"`` or ``"failed"`` once the judgement is made; in worker
        mode ``"to_worker"`` (or ``"dropped"``: the turn has no trace to send).
        """
        return self.submit_turn(turn, content_policy=content_policy, tracer_provider=tracer_provider).status

    def submit_turn(self, turn: RagTurn, *, content_policy: ContentPolicy | None = None,
                    tracer_provider: TracerProvider | None = None,
                    ground_truth_metrics: Mapping[str, float] | object | None = COMPUTE) -> Submission:
        """[`submit`][ragaudit.Auditor.submit], returning a [`Submission`][ragaudit.auditor.Submission] (status,
        ground-truth metrics computed once, and the record when judged inline). *ground_truth_metrics*: when already
        computed. Never raises."""
        try:
            policy = self._policies.resolve(content_policy)
            metrics = cast("Mapping[str, float] | None", ground_truth_metrics)  # the documented values: None or one
            if ground_truth_metrics is COMPUTE:
                metrics = _metrics(turn, policy)
            status, record = self._submitter.submit(Job(turn, policy, tracer_provider, metrics), True)
            return Submission(status, metrics, record)
        except Exception as exc:  # the host pipeline must never see our failure
            policy = content_policy if isinstance(content_policy, ContentPolicy) else self._content_policy
            logger.error("ragaudit: submit failed; turn counted as dropped: %s", policy.exception(exc),
                         exc_info=exc if policy.capture_content and self._content_policy.capture_content else None)
            self._ledger.shed("dropped")
            return Submission("dropped")

    def admit_turn(self, turn_id: str) -> bool:
        """At hand-off, before any closing work: True when the finished turn *turn_id* is to be closed (built,
        traced, submitted). False when it was decided here, and counted: sampled out, or shed because the
        backlog is at its bound (``dropped``). Never raises, never blocks."""
        return self._admission.admit_turn(turn_id)

    def feedback(self, turn_id: str, value: object) -> str:
        """A user's feedback on the answer of *turn_id*; never raises, never blocks. A thumbs-down on a
        turn the sampler left out and that is still kept (``retain_s``) gets it judged: ``"queued"``;
        see `CostGate.feedback`."""
        return self._cost.feedback(turn_id, value, lambda job: self._submitter.submit(job, False)[0])

    def count_unjudged(self, reason: str) -> bool:
        """Count a turn traced and not judged, ``stats()["unjudged_<reason>"]`` (*reason* one of
        `UNSUBMITTED_REASONS`); True the first time (the caller warns once)."""
        return self.count(f"unjudged_{reason}")

    def count(self, key: str) -> bool:
        """Add one to ``stats()[key]``, a count integrations keep (``unjudged_<reason>``,
        ``evidence_from_prompt``); True the first time. Other keys are not counted."""
        return self._ledger.count(key)

    def record_unjudged(self, turn: RagTurn, reason: str, *, content_policy: ContentPolicy | None = None,
                        tracer_provider: TracerProvider | None = None) -> bool:
        """[`count_unjudged`][ragaudit.Auditor.count_unjudged] and the turn's record (with its *reason*, no judgement)
        to every exporter, so that every finished turn ends as a record. Returns True the first time for
        *reason*. Never raises."""
        first = self.count_unjudged(reason)
        try:  # in worker mode ragaudit worker makes the record, from the same trace: nothing is made here
            self._submitter.record_unjudged(lambda: audit_record(
                turn, None, self._policies.resolve(content_policy), unjudged=reason,
                tracer_provider=tracer_provider or self.tracer_provider))
        except Exception as exc:
            self._job_failed(exc)
        return first

    def end_session(self, session_id: str) -> bool:
        """The app says the conversation *session_id* ended: it is judged now (one judge call, in the
        background) without waiting for ``session_idle_s``. True when such a session was open.
        Never blocks; raises only [`ConfigurationError`][ragaudit.ConfigurationError] when this Auditor was built
        without ``sessions=True`` (a call that could never do anything is a mistake in the app)."""
        if self._sessions is None:
            raise ConfigurationError("end_session() needs an Auditor that tracks sessions: "
                                     "Auditor(..., sessions=True) (or a Sessions)")
        return self._sessions.end_session(session_id)

    def check_sessions(self) -> int:
        """Judge every session idle for ``session_idle_s`` by the session clock; returns how many were
        due. The Auditor checks by itself every few seconds; call it after moving an injected clock.
        Never raises."""
        return 0 if self._sessions is None else self._sessions.check_sessions()

    def stats(self) -> dict[str, int]:
        """Counts: submitted, judged, failed, dropped, sampled_out, to_worker, pending, export_errors, close_dropped,
        closing, evidence_from_prompt and ``unjudged_<reason>`` for each of
        `UNSUBMITTED_REASONS`.

        ``unjudged_*``: finished turns traced and never submitted, by reason
        ([`count_unjudged`][ragaudit.Auditor.count_unjudged]); ``evidence_from_prompt``: judged turns whose evidence
        came, at least in part, from the prompt.

        Cost control (``budget``, ``max_rps``, ``pause_s``, ``judge_if``): ``filtered_out``,
        ``over_budget``, ``paused``, ``budget_unavailable`` and ``rate_limited`` count the turns not
        sent to the judge, by reason (each still ends as a record); ``budget_store_errors`` the store
        calls that failed, ``rate_waits`` the waits for a rate slot, ``judge_tokens`` and ``judge_usd``
        what the judge calls cost (money where a price is known); ``feedback_judged``,
        ``feedback_unmatched`` and ``retained_evicted``: see [`feedback`][ragaudit.Auditor.feedback].

        One consistent snapshot (one lock): ``submitted == judged + failed + dropped + sampled_out
        + pending + to_worker`` plus the five not-sent reasons always holds, also while judgements are being
        delivered (a turn judged after a thumbs-down was submitted twice: sampled out, then judged). ``export_errors``
        includes the exporters' own delivery failures (items an exporter gave up on) and the judge spans' export
        failures (spans the exporters ragaudit installed could not deliver). ``closing`` and ``close_dropped``
        are the [`Upstream`][ragaudit.auditor.Upstream] stages' own counts (their ``stats()``, summed over the
        stages): how many finished turns wait to be recorded in the integrations' closer above, and how many it
        dropped because *max_closing* were waiting already; neither is part of the sum above (a turn dropped
        there never reached this Auditor). ``backlog_bound``: how
        many turns may wait to be closed or judged before a new one is shed at hand-off (``dropped``).
        ``shed_backlog`` and ``shed_cpu``: the turns shed at hand-off, by reason (each also counted in ``dropped``,
        not added to the sum again): past the backlog's bound, and while the process is CPU-saturated and
        ragaudit's threads are over ``limits.max_cpu_share`` of its CPU ([`Limits`][ragaudit.Limits]).
        """
        export_errors = self._export.errors
        upstream = self._drain.upstream_stats()
        stats = self._ledger.snapshot()
        stats["closing"] = upstream.get("closing", 0)
        stats["close_dropped"] = upstream.get("close_dropped", 0)
        stats.update(self._admission.stats())
        stats["export_errors"] = export_errors
        stats.update(self._cost.stats(), **(self._sessions.stats() if self._sessions is not None else {}))
        return stats

    def add_upstream(self, stage: Upstream) -> None:
        """Have `force_flush` and `shutdown` (and so the exit hook and SIGTERM) hand
        *stage*'s ended turns down first, in the order the stages were added, and ``stats()`` add its
        ``stats()``. Held weakly: a stage lives as long as whoever made it keeps it. An integration's turn
        closer registers itself."""
        self._drain.add_upstream(stage)

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every turn that ended before the call is recorded and judged, its spans
        exported and the exporters flushed, whichever source produced it: the integrations' closer
        above this Auditor (every [`Upstream`][ragaudit.auditor.Upstream] added) first closes its sources' ended turns
        and runs the close jobs handed over so far, then judging, export and each exporter's
        ``force_flush``, all within the one deadline.

        Returns within *timeout_s* (seconds) plus a few milliseconds whatever the trace backend or a
        exporter does (their flushes run on a worker thread and are abandoned at the deadline), and
        says truthfully whether everything was delivered: False when the time ran out, a span
        export or an exporter's flush did not succeed, or a delivery failed (``export_errors`` grew)
        during the flush. Never raises.
        """
        return self._drain.force_flush(timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Flush (within *timeout_s*, default ``exit_timeout_s``), then stop the workers. Idempotent.

        First every [`Upstream`][ragaudit.auditor.Upstream] (the integrations' closer) hands its ended turns down and
        stops closing in the background, so the turns that ended before the call are judged too.

        Never raises, and returns within *timeout_s* plus a small margin whatever a judge, the trace
        backend or an exporter does. Turns submitted afterwards are counted as dropped. Returns False
        when something was not delivered by the deadline; what (judgements, turns, spans) is
        reported on stderr.
        """
        return self._drain.shutdown(timeout_s)

    def __enter__(self) -> Auditor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _after_fork(self) -> None:
        # In a forked child (gunicorn --preload): the parent's judgements in flight are the
        # parent's to finish; the child's workers start empty, and so do its counts.
        self._ledger.after_fork()
        self._judge_failures.reset()
        self._admission.after_fork()
        self._export.after_fork()
        self._policies.after_fork()
        self._cost.after_fork()


class _FailureLog:
    """How a failure of ours on a turn's way is said: rate-limited, under the strictest policy in the process
    (a job is a handler's turn; its policy is not at hand here). Holds no Auditor."""

    __slots__ = ("_log", "_policy")

    def __init__(self, log: RateLimitedLog, policy: ContentPolicy) -> None:
        self._log, self._policy = log, policy

    def __call__(self, exc: BaseException) -> None:
        self._log.warning(f"job:{type(exc).__name__}", "ragaudit: closing a turn failed (the pipeline is "
                          "unaffected): %s", log_exception(exc, self._policy))


@dataclass(frozen=True, slots=True)
class _Parts:
    judging: BatchWorker[JudgingJob]
    blocking: BatchWorker[Callable[[], None]] | None
    export: ExportStage
    submitter: SubmitStrategy
    drain: Drain
    admission: Admission
    judge_failures: JudgeFailureLog


def _assemble(auditor: Auditor, exporters: list[Exporter], strategy: type[SubmitStrategy]) -> _Parts:
    """The parts of *auditor* (its settings, policy, cost control, sessions and ledger made already), each given
    what it needs; none holds *auditor* (what they report with goes through a weak reference), so a running
    worker thread never keeps an Auditor nobody else references alive; when it goes, they stop."""
    judge, audit_log, recorder, ledger = auditor.judge, auditor._audit_log, auditor._recorder, auditor._ledger
    sessions, policy, cost = auditor._sessions, auditor._content_policy, auditor._cost
    failures = JudgeFailureLog(
        on_first=lambda: say_where_things_are(judge.name, audit_log, recorder.tracer_provider),
        context=lambda: judge_context(judge, audit_log.path if audit_log is not None else None))
    describe = _weak_stats(auditor)
    # The workers' own bounds leave room for the judgements in flight: max_queue (pending,
    # counted in the ledger under one lock with the judged/failed counts) is what drops turns.
    bound = auditor.max_queue + auditor.max_concurrency
    # Sync-only judges (LexicalJudge, a user's BaseRagJudge with judge()) are called in
    # threads of a worker of ours, not through asyncio.to_thread: at interpreter exit the
    # default executor refuses new work, and exit is exactly when we flush.
    blocking: BatchWorker[Callable[[], None]] | None = None
    if judge.blocking:
        blocking = BatchWorker("judge", run_jobs, max_queue=bound, max_batch=1, threads=auditor.max_concurrency,
                               paced=True)
    export = ExportStage(exporters, ledger.delivered, policy, max_queue=bound)
    turns = TurnJudging(ledger, cost, judge, export, timeout_s=auditor.timeout_s,
                        max_context_chars=auditor.max_context_chars, blocking=blocking, failures=failures,
                        provider=recorder.tracer_provider, deliver=strategy.delivery(export))
    judging: BatchWorker[JudgingJob] = BatchWorker("auditor", ahandle=job_handler(turns, sessions), max_queue=bound,
                                            concurrency=auditor.max_concurrency, paced=True, yield_idle=False)
    if sessions is not None:
        sessions.connect(judging, blocking, export.put)
    submitter = strategy(ledger, cost, judging, turns, export, sessions, sample_rate=auditor.sample_rate,
                         max_queue=auditor.max_queue, log=auditor._log, describe=describe)
    drain = Drain(ledger, judging, blocking, export, auditor._spans, sessions, judge,
                  exit_timeout_s=auditor.exit_timeout_s, policy=policy, describe=describe, failed=auditor._job_failed)
    # Sampling moves to hand-off unless the built turn of a sampled-out turn is needed (kept for feedback,
    # or counted in its session): decided once, here.
    early = strategy.samples_at_hand_off and not cost.retained.enabled and sessions is None
    admission = Admission(ledger, drain.closing, sample_rate=auditor.sample_rate, sample_early=early,
                          shed=strategy.sheds_at_hand_off, max_queue=auditor.max_queue,
                          max_concurrency=auditor.max_concurrency, exit_timeout_s=auditor.exit_timeout_s,
                          log=auditor._log,
                          cpu=None if auditor.max_cpu_share is None else CpuShare(auditor.max_cpu_share))
    return _Parts(judging, blocking, export, submitter, drain, admission, failures)


def _weak_stats(auditor: Auditor) -> Callable[[], Mapping[str, int]]:
    """*auditor*'s ``stats()`` for its parts' reports, through a weak reference ({} once it is gone)."""
    ref = weakref.ref(auditor)

    def describe() -> Mapping[str, int]:
        owner = ref()
        return owner.stats() if owner is not None else {}

    return describe


def _exporters(recorder: SpanRecorder, policy: ContentPolicy, audit_log: str | os.PathLike[str] | None,
               given: Sequence[Exporter], on_judgement: OnJudgement | None, meter_provider: MeterProvider | None,
               judge_name: str, sessions: SessionJudging | None) -> tuple[JudgeSpanExporter, AuditLog | None,
                                                                          list[Exporter]]:
    """The judge-span exporter, the audit log (None: none) and every exporter of the export stage, in order."""
    from ..tracing._judge_spans import JudgeSpanExporter
    from ..tracing.score_metrics import ScoreMetricsExporter

    spans = JudgeSpanExporter(recorder)
    log = None
    if audit_log is not None:
        from ..tracing.files import AuditLog

        # Opened with its first line: a read-only working directory must not make constructing
        # an Auditor (or a handler) raise into the host; a failed write is counted instead.
        log = AuditLog(audit_log, content=policy, lazy=True)
    # Judge spans first: an exporter may refer to them (Phoenix annotations need the span to exist).
    stage: list[Exporter] = [spans]
    stage += [log] if log is not None else []
    stage += given
    stage += [OnJudgementExporter(on_judgement)] if on_judgement is not None else []
    stage.append(ScoreMetricsExporter(meter_provider, judge_name=judge_name))
    stage += [sessions.tracker] if sessions is not None else []  # the session tracker sees every record too
    return spans, log, stage


def _session_part(tracking: Sessions | None, judge: RagJudge, cost: CostGate, timeout_s: float,
                  ledger: Ledger, failed: Callable[[BaseException], None]) -> SessionJudging | None:
    """The session part, when *tracking* asks for sessions (its idle sweep stops once *ledger* is closed)."""
    if tracking is None:
        return None
    return SessionJudging(tracking, judge, cost, timeout_s, closed=lambda: ledger.closed, failed=failed)


def _release(workers: Sequence[_Stoppable], audit_log: AuditLog | None) -> None:
    """An Auditor went away without shutdown(): stop its threads, close its file. Never raises."""
    for worker in workers:
        worker.shutdown(0)
    if audit_log is not None:
        try:
            audit_log.shutdown(0)
        except Exception as exc:
            logger.debug("ragaudit: closing the audit log of a released auditor failed: %r", exc)
