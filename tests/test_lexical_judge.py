"""LexicalJudge and the text utilities under it, on the demo's return-policy knowledge base."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ragaudit import ConfigurationError, Judgement, JudgeRequest, LexicalJudge, RagJudge, RetrievedDoc
from ragaudit._text import content_terms, sentence_spans, split_sentences, stem, strip_markers, tokens

# The five documents of the demo knowledge base (facts from shared/demo-kb.md), all from one PDF.
KB: dict[str, str] = {
    "refund_eligibility": (
        "Every purchase has a 30-day refund window: any customer gets a full refund within 30 days of "
        "purchase. The item must be unused and in its original packaging. The money goes back to the "
        "original payment method within 5–7 business days."
    ),
    "exchanges": (
        "Items can be exchanged within 45 days of purchase for an item of equal or lower value. Size "
        "exchanges on clothing are free of charge. For an item of higher value, the customer pays the "
        "difference."
    ),
    "electronics": (
        "Electronics have a 15-day return window, because they lose value fast. Opened software and "
        "digital downloads cannot be refunded. Defective electronics can come back within 90 days with "
        "proof of the defect from an authorised service centre."
    ),
    "shipping": (
        "We pay return shipping for defective items. For non-defective returns the customer pays the "
        "shipping. Loyalty programme members get free return labels whatever the reason."
    ),
    "gifts": (
        "With a gift receipt, gifts are returned for store credit only. Without a gift receipt, the return "
        "is valued at the lowest sale price of the last 90 days. Gift cards and prepaid cards are neither "
        "refundable nor exchangeable."
    ),
}

REFUND_WINDOW = "What is the refund window for ordinary purchases?"
SIZE_EXCHANGE = "Are size exchanges on clothing free?"
LAPTOP = "My laptop turned out to be defective; I bought it 60 days ago. What can I do?"
DOWNLOAD = "Can I get my money back for a digital download I bought yesterday?"
GIFT = "What happens if I return a gift without the gift receipt?"
INTERNATIONAL = "Do you refund international orders?"
# The demo's wording. "Bought on sale" alone is lexically covered ("purchase", "sale price" in the gifts
# document): a word-overlap judge cannot tell that this sale is another sense of the word.
SALE = "Can I return something I bought on sale at a discount?"
LOYALTY = "As a loyalty member, is return shipping free for electronics too?"

JUDGE = LexicalJudge()


def _trigrams(text: str) -> Counter[str]:
    padded = " " + re.sub(r"\W+", " ", text.lower()) + " "
    return Counter(padded[i : i + 3] for i in range(len(padded) - 2))


def trigram_cosine(query: str, doc: str) -> float:
    """An offline 'embedding' similarity: cosine of character trigram counts."""
    a, b = _trigrams(query), _trigrams(doc)
    dot = sum(n * b[g] for g, n in a.items())
    return dot / math.sqrt(sum(n * n for n in a.values()) * sum(n * n for n in b.values()))


def word_overlap(query: str, doc: str) -> float:
    """A bag-of-words similarity over raw lowercase words (no stemming, no stopwords removed)."""
    q, d = set(re.findall(r"\w+", query.lower())), set(re.findall(r"\w+", doc.lower()))
    return len(q & d) / math.sqrt(len(q) * len(d))


SIMILARITIES = [trigram_cosine, word_overlap]


def retrieve(query: str, similarity: Callable[[str, str], float] = trigram_cosine, k: int = 2) -> list[RetrievedDoc]:
    ranked = sorted(KB, key=lambda section: -similarity(query, KB[section]))[:k]
    return [
        RetrievedDoc(
            id=section,
            content=KB[section],
            score=similarity(query, KB[section]),
            rank=i + 1,
            source="return_policy.pdf",
            metadata={"section": section},
        )
        for i, section in enumerate(ranked)
    ]


def request(query: str, answer: str, docs: list[RetrievedDoc] | None = None, **kwargs: object) -> JudgeRequest:
    docs = retrieve(query, **kwargs) if docs is None else docs  # type: ignore[arg-type]
    context = JudgeRequest.build_context(docs)
    return JudgeRequest(query=query, answer=answer, context=context, documents=tuple(docs))


def doc(text: str, rank: int = 1, doc_id: str | None = None) -> RetrievedDoc:
    return RetrievedDoc(id=doc_id or f"d{rank}", content=text, rank=rank)


# --- text utilities ------------------------------------------------------------------------------


def test_stemmer_conflates_the_inflections_the_kb_uses() -> None:
    groups = [
        ("refund", "refunds", "refunded", "refundable", "refunding"),
        ("purchase", "purchases", "purchased", "purchasing"),
        ("exchange", "exchanges", "exchanged", "exchangeable"),
        ("ship", "shipping", "shipped"),
        ("policy", "policies"),
        ("size", "sizes"),
        ("value", "values", "valued"),
        ("buy", "bought", "purchase"),
        ("make", "made", "making"),
    ]
    for group in groups:
        assert len({stem(w) for w in group}) == 1, group
    assert stem("class") == "class" and stem("analysis") == "analysis"
    assert stem("30") == "30"
    assert stem("gift") != stem("gifted") or stem("gift") == "gift"


def test_tokens_keep_numbers_and_drop_punctuation() -> None:
    assert tokens("Refunds within 5–7 business days; 1,000 items at 4.50 (30.0%)") == [
        "refunds",
        "within",
        "5",
        "7",
        "business",
        "days",
        "1000",
        "items",
        "at",
        "4.5",
        "30",
    ]
    assert tokens("forty-five days, twenty one, fifteen") == ["45", "days", "21", "15"]
    assert tokens("The customer’s item") == ["the", "customer", "item"]
    assert tokens("") == []


def test_content_terms_drop_stopwords_and_keep_first_surface_form() -> None:
    terms = content_terms("What is the refund window for ordinary purchases? Refunds!")
    assert list(terms) == ["refund", "window", "purchas"]
    assert terms["purchas"] == "purchases"
    assert content_terms("Can I do it?") == {}


def test_sentence_splitting_handles_abbreviations_decimals_and_markers() -> None:
    text = (
        "Refunds take 5.5 days, e.g. by card. Ask Dr. Smith at No. 5 Main St. today! Really? "
        "See return_policy.pdf for more. Opened software cannot be refunded. [1] Next."
    )
    assert split_sentences(text) == [
        "Refunds take 5.5 days, e.g. by card.",
        "Ask Dr. Smith at No. 5 Main St. today!",
        "Really?",
        "See return_policy.pdf for more.",
        "Opened software cannot be refunded. [1]",
        "Next.",
    ]


def test_sentence_splitting_on_lists_and_paragraphs_but_not_wrapped_lines() -> None:
    text = "Intro line\nwrapped here.\n\nSecond paragraph\n- first item\n- second item\n1. numbered"
    assert split_sentences(text) == [
        "Intro line wrapped here.",
        "Second paragraph",
        "- first item",
        "- second item",
        "1. numbered",
    ]
    spans = sentence_spans("  A b.  C d.  ")
    assert [("  A b.  C d.  ")[s:e] for s, e in spans] == ["A b.", "C d."]
    assert split_sentences("") == [] and split_sentences(" \n\n ") == []


def test_strip_markers_removes_citations_only() -> None:
    assert strip_markers("Yes [1, 2] (source: a.pdf) ok").split() == ["Yes", "ok"]
    assert strip_markers("(see below) fine") == "(see below) fine"


# --- construction --------------------------------------------------------------------------------


def test_construction_validates_and_identifies() -> None:
    judge = LexicalJudge()
    assert judge.name == "lexical" and isinstance(judge, RagJudge)
    assert "0.6" in judge.config_key() and "0.6" in repr(judge)
    assert LexicalJudge("strict", support_threshold=0.9).config_key() != judge.config_key()
    for bad in (0, 0.0, -0.1, 1.5, float("nan"), "0.6", True, None):
        with pytest.raises(ConfigurationError, match="support_threshold"):
            LexicalJudge(support_threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="name"):
        LexicalJudge("")


# --- the demo knowledge base ---------------------------------------------------------------------

GROUNDED_VS_HALLUCINATED = [
    (
        DOWNLOAD,
        "Opened software and digital downloads cannot be refunded.",
        "Yes, you can get a full refund within 30 days for digital downloads, and we also add a 10% bonus voucher.",
    ),
    (
        REFUND_WINDOW,
        "You can get a full refund within 30 days of purchase, as long as the item is unused and in its "
        "original packaging.",
        "The refund window is 60 days, and refunds are paid in cash at any store.",
    ),
    (
        SIZE_EXCHANGE,
        "Yes, size exchanges on clothing are free of charge.",
        "Size exchanges cost a 5 dollar handling fee unless you have a premium membership.",
    ),
    (
        GIFT,
        "Without a gift receipt, the return is valued at the lowest sale price of the last 90 days.",
        "Without a gift receipt you receive a full cash refund at the original price, no questions asked.",
    ),
    (
        LAPTOP,
        "Defective electronics can come back within 90 days with proof of the defect from an authorised "
        "service centre, so you can still return it.",
        "Laptops are covered by a 2-year manufacturer warranty, so contact the manufacturer for a replacement.",
    ),
    (
        LOYALTY,
        "Yes. Loyalty programme members get free return labels whatever the reason, so that includes electronics.",
        "No, electronics always ship back at the customer's expense, and a 20% restocking fee applies.",
    ),
    (
        INTERNATIONAL,
        "The retrieved documents do not mention international orders.",
        "Yes, international orders are refunded within 60 days, minus customs fees.",
    ),
    (
        SALE,
        "I could not find anything about sale items in the retrieved documents.",
        "Sale items can be returned within 14 days for store credit only.",
    ),
]


def _mean(j: Judgement) -> float:
    return sum(s for s in j.scores().values() if s is not None) / 3


@pytest.mark.parametrize("similarity", SIMILARITIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("query", "grounded", "hallucinated"),
    GROUNDED_VS_HALLUCINATED,
    ids=[q[:30] for q, _, _ in GROUNDED_VS_HALLUCINATED],
)
def test_grounded_answer_ranks_above_hallucinated_one(
    similarity: Callable[[str, str], float], query: str, grounded: str, hallucinated: str
) -> None:
    good = JUDGE.judge(request(query, grounded, similarity=similarity))
    bad = JUDGE.judge(request(query, hallucinated, similarity=similarity))
    assert good.error is None and bad.error is None
    assert good.faithfulness == 1.0
    assert bad.faithfulness == 0.0
    assert good.context_relevance == bad.context_relevance  # same question, same retrieval
    assert _mean(good) > _mean(bad)
    assert "unsupported" in (bad.reason or "")


def test_the_hallucinated_voucher_is_named_in_the_reason() -> None:
    query, _, hallucinated = GROUNDED_VS_HALLUCINATED[0]
    j = JUDGE.judge(request(query, hallucinated))
    assert j.faithfulness == 0.0
    assert "'bonus'" in (j.reason or "") and "'voucher'" in (j.reason or "") and "'10'" in (j.reason or "")
    sentence = j.details["sentences"][0]
    assert sentence["supported"] is False
    assert "10" in sentence["numbers_missing"]
    assert {"bonus", "voucher"} <= set(sentence["not_in_context"])


@pytest.mark.parametrize("similarity", SIMILARITIES, ids=lambda f: f.__name__)
def test_uncovered_questions_get_lower_context_relevance_than_direct_ones(
    similarity: Callable[[str, str], float],
) -> None:
    def relevance(query: str) -> float:
        j = JUDGE.judge(request(query, "I don't know.", similarity=similarity))
        assert j.context_relevance is not None
        return j.context_relevance

    direct = [relevance(REFUND_WINDOW), relevance(SIZE_EXCHANGE)]
    uncovered = [relevance(INTERNATIONAL), relevance(SALE)]
    assert min(direct) > max(uncovered)
    assert max(uncovered) < 0.8 <= min(direct)


def test_the_packaged_demo_knowledge_base_ranks_the_same_way() -> None:
    from ragaudit.demo.kb import DOCUMENTS, QUESTIONS

    texts = {d.id: d.text for d in DOCUMENTS}

    def relevance(query: str) -> float:
        ranked = sorted(texts, key=lambda i: -trigram_cosine(query, texts[i]))[:2]
        docs = [doc(texts[i], rank, i) for rank, i in enumerate(ranked, start=1)]
        j = JUDGE.judge(request(query, "I don't know.", docs))
        assert j.context_relevance is not None
        return j.context_relevance

    direct = [relevance(q.text) for q in QUESTIONS if q.kind == "direct"]
    uncovered = [relevance(q.text) for q in QUESTIONS if q.kind == "not covered"]
    assert len(direct) == len(uncovered) == 2
    assert min(direct) > max(uncovered)


def test_uncovered_question_reason_names_the_missing_terms() -> None:
    j = JUDGE.judge(request(INTERNATIONAL, "Any customer gets a full refund within 30 days of purchase."))
    assert "context relevance" in (j.reason or "")
    assert "no retrieved document mentions 'international', 'orders'" in (j.reason or "")
    assert j.details["missing_question_terms"] == ("international", "orders")


def test_direct_question_reason_says_all_terms_are_covered() -> None:
    j = JUDGE.judge(request(SIZE_EXCHANGE, "Yes, size exchanges on clothing are free of charge."))
    assert j.context_relevance == 1.0 and j.answer_relevance == 1.0 and j.faithfulness == 1.0
    assert "mention all 4 question terms" in (j.reason or "")
    assert "addresses all 4 question terms" in (j.reason or "")


def test_all_five_documents_as_context() -> None:
    docs = [doc(text, rank, section) for rank, (section, text) in enumerate(KB.items(), start=1)]
    j = JUDGE.judge(request(LOYALTY, GROUNDED_VS_HALLUCINATED[5][1], docs))
    assert j.faithfulness == 1.0
    # Every document mentions returns or electronics, so all of them touch the question.
    assert j.context_relevance is not None and j.context_relevance > 0.8


# --- faithfulness rules --------------------------------------------------------------------------

CONTEXT_DOCS = [
    doc("Electronics have a 15-day return window. Opened software cannot be refunded.", 1),
    doc("Any customer gets a full refund within 30 days of purchase.", 2),
]


def test_numbers_must_match_exactly() -> None:
    ok = JUDGE.judge(
        request("How long is the refund window?", "A full refund is possible within 30 days.", CONTEXT_DOCS)
    )
    wrong = JUDGE.judge(
        request("How long is the refund window?", "A full refund is possible within 45 days.", CONTEXT_DOCS)
    )
    assert ok.faithfulness == 1.0
    assert wrong.faithfulness == 0.0
    assert "'45'" in (wrong.reason or "")


def test_a_number_must_come_from_the_passage_that_supports_the_claim() -> None:
    # 30 days is the general window, not the electronics one: the words and the number are both in the
    # context, but not in the same passage.
    j = JUDGE.judge(request("Can I return electronics?", "Electronics can be returned within 30 days.", CONTEXT_DOCS))
    assert j.faithfulness == 0.0
    assert "'30'" in (j.reason or "")
    right = JUDGE.judge(request("Can I return electronics?", "Electronics have a 15-day return window.", CONTEXT_DOCS))
    assert right.faithfulness == 1.0


def test_numbers_from_the_question_may_be_repeated() -> None:
    docs = [doc("Defective electronics can come back within 90 days with proof of the defect.")]
    j = JUDGE.judge(
        request(
            LAPTOP,
            "Bought 60 days ago, defective electronics can still come back within 90 days with proof.",
            docs,
        )
    )
    assert j.faithfulness == 1.0


def test_share_of_supported_sentences() -> None:
    answer = (
        "Opened software cannot be refunded. Any customer gets a full refund within 30 days. "
        "Refunds are paid in gold bars by courier drones."
    )
    j = JUDGE.judge(request("Refunds?", answer, CONTEXT_DOCS))
    assert j.faithfulness == pytest.approx(2 / 3, abs=1e-3)
    assert "1 of 3 answer sentences unsupported" in (j.reason or "")
    assert "'gold'" in (j.reason or "")
    assert [s["supported"] for s in j.details["sentences"]] == [True, True, False]


def test_support_threshold_is_respected() -> None:
    # 3 of the 4 content words (refund, 30, day; not "swiftly") are in the context.
    answer = "Refunds swiftly within 30 days."
    lenient = LexicalJudge(support_threshold=0.6).judge(request("Refunds?", answer, CONTEXT_DOCS))
    strict = LexicalJudge(support_threshold=0.9).judge(request("Refunds?", answer, CONTEXT_DOCS))
    assert lenient.faithfulness == 1.0
    assert strict.faithfulness == 0.0
    assert lenient.details["sentences"][0]["coverage"] == pytest.approx(0.75)


def test_citation_markers_in_the_answer_are_not_claims() -> None:
    j = JUDGE.judge(
        request(
            "Refunds?",
            "Any customer gets a full refund within 30 days [2]. (source: return_policy.pdf)",
            CONTEXT_DOCS,
        )
    )
    assert j.faithfulness == 1.0


def test_context_without_documents_is_split_into_passages() -> None:
    context = JudgeRequest.build_context(CONTEXT_DOCS)
    with_docs = JUDGE.judge(
        JudgeRequest(
            query="Can I return electronics?",
            answer="Electronics can be returned within 30 days.",
            context=context,
            documents=tuple(CONTEXT_DOCS),
        )
    )
    text_only = JUDGE.judge(
        JudgeRequest(
            query="Can I return electronics?",
            answer="Electronics can be returned within 30 days.",
            context=context,
        )
    )
    assert text_only.scores() == with_docs.scores()
    plain = JUDGE.judge(
        JudgeRequest(
            query="Refund window?",
            answer="Refunds within 30 days.",
            context="Refunds within 30 days.\n\nShipping is free.",
        )
    )
    assert plain.faithfulness == 1.0
    assert plain.context_relevance == pytest.approx(0.5 * 0.5 + 0.3 * 0.5 + 0.2 * 0.5)


# --- refusals ------------------------------------------------------------------------------------

REFUSALS = [
    "I don't know.",
    "I do not know the answer to that.",
    "The context does not say.",
    "The provided documents don't mention this.",
    "I'm not sure.",
    "There is no information about that in the documents.",
    "I cannot answer that based on the retrieved context.",
    "This is not mentioned in the context.",
]


@pytest.mark.parametrize("refusal", REFUSALS)
def test_refusal_when_the_context_had_the_answer_is_penalised(refusal: str) -> None:
    j = JUDGE.judge(request(SIZE_EXCHANGE, refusal))
    assert j.faithfulness == 1.0
    assert j.answer_relevance is not None and j.answer_relevance <= 0.2
    assert "declines" in (j.reason or "")


@pytest.mark.parametrize("refusal", REFUSALS)
def test_refusal_when_the_context_lacked_the_answer_is_faithful_but_low_ish(refusal: str) -> None:
    j = JUDGE.judge(request(INTERNATIONAL, refusal))
    assert j.faithfulness == 1.0
    assert j.answer_relevance is not None and 0.25 <= j.answer_relevance <= 0.4
    assert "the context lacks 'international', 'orders'" in (j.reason or "")


def test_honest_refusal_beats_an_answer_to_a_different_question_only_on_faithfulness() -> None:
    refusal = JUDGE.judge(request(INTERNATIONAL, "The documents do not mention international orders."))
    invented = JUDGE.judge(request(INTERNATIONAL, "International orders are refunded within 60 days."))
    assert refusal.faithfulness == 1.0 and invented.faithfulness == 0.0
    assert invented.answer_relevance is not None and refusal.answer_relevance is not None
    assert invented.answer_relevance > refusal.answer_relevance


def test_refusal_plus_claims_is_judged_on_the_claims() -> None:
    answer = "I'm not sure about international orders. Any customer gets a full refund within 30 days."
    j = JUDGE.judge(request(INTERNATIONAL, answer, CONTEXT_DOCS))
    assert j.faithfulness == 1.0
    assert [s["refusal"] for s in j.details["sentences"]] == [True, False]
    assert j.answer_relevance == pytest.approx(math.sqrt(1 / 3), abs=1e-3)


def test_policy_statements_with_cannot_are_claims_not_refusals() -> None:
    j = JUDGE.judge(request(DOWNLOAD, "Opened software and digital downloads cannot be refunded."))
    assert j.details["sentences"][0]["refusal"] is False


# --- None rules and empty input ------------------------------------------------------------------


def test_empty_answer() -> None:
    for answer in ("", "   \n "):
        j = JUDGE.judge(request(SIZE_EXCHANGE, answer))
        assert j.faithfulness is None
        assert j.answer_relevance == 0.0
        assert j.context_relevance == 1.0
        assert "nothing to check" in (j.reason or "")
        assert j.error is None


def test_answer_without_checkable_claim_has_no_faithfulness() -> None:
    j = JUDGE.judge(request(SIZE_EXCHANGE, "Yes."))
    assert j.faithfulness is None
    assert "no checkable claim" in (j.reason or "")
    assert j.answer_relevance == 0.0


def test_empty_context() -> None:
    empty = JudgeRequest(query=SIZE_EXCHANGE, answer="Size exchanges on clothing are free.", context="")
    j = JUDGE.judge(empty)
    assert j.context_relevance == 0.0
    assert j.faithfulness == 0.0
    assert "nothing was retrieved" in (j.reason or "")
    assert "no context" in (j.reason or "")
    refusal = JUDGE.judge(JudgeRequest(query=SIZE_EXCHANGE, answer="I don't know.", context=" "))
    assert refusal.faithfulness == 1.0 and refusal.context_relevance == 0.0
    assert refusal.answer_relevance is not None and 0.25 <= refusal.answer_relevance <= 0.4


def test_question_without_content_words_gives_no_relevance() -> None:
    j = JUDGE.judge(request("What is it?", "Size exchanges on clothing are free of charge.", CONTEXT_DOCS))
    assert j.context_relevance is None and j.answer_relevance is None
    assert j.faithfulness is not None
    assert (j.reason or "").count("n/a") == 2


def test_malformed_request_gives_a_failed_judgement_not_an_exception() -> None:
    j = JUDGE.judge(None)  # type: ignore[arg-type]
    assert j.error is not None and j.judge == "lexical"
    assert j.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    assert dict(j.usage) == {"calls": 0}


# --- the judgement record ------------------------------------------------------------------------


def test_judgement_fields() -> None:
    j = LexicalJudge("offline").judge(request(*GROUNDED_VS_HALLUCINATED[0][:2]))
    assert j.judge == "offline"
    assert dict(j.usage) == {"calls": 0}
    assert j.raw_output is None and j.error is None
    assert j.latency_s is not None and j.latency_s >= 0
    reason = j.reason or ""
    assert reason.startswith("faithfulness 1.00:")
    assert reason.index("faithfulness") < reason.index("context relevance") < reason.index("answer relevance")
    assert reason.count(". ") >= 2  # one short sentence per score
    assert j.details["method"] == "lexical"
    assert j.details["support_threshold"] == 0.6
    assert j.details["question_terms"] == ("money", "back", "digital", "download", "bought")
    assert j.details["answer_missing_question_terms"] == ("money", "back", "bought")
    assert j.ok


def test_sentence_details_are_cut() -> None:
    long_sentence = "Refund " + "very " * 60 + "quickly."
    answer = " ".join(f"Claim number {i} about refunds." for i in range(30)) + " " + long_sentence
    j = JUDGE.judge(request("Refunds?", answer, CONTEXT_DOCS))
    assert j.details["sentences_total"] == 31
    assert len(j.details["sentences"]) == 20
    assert all(len(s["text"]) <= 120 for s in j.details["sentences"])


def test_deterministic() -> None:
    req = request(*GROUNDED_VS_HALLUCINATED[3][::2])
    first = JUDGE.judge(req)
    for _ in range(3):
        again = LexicalJudge().judge(req)
        assert (again.scores(), again.reason, dict(again.details)) == (
            first.scores(),
            first.reason,
            dict(first.details),
        )


_SEEDED_RUN = """
import json
from ragaudit import JudgeRequest, LexicalJudge
from ragaudit.citations import find_citations
from ragaudit.records import RetrievedDoc
docs = [RetrievedDoc(id="a", content="Electronics have a 15-day return window. Software cannot be refunded.",
                     rank=1),
        RetrievedDoc(id="b", content="Any customer gets a full refund within 30 days of purchase.", rank=2)]
answer = ("Electronics can be returned within 30 days, plus 45 extra days and a 10% voucher. "
          "A full refund within 30 days. Software cannot be refunded.")
j = LexicalJudge().judge(JudgeRequest(query="Can I return electronics or get a refund abroad?", answer=answer,
                                      context=JudgeRequest.build_context(docs), documents=docs))
print(json.dumps([j.scores(), j.reason, dict(j.details), [repr(c) for c in find_citations(answer, docs)]],
                 sort_keys=True, default=list))
"""


@pytest.mark.timeout(60)
def test_same_output_under_different_hash_seeds() -> None:
    outputs = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", _SEEDED_RUN],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=50,
        )
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    scores, reason, _, citations = json.loads(outputs[0])
    assert scores["faithfulness"] == pytest.approx(2 / 3, abs=1e-3)
    assert "'45', '10'" in reason or "'45'" in reason
    assert citations


# --- async ---------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_ajudge_matches_judge() -> None:
    requests = [request(q, a) for q, g, h in GROUNDED_VS_HALLUCINATED for a in (g, h)]

    async def run_all() -> list[Judgement]:
        return list(await asyncio.gather(*(JUDGE.ajudge(r) for r in requests)))

    results = asyncio.run(run_all())
    for req, result in zip(requests, results):
        expected = JUDGE.judge(req)
        assert result.scores() == expected.scores() and result.reason == expected.reason


@pytest.mark.timeout(30)
def test_ajudge_on_a_large_request() -> None:
    big_docs = [doc(" ".join(KB.values()) * 3, rank) for rank in range(1, 5)]
    req = request(LOYALTY, GROUNDED_VS_HALLUCINATED[5][1], big_docs)
    assert len(req.context) > 8_000
    result = asyncio.run(JUDGE.ajudge(req))
    assert result.scores() == JUDGE.judge(req).scores()
    assert result.faithfulness == 1.0


# --- properties ----------------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300)
_wordy = st.lists(
    st.sampled_from(
        [
            "refund",
            "30",
            "days",
            "gift",
            "receipt",
            ".",
            "?",
            "I don't know.",
            "[1]",
            "\n\n",
            "e.g.",
            "4.5",
            "no",
        ]
    ),
    max_size=40,
).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(query=st.one_of(_text, _wordy), answer=st.one_of(_text, _wordy), context=st.one_of(_text, _wordy))
def test_any_text_gives_valid_scores_and_never_fails(query: str, answer: str, context: str) -> None:
    # The reason quotes the texts' own words (lower-cased); a text containing "relevance" would make
    # the count below about the input rather than about the reason's two relevance clauses.
    assume("relevance" not in f"{query} {answer} {context}".lower())
    j = JUDGE.judge(JudgeRequest(query=query, answer=answer, context=context))
    assert j.error is None
    for score in j.scores().values():
        assert score is None or 0.0 <= score <= 1.0
    assert j.reason and j.reason.count("relevance") == 2
    if not answer.strip():
        assert j.faithfulness is None and j.answer_relevance == 0.0
    if not context.strip():
        assert j.context_relevance == 0.0
