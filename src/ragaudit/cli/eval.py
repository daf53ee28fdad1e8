"""The ``ragaudit eval`` and ``ragaudit report`` subcommands (arguments are defined in ``ragaudit.cli``).

Exit codes: 0 all good, 1 a ``--fail-under`` threshold was missed (the failures are printed,
naming each metric), 2 bad usage or input (raised as :class:`~ragaudit.RagAuditError`, printed by
``ragaudit.cli.main``).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .._text import EscapingWriter
from ..errors import ConfigurationError, MetricError
from ..evaluation.report import DIAGNOSES, EvaluationReport, RowResult, diagnose
from ..evaluation.runner import DEFAULT_METRICS, is_pipeline, load_dataset
from ..records import SCORE_NAMES

__all__ = [
    "eval_command",
    "load_object",
    "parse_fail_under",
    "report_command",
    "report_from_audit_log",
    "resolve_judge",
    "resolve_pipeline",
]

_MAX_PRINTED_ROWS = 50  # a bigger report prints its summary only; the files have every row


def parse_fail_under(items: Sequence[str]) -> dict[str, float]:
    """Parse ``--fail-under NAME=VALUE`` items into ``{NAME: VALUE}``.

    NAME is a judge score (faithfulness, context_relevance, answer_relevance) or a retrieval
    metric (recall@5, ndcg@10, ...); VALUE a number in [0, 1]. Raises ConfigurationError naming
    the malformed item.
    """
    out: dict[str, float] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise ConfigurationError(f"--fail-under expects NAME=VALUE (e.g. faithfulness=0.8), got {item!r}")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"--fail-under {item!r}: {raw!r} is not a number") from None
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ConfigurationError(f"--fail-under {item!r}: the threshold must be in [0, 1]")
        normalised = name.lower().replace("-", "_")
        if normalised in SCORE_NAMES:
            name = normalised
        else:
            from ..metrics import parse_measure

            try:
                parse_measure(name)
            except MetricError as exc:
                raise ConfigurationError(
                    f"--fail-under {item!r}: unknown name {name!r}; use one of {', '.join(SCORE_NAMES)} "
                    f"or a retrieval metric such as recall@5 ({exc})") from exc
        out[name] = value
    return out


def load_object(spec: str, what: str) -> Any:
    """Import ``module:attr`` (attr may be dotted). The current directory is importable, as for uvicorn."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{what} must be given as module:attr, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"{what} {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    return obj


def resolve_pipeline(spec: str) -> Any:
    """The pipeline named by *spec*: a runnable or query engine, or a zero-argument factory of one."""
    obj = load_object(spec, "--pipeline")
    if is_pipeline(obj):
        return obj
    if callable(obj):
        try:
            built = obj()
        except TypeError as exc:
            raise ConfigurationError(f"--pipeline {spec!r} is callable but not a zero-argument factory: "
                                     f"{exc}") from exc
        if is_pipeline(built):
            return built
        raise ConfigurationError(f"--pipeline {spec!r}: the factory returned {type(built).__name__}, not a "
                                 "LangChain runnable or LlamaIndex query engine")
    raise ConfigurationError(f"--pipeline {spec!r} is a {type(obj).__name__}, not a LangChain runnable, "
                             "a LlamaIndex query engine or a factory of one")


def resolve_judge(spec: str | None, *, dry_run: bool = False) -> Any:
    """``None`` -> the default judge; ``lexical``; ``chat:<model>``; ``module:attr`` (judge or factory).

    With *dry_run*, a ``chat:`` judge is built even without an API key (it is never called).
    """
    if spec is None:
        from ..judges import default_judge

        return default_judge()
    if spec == "lexical":
        from ..judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec.startswith("chat:"):
        model = spec[len("chat:"):].strip()
        if not model:
            raise ConfigurationError("--judge chat:<model> needs a model name, e.g. chat:gpt-4o-mini")
        from ..judges.chat import ChatRagJudge

        if dry_run and not os.environ.get("OPENAI_API_KEY"):
            return ChatRagJudge(model=model, api_key="dry-run")
        return ChatRagJudge(model=model)
    obj = load_object(spec, "--judge")
    if isinstance(obj, type) or not callable(getattr(obj, "judge", None)):
        if not callable(obj):
            raise ConfigurationError(f"--judge {spec!r} is not a judge (no judge()/ajudge() methods)")
        obj = obj()
    if not (callable(getattr(obj, "judge", None)) and callable(getattr(obj, "ajudge", None))):
        raise ConfigurationError(f"--judge {spec!r} did not give a judge (needs judge() and ajudge())")
    return obj


def _demo_dataset_path() -> str:
    from ..demo.kb import dataset_path

    return str(dataset_path())


def _print_summary(report: EvaluationReport) -> None:
    print(report.to_markdown(rows=len(report.rows) <= _MAX_PRINTED_ROWS), end="")
    if len(report.rows) > _MAX_PRINTED_ROWS:
        print(f"\n({len(report.rows)} rows: see --markdown, --html or --json for each row)")


def _dry_run(dataset: Any, judge_spec: str | None, out: Any = None) -> None:
    out = out or sys.stdout
    from ..judges.cost import estimate_cost

    rows = load_dataset(dataset)
    judge = resolve_judge(judge_spec, dry_run=True)
    name = str(getattr(judge, "name", type(judge).__name__))
    estimate = estimate_cost(judge, rows)
    print(f"dry run: {estimate.rows} rows, judge {name}", file=out)
    print(f"  judge calls: {estimate.calls}"
          + (f" ({estimate.cached_rows} rows already cached)" if estimate.cached_rows else ""), file=out)
    print(f"  tokens (estimated): {estimate.prompt_tokens} prompt + {estimate.completion_tokens} completion "
          f"= {estimate.total_tokens}", file=out)
    for assumption in estimate.assumptions:
        print(f"  assumed: {assumption}", file=out)
    print("  nothing was run", file=out)


def _gate(report: EvaluationReport, thresholds: Mapping[str, float]) -> int:
    failures = report.gate(thresholds)
    if failures:
        print("ragaudit: quality gate FAILED:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    if thresholds:
        passed = ", ".join(f"{k}>={v:g}" for k, v in thresholds.items())
        print(f"ragaudit: quality gate passed ({passed})", file=sys.stderr)
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """``ragaudit eval DATASET [--pipeline module:attr] [--judge ...] [--html ...] [--fail-under ...]``."""
    thresholds = parse_fail_under(args.fail_under or [])
    metrics = list(args.metrics or DEFAULT_METRICS)
    from ..metrics import parse_measure

    for metric in metrics:
        try:
            parse_measure(metric)
        except MetricError as exc:
            raise ConfigurationError(f"-m {metric!r}: {exc}") from exc
    for name in thresholds:  # a gated metric is computed even when -m did not name it
        if name not in SCORE_NAMES and name not in metrics:
            metrics.append(name)
    if args.concurrency < 1:
        raise ConfigurationError(f"--concurrency must be >= 1, got {args.concurrency}")

    dataset = args.dataset
    pipeline_spec = args.pipeline
    if dataset == "demo":
        dataset = _demo_dataset_path()
    elif not os.path.exists(dataset):
        raise ConfigurationError(f"dataset {dataset!r} not found (give a JSONL file, or 'demo')")
    if args.dry_run:
        _dry_run(dataset, args.judge)
        return 0
    judge = resolve_judge(args.judge)

    if pipeline_spec is None:
        if args.dataset != "demo":
            raise ConfigurationError("--pipeline module:attr is required (except for the 'demo' dataset)")
        from ..demo.pipelines import build_langchain_chain

        pipeline = build_langchain_chain()
    else:
        pipeline = resolve_pipeline(pipeline_spec)

    from ..evaluation.runner import evaluate

    report = evaluate(dataset, pipeline, judge=judge, metrics=metrics, concurrency=args.concurrency,
                      progress=not args.no_progress)
    _print_summary(report)
    _write_outputs(report, args)
    return _gate(report, thresholds)


def _write_outputs(report: EvaluationReport, args: argparse.Namespace) -> None:
    for attr, method in (("json_out", report.to_json), ("md_out", getattr(report, "to_markdown", None)),
                         ("html_out", report.to_html)):
        path = getattr(args, attr, None)
        if path and method is not None:
            try:
                method(path)
            except OSError as exc:
                raise ConfigurationError(f"cannot write {path!r}: {exc}") from exc
            print(f"wrote {path}", file=sys.stderr)


# -- report -------------------------------------------------------------------------------------


def _float_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else min(max(value, 0.0), 1.0)


def _row_from_audit(entry: Mapping[str, Any], index: int, threshold: float) -> RowResult:
    documents = [d for d in entry.get("documents") or () if isinstance(d, Mapping)]
    sources = {str(d.get("id")): d.get("source") for d in documents}
    citations: list[dict[str, Any]] = []
    for c in entry.get("citations") or ():
        if isinstance(c, Mapping) and c.get("doc_id"):
            doc_id = str(c["doc_id"])
            citations.append({"doc_id": doc_id, "rank": c.get("rank"), "source": sources.get(doc_id),
                              "method": c.get("method"), "marker": c.get("marker")})
    raw_metrics = entry.get("retrieval_metrics") or {}
    metrics = {str(k): float(v) for k, v in raw_metrics.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(float(v))}
    faithfulness = _float_or_none(entry.get("faithfulness"))
    context_relevance = _float_or_none(entry.get("context_relevance"))
    answer_relevance = _float_or_none(entry.get("answer_relevance"))
    recall = next((v for k, v in metrics.items() if k.startswith("recall")), None)
    usage = {str(k): int(v) for k, v in (entry.get("usage") or {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    relevant = entry.get("relevant_ids")
    has_truth = isinstance(relevant, Mapping) and any(
        isinstance(v, (int, float)) and v >= 1 for v in relevant.values())
    return RowResult(
        id=str(entry.get("turn_id") or f"line-{index + 1}"),
        question=_str_or_none(entry.get("query")),
        answer=_str_or_none(entry.get("answer")),
        doc_ids=tuple(str(d.get("id")) for d in documents),
        doc_sources=tuple(_str_or_none(d.get("source")) for d in documents),
        cited_ids=tuple(str(c["doc_id"]) for c in citations),
        citations=tuple(citations),
        faithfulness=faithfulness,
        context_relevance=context_relevance,
        answer_relevance=answer_relevance,
        retrieval_metrics=metrics,
        has_ground_truth=has_truth,
        diagnosis=diagnose(faithfulness=faithfulness, context_relevance=context_relevance,
                           answer_relevance=answer_relevance, recall=recall, threshold=threshold),
        reason=_str_or_none(entry.get("reason")),
        judge_error=_str_or_none(entry.get("error")),
        trace_id=_str_or_none(entry.get("trace_id")),
        usage=usage,
        **_full_audit_from_entry(entry),
    )


def _full_audit_from_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The full-audit fields of an audit-log line (absent keys in older logs give empty values)."""
    def dicts(key: str) -> tuple[Mapping[str, Any], ...]:
        return tuple(x for x in entry.get(key) or () if isinstance(x, Mapping))

    judged = entry.get("judged_metrics") or {}
    return {
        "sentences": dicts("sentences"),
        "document_grades": dicts("document_grades"),
        "citation_checks": dicts("citation_checks"),
        "judged_metrics": {str(k): float(v) for k, v in judged.items() if isinstance(v, (int, float))
                           and not isinstance(v, bool) and math.isfinite(float(v))},
        "citation_precision": _float_or_none(entry.get("citation_precision")),
        "citation_recall": _float_or_none(entry.get("citation_recall")),
    }


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _lowest_first(row: RowResult) -> tuple[int, int, float]:
    """Turns with an unsupported/contradicted sentence or a failing citation first, then lowest score."""
    flagged = 0 if row.problem_sentences or row.failing_citations else 1
    low = row.min_score()
    return (flagged, 1, 0.0) if low is None else (flagged, 0, low)


def report_from_audit_log(path: str | os.PathLike[str], *, threshold: float = 0.5) -> EvaluationReport:
    """An :class:`EvaluationReport` of the turns in an audit log, flagged turns first, then lowest score.

    Turns with an unsupported or contradicted sentence, or a citation that does not hold, come
    first; then by the minimum of the three scores; turns with no score at all come last.
    """
    from ..tracing.files import read_audit_log

    entries = read_audit_log(path)
    rows = [_row_from_audit(entry, i, threshold)
            for i, entry in enumerate(entries) if isinstance(entry, Mapping)]
    rows.sort(key=_lowest_first)
    judges = sorted({str(e.get("judge")) for e in entries if isinstance(e, Mapping) and e.get("judge")})
    return EvaluationReport.from_rows(rows, judge=", ".join(judges) or "unknown", threshold=threshold,
                                      title=f"ragaudit audit report: {os.path.basename(os.fspath(path))}")


def _print_audit(report: EvaluationReport, limit: int, out: Any = None) -> None:
    # Every line can carry recorded (untrusted) text: control characters are shown, not obeyed.
    out = EscapingWriter(out or sys.stdout)
    total = len(report.rows)
    print(f"{total} turns in the log · judge {report.judge} · flagged sentences first, then lowest scores"
          + (f" (showing {min(limit, total)})" if limit < total else ""), file=out)
    print("", file=out)
    print("mean " + " · ".join(f"{name} {s.mean:.3f} (n={s.n}, missing={s.missing})" if s.mean is not None
                               else f"{name} – (n=0, missing={s.missing})"
                               for name, s in report.aggregate.items()), file=out)
    shares = report.diagnosis_shares
    print("diagnosis " + ", ".join(f"{d} {shares[d]:.0%}" for d in DIAGNOSES if report.diagnosis_counts[d]),
          file=out)
    _print_problem_sentences(report, limit, out)
    for i, row in enumerate(report.rows[:limit], start=1):
        low = row.min_score()
        scores = "  ".join(f"{n}={v:.2f}" if v is not None else f"{n}=–" for n, v in row.scores().items())
        print("", file=out)
        print(f"{i:>3}. min {low:.2f}" if low is not None else f"{i:>3}. min –", f"[{row.diagnosis}]",
              f"turn {row.id}", file=out)
        print(f"     {scores}", file=out)
        if row.retrieval_metrics:
            print("     " + "  ".join(f"{k}={v:.2f}" for k, v in row.retrieval_metrics.items()), file=out)
        if row.judged_metrics or row.document_grades:
            grades = " ".join("–" if g.get("grade") is None else str(g.get("grade")) for g in row.document_grades)
            judged = "  ".join(f"{k}={v:.2f}" for k, v in row.judged_metrics.items())
            print(f"     grades by rank: {grades or '–'}  {judged}", file=out)
        if row.citation_checks:
            print(f"     citation precision {_num(row.citation_precision)}, recall {_num(row.citation_recall)}",
                  file=out)
        print(f"     Q: {_one_line(row.question)}", file=out)
        print(f"     A: {_one_line(row.answer)}", file=out)
        if row.citations:
            for c in row.citations:
                source = f" ({c['source']})" if c.get("source") else ""
                print(f"     cites [{c.get('rank')}] {c['doc_id']}{source} via {c.get('method')}", file=out)
        else:
            print("     cites nothing", file=out)
        if row.judge_error:
            print(f"     judge error: {_one_line(row.judge_error)}", file=out)
        print(f"     reason: {_one_line(row.reason)}", file=out)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _sentence_citations(row: RowResult, index: Any) -> str:
    sources = dict(zip(row.doc_ids, row.doc_sources))
    parts = []
    for check in row.citation_checks:
        if check.get("sentence") == index:
            holds = check.get("holds")
            verdict = "holds" if holds else "does NOT hold" if holds is False else "not checked"
            source = sources.get(str(check.get("doc_id")))
            parts.append(f"[{check.get('rank')}] {check.get('doc_id')}" + (f" ({source})" if source else "")
                         + f": {verdict}")
    return "cites " + ", ".join(parts) if parts else "cites nothing"


def _print_problem_sentences(report: EvaluationReport, limit: int, out: Any) -> None:
    """The sentences judged unsupported or contradicted, and the citations that do not hold, first."""
    lines: list[str] = []
    for row in report.rows:
        for sentence in row.problem_sentences:
            index = sentence.get("index")
            lines.append(f"  turn {row.id[:8]} S{index} {sentence.get('verdict')}: "
                         f"{_one_line(sentence.get('text'), 140)} -- {_sentence_citations(row, index)}")
        problems = {s.get("index") for s in row.problem_sentences}
        for check in row.failing_citations:
            if check.get("sentence") not in problems:
                lines.append(f"  turn {row.id[:8]} S{check.get('sentence')} ({check.get('verdict')}) cites "
                             f"[{check.get('rank')}] {check.get('doc_id')}, which does not support it")
    if not lines:
        if any(row.sentences for row in report.rows):
            print("no unsupported or contradicted sentence, no citation that does not hold", file=out)
        return
    print(f"{len(lines)} unsupported or contradicted sentence(s) and wrong citation(s)"
          + (f" (showing {limit})" if len(lines) > limit else "") + ":", file=out)
    for line in lines[:limit]:
        print(line, file=out)


def _one_line(text: str | None, limit: int = 200) -> str:
    if text is None:
        return "(not recorded)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def report_command(args: argparse.Namespace) -> int:
    """``ragaudit report AUDIT.jsonl [--html out.html] [--json out.json] [--limit N] [--fail-under ...]``."""
    thresholds = parse_fail_under(args.fail_under or [])
    if args.limit < 1:
        raise ConfigurationError(f"--limit must be >= 1, got {args.limit}")
    if not os.path.exists(args.audit_log):
        raise ConfigurationError(f"audit log {args.audit_log!r} not found")
    report = report_from_audit_log(args.audit_log)
    _print_audit(report, args.limit)
    _write_outputs(report, args)
    return _gate(report, thresholds)
