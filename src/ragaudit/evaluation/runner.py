"""Run a dataset through a RAG pipeline with ragaudit attached: every row a traced, judged turn.

The pipeline is a LangChain runnable (the
[`RagAuditCallbackHandler`][ragaudit.integrations.langchain.RagAuditCallbackHandler] goes into each call's config) or a
LlamaIndex query engine ([`ragaudit.integrations.llamaindex.instrument`][ragaudit.integrations.llamaindex.instrument]
for the duration of the run). Rows run concurrently on a bounded thread pool; judging happens in an
[`Auditor`][ragaudit.Auditor], with the same timeout and error rules as online judging; retrieval metrics come from the
documents each turn captured, scored against the row's ground truth with [`ragaudit.metrics`][ragaudit.metrics].
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._jsonl import read_jsonl
from ..auditor import Auditor, Limits, Submission, SubmitStatus
from ..errors import ConfigurationError, MetricError
from ..judges.base import RagJudge
from ..records import SCORE_NAMES, Judgement, RagTurn, normalize_relevance
from .report import EvaluationReport, RowResult, diagnose, full_audit_fields

__all__ = ["DEFAULT_METRICS", "ROW_KEY", "DatasetRow", "evaluate_pipeline", "is_pipeline", "load_dataset"]

DEFAULT_METRICS: tuple[str, ...] = ("recall@5", "mrr@10", "ndcg@10")
"""Retrieval metrics computed when none are named."""

ROW_KEY = "ragaudit.eval_row"
"""Run metadata (LangChain) / instrument tag (LlamaIndex) that ties a turn to its dataset row."""

_ROW_FIELDS = frozenset({"id", "question", "relevant_ids", "qrels", "reference_answer"})


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One dataset row: the question, its ground truth when known, and any extra fields.

    ``relevant`` maps relevant doc ids to labels (``relevant_ids`` given as a list become label 1;
    ``qrels`` keep their graded labels); None when the row gives no ground truth.
    """

    id: str
    question: str
    relevant: Mapping[str, int] | None = None
    reference_answer: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_ground_truth(self) -> bool:
        """True when at least one document is labelled relevant (label >= 1).

        A row whose relevant set is empty (a question the knowledge base does not cover) has no
        ranking to score, so it gets no retrieval metrics rather than a misleading 0.
        """
        return self.relevant is not None and any(label >= 1 for label in self.relevant.values())


def _row_from_mapping(raw: object, index: int, where: str) -> DatasetRow:
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{where}: a row must be a JSON object, got {type(raw).__name__}")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ConfigurationError(f"{where}: 'question' must be a non-empty string, got {question!r}")
    row_id = raw.get("id")
    if row_id is None:
        row_id = f"row-{index + 1}"
    elif isinstance(row_id, bool) or not isinstance(row_id, (str, int)) or str(row_id) == "":
        raise ConfigurationError(f"{where}: 'id' must be a non-empty string or an integer, got {row_id!r}")
    if raw.get("relevant_ids") is not None and raw.get("qrels") is not None:
        raise ConfigurationError(f"{where}: give 'relevant_ids' or 'qrels', not both")
    ground = raw.get("qrels") if raw.get("qrels") is not None else raw.get("relevant_ids")
    if raw.get("qrels") is not None and not isinstance(ground, Mapping):
        raise ConfigurationError(f"{where}: 'qrels' must be an object {{doc_id: label}}, got {ground!r}")
    if ground is not None and not isinstance(ground, (Mapping, list, tuple)):
        raise ConfigurationError(f"{where}: 'relevant_ids' must be a list of ids or an object "
                                 f"{{doc_id: label}}, got {ground!r}")
    try:
        relevant = normalize_relevance(ground)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from exc
    reference = raw.get("reference_answer")
    if reference is not None and not isinstance(reference, str):
        raise ConfigurationError(f"{where}: 'reference_answer' must be a string, got {reference!r}")
    extra = {k: v for k, v in raw.items() if k not in _ROW_FIELDS}
    return DatasetRow(str(row_id), question, relevant, reference, MappingProxyType(extra))


def load_dataset(dataset: str | os.PathLike[str] | Iterable[Mapping[str, Any] | DatasetRow]) -> list[DatasetRow]:
    """Read and check a dataset: a JSONL file path or an iterable of dicts.

    Each row needs ``question``; optional ``id`` (default ``row-N``), ``relevant_ids`` (a list of
    ids, or ``{id: label}``), ``qrels`` (``{id: label}``, graded) and ``reference_answer``; other
    keys are kept as extras. Raises ConfigurationError naming the row (and line) at fault, for an
    empty dataset and for duplicate ids.
    """
    rows: list[DatasetRow] = []
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        for number, raw in read_jsonl(path, "dataset", objects=False):
            rows.append(_row_from_mapping(raw, len(rows), f"dataset {path!r} line {number}"))
    else:
        if isinstance(dataset, Mapping):
            raise ConfigurationError("dataset must be a JSONL path or a list of row dicts, not one dict")
        for index, raw in enumerate(dataset):
            # Rows read already (the command line checks the file before it imports the pipeline).
            rows.append(raw if isinstance(raw, DatasetRow)
                        else _row_from_mapping(raw, index, f"dataset row {index + 1}"))
    if not rows:
        raise ConfigurationError("the dataset has no rows")
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise ConfigurationError(f"dataset: row id {row.id!r} appears more than once")
        seen.add(row.id)
    return rows


# --- pipelines ----------------------------------------------------------------------------------


def _langchain_runnable_type() -> type | None:
    if "langchain_core" not in sys.modules:
        try:
            import langchain_core.runnables  # noqa: F401
        except ImportError:
            return None
    from langchain_core.runnables import Runnable

    return Runnable


def _llamaindex_engine_type() -> type | None:
    try:
        from llama_index.core.base.base_query_engine import BaseQueryEngine
    except ImportError:
        return None
    return BaseQueryEngine


def _framework_of(pipeline: object) -> str | None:
    runnable = _langchain_runnable_type()
    if runnable is not None and isinstance(pipeline, runnable):
        return "langchain"
    engine = _llamaindex_engine_type()
    if engine is not None and isinstance(pipeline, engine):
        return "llamaindex"
    return None


def is_pipeline(obj: object) -> bool:
    """True for a LangChain ``Runnable`` or a LlamaIndex ``BaseQueryEngine``."""
    return _framework_of(obj) is not None


def _langchain_input(runnable: Any, question: str, input_key: str | None) -> Any:
    if input_key is not None:
        return {input_key: question}
    try:
        schema = runnable.get_input_jsonschema()
    except Exception:
        return question
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if schema.get("type") != "object" or not isinstance(properties, Mapping) or not properties:
        return question
    for key in ("question", "input", "query"):
        if key in properties:
            return {key: question}
    required = schema.get("required") or list(properties)
    return {required[0]: question} if len(required) == 1 else question


class _EvalAuditor(Auditor):
    """An Auditor that also remembers every turn submitted to it and what submit did with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.submitted: dict[str, tuple[RagTurn, SubmitStatus]] = {}
        self._submitted_lock = threading.Lock()

    def submit_turn(self, turn: RagTurn, **kwargs: Any) -> Submission:
        submitted = super().submit_turn(turn, **kwargs)
        key = turn.metadata.get(ROW_KEY) if turn.metadata else None
        if isinstance(key, str):
            with self._submitted_lock:
                self.submitted[key] = (turn, submitted.status)
        return submitted


RunRow = Callable[[DatasetRow, str], None]


class _Progress:
    def __init__(self, enabled: bool, total: int) -> None:
        self.run: Any = None
        self.judged: Any = None
        if enabled:
            from tqdm import tqdm

            self.run = tqdm(total=total, desc="pipeline", unit="row", position=0, leave=True)
            self.judged = tqdm(total=total, desc="judged  ", unit="row", position=1, leave=True)

    def ran(self) -> None:
        if self.run is not None:
            self.run.update(1)

    def judged_one(self) -> None:
        if self.judged is not None:
            self.judged.update(1)

    def close(self) -> None:
        for bar in (self.run, self.judged):
            if bar is not None:
                bar.close()


def _ground_truth_tags(row: DatasetRow, key: str) -> dict[str, Any]:
    tags: dict[str, Any] = {ROW_KEY: key}
    if row.relevant is not None:
        tags["ragaudit_relevant_ids"] = dict(row.relevant)
    if row.reference_answer is not None:
        tags["ragaudit_reference_answer"] = row.reference_answer
    return tags


def _langchain_runner(pipeline: Any, auditor: Auditor, measures: Sequence[str], input_key: str | None
                      ) -> tuple[RunRow, Callable[[], None]]:
    from ..integrations.langchain import RagAuditCallbackHandler

    handler = RagAuditCallbackHandler(auditor=auditor, turn_measures=measures)

    def run(row: DatasetRow, key: str) -> None:
        config = {"callbacks": [handler], "metadata": _ground_truth_tags(row, key),
                  "run_id": uuid.uuid4(), "run_name": f"ragaudit eval {row.id}"}
        pipeline.invoke(_langchain_input(pipeline, row.question, input_key), config=config)

    def done() -> None:
        handler.force_flush(None)  # the turns closed above the auditor, handed down to it

    return run, done


def _llamaindex_runner(pipeline: Any, auditor: Auditor, measures: Sequence[str]
                       ) -> tuple[RunRow, Callable[[], None]]:
    from llama_index.core.instrumentation.dispatcher import instrument_tags

    from ..integrations import llamaindex

    # The public seam: instrument for the run, then give back whatever instrumentation was there.
    scope = ExitStack()
    installed = scope.enter_context(llamaindex.instrumented(auditor=auditor, turn_measures=measures))

    def run(row: DatasetRow, key: str) -> None:
        with instrument_tags(_ground_truth_tags(row, key)):
            pipeline.query(row.question)

    def done() -> None:
        try:
            installed.force_flush(None)
        finally:
            scope.close()

    return run, done


def _canonical_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    from ..metrics import parse_measure

    if isinstance(metrics, str):
        raise ConfigurationError("metrics must be a sequence of names such as ['recall@5'], not a string")
    out: list[str] = []
    for name in metrics:
        try:
            canonical = str(parse_measure(name))
        except MetricError as exc:
            raise ConfigurationError(f"metrics: {exc}") from exc
        if canonical not in out:
            out.append(canonical)
    return tuple(out)


def _citations_of(turn: RagTurn) -> tuple[dict[str, Any], ...]:
    sources = {doc.id: doc.source for doc in turn.documents}
    return tuple({"doc_id": c.doc_id, "rank": c.rank, "source": sources.get(c.doc_id), "method": c.method,
                  "marker": c.marker} for c in turn.citations)


def _row_result(
    row: DatasetRow,
    turn: RagTurn | None,
    status: str | None,
    judgement: Judgement | None,
    error: str | None,
    latency_s: float | None,
    measures: Sequence[str],
    threshold: float,
) -> RowResult:
    documents = sorted(turn.documents, key=lambda d: d.rank) if turn is not None else []
    metrics: dict[str, float] = {}
    if error is None and turn is not None and row.has_ground_truth and row.relevant is not None:
        from ..metrics import score_ranking

        metrics = score_ranking([d.id for d in documents], row.relevant, measures)
    judge_error: str | None = None
    scores: dict[str, float | None] = dict.fromkeys(SCORE_NAMES)
    if error is None:
        if judgement is not None:
            scores = judgement.scores()
            judge_error = judgement.error
        elif turn is None:
            judge_error = "not judged: the run retrieved nothing or gave no answer"
        elif status in ("sampled_out", "dropped"):
            judge_error = f"not judged: the auditor reported {status}"
        else:
            judge_error = f"not judged: no judgement arrived (submit status {status})"
    recall = next((v for k, v in metrics.items() if k.startswith("recall")), None)
    return RowResult(
        id=row.id,
        question=row.question,
        answer=turn.answer if turn is not None else None,
        doc_ids=tuple(d.id for d in documents),
        doc_sources=tuple(d.source for d in documents),
        cited_ids=tuple(c.doc_id for c in turn.citations) if turn is not None else (),
        citations=_citations_of(turn) if turn is not None else (),
        retrieval_metrics=metrics,
        has_ground_truth=row.has_ground_truth,
        error=error,
        diagnosis=diagnose(faithfulness=scores["faithfulness"], context_relevance=scores["context_relevance"],
                           answer_relevance=scores["answer_relevance"], recall=recall, error=error,
                           threshold=threshold),
        reason=judgement.reason if judgement is not None and error is None else None,
        judge_error=judge_error,
        trace_id=turn.trace_id if turn is not None else None,
        usage={k: v for k, v in judgement.usage.items() if v is not None} if judgement is not None else {},
        latency_s=latency_s,
        faithfulness=scores["faithfulness"],
        context_relevance=scores["context_relevance"],
        answer_relevance=scores["answer_relevance"],
        **full_audit_fields(turn, judgement if error is None else None),
    )


def evaluate_pipeline(
    dataset: str | os.PathLike[str] | Iterable[Mapping[str, Any] | DatasetRow],
    pipeline: Any,
    *,
    judge: RagJudge | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    concurrency: int = 8,
    progress: bool = True,
    auditor_kwargs: Mapping[str, Any] | None = None,
    threshold: float = 0.5,
    input_key: str | None = None,
) -> EvaluationReport:
    """Run every row of *dataset* through *pipeline*, judge each answer and score each retrieval.

    Args:
        dataset: a JSONL path or a list of dicts (see [`load_dataset`][ragaudit.evaluation.load_dataset]).
        pipeline: a LangChain ``Runnable`` (called with the question, or ``{key: question}`` when
            its input schema is an object with a ``question``/``input``/``query`` field, or
            *input_key*) or a LlamaIndex ``BaseQueryEngine`` (``query(question)``).
        judge: any [`RagJudge`][ragaudit.RagJudge]; None picks the default judge (ChatRagJudge when
            ``OPENAI_API_KEY``/``OPENAI_BASE_URL`` is set, else LexicalJudge).
        metrics: retrieval metrics per row (names as [`ragaudit.metrics.parse_measure`][ragaudit.metrics.parse_measure]
            reads them).
        concurrency: rows run at once, and judgements made at once.
        progress: show progress bars on a terminal (never when stderr is not a TTY).
        auditor_kwargs: extra [`Auditor`][ragaudit.Auditor] arguments (``audit_log``,
            ``tracer_provider``, ``limits``, ...). By default no audit log is written and every
            row is judged (``sample_rate=1``, a queue as long as the dataset).
        threshold: the score at or above which a signal counts as good in the diagnosis.

    A row whose pipeline raised is kept, with its ``error`` and no scores. Ground-truth metrics
    are computed only for rows with at least one relevant document. Raises ConfigurationError
    for a bad dataset, pipeline or argument.
    """
    rows, framework, measures, judge = _checked(dataset, pipeline, judge, metrics, concurrency, threshold)
    judge_name = judge.name
    bar = _Progress(bool(progress) and sys.stderr.isatty(), len(rows))
    auditor, judgements = _eval_auditor(judge, len(rows), concurrency, auditor_kwargs, bar)
    keys = [f"{row.id}#{uuid.uuid4().hex[:8]}" for row in rows]
    try:
        if framework == "langchain":
            run, done = _langchain_runner(pipeline, auditor, measures, input_key)
        else:
            run, done = _llamaindex_runner(pipeline, auditor, measures)
        try:
            errors, latencies = _run_rows(run, rows, keys, concurrency, bar)
        finally:
            done()
        auditor.force_flush(timeout_s=None)
    finally:
        bar.close()
        auditor.shutdown()

    results = []
    for row, key in zip(rows, keys):
        turn, status = auditor.submitted.get(key, (None, None))
        results.append(_row_result(row, turn, status, judgements.get(key), errors.get(key),
                                   latencies.get(key), measures, threshold))
    return EvaluationReport.from_rows(results, judge=judge_name, metrics=measures, threshold=threshold,
                                      stats=auditor.stats())


def _checked(dataset: str | os.PathLike[str] | Iterable[Mapping[str, Any] | DatasetRow], pipeline: Any,
             judge: RagJudge | None, metrics: Sequence[str], concurrency: int, threshold: float
             ) -> tuple[list[DatasetRow], str, tuple[str, ...], RagJudge]:
    """evaluate_pipeline()'s arguments checked: the rows, the framework, the metrics, the judge."""
    rows = load_dataset(dataset)
    framework = _framework_of(pipeline)
    if framework is None:
        raise ConfigurationError(f"pipeline must be a LangChain Runnable or a LlamaIndex query engine, got "
                                 f"{type(pipeline).__name__}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
    if not isinstance(threshold, (int, float)) or math.isnan(threshold) or not 0.0 <= threshold <= 1.0:
        raise ConfigurationError(f"threshold must be in [0, 1], got {threshold!r}")
    measures = _canonical_metrics(metrics)
    if judge is None:
        from ..judges import default_judge

        judge = default_judge()
    if not isinstance(judge, RagJudge):
        raise ConfigurationError(f"judge must be a RagJudge (derive it from ragaudit.BaseRagJudge), "
                                 f"got {type(judge).__name__}")
    return rows, framework, measures, judge


def _eval_auditor(judge: RagJudge, rows: int, concurrency: int, auditor_kwargs: Mapping[str, Any] | None,
                  bar: _Progress) -> tuple[_EvalAuditor, dict[str, Judgement]]:
    """The run's auditor, and the dict it fills with each row's judgement (by row key)."""
    judgements: dict[str, Judgement] = {}
    lock = threading.Lock()

    def on_judgement(turn: RagTurn, judgement: Judgement) -> None:
        key = turn.metadata.get(ROW_KEY) if turn.metadata else None
        if isinstance(key, str):
            with lock:
                judgements[key] = judgement
        bar.judged_one()

    settings: dict[str, Any] = {"audit_log": None, "sample_rate": 1.0,
                                "limits": Limits(max_queue=max(rows, 1), max_concurrency=concurrency)}
    settings.update(auditor_kwargs or {})
    for reserved in ("judge", "on_judgement"):
        if reserved in settings:
            raise ConfigurationError(f"auditor_kwargs must not set {reserved!r}; pass judge= to evaluate_pipeline()")
    return _EvalAuditor(judge, on_judgement=on_judgement, **settings), judgements


def _run_rows(run: RunRow, rows: list[DatasetRow], keys: list[str], concurrency: int, bar: _Progress
              ) -> tuple[dict[str, str], dict[str, float]]:
    """Every row through the pipeline, *concurrency* at once: each failed row's error and each row's latency."""
    errors: dict[str, str] = {}
    latencies: dict[str, float] = {}

    def one(row: DatasetRow, key: str) -> None:
        started = time.perf_counter()
        try:
            run(row, key)
        except Exception as exc:
            errors[key] = f"{type(exc).__name__}: {exc}"
        finally:
            latencies[key] = time.perf_counter() - started

    with ThreadPoolExecutor(max_workers=min(concurrency, len(rows)), thread_name_prefix="ragaudit-eval") as pool:
        futures = [pool.submit(one, row, key) for row, key in zip(rows, keys)]
        for future in as_completed(futures):
            future.result()
            bar.ran()
    return errors, latencies
