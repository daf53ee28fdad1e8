"""What a full audit gives beyond the three scores: judged retrieval metrics and citation checks.

A full-audit judgement (:attr:`~ragaudit.Judgement.sentences`, :attr:`~ragaudit.Judgement.document_grades`)
says which answer sentence each document supports and how relevant each retrieved document is.
From it, on every turn and without ground truth:

- **Judged retrieval metrics** (:func:`judged_metrics`): the grades are the relevance labels of the
  turn's ranking and :func:`ragaudit.metrics.score_ranking` computes NDCG@k with the grade as gain,
  and P@k and MRR@k with *relevant = grade >= 2* (trec_eval semantics: a document the judge did not
  grade counts as not relevant; no grade at all gives None). They are named ``judged_<metric>`` so
  they never mix with the ground-truth metrics. Judged **recall** is not defined for one turn: the
  relevant documents the retriever missed were never shown to the judge. Pool many turns with
  ``ragaudit qrels`` and compare retrievers with ``ragaudit metrics`` for that.
- **Citation checks** (:func:`check_citations`): every explicit citation marker of the answer
  (``[2]``, ``[doc-id]``, a source note, as :mod:`ragaudit.citations` reads them) belongs to the
  sentence it stands in; it *holds* when the cited document is among the documents the judge says
  support that sentence (None when the judge gave that sentence no verdict).
- **Citation precision and recall** (:func:`citation_scores`, the ALCE definitions): precision =
  citations that hold / citations checked; recall = supported sentences (verdict ``supported`` or
  ``partially_supported``) with at least one citation that holds / supported sentences. Both are
  None when the answer cites nothing; recall is None when no sentence is supported.

The answer is split into sentences by :func:`answer_sentences`, the one splitter used by the judge
prompt, the citation finder and the reports, so sentence numbers line up everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._text import sentence_spans
from .records import Citation, Judgement, RagTurn, RetrievedDoc

__all__ = [
    "JUDGED_MEASURES",
    "JUDGED_PREFIX",
    "RELEVANT_GRADE",
    "CitationCheck",
    "TurnAudit",
    "answer_sentences",
    "audit_turn",
    "check_citations",
    "citation_scores",
    "judged_labels",
    "judged_metrics",
]

JUDGED_MEASURES: tuple[str, ...] = ("ndcg@10", "P@5", "mrr@10")
"""The judged retrieval metrics put on every fully audited turn (named ``judged_<metric>``)."""

JUDGED_PREFIX = "judged_"
"""Judged metrics are named apart from ground-truth ones: ``judged_ndcg@10``."""

RELEVANT_GRADE = 2
"""The UMBRELA grade from which a document counts as relevant for P@k, MRR@k (and pooled recall)."""

_MAX_SENTENCES = 200
_BINARY = ("P", "mrr", "recall", "map", "f1", "hit_rate")


def answer_sentences(answer: str | None) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the answer's sentences, the numbering every audit uses (up to 200).

    Deterministic (see :func:`ragaudit._text.sentence_spans`): a citation marker right after the
    full stop stays with its sentence, decimals and file names are not split.
    """
    if not isinstance(answer, str) or not answer.strip():
        return []
    return sentence_spans(answer)[:_MAX_SENTENCES]


def judged_labels(judgement: Judgement) -> dict[str, int] | None:
    """The judge's grades as qrels for one turn: ``{doc_id: grade}``; None when no document was graded.

    A document graded twice (two retrievers returned it) keeps its highest grade.
    """
    labels: dict[str, int] = {}
    for grade in judgement.document_grades:
        if grade.grade is not None:
            labels[grade.doc_id] = max(grade.grade, labels.get(grade.doc_id, 0))
    return labels or None


def judged_metrics(judgement: Judgement, measures: Iterable[str] = JUDGED_MEASURES) -> dict[str, float] | None:
    """The judged retrieval metrics of the graded ranking, keyed ``judged_<metric>``; None without grades.

    The ranking is the graded documents by rank. Graded metrics (``ndcg``) use the grade as gain;
    binary ones (P, MRR, ...) count grade >= :data:`RELEVANT_GRADE` as relevant. Computed by
    :func:`ragaudit.metrics.score_ranking`, so they equal ``ragaudit.metrics`` on the same labels.
    """
    labels = judged_labels(judgement)
    if labels is None:
        return None
    from .metrics import parse_measure, score_ranking

    ranked = [g.doc_id for g in sorted(judgement.document_grades, key=lambda g: g.rank)]
    out: dict[str, float] = {}
    for measure in measures:
        name = str(parse_measure(measure))
        level = RELEVANT_GRADE if parse_measure(measure).name in _BINARY else 1
        out[JUDGED_PREFIX + name] = score_ranking(ranked, labels, [name], relevance_level=level)[name]
    return out


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """One explicit citation of one answer sentence, checked against the judge's sentence verdict.

    ``sentence`` is the 1-based sentence number, ``doc_id``/``rank`` the cited document, ``marker``
    the marker as written. ``holds`` is True when the judge lists the document among the sentence's
    supporting documents, False when it does not, None when the judge gave the sentence no verdict.
    ``verdict`` is the sentence's verdict (None when not given).
    """

    sentence: int
    doc_id: str
    rank: int
    marker: str | None
    holds: bool | None
    verdict: str | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"sentence": self.sentence, "doc_id": self.doc_id, "rank": self.rank, "marker": self.marker,
                "holds": self.holds, "verdict": self.verdict}


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


@dataclass(frozen=True, slots=True)
class TurnAudit:
    """Everything derived from one fully audited turn, for spans, the audit log, sinks and reports.

    ``metrics`` are the judged retrieval metrics (None without grades); ``citation_checks`` one per
    explicit citation; ``citation_precision``/``citation_recall`` as in :func:`citation_scores`.
    ``unsupported`` counts ``unsupported`` and ``contradicted`` sentences, ``sentences_missing``
    the sentences the judge gave no verdict, ``grades_missing`` the documents it gave no grade.
    """

    metrics: Mapping[str, float] | None
    citation_checks: tuple[CitationCheck, ...]
    citation_precision: float | None
    citation_recall: float | None
    unsupported: int
    sentences_missing: int
    grades_missing: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "judged_metrics": dict(self.metrics) if self.metrics is not None else None,
            "citation_checks": [c.to_dict() for c in self.citation_checks],
            "citation_precision": self.citation_precision,
            "citation_recall": self.citation_recall,
            "unsupported_sentences": self.unsupported,
            "sentences_missing": self.sentences_missing,
            "grades_missing": self.grades_missing,
        }


def audit_turn(turn: RagTurn, judgement: Judgement, measures: Iterable[str] = JUDGED_MEASURES) -> TurnAudit:
    """The :class:`TurnAudit` of *turn* and its *judgement*. Pure; raises nothing for any judgement."""
    checks = check_citations(turn.answer, turn.documents, judgement,
                             [c for c in turn.citations if c.method == "structured"])
    precision, recall = citation_scores(checks, judgement)
    return TurnAudit(
        metrics=judged_metrics(judgement, measures),
        citation_checks=checks,
        citation_precision=precision,
        citation_recall=recall,
        unsupported=sum(1 for s in judgement.sentences if s.problem),
        sentences_missing=sum(1 for s in judgement.sentences if s.verdict is None),
        grades_missing=sum(1 for g in judgement.document_grades if g.grade is None),
    )
