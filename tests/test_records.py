from __future__ import annotations

import math

import pytest

from ragaudit import Citation, ConfigurationError, Judgement, JudgeRequest, RagTurn, RetrievedDoc
from ragaudit.records import TRUNCATION_MARKER, JudgeIdentity, normalize_relevance, stable_doc_id, truncate


def _doc(i: int, content: str = "text", **kw: object) -> RetrievedDoc:
    return RetrievedDoc(id=f"d{i}", content=content, rank=i, **kw)  # type: ignore[arg-type]


class TestRetrievedDoc:
    def test_valid(self) -> None:
        doc = RetrievedDoc(id="a", content="c", score=0.5, rank=1, source="s.pdf", metadata={"k": 1})
        assert doc.metadata["k"] == 1
        with pytest.raises(TypeError):
            doc.metadata["k"] = 2  # type: ignore[index]

    @pytest.mark.parametrize("rank", [0, -1, 1.5, True])
    def test_rank_must_be_positive_int(self, rank: object) -> None:
        with pytest.raises(ConfigurationError, match="rank"):
            RetrievedDoc(id="a", content="c", rank=rank)  # type: ignore[arg-type]

    def test_id_and_content_checked(self) -> None:
        with pytest.raises(ConfigurationError, match="id"):
            RetrievedDoc(id="", content="c")
        with pytest.raises(ConfigurationError, match="content"):
            RetrievedDoc(id="a", content=b"bytes")  # type: ignore[arg-type]

    def test_nan_score_rejected(self) -> None:
        with pytest.raises(ConfigurationError, match="NaN"):
            RetrievedDoc(id="a", content="c", score=math.nan)

    def test_frozen(self) -> None:
        doc = _doc(1)
        with pytest.raises(AttributeError):
            doc.rank = 2  # type: ignore[misc]


def test_stable_doc_id_is_stable_and_depends_on_source() -> None:
    assert stable_doc_id("x", "a") == stable_doc_id("x", "a")
    assert stable_doc_id("x", "a") != stable_doc_id("x", "b")
    assert stable_doc_id("x").startswith("doc-")


def test_citation_validation() -> None:
    assert Citation(doc_id="d1", rank=1, marker="[1]").method == "marker"
    with pytest.raises(ConfigurationError, match="method"):
        Citation(doc_id="d1", rank=1, method="guess")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="rank"):
        Citation(doc_id="d1", rank=0)


class TestJudgement:
    def test_scores_none_by_default_and_never_zero(self) -> None:
        j = Judgement(judge="x")
        assert j.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
        assert not j.ok

    @pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan, "0.5", True])
    def test_out_of_range_rejected(self, bad: object) -> None:
        with pytest.raises(ConfigurationError, match="faithfulness"):
            Judgement(faithfulness=bad)  # type: ignore[arg-type]

    def test_ok_and_failed(self) -> None:
        j = Judgement(faithfulness=1, context_relevance=0.5, answer_relevance=0.0, judge="x")
        assert j.ok and isinstance(j.faithfulness, float)
        f = Judgement.failed("x", "boom")
        assert f.error == "boom" and not f.ok and f.faithfulness is None
        assert f.to_dict()["faithfulness"] is None


class TestRagTurn:
    def test_relevant_ids_forms(self) -> None:
        t = RagTurn(turn_id="t", query="q", answer="a", relevant_ids=["d1", "d2"])  # type: ignore[arg-type]
        assert dict(t.relevant_ids or {}) == {"d1": 1, "d2": 1}
        g = RagTurn(turn_id="t", query="q", answer="a", relevant_ids={"d1": 2, "d2": -1})
        assert dict(g.relevant_ids or {}) == {"d1": 2, "d2": -1}
        with pytest.raises(ConfigurationError, match="relevant_ids"):
            normalize_relevance("d1")

    def test_validation(self) -> None:
        with pytest.raises(ConfigurationError, match="turn_id"):
            RagTurn(turn_id="", query="q", answer=None)
        with pytest.raises(ConfigurationError, match="answer"):
            RagTurn(turn_id="t", query="q", answer=3)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="documents"):
            RagTurn(turn_id="t", query="q", answer="a", documents=["x"])  # type: ignore[list-item]
        with pytest.raises(ConfigurationError, match="started_at"):
            RagTurn(turn_id="t", query="q", answer="a", started_at=1.5)  # type: ignore[arg-type]

    def test_with_trace(self) -> None:
        t = RagTurn(turn_id="t", query="q", answer="a").with_trace("ab" * 16, "cd" * 8)
        assert t.trace_id == "ab" * 16 and t.span_id == "cd" * 8


class TestJudgeRequest:
    def test_from_turn_numbers_documents_with_source(self) -> None:
        docs = (_doc(1, "alpha", source="a.pdf"), _doc(2, "beta"))
        turn = RagTurn(turn_id="t", query="q?", answer="ans", documents=docs,
                       metadata={"reference_answer": "ref"})
        req = JudgeRequest.from_turn(turn)
        assert req.context.startswith("[1] (source: a.pdf) id=d1\nalpha")
        assert "[2] id=d2\nbeta" in req.context
        assert req.reference == "ref" and req.documents == docs

    def test_context_capped_with_visible_marker(self) -> None:
        turn = RagTurn(turn_id="t", query="q", answer=None, documents=(_doc(1, "x" * 5000),))
        req = JudgeRequest.from_turn(turn, max_context_chars=100)
        assert req.answer == ""
        assert len(req.context) < 200
        assert req.context.endswith(TRUNCATION_MARKER.format(n=len("[1] id=d1\n") + 5000 - 100))

    def test_bad_cap(self) -> None:
        with pytest.raises(ConfigurationError, match="max_context_chars"):
            JudgeRequest.build_context([], 0)


def test_truncate() -> None:
    assert truncate("abc", 5) == "abc"
    assert truncate("abcdef", 2) == "ab" + TRUNCATION_MARKER.format(n=4)
    with pytest.raises(ConfigurationError):
        truncate("x", -1)


class TestJudgementValidation:
    @pytest.mark.parametrize(
        "field, bad",
        [
            ("reason", 123),
            ("error", ValueError("boom")),
            ("raw_output", b"bytes"),
            ("judge", ""),
            ("judge", None),
            ("latency_s", math.nan),
            ("latency_s", -1.0),
            ("latency_s", "1"),
            ("details", ["not", "a", "mapping"]),
            ("usage", [1, 2]),
            ("identity", {"model": "m"}),
        ],
    )
    def test_every_field_is_checked(self, field: str, bad: object) -> None:
        with pytest.raises(ConfigurationError, match=f"Judgement.{field}"):
            Judgement(**{field: bad})  # type: ignore[arg-type]

    def test_usage_counts_that_are_not_finite_non_negative_ints_become_none(self) -> None:
        j = Judgement(usage={"calls": 1, "prompt_tokens": math.nan, "completion_tokens": -3, "a": 2.0,
                             "b": 2.5, "c": True, "d": "7", "e": math.inf})
        assert dict(j.usage) == {"calls": 1, "prompt_tokens": None, "completion_tokens": None, "a": 2, "b": None,
                                 "c": None, "d": None, "e": None}
        with pytest.raises(ConfigurationError, match="usage keys"):
            Judgement(usage={1: 2})  # type: ignore[dict-item]

    def test_identity_round_trips_through_to_dict(self) -> None:
        identity = JudgeIdentity(model="m", endpoint="host:8000", protocol="full-audit", protocol_version="p/1",
                                 prompt_hash="ab" * 8, response_id="r-1")
        j = Judgement(faithfulness=0.5, judge="x", identity=identity)
        assert j.to_dict()["identity"] == identity.to_dict()
        assert JudgeIdentity.from_dict(j.to_dict()["identity"]) == identity
        # A line written before protocol_version existed held the wire version in "protocol".
        old = JudgeIdentity.from_dict({"model": "m", "protocol": "ragaudit-judge/3"})
        assert old == JudgeIdentity(model="m", protocol_version="ragaudit-judge/3")
        with pytest.raises(ConfigurationError, match=r"JudgeIdentity\.model"):
            JudgeIdentity(model=3)  # type: ignore[arg-type]


class TestJudgeRequestValidation:
    @pytest.mark.parametrize(
        "field, bad",
        [("query", None), ("answer", 3), ("context", b"x"), ("reference", 1.5), ("documents", ["x"]),
         ("documents", "abc"), ("metadata", [1])],
    )
    def test_every_field_is_checked(self, field: str, bad: object) -> None:
        fields: dict[str, object] = {"query": "q", "answer": "a", "context": "c", field: bad}
        with pytest.raises(ConfigurationError, match=f"JudgeRequest.{field}"):
            JudgeRequest(**fields)  # type: ignore[arg-type]
