"""What is derived from a judged turn: graded retrieval metrics, citation checks, the audit record.

A full-audit judgement ([`sentences`][ragaudit.Judgement.sentences],
[`document_grades`][ragaudit.Judgement.document_grades]) says which answer sentence each document supports and how
relevant each retrieved document is. From it, on every turn and without ground truth:

- **Graded retrieval metrics** ([`graded_metrics`][ragaudit.turn_audit.graded_metrics]): the grades are the relevance
  labels of the turn's ranking and [`ragaudit.metrics.score_ranking`][ragaudit.metrics.score_ranking] computes NDCG@k
  with the grade as gain, and P@k and MRR@k with *relevant = grade >= 2* (trec_eval semantics: a document the judge did
  not grade counts as not relevant; no grade at all gives None). They are named ``graded_<metric>`` so
  they never mix with the ground-truth metrics (0.1.0 wrote them ``judged_<metric>``; its audit
  logs and span files are read under the new names). Graded **recall** is not defined for one turn: the
  relevant documents the retriever missed were never shown to the judge. Pool many turns with
  ``ragaudit qrels`` and compare retrievers with ``ragaudit metrics`` for that.
- **Citation checks** ([`check_citations`][ragaudit.turn_audit.check_citations]): every explicit citation marker of the
  answer (``[2]``, ``[doc-id]``, a source note, as [`ragaudit.citations`][ragaudit.citations] reads them) belongs to the
  sentence it stands in; it *holds* when the cited document is among the documents the judge says
  support that sentence (None when the judge gave that sentence no verdict).
- **Citation precision and recall** ([`citation_scores`][ragaudit.turn_audit.citation_scores], the ALCE definitions):
  precision = citations that hold / citations checked; recall = supported sentences (verdict ``supported`` or
  ``partially_supported``) with at least one citation that holds / supported sentences. Both are
  None when the answer cites nothing; recall is None when no sentence is supported.

The answer is split into sentences by [`answer_sentences`][ragaudit.turn_audit.answer_sentences], the one splitter used
by the judge prompt, the citation finder and the reports, so sentence numbers line up everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ._compat import GRADED_PREFIX
from ._text import sentence_spans
from ._turn_metrics import DEFAULT_TURN_MEASURES, turn_metrics
from .records import AuditRecord, Citation, CitationCheck, Judgement, RagTurn, RetrievedDoc, SentenceVerdict, TurnAudit

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .content import ContentPolicy

__all__ = [
    "GRADED_MEASURES",
    "GRADED_PREFIX",
    "RELEVANT_GRADE",
    "CitationCheck",
    "TurnAudit",
    "answer_sentences",
    "audit_record",
    "audit_turn",
    "check_citations",
    "citation_scores",
    "consistent_faithfulness",
    "graded_labels",
    "graded_metrics",
]

GRADED_MEASURES: tuple[str, ...] = ("ndcg@10", "P@5", "mrr@10")
"""The graded retrieval metrics put on every fully audited turn (named ``graded_<metric>``)."""

# GRADED_PREFIX (from ._compat, where files of the previous release are read): graded metrics are
# named apart from ground-truth ones, ``graded_ndcg@10``.

RELEVANT_GRADE = 2
"""The UMBRELA grade from which a document counts as relevant for P@k, MRR@k (and pooled recall)."""

_MAX_SENTENCES = 200

COMPUTE: object = object()
"""The default of [`audit_record`][ragaudit.turn_audit.audit_record]'s *ground_truth_metrics*: compute them."""
_BINARY = ("P", "mrr", "recall", "map", "f1", "hit_rate")


def answer_sentences(answer: str | None) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the answer's sentences, the numbering every audit uses (up to 200).

    Deterministic (see `ragaudit._text.sentence_spans`): a citation marker right after the
    full stop stays with its sentence, decimals and file names are not split.
    """
    if not isinstance(answer, str) or not answer.strip():
        return []
    return sentence_spans(answer)[:_MAX_SENTENCES]


def consistent_faithfulness(sentences: Sequence[SentenceVerdict]) -> float | None:
    """Faithfulness from sentence verdicts, the full audit's rule (`ragaudit.judges.llm.fullaudit`):
    supported 1, partially supported 0.5, unsupported and contradicted 0, over the sentences that make
    a claim (1.0 when none does); None when no sentence has a verdict. Also a session's groundedness."""
    judged = [s.verdict for s in sentences if s.verdict is not None]
    if not judged:
        return None
    claims = [v for v in judged if v != "no_claim"]
    if not claims:
        return 1.0
    credit = sum(1.0 if v == "supported" else 0.5 if v == "partially_supported" else 0.0 for v in claims)
    return round(credit / len(claims), 6)


def graded_labels(judgement: Judgement) -> dict[str, int] | None:
    """The judge's grades as qrels for one turn: ``{doc_id: grade}``; None when no document was graded.

    A document graded twice (two retrievers returned it) keeps its highest grade.
    """
    labels: dict[str, int] = {}
    for grade in judgement.document_grades:
        if grade.grade is not None:
            labels[grade.doc_id] = max(grade.grade, labels.get(grade.doc_id, 0))
    return labels or None


def graded_metrics(judgement: Judgement, measures: Iterable[str] = GRADED_MEASURES) -> dict[str, float] | None:
    """The retrieval metrics of the graded ranking, keyed ``graded_<metric>``; None without grades.

    The ranking is the graded documents by rank. Graded metrics (``ndcg``) use the grade as gain;
    binary ones (P, MRR, ...) count grade >= `RELEVANT_GRADE` as relevant. Computed by
    [`ragaudit.metrics.score_ranking`][ragaudit.metrics.score_ranking], so they equal ``ragaudit.metrics`` on the same
    labels.
    """
    labels = graded_labels(judgement)
    if labels is None:
        return None
    from .metrics import parse_measure, score_ranking

    ranked = [g.doc_id for g in sorted(judgement.document_grades, key=lambda g: g.rank)]
    out: dict[str, float] = {}
    for measure in measures:
        name = str(parse_measure(measure))
        level = RELEVANT_GRADE if parse_measure(measure).name in _BINARY else 1
        out[GRADED_PREFIX + name] = score_ranking(ranked, labels, [name], relevance_level=level)[name]
    return out


def check_citations(answer: str | None, documents: Sequence[RetrievedDoc], judgement: Judgement,
                    structured: Sequence[Citation] = ()) -> tuple[CitationCheck, ...]:
    """Each explicit citation of *answer*, per sentence, checked against *judgement*'s verdicts.

    *structured*: the citations a structured answer gave as a field (``method="structured"``): they
    belong to the whole answer, so each holds when the judge lists the document for any sentence
    (its check names the first such sentence, else sentence 1). Empty when the answer has no citation
    and the judgement has no sentence verdicts (a three-score judgement cannot check a citation).
    """
    if not judgement.sentences:
        return ()
    if structured:
        return tuple(_check_structured(cit, judgement) for cit in structured)
    from .citations import sentence_citations

    verdicts = {s.index: s for s in judgement.sentences}
    checks: list[CitationCheck] = []
    for index, citations in enumerate(sentence_citations(answer, documents), start=1):
        verdict = verdicts.get(index)
        for cit in citations:
            holds: bool | None = None
            if verdict is not None and verdict.verdict is not None:
                holds = cit.doc_id in verdict.supporting_doc_ids
            checks.append(CitationCheck(index, cit.doc_id, cit.rank, cit.marker, holds,
                                        verdict.verdict if verdict is not None else None))
    return tuple(checks)


def _check_structured(cit: Citation, judgement: Judgement) -> CitationCheck:
    given = [s for s in judgement.sentences if s.verdict is not None]
    support = next((s for s in given if cit.doc_id in s.supporting_doc_ids), None)
    first = support or (given[0] if given else judgement.sentences[0])
    holds = None if not given else support is not None
    return CitationCheck(first.index, cit.doc_id, cit.rank, cit.marker, holds, first.verdict)


def citation_scores(checks: Sequence[CitationCheck], judgement: Judgement) -> tuple[float | None, float | None]:
    """``(precision, recall)`` of the answer's citations (ALCE definitions, see the module doc).

    Both None when nothing is cited; precision None when no citation could be checked, recall None
    when no sentence is supported.
    """
    if not checks:
        return None, None
    checked = [c for c in checks if c.holds is not None]
    precision = sum(1 for c in checked if c.holds) / len(checked) if checked else None
    supported = [s.index for s in judgement.sentences if s.verdict in ("supported", "partially_supported")]
    if not supported:
        return precision, None
    well_cited = {c.sentence for c in checks if c.holds}
    recall = sum(1 for index in supported if index in well_cited) / len(supported)
    return precision, recall


def audit_turn(turn: RagTurn, judgement: Judgement, measures: Iterable[str] = GRADED_MEASURES) -> TurnAudit:
    """The [`TurnAudit`][ragaudit.records.TurnAudit] of *turn* and its *judgement*. Pure; raises nothing for any
    judgement."""
    checks = check_citations(turn.answer, turn.documents, judgement,
                             [c for c in turn.citations if c.method == "structured"])
    precision, recall = citation_scores(checks, judgement)
    return TurnAudit(
        metrics=graded_metrics(judgement, measures),
        citation_checks=checks,
        citation_precision=precision,
        citation_recall=recall,
        unsupported=sum(1 for s in judgement.sentences if s.problem),
        sentences_missing=sum(1 for s in judgement.sentences if s.verdict is None),
        grades_missing=sum(1 for g in judgement.document_grades if g.grade is None),
    )


def audit_record(
    turn: RagTurn,
    judgement: Judgement | None,
    content_policy: ContentPolicy,
    *,
    unjudged: str | None = None,
    tracer_provider: TracerProvider | None = None,
    judge_started_at: int | None = None,
    ground_truth_metrics: Mapping[str, float] | object | None = COMPUTE,
    measures: Iterable[str] = DEFAULT_TURN_MEASURES,
) -> AuditRecord:
    """The [`AuditRecord`][ragaudit.AuditRecord] of *turn*: every derived value computed here, once.

    *ground_truth_metrics*: when the caller computed them already (for the turn span), pass them
    in (a mapping, or None for "unknown"); left out (`COMPUTE`), they are computed from
    *measures*. The full audit ([`audit_turn`][ragaudit.turn_audit.audit_turn]) is computed for a judgement with
    sentence verdicts or document grades, and only then.
    """
    metrics = turn_metrics(turn, measures) if ground_truth_metrics is COMPUTE else ground_truth_metrics
    audit = None
    if judgement is not None and (judgement.sentences or judgement.document_grades):
        audit = audit_turn(turn, judgement)
    return AuditRecord(turn=turn, content_policy=content_policy, judgement=judgement, unjudged=unjudged,
                       ground_truth_metrics=metrics,  # type: ignore[arg-type]
                       audit=audit, tracer_provider=tracer_provider, judge_started_at=judge_started_at)
