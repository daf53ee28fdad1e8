"""LexicalJudge: a deterministic judge built on word overlap. No model, no network: the offline default."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .._text import content_terms, is_number, sentence_spans, split_sentences, strip_markers, term_set
from ..errors import ConfigurationError
from ..records import DocumentGrade, Judgement, JudgeRequest, RetrievedDoc, SentenceVerdict
from ..turn_audit import answer_sentences
from .base import BaseRagJudge

__all__ = ["LexicalJudge"]

_WINDOW = 3  # consecutive context sentences a claim may draw on together
_MAX_DETAIL_SENTENCES = 20
_DETAIL_CHARS = 120
_NAMED_TERMS = 5
_INLINE_CHARS = 8_000  # above this much text, ajudge moves the work to a thread
_CACHED_CHARS = 4_000  # passages up to this size have their sentence terms cached

# A header line as JudgeRequest.build_context writes it: "[2] (source: x.pdf) id=doc-1".
_HEADER_RE = re.compile(r"^[ \t]*\[\d+\][^\n]*\bid=\S+[ \t]*$", re.MULTILINE)
_PARAGRAPH_RE = re.compile(r"\n[ \t]*\n")

_SUBJECT = (
    r"(?:the\s+|these\s+|this\s+|provided\s+|given\s+|available\s+|retrieved\s+|my\s+)*"
    r"(?:context|documents?|sources?|information|text|passages?|excerpts?|knowledge\s+base)"
)
_REFUSAL_RE = re.compile(
    r"\bi\s+(?:do\s*not|don'?t|cannot|can'?t|could\s*not|couldn'?t)\s+"
    r"(?:know|find|tell|say|answer|determine|confirm|see|have\s+(?:enough\s+)?information)"
    r"|\b(?:i'?m|i\s+am)\s+(?:not\s+sure|unable|afraid\s+i)"
    r"|\bnot\s+(?:sure|certain)\b|\bno\s+idea\b"
    r"|\bunable\s+to\s+(?:answer|find|determine|tell|say|confirm)"
    r"|\b(?:cannot|can'?t|could\s*not|couldn'?t)\s+(?:be\s+)?(?:answer|determine|find|tell|say|confirm|help)"
    rf"|\b{_SUBJECT}\s+(?:does|do|did)\s*(?:not|n'?t)\s+"
    r"(?:say|mention|contain|include|specify|state|cover|provide|address|tell|discuss|give|answer)"
    rf"|\b{_SUBJECT}\s+(?:is|are)\s+(?:silent|insufficient)"
    r"|\b(?:no|not\s+enough|insufficient)\s+(?:relevant\s+)?(?:information|context|details|mention)\b"
    r"|\bthere\s+is\s+no\s+(?:mention|information|reference)"
    r"|\bnot\s+(?:mentioned|covered|specified|stated|addressed|discussed|provided)\s+in\s+"
    + _SUBJECT
    + r"|\b(?:is|are)\s+not\s+(?:mentioned|specified|stated|addressed|discussed)\b",
    re.IGNORECASE,
)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _quoted(terms: Iterable[str], limit: int = _NAMED_TERMS) -> str:
    items = list(terms)
    shown = ", ".join(f"'{t}'" for t in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclass(frozen=True, slots=True)
class _Claim:
    text: str
    terms: dict[str, str]
    refusal: bool
    supported: bool = False
    coverage: float = 0.0
    unsupported: tuple[str, ...] = ()
    numbers_missing: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()

    def detail(self) -> dict[str, Any]:
        return {
            "text": _cut(self.text, _DETAIL_CHARS),
            "supported": self.supported,
            "coverage": round(self.coverage, 4),
            "unsupported": self.unsupported,
            "numbers_missing": self.numbers_missing,
            "not_in_context": self.absent,
            "refusal": self.refusal,
        }


class LexicalJudge(BaseRagJudge):
    """A deterministic judge from word overlap: no model, no network, well under a millisecond.

    It is the offline default (used when no LLM endpoint is configured) and a cheap first screen.
    Words are compared after lower-casing, dropping stopwords and question filler, and light
    stemming (``refunds``/``refunded``/``refundable`` all match ``refund``); numbers are compared
    exactly. ``[1]``-style markers and ``(source: ...)`` notes in the answer are ignored. The
    evidence is ``request.context`` (the documents' text when the context is blank), split into
    passages at the ``[n] ... id=...`` headers [`JudgeRequest.build_context`][ragaudit.JudgeRequest.build_context]
    writes and at blank lines. Usage is ``{"calls": 0}``; ``ajudge`` runs inline (no thread hop) for ordinary
    request sizes. A malformed request gives a Judgement with ``error`` set, never an exception.

    **Faithfulness** is the share of the answer's sentences that are supported by the context. A
    sentence is supported when at least ``support_threshold`` of its content words appear within
    three consecutive sentences of one context passage (so facts stitched together from unrelated
    documents do not count), and every number in it appears there too, or in the question (the
    user's own figures, such as "60 days ago", may be repeated). Sentences without content words
    ("Yes.") and declining sentences ("The context does not say ...") make no claim; an answer that
    only declines is faithful (1.0). An empty answer, or one with no checkable claim, gets None.
    With no context at all, an answer that makes claims gets 0.0.

    **Context relevance** is how much of the retrieved text bears on the question's content words:
    ``0.5 * share of question terms found in any document + 0.3 * best single document's share +
    0.2 * share of documents mentioning at least one question term``. The documents are
    ``request.documents`` when given, else the passages of ``request.context``. No context: 0.0.

    **Answer relevance** is the square root of the share of the question's content words the
    answer addresses (an answer need not repeat every word of the question). An answer that only
    declines scores at most 0.2 when the best document covered at least ``support_threshold`` of
    the question terms (it declined an answerable question), and 0.25-0.4 when the context lacked
    them (the honest reply, but still no answer). An empty answer scores 0.0. A question with no
    content words gives None for both relevance scores.

    The reason has one short sentence per score, naming the unsupported sentence and its words
    that are not in the context, and the question terms no document mentions. ``details`` holds
    ``sentences`` (per answer sentence, up to 20: ``text`` cut to 120 characters, ``supported``,
    ``coverage``, ``unsupported``, ``numbers_missing``, ``not_in_context``, ``refusal``),
    ``sentences_total``, ``question_terms``, ``missing_question_terms`` (not in any document) and
    ``answer_missing_question_terms``.

    **The full-audit records** (``sentences``, ``document_grades``, ``method="lexical"``): each
    answer sentence (as [`ragaudit.turn_audit.answer_sentences`][ragaudit.turn_audit.answer_sentences] splits it) is
    ``supported`` by the rule above, with the documents whose own text supports it alone, ``unsupported``, or
    ``no_claim`` (no content words, or a refusal); never ``partially_supported`` or
    ``contradicted``, which words cannot tell. Each document's grade is the share of the question's
    content words it has: 3 all of them, 2 three quarters, 1 any, 0 none. Graded metrics and citation
    checks follow from them as for an LLM judge -- a cheap screen, not a verdict.

    Limits: it sees words, not meaning. Negation and recombination within one passage pass
    ("Gift cards are refundable" against "gift cards are neither refundable nor exchangeable");
    paraphrases and synonyms fail ("money back" against "refund", "laptop" against
    "electronics"); a word used in another sense still counts ("sale price" for "bought on
    sale"); refusals are recognised by common English phrasings only; and relevance is term
    coverage, not whether the question was actually answered. Use an LLM judge
    ([`ChatRagJudge`][ragaudit.ChatRagJudge]) where those matter.
    """

    calls_per_judgement = 0  # word overlap, no model

    def __init__(self, name: str = "lexical", *, support_threshold: float = 0.6) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"LexicalJudge name must be a non-empty string, got {name!r}")
        if (
            isinstance(support_threshold, bool)
            or not isinstance(support_threshold, (int, float))
            or not 0.0 < float(support_threshold) <= 1.0
        ):
            raise ConfigurationError(f"support_threshold must be a number in (0, 1], got {support_threshold!r}")
        self.name = name
        self.support_threshold = float(support_threshold)

    def config_key(self) -> str:
        return f"{self.name}:lexical:support_threshold={self.support_threshold:g}"

    def __repr__(self) -> str:
        return f"LexicalJudge(name={self.name!r}, support_threshold={self.support_threshold:g})"

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        # The work is a fraction of a millisecond for ordinary requests: a thread hop would cost more.
        size = len(request.context) + len(request.answer)
        if size <= _INLINE_CHARS:
            return self.judge(request)
        return await asyncio.to_thread(self.judge, request)

    def judge(self, request: JudgeRequest) -> Judgement:
        started = time.perf_counter()
        try:
            return self._judge(request, started)
        except Exception as exc:  # a judge reports a failure instead of raising into its caller
            return Judgement.failed(
                self.name,
                f"{type(exc).__name__}: {exc}",
                latency_s=time.perf_counter() - started,
                usage={"calls": 0},
            )

    def _judge(self, request: JudgeRequest, started: float) -> Judgement:
        question = content_terms(request.query or "")
        documents = _document_texts(request.documents, request.context)
        doc_terms = [frozenset().union(*_sentence_sets(text)) for text in documents]
        windows = _windows(request.context if request.context.strip() else "\n\n".join(documents))
        answer = request.answer or ""

        context_score, context_reason, missing_in_context = self._context_relevance(question, doc_terms)
        claims = _claims(answer)
        faithfulness, faith_reason, checked = self._faithfulness(claims, windows, question, bool(answer.strip()))
        answer_score, answer_reason, missing_in_answer = self._answer_relevance(question, checked, answer, doc_terms)
        details: dict[str, Any] = {
            "method": "lexical",
            "support_threshold": self.support_threshold,
            "sentences": tuple(c.detail() for c in checked[:_MAX_DETAIL_SENTENCES]),
            "sentences_total": len(checked),
            "question_terms": tuple(question.values()),
            "missing_question_terms": missing_in_context,
            "answer_missing_question_terms": missing_in_answer,
        }
        sentences, grades = self._audit(request, question, windows)
        return Judgement(
            sentences=sentences,
            document_grades=grades,
            faithfulness=faithfulness,
            context_relevance=context_score,
            answer_relevance=answer_score,
            reason=" ".join((faith_reason, context_reason, answer_reason)),
            judge=self.name,
            latency_s=time.perf_counter() - started,
            usage={"calls": 0},
            details=details,
        )

    def _audit(
        self, request: JudgeRequest, question: Mapping[str, str], windows: list[frozenset[str]]
    ) -> tuple[tuple[SentenceVerdict, ...], tuple[DocumentGrade, ...]]:
        """The full-audit records by word overlap (see the class doc): a verdict per answer sentence, a
        grade per document. Never ``partially_supported`` or ``contradicted``: words cannot tell."""
        answer = request.answer or ""
        docs = sorted((d for d in request.documents if isinstance(d, RetrievedDoc)), key=lambda d: d.rank)
        doc_windows = [_windows(d.content[:_MAX_DOCUMENT_CHARS]) for d in docs]
        question_numbers = {t for t in question if is_number(t)}
        vocabulary = frozenset().union(*windows)
        sentences: list[SentenceVerdict] = []
        for index, (start, end) in enumerate(answer_sentences(answer), start=1):
            text = " ".join(answer[start:end].split())
            claim = _Claim(text, content_terms(strip_markers(text)), _REFUSAL_RE.search(text) is not None)
            verdict = "no_claim"
            supporting: list[RetrievedDoc] = []
            if claim.terms and not claim.refusal:
                supported = windows and self._check(claim, windows, vocabulary, question_numbers).supported
                verdict = "supported" if supported else "unsupported"
                if supported:
                    supporting = [d for d, w in zip(docs, doc_windows) if w and self._check(
                        claim, w, frozenset().union(*w), question_numbers).supported]
            sentences.append(SentenceVerdict(
                index=index, text=text, verdict=verdict,  # type: ignore[arg-type]
                supporting_ranks=tuple(d.rank for d in supporting),
                supporting_doc_ids=tuple(d.id for d in supporting),
                start=start, end=end, method="lexical"))
        grades = tuple(DocumentGrade(d.rank, d.id, _grade(question, d.content), "lexical") for d in docs)
        return tuple(sentences), grades

    def _faithfulness(
        self,
        claims: list[_Claim],
        windows: list[frozenset[str]],
        question: Mapping[str, str],
        has_answer: bool,
    ) -> tuple[float | None, str, list[_Claim]]:
        if not has_answer:
            return None, "faithfulness n/a: the answer is empty, so there is nothing to check.", claims
        question_numbers = {t for t in question if is_number(t)}
        vocabulary = frozenset().union(*windows)
        checked = [c if c.refusal else self._check(c, windows, vocabulary, question_numbers) for c in claims]
        assertions = [c for c in checked if not c.refusal]
        if not assertions:
            if any(c.refusal for c in checked):
                return 1.0, "faithfulness 1.00: the answer declines to answer and makes no claim.", checked
            return None, "faithfulness n/a: the answer makes no checkable claim.", checked
        if not windows:
            return (
                0.0,
                f"faithfulness 0.00: there is no context to support the answer's {len(assertions)} "
                f"claim{'s' if len(assertions) != 1 else ''}.",
                checked,
            )
        unsupported = [c for c in assertions if not c.supported]
        score = round(1.0 - len(unsupported) / len(assertions), 4)
        if not unsupported:
            n = len(assertions)
            what = "the answer's sentence is" if n == 1 else f"all {n} answer sentences are"
            return score, f"faithfulness {score:.2f}: {what} supported by the context.", checked
        first = unsupported[0]
        if first.absent:
            why = f"not in the context: {_quoted(first.absent)}"
        elif first.numbers_missing:
            why = f"the context does not give {_quoted(first.numbers_missing)} with these facts"
        else:
            why = f"no passage of the context has {_quoted(first.unsupported)} with the rest of it"
        if len(assertions) == 1:
            what = "the answer's sentence is unsupported"
        else:
            what = f"{len(unsupported)} of {len(assertions)} answer sentences unsupported"
            what += ", e.g." if len(unsupported) > 1 else ","
        reason = f"faithfulness {score:.2f}: {what} '{_cut(first.text, 60)}' ({why})."
        return score, reason, checked

    def _check(
        self,
        claim: _Claim,
        windows: list[frozenset[str]],
        vocabulary: frozenset[str],
        question_numbers: set[str],
    ) -> _Claim:
        terms = claim.terms.keys()
        needed = {t for t in terms if is_number(t)} - question_numbers
        given = len(terms & question_numbers)
        best: frozenset[str] = frozenset()  # the closest window, numbers aside (for the explanation)
        best_cov = 0.0
        ok_cov = 0.0  # the best coverage among windows that state every number of the claim
        for window in windows:
            cov = (len(terms & window - question_numbers) + given) / len(terms)
            if cov > best_cov or not best:
                best, best_cov = window, cov
            if cov > ok_cov and needed <= window:
                ok_cov = cov
        if ok_cov >= self.support_threshold:
            return _Claim(claim.text, claim.terms, False, True, best_cov)
        return _Claim(
            claim.text,
            claim.terms,
            False,
            False,
            best_cov,
            unsupported=tuple(claim.terms[t] for t in terms if t not in best and t not in question_numbers),
            numbers_missing=tuple(claim.terms[t] for t in terms if t in needed and t not in best),
            absent=tuple(claim.terms[t] for t in terms if t not in vocabulary and t not in question_numbers),
        )

    def _context_relevance(
        self, question: Mapping[str, str], documents: Sequence[frozenset[str]]
    ) -> tuple[float | None, str, tuple[str, ...]]:
        if not documents:
            return 0.0, "context relevance 0.00: nothing was retrieved.", tuple(question.values())
        if not question:
            return None, "context relevance n/a: the question has no content words to match.", ()
        q = question.keys()
        covered: set[str] = set()
        best = 0
        touching = 0
        for terms in documents:
            hits = q & terms
            covered |= hits
            best = max(best, len(hits))
            touching += bool(hits)
        union_share = len(covered) / len(q)
        score = round(0.5 * union_share + 0.3 * best / len(q) + 0.2 * touching / len(documents), 4)
        missing = tuple(question[t] for t in question if t not in covered)
        if missing:
            which = "no retrieved document mentions" if len(documents) > 1 else "the retrieved document lacks"
            reason = f"context relevance {score:.2f}: {which} {_quoted(missing)}."
        else:
            reason = (
                f"context relevance {score:.2f}: the retrieved documents mention all {len(q)} question "
                f"term{'s' if len(q) != 1 else ''}, the best one {best} of them"
            )
            idle = len(documents) - touching
            reason += f"; {idle} of {len(documents)} documents mention none." if idle else "."
        return score, reason, missing

    def _answer_relevance(
        self,
        question: Mapping[str, str],
        claims: list[_Claim],
        answer: str,
        documents: Sequence[frozenset[str]],
    ) -> tuple[float | None, str, tuple[str, ...]]:
        if not answer.strip():
            return 0.0, "answer relevance 0.00: the answer is empty.", tuple(question.values())
        if not question:
            return None, "answer relevance n/a: the question has no content words to match.", ()
        assertions = [c for c in claims if not c.refusal]
        used = assertions or claims
        answer_terms: set[str] = set()
        for claim in used:
            answer_terms.update(claim.terms)
        q = question.keys()
        share = len(q & answer_terms) / len(q)
        raw = math.sqrt(share)
        missing = tuple(question[t] for t in question if t not in answer_terms)
        if not assertions and any(c.refusal for c in claims):
            best_doc = max((len(q & d) for d in documents), default=0) / len(q)
            if best_doc >= self.support_threshold:
                score = round(0.2 * raw, 4)
                return (
                    score,
                    f"answer relevance {score:.2f}: the answer declines although the context covers "
                    f"{round(best_doc * len(q))} of the {len(q)} question terms.",
                    missing,
                )
            score = round(0.25 + 0.15 * raw, 4)
            lacking = [question[t] for t in q if not any(t in d for d in documents)]
            because = f" (the context lacks {_quoted(lacking)})" if lacking else ""
            return score, f"answer relevance {score:.2f}: the answer declines to answer{because}.", missing
        score = round(raw, 4)
        if not missing:
            return (
                score,
                f"answer relevance {score:.2f}: the answer addresses all {len(q)} question terms.",
                (),
            )
        return (
            score,
            f"answer relevance {score:.2f}: the answer addresses {len(q) - len(missing)} of {len(q)} "
            f"question terms (not {_quoted(missing)}).",
            missing,
        )


def _grade(question: Mapping[str, str], content: str) -> int | None:
    """A lexical UMBRELA grade: the share of the question's content words the document has.

    3 when it has all of them, 2 from three quarters, 1 when it has any, else 0; None for a
    question without content words. A weak screen: it cannot tell a document that answers from
    one that merely uses the same words.
    """
    if not question:
        return None
    terms = frozenset().union(*_sentence_sets(content[:_MAX_DOCUMENT_CHARS]))
    share = len(question.keys() & terms) / len(question)
    return 3 if share >= 1.0 else 2 if share >= 0.75 else 1 if share > 0 else 0


def _claims(answer: str) -> list[_Claim]:
    claims = []
    for sentence in split_sentences(strip_markers(answer)):
        terms = content_terms(sentence)
        refusal = _REFUSAL_RE.search(sentence) is not None
        if terms or refusal:
            claims.append(_Claim(sentence, terms, refusal))
    return claims


_MAX_DOCUMENT_CHARS = 24_000


def _document_texts(documents: Sequence[RetrievedDoc], context: str) -> list[str]:
    # Each document is read up to the judge's context cap: a 5 MB page must not cost seconds of CPU.
    texts = [d.content[:_MAX_DOCUMENT_CHARS] for d in documents if d.content.strip()]
    return texts or _passages(context)


def _passages(context: str) -> list[str]:
    parts: list[str] = []
    for chunk in _HEADER_RE.split(context):
        parts.extend(p for p in _PARAGRAPH_RE.split(chunk) if p.strip())
    return parts


def _windows(context: str) -> list[frozenset[str]]:
    """Term sets of up to ``_WINDOW`` consecutive sentences, within each passage of *context*."""
    windows: list[frozenset[str]] = []
    for passage in _passages(context):
        sentences = _sentence_sets(passage)
        if len(sentences) <= _WINDOW:
            if sentences:
                windows.append(frozenset().union(*sentences))
            continue
        for i in range(len(sentences) - _WINDOW + 1):
            windows.append(frozenset().union(*sentences[i : i + _WINDOW]))
    return windows


def _sentence_sets(text: str) -> tuple[frozenset[str], ...]:
    """The content stems of each sentence of *text* (sentences without any are left out)."""
    if len(text) <= _CACHED_CHARS:
        return _cached_sentence_sets(text)
    return _compute_sentence_sets(text)


def _compute_sentence_sets(text: str) -> tuple[frozenset[str], ...]:
    sets = (term_set(text[s:e]) for s, e in sentence_spans(text))
    return tuple(s for s in sets if s)


# Retrieved chunks recur across turns (and appear both as documents and in the context): cache them.
_cached_sentence_sets = lru_cache(maxsize=2048)(_compute_sentence_sets)
