"""The demo run behind ``ragaudit demo``: the return-policy knowledge base, its eight questions, audited.

Offline by default: Chroma's in-memory client, the hashed embedding, the extractive stand-in
generator and [`LexicalJudge`][ragaudit.LexicalJudge]. With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set
(and no ``--offline``) a real model generates (``RAGAUDIT_MODEL``, default gpt-4o-mini) and
[`ChatRagJudge`][ragaudit.ChatRagJudge] judges. Spans go to a JSONL file (and over OTLP when an endpoint is
given), judgements to the audit log; a table of the judged answers is printed.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .._text import EscapingWriter
from ..errors import ConfigurationError
from ..judges import default_judge
from ..records import Judgement, RagTurn
from .careless import CARELESS_MODEL, MISTAKES
from .generator import STANDIN_MODEL, model_from_env
from .kb import DOCUMENTS, QRELS, QUESTIONS, DemoQuestion
from .pipelines import DEFAULT_K, real_model_configured

if TYPE_CHECKING:
    from _typeshed import SupportsWrite
    from opentelemetry.sdk.trace import TracerProvider

    from ..auditor import Auditor

__all__ = ["DemoResult", "print_report", "run_demo"]

_SECTIONS = {d.id: d.section for d in DOCUMENTS}
_QUESTION_CHARS = 45
_REASON_CHARS = 240
_FLUSH_TIMEOUT_S = 120.0
_SCORE_LABELS = {
    "faithfulness": "faithfulness",
    "context_relevance": "context relevance",
    "answer_relevance": "answer relevance",
}


@dataclass
class DemoResult:
    """What one demo run produced: per question id its turn and judgement (when judged) or error."""

    framework: str
    generator: str
    judge: str
    turns: dict[str, RagTurn] = field(default_factory=dict)
    judgements: dict[str, Judgement] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    spans: dict[str, int] = field(default_factory=dict)
    audit_lines: int = 0
    otlp_endpoint: str | None = None


def _otlp_url(explicit: str | None) -> str | None:
    """The OTLP/HTTP traces URL: ``--otlp-endpoint`` (a base URL), else the OTel variables, else None."""
    base = explicit
    if not base:
        traces_url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if traces_url:
            return traces_url  # the signal-specific variable is the full URL, used as is
        base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            return None
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def _tracer_provider(traces: str | os.PathLike[str], otlp_url: str | None) -> TracerProvider:
    # The demo's own provider, passed explicitly to the handler and the Auditor: the process-wide
    # provider is left alone (tracing.configure() would install one globally).
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ..tracing import JsonlSpanExporter

    provider = TracerProvider(resource=Resource.create(
        {SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "ragaudit-demo"}))
    Path(traces).parent.mkdir(parents=True, exist_ok=True)
    provider.add_span_processor(BatchSpanProcessor(JsonlSpanExporter(traces)))
    if otlp_url:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_url)))
    return provider


def _line_count(path: str | os.PathLike[str]) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except FileNotFoundError:
        return 0


def run_demo(
    *,
    framework: str = "langchain",
    traces: str | os.PathLike[str] = "ragaudit-traces.jsonl",
    audit_log: str | os.PathLike[str] = "ragaudit-audit.jsonl",
    otlp_endpoint: str | None = None,
    offline: bool = False,
    questions: Sequence[DemoQuestion] = QUESTIONS,
    careless: bool = False,
) -> DemoResult:
    """Run *questions* through the demo pipeline of *framework* with ragaudit attached.

    Judging runs in the background, as in production; this waits for every judgement before it
    returns. The span file and audit log are appended to. *careless* runs the offline careless
    generator (`ragaudit.demo.careless`: scripted mistakes) instead of any other generator,
    judged offline.
    """
    if framework not in ("langchain", "llamaindex"):
        raise ConfigurationError(f"framework must be 'langchain' or 'llamaindex', got {framework!r}")
    from ..auditor import Auditor
    from ..judges.lexical import LexicalJudge
    from ..tracing import read_spans

    real = real_model_configured(offline) and not careless
    judge = default_judge() if real else LexicalJudge()
    endpoint = _otlp_url(otlp_endpoint)
    base_url = os.environ.get("OPENAI_BASE_URL")
    generator = (f"{model_from_env()} (OpenAI-compatible API{' at ' + base_url if base_url else ''})"
                 if real else CARELESS_MODEL if careless else STANDIN_MODEL)
    judge_name = judge.name
    result = DemoResult(framework, generator, judge_name, otlp_endpoint=endpoint)
    by_query = {q.text: q.id for q in questions}
    lock = threading.Lock()

    def on_judgement(turn: RagTurn, judgement: Judgement) -> None:
        qid = by_query.get(turn.query)
        if qid is not None:
            with lock:
                result.turns[qid] = turn
                result.judgements[qid] = judgement

    spans_before = _line_count(traces)
    audit_before = _line_count(audit_log)
    provider = _tracer_provider(traces, endpoint)
    auditor = Auditor(judge, mode="background", audit_log=audit_log, tracer_provider=provider,
                      on_judgement=on_judgement)
    try:
        runner = _run_langchain if framework == "langchain" else _run_llamaindex
        runner(questions, auditor, provider, real, result, careless)
        auditor.force_flush(timeout_s=_FLUSH_TIMEOUT_S)
    finally:
        auditor.shutdown(timeout_s=_FLUSH_TIMEOUT_S)
        provider.force_flush()
        provider.shutdown()
    result.stats = auditor.stats()
    result.audit_lines = _line_count(audit_log) - audit_before
    for span in read_spans(traces)[spans_before:]:
        kind = _span_kind(str(span.get("name", "")))
        result.spans[kind] = result.spans.get(kind, 0) + 1
    return result


def _span_kind(name: str) -> str:
    from ..tracing import conventions as c

    if name == c.SPAN_TURN:
        return "turn"
    if name == c.SPAN_JUDGE:
        return "judge"
    if name.startswith(c.SPAN_RETRIEVAL):
        return "retrieval"
    if name.startswith(c.SPAN_CHAT):
        return "chat"
    return "other"


def _ask_all(questions: Sequence[DemoQuestion], ask: Callable[[DemoQuestion, dict[str, Any]], object],
             result: DemoResult) -> None:
    """Call ``ask(question, ground_truth)`` for each question; a failure is noted and the demo goes on."""
    for question in questions:
        ground_truth: dict[str, Any] = {"ragaudit_reference_answer": question.reference_answer,
                                        "demo_question_id": question.id}
        # q6 and q7 have no relevant document: retrieval metrics are undefined for them (trec_eval
        # skips such queries), so they get no ground truth rather than an empty one scored 0.
        if QRELS[question.id]:
            ground_truth["ragaudit_relevant_ids"] = sorted(QRELS[question.id])
        try:
            ask(question, ground_truth)
        except Exception as exc:  # one failed question (say, the model endpoint) must not end the demo
            result.errors[question.id] = f"{type(exc).__name__}: {exc}"


def _run_langchain(questions: Sequence[DemoQuestion], auditor: Auditor, provider: TracerProvider, real: bool,
                   result: DemoResult, careless: bool = False) -> None:
    from ..integrations.langchain import RagAuditCallbackHandler
    from .careless import langchain_careless
    from .generator import langchain_openai
    from .pipelines import build_langchain_chain

    chain = build_langchain_chain(langchain_careless() if careless else langchain_openai() if real else None)
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)

    def ask(question: DemoQuestion, ground_truth: dict[str, Any]) -> None:
        chain.invoke(question.text, config={"callbacks": [handler], "metadata": ground_truth,
                                            "run_name": "ragaudit-demo"})

    _ask_all(questions, ask, result)
    handler.force_flush(_FLUSH_TIMEOUT_S)  # turns close above the auditor, on the closing thread


def _run_llamaindex(questions: Sequence[DemoQuestion], auditor: Auditor, provider: TracerProvider, real: bool,
                    result: DemoResult, careless: bool = False) -> None:
    from llama_index.core.instrumentation.dispatcher import instrument_tags

    from ..integrations import llamaindex
    from .careless import llamaindex_careless
    from .generator import llamaindex_openai
    from .pipelines import build_llamaindex_engine

    engine = build_llamaindex_engine(llamaindex_careless() if careless else llamaindex_openai() if real else None)

    def ask(question: DemoQuestion, ground_truth: dict[str, Any]) -> None:
        with instrument_tags(ground_truth):
            engine.query(question.text)

    instrumentation = llamaindex.instrument(auditor=auditor, tracer_provider=provider)
    try:
        _ask_all(questions, ask, result)
        instrumentation.force_flush(_FLUSH_TIMEOUT_S)  # turns close on the integration's own thread
    finally:
        llamaindex.uninstrument()


# -- the report ------------------------------------------------------------------------------------


def _fmt(score: float | None) -> str:
    return "—" if score is None else f"{score:.2f}"


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _recall(turn: RagTurn | None, question: DemoQuestion) -> float | None:
    relevant = QRELS[question.id]
    if turn is None or not relevant:
        return None
    from ..metrics import score_ranking

    ranked = [d.id for d in sorted(turn.documents, key=lambda d: d.rank)]
    return score_ranking(ranked, relevant, [f"recall@{DEFAULT_K}"]).get(f"recall@{DEFAULT_K}")


def _citation_precision(turn: RagTurn | None, judgement: Judgement | None) -> str:
    """ALCE citation precision of the turn's citations (the judge's sentence verdicts), — when unknown."""
    if turn is None or judgement is None:
        return "—"
    from ..turn_audit import audit_turn

    return _fmt(audit_turn(turn, judgement).citation_precision)


def _cited(turn: RagTurn | None) -> str:
    if turn is None:
        return "—"
    names = []
    for citation in sorted(turn.citations, key=lambda c: c.rank):
        names.append(f"[{citation.rank}] {_SECTIONS.get(citation.doc_id, citation.doc_id)}")
    return ", ".join(names) or "none"


_PART_RE = re.compile(r"\b(faithfulness|context relevance|answer relevance)\b(?=\s+(?:\d|n/a))",
                      re.IGNORECASE)


def _reason_for(reason: str | None, score_name: str) -> str:
    """The part of *reason* about *score_name* when the judge labels its parts (LexicalJudge does)."""
    if not reason:
        return "(no reason given)"
    label = _SCORE_LABELS[score_name]
    parts = list(_PART_RE.finditer(reason))
    for i, match in enumerate(parts):
        if match.group(1).lower() == label:
            end = parts[i + 1].start() if i + 1 < len(parts) else len(reason)
            return _cut(reason[match.start():end], _REASON_CHARS)
    return _cut(reason, _REASON_CHARS)


_MISTAKE_LABELS = {"wrong_number": "a wrong number", "wrong_citation": "a citation to the wrong document",
                   "unsupported_claim": "an unsupported claim"}
_LABEL_RE = re.compile(r"^\[[^\[\]]{20,}\]\s*")  # the stand-ins' "[offline ...]" label, not a citation


def _graded(judgement: Judgement | None, measure: str) -> float | None:
    if judgement is None:
        return None
    from ..turn_audit import GRADED_PREFIX, graded_metrics

    found = graded_metrics(judgement, [f"{measure}@{DEFAULT_K}"])
    return None if found is None else found[f"{GRADED_PREFIX}{measure}@{DEFAULT_K}"]


def _grades(judgement: Judgement | None) -> str:
    if judgement is None or not judgement.document_grades:
        return "—"
    return " ".join("—" if g.grade is None else str(g.grade) for g in judgement.document_grades)


def _problems(turn: RagTurn | None, judgement: Judgement | None) -> tuple[list[str], list[str]]:
    """(lines about unsupported/contradicted sentences, lines about citations that do not hold)."""
    if turn is None or judgement is None:
        return [], []
    from ..turn_audit import check_citations

    checks = check_citations(turn.answer, turn.documents, judgement)
    by_sentence: dict[int, list[str]] = {}
    for check in checks:
        verdict = "holds" if check.holds else "does NOT hold" if check.holds is False else "not checked"
        by_sentence.setdefault(check.sentence, []).append(
            f"[{check.rank}] {_SECTIONS.get(check.doc_id, check.doc_id)}: {verdict}")
    sentences = []
    for sentence in judgement.sentences:
        if sentence.problem:
            cites = "; cites " + ", ".join(by_sentence[sentence.index]) if sentence.index in by_sentence \
                else "; cites nothing"
            text = _LABEL_RE.sub("", sentence.text)
            sentences.append(f"S{sentence.index} {sentence.verdict}: \"{_cut(text, 110)}\"{cites}")
    wrong = []
    for check in checks:
        if check.holds is False and check.verdict in ("supported", "partially_supported"):
            support = next((s for s in judgement.sentences if s.index == check.sentence), None)
            by = ", ".join(f"[{r}] {_SECTIONS.get(d, d)}" for r, d in
                           zip(support.supporting_ranks, support.supporting_doc_ids)) if support else ""
            wrong.append(f"S{check.sentence} cites [{check.rank}] {_SECTIONS.get(check.doc_id, check.doc_id)}, "
                         f"but the sentence is supported by {by or 'another document'}: the citation does NOT hold")
    return sentences, wrong


def _print_sentence_problems(result: DemoResult, questions: Sequence[DemoQuestion],
                             say: Callable[..., None]) -> None:
    say("")
    found = False
    for question in questions:
        sentences, wrong = _problems(result.turns.get(question.id), result.judgements.get(question.id))
        if sentences or wrong:
            if not found:
                say("Unsupported or contradicted sentences, and citations that do not hold (sentence audit):")
                found = True
            say(f"  {question.id} {_cut(question.text, 60)}")
            for line in sentences + wrong:
                say(f"      {line}")
    judged = [j for j in result.judgements.values() if j.error is None]
    missing = sum(1 for j in judged for s in j.sentences if s.verdict is None)
    if not any(j.sentences for j in judged):
        say("Unsupported or contradicted sentences: not judged -- the judge gave no sentence verdicts "
            "(three-score protocol, or no judgement).")
    elif not found and not missing:
        say("Unsupported or contradicted sentences: none -- every answer sentence is supported and every "
            "citation holds.")
    elif not found:
        say(f"Unsupported or contradicted sentences: none found; {missing} sentence(s) got no verdict.")
    elif missing:
        say(f"  ({missing} sentence(s) got no verdict from the judge)")


def _print_caught(result: DemoResult, questions: Sequence[DemoQuestion], say: Callable[..., None]) -> None:
    say("")
    say("Planted mistakes (careless generator) and whether the audit caught them:")
    for qid, mistake in MISTAKES.items():
        sentences, wrong = _problems(result.turns.get(qid), result.judgements.get(qid))
        caught = bool(wrong) if mistake == "wrong_citation" else bool(sentences)
        how = (wrong or sentences or ["no unsupported sentence and no failing citation found"])[0]
        say(f"  {qid} {_MISTAKE_LABELS[mistake]:<34} {'CAUGHT' if caught else 'MISSED'}: {how}")


def _table(rows: list[list[str]], out: SupportsWrite[str]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    numeric = {2, 3, 4, 5, 6, 7}
    for n, row in enumerate(rows):
        cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        print("  ".join(cells).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def print_report(result: DemoResult, *, traces: str | os.PathLike[str], audit_log: str | os.PathLike[str],
                 questions: Sequence[DemoQuestion] = QUESTIONS, out: TextIO | None = None) -> None:
    """Print the demo's report: what ran, the judged table, low scores with reasons, where output went."""
    # Answers, reasons and errors are recorded (untrusted) text: control characters are shown, not obeyed.
    escaped = EscapingWriter(out or sys.stdout)
    say: Callable[..., None] = lambda *a: print(*a, file=escaped)  # noqa: E731
    _print_header(result, questions, say)
    _print_table(result, questions, escaped, say)
    _print_sentence_problems(result, questions, say)
    _print_unjudged(result, questions, say)
    _print_low_scores(result, questions, say)
    if result.generator == CARELESS_MODEL:
        _print_caught(result, questions, say)
    say("")
    _print_outputs(result, traces, audit_log, say)


def _print_header(result: DemoResult, questions: Sequence[DemoQuestion], say: Callable[..., None]) -> None:
    """What ran: the knowledge base, the generator (saying plainly when it is no model), the judge."""
    framework = ("LangChain (LCEL chain)" if result.framework == "langchain"
                 else "LlamaIndex (VectorStoreIndex)")
    say(f"ragaudit demo: return-policy knowledge base ({len(DOCUMENTS)} documents in Chroma's in-memory "
        f"client, k={DEFAULT_K}), {len(questions)} questions, {framework}")
    if result.generator == STANDIN_MODEL:
        say(f"  generator: {STANDIN_MODEL} -- an OFFLINE EXTRACTIVE STAND-IN, not a language model:")
        say("             it only copies sentences of the retrieved documents "
            "(set OPENAI_API_KEY or OPENAI_BASE_URL for a real model)")
    elif result.generator == CARELESS_MODEL:
        say(f"  generator: {CARELESS_MODEL} -- an OFFLINE CARELESS GENERATOR with SCRIPTED MISTAKES, not a "
            "language model:")
        say("             the stand-in's answers with " + ", ".join(
            f"{_MISTAKE_LABELS[m]} on {qid}" for qid, m in MISTAKES.items()) + " (see ragaudit.demo.careless)")
    else:
        say(f"  generator: {result.generator}")
    if result.judge == "lexical":
        say(f"  judge:     {result.judge} (deterministic word overlap, no model); scores in [0, 1], — = no score")
        say("             a weak screen, not a verdict: it sees words, not meaning (negations, paraphrases and "
            "contradictions pass);")
        say("             for verdicts use an LLM judge: ChatRagJudge (full audit) via OPENAI_API_KEY / "
            "OPENAI_BASE_URL")
    else:
        say(f"  judge:     {result.judge} (LLM judge, full audit); scores in [0, 1], — = no score")
    say("")


def _print_table(result: DemoResult, questions: Sequence[DemoQuestion], out: SupportsWrite[str],
                 say: Callable[..., None]) -> None:
    """The judged table, one row per question, and what its columns mean."""
    rows = [["#", "question", "faithful", "ctx rel", "ans rel", f"recall@{DEFAULT_K}", f"gNDCG@{DEFAULT_K}",
             f"gP@{DEFAULT_K}", "grades", "cited", "cite P"]]
    for question in questions:
        turn = result.turns.get(question.id)
        judgement = result.judgements.get(question.id)
        scores = judgement.scores() if judgement is not None else dict.fromkeys(_SCORE_LABELS)
        rows.append([
            question.id, _cut(question.text, _QUESTION_CHARS), _fmt(scores["faithfulness"]),
            _fmt(scores["context_relevance"]), _fmt(scores["answer_relevance"]),
            _fmt(_recall(turn, question)), _fmt(_graded(judgement, "ndcg")), _fmt(_graded(judgement, "P")),
            _grades(judgement), _cited(turn), _citation_precision(turn, judgement),
        ])
    _table(rows, out)
    say(f"  recall@{DEFAULT_K} — : no document in the knowledge base is relevant (not covered).")
    say("  grades: the judge's grade of each retrieved document, by rank (0 unrelated, 1 related, 2 partly "
        "answers, 3 answers); no ground truth needed.")
    say(f"  gNDCG@{DEFAULT_K}: graded NDCG, from those grades -- the ORDER of what was retrieved (1.00 when "
        f"all are equally poor); gP@{DEFAULT_K}: the share graded >= 2.")
    say("  cite P: citation precision (ALCE): the share of the answer's citations whose document the judge "
        "found supports the sentence they follow.")


def _print_unjudged(result: DemoResult, questions: Sequence[DemoQuestion], say: Callable[..., None]) -> None:
    """Every question without a judgement, and why (a pipeline error, a judge error, none arrived)."""
    problems = {qid: err for qid, err in result.errors.items()}
    for question in questions:
        judgement = result.judgements.get(question.id)
        if judgement is not None and judgement.error:
            problems.setdefault(question.id, f"judge error: {judgement.error}")
        elif judgement is None and question.id not in problems:
            problems[question.id] = "no judgement arrived"
    if problems:
        say("")
        say("Not judged / errors:")
        for qid, err in problems.items():
            say(f"  {qid}: {_cut(err, _REASON_CHARS)}")


def _print_low_scores(result: DemoResult, questions: Sequence[DemoQuestion], say: Callable[..., None]) -> None:
    """The unfaithful answers and the lowest relevance scores, each with the judge's reason."""
    judged = [(q, result.judgements[q.id]) for q in questions if q.id in result.judgements]
    say("")
    unfaithful = [(q, j) for q, j in judged if j.faithfulness is not None and j.faithfulness < 0.5]
    if unfaithful:
        say("Faithfulness < 0.5 (the answer says what the retrieved documents do not):")
        for question, judgement in unfaithful:
            say(f"  {question.id} {_fmt(judgement.faithfulness)}  {question.text}")
            say(f"      {_reason_for(judgement.reason, 'faithfulness')}")
    else:
        say("Faithfulness < 0.5: none.")
    for score_name in ("context_relevance", "answer_relevance"):
        scored = sorted(((getattr(j, score_name), q.id, q, j) for q, j in judged
                         if getattr(j, score_name) is not None), key=lambda x: (x[0], x[1]))
        if not scored:
            continue
        say("")
        say(f"Lowest {_SCORE_LABELS[score_name]}:")
        for value, _, question, judgement in scored[:3]:
            say(f"  {question.id} {_fmt(value)}  {question.text}")
            say(f"      {_reason_for(judgement.reason, score_name)}")


def _print_outputs(result: DemoResult, traces: str | os.PathLike[str], audit_log: str | os.PathLike[str],
                   say: Callable[..., None]) -> None:
    """Where the spans and the audit log went, and the auditor's counts."""
    spans = ", ".join(f"{n} {kind}" for kind, n in sorted(result.spans.items())) or "none"
    say(f"Spans:     {sum(result.spans.values())} written to {traces} ({spans})")
    if result.otlp_endpoint:
        say(f"           also sent over OTLP/HTTP to {result.otlp_endpoint}")
    say(f"Audit log: {result.audit_lines} lines appended to {audit_log}  (view: ragaudit report {audit_log})")
    stats = ", ".join(f"{k}={v}" for k, v in result.stats.items())
    say(f"Auditor:   {stats}")
