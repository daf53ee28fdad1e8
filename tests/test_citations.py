"""find_citations: explicit markers of every kind, overlap attribution, odd input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragaudit import Citation, ConfigurationError, RetrievedDoc
from ragaudit.citations import find_citations

TEXTS = [
    (
        "refund_eligibility",
        "Any customer gets a full refund within 30 days of purchase. The item must be unused "
        "and in its original packaging.",
    ),
    (
        "exchanges",
        "Items can be exchanged within 45 days for an item of equal or lower value. Size exchanges "
        "on clothing are free of charge.",
    ),
    (
        "electronics",
        "Electronics have a 15-day return window. Opened software and digital downloads cannot be refunded.",
    ),
    (
        "shipping",
        "We pay return shipping for defective items. Loyalty programme members get free return labels "
        "whatever the reason.",
    ),
    (
        "gifts",
        "With a gift receipt, gifts are returned for store credit only. Gift cards and prepaid cards are "
        "neither refundable nor exchangeable.",
    ),
]


def kb(source: str | None = "return_policy.pdf", ids: str = "section") -> list[RetrievedDoc]:
    """The five policy documents, ranked 1..5, with ids ``doc-1``.. or the section names."""
    return [
        RetrievedDoc(
            id=section if ids == "section" else f"doc-{rank}",
            content=text,
            rank=rank,
            source=source,
            metadata={"section": section},
        )
        for rank, (section, text) in enumerate(TEXTS, start=1)
    ]


def cited(answer: str | None, docs: list[RetrievedDoc] | None = None, **kwargs: float) -> list[tuple[int, str]]:
    """(rank, method) of each citation."""
    return [(c.rank, c.method) for c in find_citations(answer, kb() if docs is None else docs, **kwargs)]


def markers(answer: str, docs: list[RetrievedDoc] | None = None) -> dict[int, str | None]:
    return {c.rank: c.marker for c in find_citations(answer, kb() if docs is None else docs)}


# --- numeric markers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "ranks"),
    [
        ("Refunds are possible [1].", [1]),
        ("Refunds and exchanges differ [1, 3].", [1, 3]),
        ("Refunds and exchanges differ [1,3].", [1, 3]),
        ("Refunds and exchanges differ [1; 2].", [1, 2]),
        ("Refunds and exchanges differ [1 and 4].", [1, 4]),
        ("Refunds and exchanges differ [1][2].", [1, 2]),
        ("Refunds and exchanges differ [2-4].", [2, 3, 4]),
        ("Refunds and exchanges differ [2–3].", [2, 3]),
        ("As [Doc 5] and [source 2] and [document #3] say.", [2, 3, 5]),
        ("Per 【4】 this holds.", [4]),
    ],
)
def test_numeric_markers_map_to_ranks(answer: str, ranks: list[int]) -> None:
    assert cited(answer) == [(r, "marker") for r in ranks]


def test_marker_numbers_beyond_the_list_are_ignored() -> None:
    assert cited("Nothing here [9]. Or here [0]. Nor in [2023]. Nor [6-8].") == []
    assert cited("Only the third [3][9].") == [(3, "marker")]


def test_marker_text_is_kept_as_written() -> None:
    assert markers("Refunds and exchanges differ [1, 3].") == {1: "[1, 3]", 3: "[1, 3]"}
    assert markers("Electronics: see [doc 3]") == {3: "[doc 3]"}


def test_numbers_are_ranks_even_when_ids_are_numbers() -> None:
    docs = [RetrievedDoc(id=str(rank - 1), content=text, rank=rank) for rank, (_, text) in enumerate(TEXTS, 1)]
    found = find_citations("The first one [1].", docs)
    assert [(c.doc_id, c.rank) for c in found] == [("0", 1)]


def test_ranks_follow_the_documents_not_their_list_order() -> None:
    docs = list(reversed(kb()))
    assert cited("[2] and [5]", docs) == [(2, "marker"), (5, "marker")]
    assert [c.doc_id for c in find_citations("[2] and [5]", docs)] == ["exchanges", "gifts"]


# --- id markers ----------------------------------------------------------------------------------


def test_exact_doc_id_in_brackets() -> None:
    assert cited("Electronics are special [electronics].") == [(3, "marker")]
    assert cited("Electronics are special [ELECTRONICS].") == [(3, "marker")]
    assert cited("Gifts [doc-5].", kb(ids="doc")) == [(5, "marker")]


def test_an_exact_id_wins_over_reading_it_as_a_rank() -> None:
    docs = kb(ids="doc")
    # The document with id "doc-3" sits at rank 1 here.
    docs = [RetrievedDoc(id="doc-3", content=TEXTS[0][1], rank=1), *docs[1:3]]
    assert [(c.doc_id, c.rank) for c in find_citations("See [doc-3].", docs)] == [("doc-3", 1)]
    # Without such an id, "doc-3" is rank 3.
    assert cited("See [doc-3].") == [(3, "marker")]


def test_unknown_bracket_text_is_ignored() -> None:
    assert cited("This is [citation needed] and [see here](https://example.com).") == []


# --- source and section names --------------------------------------------------------------------


def test_source_note_cites_the_documents_of_that_source_the_answer_draws_on() -> None:
    answer = "Opened software and digital downloads cannot be refunded (source: return_policy.pdf)."
    found = find_citations(answer, kb())
    assert [(c.rank, c.method, c.marker) for c in found] == [(3, "marker", "(source: return_policy.pdf)")]


def test_source_note_cites_every_overlapping_document_of_a_shared_source() -> None:
    answer = (
        "Opened software and digital downloads cannot be refunded. Loyalty programme members get free "
        "return labels whatever the reason. (source: return_policy.pdf)"
    )
    assert cited(answer) == [(3, "marker"), (4, "marker")]


def test_source_note_without_any_overlap_cites_the_top_ranked_document() -> None:
    assert cited("Yes (source: return_policy.pdf).") == [(1, "marker")]
    assert markers("Yes (source: return_policy.pdf).") == {1: "(source: return_policy.pdf)"}


def test_source_file_named_anywhere_in_the_text() -> None:
    docs = [
        RetrievedDoc(id=f"c{i}", content=text, rank=i, source=f"/kb/{section}.md")
        for i, (section, text) in enumerate(TEXTS, start=1)
    ]
    assert cited("As shipping.md explains, labels are free.", docs) == [(4, "marker")]
    assert cited("As /kb/gifts.md explains.", docs) == [(5, "marker")]
    assert cited("Per the exchanges file, yes.", docs) == [(2, "marker")]
    assert markers("As shipping.md explains.", docs) == {4: "shipping.md"}
    # Part of a longer name is not a mention.
    assert cited("See old_shipping.md_backup for that.", docs) == []


@pytest.mark.parametrize(
    "answer",
    [
        "Source: gifts",
        "Sources: gifts, exchanges. Then some prose follows.",
        "According to the gifts section, store credit only.",
        "See section gifts.",
        "As stated in gifts, yes.",
        "The refund_eligibility and gifts [gifts] documents say so.",
    ],
)
def test_section_named_next_to_a_cue(answer: str) -> None:
    assert (5, "marker") in cited(answer)


def test_distinctive_section_name_counts_anywhere() -> None:
    assert cited("The refund_eligibility rules apply.") == [(1, "marker")]


def test_plain_word_section_without_a_cue_is_not_a_marker() -> None:
    # "shipping" and "gifts" are section names, but here they are just words of the answer.
    assert cited("Shipping is free. Gifts too.") == []


def test_inline_sources_list_stops_at_prose() -> None:
    assert cited("Sources: gifts, exchanges. Then some prose about electronics follows.") == [
        (2, "marker"),
        (5, "marker"),
    ]
    assert markers("Sources: gifts. Bla.")[5] == "Sources: gifts"


# --- overlap -------------------------------------------------------------------------------------


def test_overlap_attributes_unmarked_sentences() -> None:
    answer = (
        "Loyalty programme members get free return labels. Size exchanges on clothing are free of charge. "
        "Thank you for asking!"
    )
    found = find_citations(answer, kb())
    assert [(c.rank, c.method) for c in found] == [(2, "overlap"), (4, "overlap")]
    assert found[0].marker == "Size exchanges on clothing are free of charge."


def test_overlap_needs_the_threshold() -> None:
    answer = "Size exchanges on clothing cost a fee in our outlet stores."  # 3 of 7 words from exchanges
    assert cited(answer) == []
    assert cited(answer, overlap_threshold=0.4) == [(2, "overlap")]


def test_overlap_picks_the_best_document() -> None:
    # Both documents mention returns; only shipping has the labels.
    assert cited("Members get free return labels for any reason.") == [(4, "overlap")]


def test_short_sentences_are_not_attributed() -> None:
    assert cited("Refunds apply. Yes.") == []


def test_overlap_marker_is_the_sentence_cut_to_120_chars() -> None:
    answer = "Loyalty programme members get free return labels whatever the reason, " + "truly " * 40 + "ok."
    (found,) = find_citations(answer, kb(), overlap_threshold=0.1)
    assert found.method == "overlap"
    assert len(found.marker or "") <= 120 and (found.marker or "").startswith("Loyalty programme members")


def test_sentences_with_a_marker_are_not_attributed_by_overlap() -> None:
    # The sentence is drawn from shipping but says [1]: it cites 1, and shipping is not added.
    assert cited("Loyalty programme members get free return labels whatever the reason [1].") == [(1, "marker")]


def test_unresolved_markers_leave_the_sentence_to_overlap() -> None:
    answer = "Loyalty programme members get free return labels whatever the reason [7]."
    assert cited(answer) == [(4, "overlap")]


def test_each_document_once_and_markers_win_over_overlap() -> None:
    answer = (
        "Size exchanges on clothing are free of charge. Items can be exchanged within 45 days [2]. "
        "Gift cards are not refundable [5]. See also [2] and [5]."
    )
    found = find_citations(answer, kb())
    assert [(c.rank, c.method, c.marker) for c in found] == [(2, "marker", "[2]"), (5, "marker", "[5]")]


def test_results_are_sorted_by_rank_and_are_citations() -> None:
    found = find_citations("Gifts [5]. Electronics [3]. Refunds [1].", kb())
    assert [c.rank for c in found] == [1, 3, 5]
    assert all(isinstance(c, Citation) for c in found)
    assert [c.doc_id for c in found] == ["refund_eligibility", "electronics", "gifts"]


def test_duplicate_ids_are_cited_once() -> None:
    docs = kb()
    twin = RetrievedDoc(id="shipping", content=docs[3].content, rank=6, source="return_policy.pdf")
    found = find_citations("Labels [4] [6]. Loyalty programme members get free return labels.", [*docs, twin])
    assert [(c.doc_id, c.rank) for c in found] == [("shipping", 4)]


# --- odd input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [None, "", "   \n\t", 42, b"[1] bytes"])
def test_odd_answers_give_nothing(answer: object) -> None:
    assert find_citations(answer, kb()) == ()  # type: ignore[arg-type]


@pytest.mark.parametrize("documents", [None, [], (), 5, ["[1]", None, 3], iter([])])
def test_odd_documents_give_nothing(documents: object) -> None:
    assert find_citations("Refunds [1]. Loyalty programme members get free return labels.", documents) == ()  # type: ignore[arg-type]


def test_non_documents_are_skipped_and_generators_accepted() -> None:
    docs = kb()
    mixed = [None, "text", docs[0], 3.5, docs[2]]
    assert cited("[1] and [3]", mixed) == [(1, "marker"), (3, "marker")]  # type: ignore[arg-type]
    assert cited("[1] and [3]", (d for d in docs)) == [(1, "marker"), (3, "marker")]  # type: ignore[arg-type]


def test_binary_ish_and_huge_answers() -> None:
    assert cited("\x00\xff\x01[2]\ud800 \u202e[3]") == [(2, "marker"), (3, "marker")]
    huge = "Size exchanges on clothing are free of charge. " * 5_000 + "[4]"
    assert cited(huge) == [(2, "overlap")]  # cut at 100,000 characters, before the marker
    assert find_citations("[" * 10_000 + "]" * 10_000, kb()) == ()


def test_empty_document_content_and_missing_source() -> None:
    docs = [RetrievedDoc(id="empty", content="", rank=1), *kb(source=None)[1:]]
    assert cited("Refunds [1]. Size exchanges on clothing are free of charge. (source: return_policy.pdf)", docs) == [
        (1, "marker"),
        (2, "overlap"),
    ]


@pytest.mark.parametrize("threshold", [0, -0.5, 1.01, float("nan"), "0.5", True, None])
def test_bad_threshold_is_a_configuration_error(threshold: object) -> None:
    with pytest.raises(ConfigurationError, match="overlap_threshold"):
        find_citations("Refunds [1].", kb(), overlap_threshold=threshold)  # type: ignore[arg-type]


def test_deterministic() -> None:
    answer = (
        "Opened software cannot be refunded [3]. Loyalty programme members get free return labels. "
        "See refund_eligibility and (source: return_policy.pdf)."
    )
    first = find_citations(answer, kb())
    assert first == find_citations(answer, kb()) == find_citations(answer, list(reversed(kb())))
    # The source note covers shipping too: the answer draws on it, and a marker wins over overlap.
    assert [(c.rank, c.method) for c in first] == [(1, "marker"), (3, "marker"), (4, "marker")]


_piece = st.sampled_from(
    [
        "[1]",
        "[2, 3]",
        "[doc-4]",
        "[gifts]",
        "(source: return_policy.pdf)",
        "Source: shipping.",
        "[",
        "]",
        "(",
        "Size exchanges on clothing are free of charge.",
        "Loyalty programme members get free return labels.",
        "\n\n",
        "e.g.",
        "[99]",
        "【2】",
        "return_policy.pdf",
        "according to",
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    answer=st.one_of(st.text(max_size=400), st.lists(_piece, max_size=30).map(" ".join)),
    count=st.integers(min_value=0, max_value=5),
)
def test_any_answer_gives_a_valid_sorted_unique_result(answer: str, count: int) -> None:
    docs = kb()[:count]
    found = find_citations(answer, docs)
    ids = [c.doc_id for c in found]
    assert len(ids) == len(set(ids))
    assert [c.rank for c in found] == sorted(c.rank for c in found)
    assert set(ids) <= {d.id for d in docs}
    assert all(c.method in ("marker", "overlap") for c in found)
    assert found == find_citations(answer, docs)


# --- citations after the sentence (issue 23) -------------------------------------------------------------

TRAILING_DOCS = (
    RetrievedDoc(id="returns", content="Items can be returned within 30 days of delivery for a full refund.",
                 rank=1, source="returns.md"),
    RetrievedDoc(id="shipping", content="Standard shipping takes 3 to 5 business days.", rank=2,
                 source="shipping.md"),
)


@pytest.mark.parametrize("answer", [
    "Items can be returned within 30 days of delivery for a full refund. (source: returns.md)",
    "Items can be returned within 30 days of delivery for a full refund. [1]",
    "Items can be returned within 30 days of delivery for a full refund.\n\nSources: returns.md",
    "Items can be returned within 30 days of delivery for a full refund [1].\n\n[1] returns.md",
    "Items can be returned within 30 days of delivery for a full refund. (source: returns.md) "
    "Standard shipping takes 3 to 5 business days. [2]",
])
def test_a_citation_after_the_sentence_belongs_to_it_and_holds(answer: str) -> None:
    from ragaudit._text import sentence_spans
    from ragaudit.judges import LexicalJudge
    from ragaudit.records import JudgeRequest, RagTurn
    from ragaudit.turn_audit import audit_turn

    claims = answer.count("Items") + answer.count("Standard")
    assert len(sentence_spans(answer)) == claims  # no citation-only sentence
    judgement = LexicalJudge().judge(JudgeRequest(query="Can I return it?", answer=answer, context="",
                                                  documents=TRAILING_DOCS))
    assert all(s.verdict != "no_claim" for s in judgement.sentences)
    audit = audit_turn(RagTurn(turn_id="t", query="Can I return it?", answer=answer, documents=TRAILING_DOCS),
                       judgement)
    assert audit.citation_checks and audit.citation_precision == 1.0


def test_list_items_that_are_claims_stay_sentences() -> None:
    from ragaudit._text import split_sentences

    assert split_sentences("Refunds:\n1. Items are refunded in 5 days.\n2. Shipping is free.") == [
        "Refunds:", "1. Items are refunded in 5 days.", "2. Shipping is free."]
    assert split_sentences("Refunds take 5 days.\n\nSources:\n- returns.md\n- refunds.md") == [
        "Refunds take 5 days. Sources: - returns.md - refunds.md"]
