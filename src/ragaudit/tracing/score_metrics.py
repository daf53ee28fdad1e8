"""Scores as OpenTelemetry metrics: [`ScoreMetricsExporter`][ragaudit.tracing.ScoreMetricsExporter], one more exporter
of the export stage.

From each [`AuditRecord`][ragaudit.AuditRecord] (never recomputed): a histogram per score (faithfulness,
context and answer relevance, citation precision and recall, graded NDCG@10, each only where the
record has it), and counters of finished turns by outcome and reason, of answer sentences by
verdict, of citation checks by result; from each judged session a counter by verdict and a
groundedness histogram. Names, units and attributes are `ragaudit.tracing.conventions.METRICS`.

Like any OpenTelemetry instrumentation it records through the *meter_provider* it is given, or the
global one, which is a no-op until the application configures an SDK ``MeterProvider``: every
[`Auditor`][ragaudit.Auditor] has one of these exporters, and an app without a metrics SDK pays one
no-op call per value on the export thread (never the host's). ``ragaudit worker`` gives it its own
provider (OTLP metrics and ``/metrics`` for Prometheus).

Attributes are those a team groups by and alerts on, low in cardinality: the app's service (the
worker's turns), the run name (chain, graph, route), the app's model, the judge, the prompt version
from turn metadata. Never the question, an id or free text: values are read only from those keys,
only when str/int/bool, and cut to `METRIC_VALUE_MAX_CHARS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._export import BaseExporter, ExportResult
from ..errors import ConfigurationError
from ..records import AuditRecord
from ..sessions import SessionRecord
from . import conventions as c

__all__ = ["ScoreMetricsExporter", "metric_attributes"]

_METADATA_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (c.ATTR_SERVICE_NAME, (c.ATTR_SERVICE_NAME,)),
    (c.ATTR_RUN_NAME, ("run_name",)),
    (c.ATTR_PROMPT_VERSION, c.PROMPT_VERSION_METADATA_KEYS),
)


_COST_METRICS = (c.METRIC_JUDGE_TOKENS, c.METRIC_JUDGE_COST, c.METRIC_JUDGE_NOT_SENT)

# A batch's counts: (metric, its attributes as items) -> n, added to the counter once per key.
_Counts = dict[tuple[str, tuple[tuple[str, str], ...]], int]


def _value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)) and str(value):
        return str(value)[: c.METRIC_VALUE_MAX_CHARS]
    return None


def metric_attributes(record: AuditRecord, judge_name: str) -> dict[str, str]:
    """The attributes of every metric point of *record*
    (`TURN_METRIC_ATTRIBUTES`, each only when known)."""
    turn = record.turn
    out: dict[str, str] = {}
    for key, sources in _METADATA_KEYS:
        found = next((v for v in (_value(turn.metadata.get(s)) for s in sources) if v is not None), None)
        if found is not None:
            out[key] = found
    model = _value(turn.model)
    if model is not None:
        out[c.ATTR_MODEL] = model
    judge = _value(record.judgement.judge if record.judgement is not None else judge_name)
    if judge is not None:
        out[c.ATTR_JUDGE_NAME] = judge
    return out


class ScoreMetricsExporter(BaseExporter):
    """Records each [`AuditRecord`][ragaudit.AuditRecord] as OpenTelemetry metrics (see the module docstring).

    *meter_provider*: where to record (None: the global ``MeterProvider``). *judge_name*: the judge
    named on the points of turns that were not judged (a judged turn names its judgement's judge).
    """

    def __init__(self, meter_provider: Any = None, *, judge_name: str = "unknown") -> None:
        from opentelemetry import metrics

        from .._version import __version__

        if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
            raise ConfigurationError(f"meter_provider must be an OpenTelemetry MeterProvider (with get_meter), "
                                     f"got {type(meter_provider).__name__}")
        self.judge_name = judge_name
        meter = metrics.get_meter(c.METER_NAME, __version__, meter_provider=meter_provider)
        instruments: dict[str, Any] = {}
        for spec in c.METRICS:
            if spec.name in _COST_METRICS:  # the cost controller's (auditor/_governor.py)
                continue
            if spec.instrument == "histogram":
                instruments[spec.name] = meter.create_histogram(
                    spec.name, unit=spec.unit, description=spec.description,
                    explicit_bucket_boundaries_advisory=c.SCORE_BUCKETS)
            else:
                instruments[spec.name] = meter.create_counter(spec.name, unit=spec.unit, description=spec.description)
        self._instruments = instruments

    def export(self, records: Sequence[AuditRecord]) -> ExportResult:
        # The counters of a batch are summed here and added once per metric and attribute set: each
        # SDK call costs 10-20 us of CPU (it cleans and hashes the attributes), a dict update far less.
        # Histograms take every value (benchmarks/score_metrics_cost.py; BENCHMARKS.md, issue 48).
        counts: _Counts = {}
        for record in records:
            self._record(record, counts)
        for (metric, attrs), n in counts.items():
            self._instruments[metric].add(n, dict(attrs))
        return ExportResult.SUCCESS

    def export_sessions(self, records: Sequence[SessionRecord]) -> ExportResult:
        sessions, groundedness = self._instruments[c.METRIC_SESSIONS], self._instruments[c.METRIC_SESSION_GROUNDEDNESS]
        for record in records:
            judgement = record.judgement
            attrs: dict[str, Any] = {c.ATTR_JUDGE_NAME: _value(judgement.verdict.judge) or self.judge_name}
            verdict = judgement.verdict
            sessions.add(1, {**attrs, c.ATTR_SESSION_RESOLVED: verdict.resolved or "unknown",
                             c.ATTR_SESSION_CONTRADICTED: bool(verdict.contradictions),
                             c.ATTR_SESSION_PARTIAL: bool(judgement.partial)})
            if judgement.groundedness is not None:
                groundedness.record(judgement.groundedness, attrs)
        return ExportResult.SUCCESS

    def _record(self, record: AuditRecord, counts: _Counts) -> None:
        """Records *record*'s scores; adds its counts to *counts*."""
        attrs = metric_attributes(record, self.judge_name)
        base = tuple(attrs.items())
        judgement = record.judgement
        turn_attrs = (*base, (c.ATTR_JUDGE_STATUS, record.status))
        if record.unjudged is not None:
            turn_attrs = (*turn_attrs, (c.ATTR_UNJUDGED_REASON, record.unjudged))
        key = (c.METRIC_TURNS, turn_attrs)
        counts[key] = counts.get(key, 0) + 1
        if judgement is None or judgement.error is not None:
            return
        audit = record.audit
        graded: Mapping[str, float] = (audit.metrics if audit is not None else None) or {}
        values = {"faithfulness": judgement.faithfulness, "context_relevance": judgement.context_relevance,
                  "answer_relevance": judgement.answer_relevance,
                  "citation_precision": audit.citation_precision if audit is not None else None,
                  "citation_recall": audit.citation_recall if audit is not None else None,
                  "graded_ndcg@10": graded.get("graded_ndcg@10")}
        for score, metric in c.SCORE_METRICS.items():
            value = values.get(score)
            if value is not None:
                self._instruments[metric].record(value, attrs)
        for sentence in judgement.sentences:
            key = (c.METRIC_SENTENCES, (*base, (c.ATTR_SENTENCE_VERDICT, sentence.verdict or "none")))
            counts[key] = counts.get(key, 0) + 1
        if audit is not None:
            for check in audit.citation_checks:
                result = "unchecked" if check.holds is None else "holds" if check.holds else "fails"
                key = (c.METRIC_CITATIONS, (*base, (c.ATTR_CITATION_RESULT, result)))
                counts[key] = counts.get(key, 0) + 1
