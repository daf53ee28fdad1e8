"""The evaluation report: per-row results, None-aware aggregates, diagnosis, outputs and the CI gate.

A score the judge did not give stays None: it is never averaged in as 0. Every aggregate says how
many rows had a value (``n``) and how many had none (``missing``), so a mean over three rows out of
eight is visibly that.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ..content import scrub
from ..errors import ConfigurationError, MetricError
from ..records import SCORE_NAMES

if TYPE_CHECKING:
    from ..judges.fitted import JudgeConfig
    from ..records import Judgement, RagTurn

__all__ = [
    "DIAGNOSES",
    "HISTOGRAM_BINS",
    "Diagnosis",
    "EvaluationReport",
    "RowResult",
    "Summary",
    "assert_rag_quality",
    "diagnose",
    "summarize",
]

Diagnosis = Literal["ok", "retrieval", "generation", "prompt/question", "error", "unknown"]

DIAGNOSES: tuple[Diagnosis, ...] = ("ok", "retrieval", "generation", "prompt/question", "error", "unknown")
"""Every diagnosis a row can get, in the order reports list them.

* ``retrieval``: the retrieved documents miss the point (recall and context relevance, whichever
  are known, below the threshold);
* ``generation``: retrieval was good but the answer is not faithful to it;
* ``prompt/question``: the answer is faithful but does not answer the question;
* ``ok``: retrieval, faithfulness and answer relevance all at or above the threshold;
* ``error``: the pipeline raised for this row;
* ``unknown``: not enough signals to tell (scores missing, no ground truth and no context relevance).
"""

HISTOGRAM_BINS = 10
"""Score distributions use this many equal bins over [0, 1] (the last bin includes 1.0)."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _first_recall(metrics: Mapping[str, float]) -> float | None:
    for name, value in metrics.items():
        if name.startswith("recall"):
            return value
    return None


def diagnose(
    *,
    faithfulness: float | None,
    context_relevance: float | None,
    answer_relevance: float | None,
    recall: float | None = None,
    error: str | None = None,
    threshold: float = 0.5,
) -> Diagnosis:
    """Where a row's problem most likely lies, from the combination of its signals.

    Retrieval counts as good when recall or context relevance (whichever are known) reaches
    *threshold*, and as poor when every known one is below it. Rules, first match wins: pipeline
    error -> ``"error"``; poor retrieval -> ``"retrieval"``; good retrieval and faithfulness below
    the threshold -> ``"generation"``; faithfulness at or above and answer relevance below ->
    ``"prompt/question"``; good retrieval, faithfulness and answer relevance -> ``"ok"``; otherwise
    ``"unknown"`` (a missing score is never read as a low one).
    """
    if error is not None:
        return "error"
    retrieval_signals = [v for v in (recall, context_relevance) if v is not None]
    retrieval_good = any(v >= threshold for v in retrieval_signals) if retrieval_signals else None
    if retrieval_good is False:
        return "retrieval"
    if retrieval_good and faithfulness is not None and faithfulness < threshold:
        return "generation"
    if (faithfulness is not None and faithfulness >= threshold
            and answer_relevance is not None and answer_relevance < threshold):
        return "prompt/question"
    if (retrieval_good and faithfulness is not None and faithfulness >= threshold
            and answer_relevance is not None and answer_relevance >= threshold):
        return "ok"
    return "unknown"


@dataclass(frozen=True, slots=True)
class RowResult:
    """One dataset row (or one logged turn) as evaluated.

    Scores are None where the judge gave none; ``retrieval_metrics`` is empty when the row has no
    ground truth (``has_ground_truth`` False) or its pipeline raised (``error`` set). ``citations``
    hold ``{doc_id, rank, source, method, marker}`` for each cited document. ``judge_error`` is set
    when the judgement could not be made in full. ``graded_metrics`` are the retrieval metrics of the
    judge's document grades (``graded_ndcg@10``, ...).
    """

    id: str
    question: str | None
    answer: str | None
    doc_ids: tuple[str, ...] = ()
    cited_ids: tuple[str, ...] = ()
    faithfulness: float | None = None
    context_relevance: float | None = None
    answer_relevance: float | None = None
    retrieval_metrics: Mapping[str, float] = field(default_factory=dict)
    error: str | None = None
    diagnosis: Diagnosis = "unknown"
    reason: str | None = None
    judge_error: str | None = None
    has_ground_truth: bool = False
    citations: tuple[Mapping[str, Any], ...] = ()
    doc_sources: tuple[str | None, ...] = ()
    trace_id: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    latency_s: float | None = None
    sentences: tuple[Mapping[str, Any], ...] = ()
    document_grades: tuple[Mapping[str, Any], ...] = ()
    citation_checks: tuple[Mapping[str, Any], ...] = ()
    graded_metrics: Mapping[str, float] = field(default_factory=dict)
    citation_precision: float | None = None
    citation_recall: float | None = None
    invalid_scores: Mapping[str, str] = field(default_factory=dict)
    """Scores logged with a value no score can have (7, -1, "high"), by name, as written; the score
    itself is then None. A report shows them as invalid, never clamped to [0, 1]."""
    timestamp: str | None = None
    """When the turn was judged, as the audit log wrote it (ISO 8601 UTC, ``ts``); None for a dataset row.
    The HTML report's score trend buckets rows by it."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConfigurationError(f"RowResult.id must be a non-empty string, got {self.id!r}")
        if self.diagnosis not in DIAGNOSES:
            raise ConfigurationError(
                f"RowResult.diagnosis must be one of {DIAGNOSES}, got {self.diagnosis!r}")
        for name in SCORE_NAMES:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or math.isnan(value) or not 0.0 <= value <= 1.0):
                raise ConfigurationError(f"RowResult.{name} must be a float in [0, 1] or None, got {value!r}")
        for key, metric in self.retrieval_metrics.items():
            if isinstance(metric, bool) or not isinstance(metric, (int, float)) or math.isnan(metric):
                raise ConfigurationError(f"RowResult.retrieval_metrics[{key!r}] must be a number, got {metric!r}")
        object.__setattr__(self, "doc_ids", tuple(self.doc_ids))
        object.__setattr__(self, "cited_ids", tuple(self.cited_ids))
        object.__setattr__(self, "doc_sources", tuple(self.doc_sources))
        object.__setattr__(self, "citations", tuple(MappingProxyType(dict(c)) for c in self.citations))
        object.__setattr__(self, "retrieval_metrics",
                           MappingProxyType({str(k): float(v) for k, v in self.retrieval_metrics.items()}))
        object.__setattr__(self, "usage", MappingProxyType(dict(self.usage)))
        for name in ("sentences", "document_grades", "citation_checks"):
            object.__setattr__(self, name, tuple(MappingProxyType(dict(x)) for x in getattr(self, name)))
        object.__setattr__(self, "graded_metrics",
                           MappingProxyType({str(k): float(v) for k, v in self.graded_metrics.items()}))
        object.__setattr__(self, "invalid_scores",
                           MappingProxyType({str(k): str(v) for k, v in self.invalid_scores.items()}))

    @property
    def problem_sentences(self) -> list[Mapping[str, Any]]:
        """The sentences judged ``unsupported`` or ``contradicted``, in answer order."""
        return [s for s in self.sentences if s.get("verdict") in ("unsupported", "contradicted")]

    @property
    def failing_citations(self) -> list[Mapping[str, Any]]:
        """The citation checks that do not hold."""
        return [c for c in self.citation_checks if c.get("holds") is False]

    @property
    def recall(self) -> float | None:
        """The first recall@K among the row's retrieval metrics (None when there is none)."""
        return _first_recall(self.retrieval_metrics)

    def scores(self) -> dict[str, float | None]:
        """The three judge scores by name."""
        return {name: getattr(self, name) for name in SCORE_NAMES}

    def value(self, name: str) -> float | None:
        """A judge score or retrieval metric of this row by name (None when absent)."""
        if name in SCORE_NAMES:
            return getattr(self, name)  # type: ignore[no-any-return]
        return self.retrieval_metrics.get(name)

    def min_score(self) -> float | None:
        """The lowest of the three judge scores, None when the judge gave none."""
        present = [v for v in self.scores().values() if v is not None]
        return min(present) if present else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "id": self.id,
            "question": self.question,
            "answer": self.answer,
            "doc_ids": list(self.doc_ids),
            "doc_sources": list(self.doc_sources),
            "cited_ids": list(self.cited_ids),
            "citations": [dict(c) for c in self.citations],
            **self.scores(),
            "retrieval_metrics": dict(self.retrieval_metrics),
            "has_ground_truth": self.has_ground_truth,
            "diagnosis": self.diagnosis,
            "reason": self.reason,
            "error": self.error,
            "judge_error": self.judge_error,
            "trace_id": self.trace_id,
            "usage": dict(self.usage),
            "latency_s": self.latency_s,
            "sentences": [dict(x) for x in self.sentences],
            "document_grades": [dict(x) for x in self.document_grades],
            "citation_checks": [dict(x) for x in self.citation_checks],
            "graded_metrics": dict(self.graded_metrics),
            "citation_precision": self.citation_precision,
            "citation_recall": self.citation_recall,
            "invalid_scores": dict(self.invalid_scores),
            "timestamp": self.timestamp,
        }



def full_audit_fields(turn: RagTurn | None, judgement: Judgement | None) -> dict[str, Any]:
    """The [`RowResult`][ragaudit.evaluation.RowResult] fields of a full audit (sentences, grades, citation checks,
    graded metrics, citation precision/recall) for *turn* and *judgement*; empty when either is None."""
    if turn is None or judgement is None or (not judgement.sentences and not judgement.document_grades):
        return {}
    from ..turn_audit import audit_turn

    audit = audit_turn(turn, judgement)
    return {
        "sentences": tuple(x.to_dict() for x in judgement.sentences),
        "document_grades": tuple(g.to_dict() for g in judgement.document_grades),
        "citation_checks": tuple(c.to_dict() for c in audit.citation_checks),
        "graded_metrics": dict(audit.metrics or {}),
        "citation_precision": audit.citation_precision,
        "citation_recall": audit.citation_recall,
    }


@dataclass(frozen=True, slots=True)
class Summary:
    """The None-aware aggregate of one score or metric over the rows.

    ``mean``, ``min`` and ``max`` are over the ``n`` rows that have a value (None when ``n`` is 0);
    ``missing`` rows have none and are not counted in the mean.
    """

    name: str
    mean: float | None
    n: int
    missing: int
    min: float | None = None
    max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "mean": self.mean, "n": self.n, "missing": self.missing,
                "min": self.min, "max": self.max}


def summarize(name: str, values: Iterable[float | None]) -> Summary:
    """Aggregate *values*, skipping (and counting) the None ones. NaN is rejected."""
    present: list[float] = []
    missing = 0
    for value in values:
        if value is None:
            missing += 1
            continue
        value = float(value)
        if math.isnan(value):
            raise ConfigurationError(f"{name}: NaN is not a score; use None for a missing one")
        present.append(value)
    if not present:
        return Summary(name, None, 0, missing)
    return Summary(name, math.fsum(present) / len(present), len(present), missing, min(present), max(present))


def _histogram(values: Iterable[float]) -> tuple[int, ...]:
    counts = [0] * HISTOGRAM_BINS
    for value in values:
        counts[min(max(int(value * HISTOGRAM_BINS), 0), HISTOGRAM_BINS - 1)] += 1
    return tuple(counts)


_KWARG_AT = re.compile(r"_at_(\d+)$")


def _canonical(name: str, known: Iterable[str]) -> str | None:
    """*name* as the report spells it, or None when it is a valid metric the report lacks.

    Raises ConfigurationError for a name that is neither a judge score nor a metric name.
    """
    known = list(known)
    if name in known:
        return name
    normalised = name.strip().lower().replace("-", "_")
    if normalised in SCORE_NAMES:
        return normalised
    from ..metrics import parse_measure

    try:
        wanted = parse_measure(name.strip())
    except MetricError as exc:
        raise ConfigurationError(
            f"unknown score or metric {name!r}: use one of {', '.join(SCORE_NAMES)} or a retrieval "
            f"metric such as recall@5 ({exc})") from exc
    for candidate in known:
        if candidate in SCORE_NAMES:
            continue
        try:
            if parse_measure(candidate) == wanted:
                return candidate
        except MetricError:
            continue
    return None


@dataclass(frozen=True, slots=True)
class EvaluationReport:
    """The result of [`evaluate_pipeline`][ragaudit.evaluate_pipeline] (or of reading an audit log).

    ``aggregate`` maps each judge score and retrieval metric to its [`Summary`][ragaudit.evaluation.Summary];
    ``distributions`` maps the same names to `HISTOGRAM_BINS` counts over [0, 1];
    ``diagnosis_counts`` counts rows per diagnosis (every one of `DIAGNOSES`, zeros included);
    ``usage`` totals the judge's token usage; ``stats`` are the Auditor's counters; ``sessions`` the
    judged sessions of an audit log (its ``"kind": "session"`` lines, shown as conversations in the
    HTML report). Build one with [`from_rows`][ragaudit.EvaluationReport.from_rows].
    """

    rows: tuple[RowResult, ...]
    aggregate: Mapping[str, Summary]
    distributions: Mapping[str, tuple[int, ...]]
    diagnosis_counts: Mapping[str, int]
    usage: Mapping[str, int]
    judge: str
    metrics: tuple[str, ...]
    threshold: float = 0.5
    stats: Mapping[str, int] = field(default_factory=dict)
    title: str = "ragaudit evaluation report"
    sessions: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[RowResult],
        *,
        judge: str,
        metrics: Sequence[str] = (),
        threshold: float = 0.5,
        stats: Mapping[str, int] | None = None,
        title: str = "ragaudit evaluation report",
        sessions: Sequence[Mapping[str, Any]] = (),
    ) -> EvaluationReport:
        """Aggregate *rows*: None-aware summaries, histograms, diagnosis counts and usage totals.

        *metrics* names the retrieval metrics to report (in order); metrics found in the rows but
        not named are appended, so an audit log's metrics show up without being listed.
        """
        rows = tuple(rows)
        names = list(metrics)
        for row in rows:
            names.extend(m for m in row.retrieval_metrics if m not in names)
        aggregate: dict[str, Summary] = {}
        distributions: dict[str, tuple[int, ...]] = {}
        for name in (*SCORE_NAMES, *names):
            summary = summarize(name, (row.value(name) for row in rows))
            aggregate[name] = summary
            distributions[name] = _histogram(v for row in rows if (v := row.value(name)) is not None)
        counts: dict[str, int] = {d: 0 for d in DIAGNOSES}
        usage: dict[str, int] = {}
        for row in rows:
            counts[row.diagnosis] += 1
            for key, value in row.usage.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    usage[key] = usage.get(key, 0) + int(value)
        return cls(
            rows=rows,
            aggregate=MappingProxyType(aggregate),
            distributions=MappingProxyType(distributions),
            diagnosis_counts=MappingProxyType(counts),
            usage=MappingProxyType(usage),
            judge=judge,
            metrics=tuple(names),
            threshold=threshold,
            stats=MappingProxyType(dict(stats or {})),
            title=title,
            sessions=tuple(sessions),
        )

    # -- derived --------------------------------------------------------------------------------

    @property
    def diagnosis_shares(self) -> dict[str, float]:
        """The share of rows per diagnosis (0.0 for all when there are no rows)."""
        total = len(self.rows)
        return {d: (c / total if total else 0.0) for d, c in self.diagnosis_counts.items()}

    @property
    def errors(self) -> int:
        """How many rows' pipelines raised."""
        return sum(row.error is not None for row in self.rows)

    @property
    def rows_without_ground_truth(self) -> int:
        """How many rows had no relevance ground truth (so no retrieval metrics)."""
        return sum(not row.has_ground_truth for row in self.rows)

    def mean(self, name: str) -> float | None:
        """The mean of a score or metric (None when no row has a value)."""
        key = _canonical(name, self.aggregate)
        return None if key is None else self.aggregate[key].mean

    # -- the CI gate ----------------------------------------------------------------------------

    def gate(self, thresholds: Mapping[str, float]) -> list[str]:
        """Check means against *thresholds* (``{"faithfulness": 0.8, "recall@5": 0.9}``).

        Returns one failure message per threshold not met (empty when all pass), naming the
        metric, its mean and the threshold. A metric with no values fails with "no values". A name
        that is neither a judge score nor a retrieval metric raises ConfigurationError.
        """
        failures: list[str] = []
        for name, threshold in thresholds.items():
            if (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                    or math.isnan(threshold)):
                raise ConfigurationError(f"threshold for {name!r} must be a number, got {threshold!r}")
            key = _canonical(name, self.aggregate)
            summary = self.aggregate.get(key) if key is not None else None
            if summary is None or summary.mean is None:
                missing = summary.missing if summary is not None else len(self.rows)
                failures.append(f"{name}: no values (threshold {threshold:g}; {missing} of "
                                f"{len(self.rows)} rows have none)")
            elif summary.mean < threshold:
                failures.append(f"{name}: mean {summary.mean:.4f} < threshold {threshold:g} "
                                f"(n={summary.n}, missing={summary.missing})")
        return failures

    # -- outputs --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: summary, diagnosis counts and shares, distributions, usage and rows."""
        edges = [i / HISTOGRAM_BINS for i in range(HISTOGRAM_BINS + 1)]
        shares = self.diagnosis_shares
        return {
            "title": self.title,
            "judge": self.judge,
            "metrics": list(self.metrics),
            "threshold": self.threshold,
            "rows_total": len(self.rows),
            "errors": self.errors,
            "rows_without_ground_truth": self.rows_without_ground_truth,
            "summary": {name: s.to_dict() for name, s in self.aggregate.items()},
            "diagnosis": {d: {"count": c, "share": shares[d]} for d, c in self.diagnosis_counts.items()},
            "distributions": {name: {"edges": edges, "counts": list(c)}
                              for name, c in self.distributions.items()},
            "usage": dict(self.usage),
            "stats": dict(self.stats),
            "rows": [row.to_dict() for row in self.rows],
            **({"sessions": [dict(session) for session in self.sessions]} if self.sessions else {}),
        }

    def to_json(self, path: str | os.PathLike[str] | None = None, *, indent: int | None = 2) -> str:
        """The report as JSON (written to *path* too when given)."""
        # scrubbed of every known credential, like everything else ragaudit writes (a proxy may echo a
        # key into a judge's reason)
        text = scrub(json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False))
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        return text

    def to_markdown(self, path: str | os.PathLike[str] | None = None, *, rows: bool = True) -> str:
        """The report as Markdown: summary, diagnosis shares and (with *rows*) the per-row table."""
        lines = [f"# {_md(self.title)}", ""]
        lines.append(f"Judge: `{_md(self.judge)}` · rows: {len(self.rows)} · pipeline errors: {self.errors}"
                     f" · rows without ground truth: {self.rows_without_ground_truth}"
                     f" · diagnosis threshold: {self.threshold:g}")
        if self.usage:
            lines.append("Judge usage: " + ", ".join(f"{k} {v}" for k, v in sorted(self.usage.items())))
        lines += ["", "## Summary", "", "| metric | mean | n | missing | min | max |",
                  "|---|---:|---:|---:|---:|---:|"]
        for s in self.aggregate.values():
            lines.append(f"| {_md(s.name)} | {_num(s.mean)} | {s.n} | {s.missing} | {_num(s.min)} "
                         f"| {_num(s.max)} |")
        lines += ["", "## Diagnosis", "", "| diagnosis | rows | share |", "|---|---:|---:|"]
        shares = self.diagnosis_shares
        for d, c in self.diagnosis_counts.items():
            lines.append(f"| {d} | {c} | {shares[d]:.0%} |")
        if rows:
            header = ["id", "question", *(_short(n) for n in SCORE_NAMES), *self.metrics, "cited",
                      "diagnosis"]
            lines += ["", "## Rows", "", "| " + " | ".join(header) + " |",
                      "|" + "|".join("---" if i < 2 or i >= len(header) - 2 else "---:"
                                     for i in range(len(header))) + "|"]
            for row in self.rows:
                cells = [_md(row.id), _md(_cut(row.question, 70)),
                         *(_num(v) for v in row.scores().values()),
                         *(_num(row.retrieval_metrics.get(m)) for m in self.metrics),
                         _md(", ".join(row.cited_ids)) or "–", row.diagnosis]
                lines.append("| " + " | ".join(cells) + " |")
            notes = [row for row in self.rows if row.diagnosis != "ok"]
            if notes:
                lines += ["", "## Rows to look at", ""]
                for row in notes:
                    why = row.error or row.judge_error or row.reason or "no reason given"
                    lines.append(f"- **{_md(row.id)}** ({row.diagnosis}): {_md(_cut(why, 300))}")
        text = scrub("\n".join(lines) + "\n")
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def to_html(self, path: str | os.PathLike[str] | None = None, *, judge_config: JudgeConfig | None = None) -> str:
        """A self-contained HTML page (inline CSS and SVG, no scripts, no external assets); with *judge_config*
        (a `ragaudit.judges.fitted.JudgeConfig`), a "Fitted judge" section draws its held-out
        agreement before and after the fit."""
        from .html import render_html

        text = scrub(render_html(self, judge_config))
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text


def _short(name: str) -> str:
    return {"faithfulness": "faithful", "context_relevance": "ctx rel", "answer_relevance": "ans rel"}.get(
        name, name)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _cut(text: str | None, limit: int) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _md(text: str | None) -> str:
    if not text:
        return ""
    return " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def assert_rag_quality(
    report: EvaluationReport, thresholds: Mapping[str, float] | None = None, /, **kwargs: float
) -> None:
    """Pytest helper: raise AssertionError naming every threshold the report's means miss.

    Thresholds come as a mapping, as keywords, or both; in keywords ``_at_K`` stands for ``@K``::

        assert_rag_quality(report, faithfulness=0.8, recall_at_5=0.9)
        assert_rag_quality(report, {"faithfulness": 0.8, "ndcg@10": 0.7})
    """
    wanted: dict[str, float] = dict(thresholds or {})
    for key, value in kwargs.items():
        wanted[_KWARG_AT.sub(r"@\1", key)] = value
    if not wanted:
        raise ConfigurationError("assert_rag_quality needs at least one threshold")
    failures = report.gate(wanted)
    if failures:
        raise AssertionError("RAG quality below threshold:\n  " + "\n  ".join(failures))
