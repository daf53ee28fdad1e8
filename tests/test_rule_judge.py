"""RuleJudge checks, and TieredJudge: cheap checks on every answer, an LLM judge on a deterministic sample."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ragaudit import Auditor, ChatRagJudge, FakeJudge, Judgement, JudgeRequest, RagTurn, RetrievedDoc
from ragaudit.auditor import sampled
from ragaudit.errors import ConfigurationError
from ragaudit.judges.combinators.tiered import DETAILED_SALT, TieredJudge, sample_key
from ragaudit.judges.rules import RuleJudge
from tests.support.llm_server import LLMServer, judgement_json

pytestmark = pytest.mark.timeout(60)

DOCS = (
    RetrievedDoc(id="policy", content="Items can be returned within 30 days of delivery with a receipt.", rank=1,
                 source="return_policy.pdf"),
    RetrievedDoc(id="shipping", content="Standard shipping takes 3-5 business days.", rank=2),
)


def request(answer: str, documents: tuple[RetrievedDoc, ...] = DOCS, **kwargs: Any) -> JudgeRequest:
    return JudgeRequest(query="How long do I have to return an item?", answer=answer,
                        context=JudgeRequest.build_context(documents), documents=documents, **kwargs)


# --- RuleJudge ----------------------------------------------------------------------------------------


def test_every_check_is_a_named_pass_or_fail() -> None:
    judge = RuleJudge(min_chars=10, max_chars=200, required=("30 days",), forbidden=("guarantee",),
                      required_regex=(r"\[\d+\]",), forbidden_regex=(r"(?i)\bI think\b",), citation_required=True)
    good = judge.judge(request("You can return items within 30 Days of delivery [1]."))
    assert good.details["passed"] is True and good.details["failed"] == []
    assert list(good.details["rules"]) == [
        "min_chars", "max_chars", "required:30 days", "forbidden:guarantee", r"required_regex:\[\d+\]",
        r"forbidden_regex:(?i)\bI think\b", "citation_required",
    ]
    assert all(result["passed"] for result in good.details["rules"].values())
    assert good.details["rules"]["citation_required"]["detail"] == "cites [1] policy"
    assert good.reason == "all 7 rule checks passed"

    bad = judge.judge(request("I think we guarantee it."))
    rules = bad.details["rules"]
    assert bad.details["passed"] is False
    assert bad.details["failed"] == ["required:30 days", "forbidden:guarantee", r"required_regex:\[\d+\]",
                                     r"forbidden_regex:(?i)\bI think\b", "citation_required"]
    assert rules["forbidden_regex:(?i)\\bI think\\b"]["detail"] == "matched 'I think' at 0"
    assert rules["required:30 days"]["detail"] == "missing"
    assert bad.reason is not None and bad.reason.startswith("5 of 7 rule checks failed: required:30 days (missing)")


def test_length_bounds_ignore_surrounding_whitespace() -> None:
    judge = RuleJudge(min_chars=5, max_chars=8)
    assert judge.judge(request("   abcde   ")).details["passed"] is True
    too_short = judge.judge(request("abcd"))
    assert too_short.details["rules"]["min_chars"] == {"passed": False, "detail": "4 chars, at least 5 needed"}
    assert judge.judge(request("abcdefghi")).details["failed"] == ["max_chars"]


def test_rule_checks_claim_no_semantic_score_unless_mapped() -> None:
    plain = RuleJudge(forbidden=("guarantee",)).judge(request("We guarantee it."))
    assert plain.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    assert plain.error is None and plain.usage == {"calls": 0} and plain.judge == "rules"
    mapped = RuleJudge(forbidden=("guarantee",), maps_to="answer_relevance")
    assert mapped.judge(request("We guarantee it.")).answer_relevance == 0.0
    ok = mapped.judge(request("30 days."))
    assert ok.answer_relevance == 1.0 and ok.faithfulness is None


def test_json_validity() -> None:
    judge = RuleJudge(json_valid=True)
    assert judge.judge(request(' {"days": 30} ')).details["passed"] is True
    broken = judge.judge(request('{"days": 30'))
    assert broken.details["rules"]["json_valid"]["passed"] is False
    assert broken.details["rules"]["json_valid"]["detail"].startswith("not JSON:")


def test_citation_needs_an_explicit_marker_not_just_overlap() -> None:
    judge = RuleJudge(citation_required=True)
    copied = judge.judge(request("Items can be returned within 30 days of delivery with a receipt."))
    assert copied.details["rules"]["citation_required"] == {"passed": False, "detail": "cites no retrieved document"}
    named = judge.judge(request("Returns are accepted for 30 days (source: return_policy.pdf)."))
    assert named.details["passed"] is True
    assert judge.judge(request("See [7] for details.")).details["passed"] is False  # no document has rank 7


def test_citation_without_documents_accepts_a_bare_marker() -> None:
    judge = RuleJudge(citation_required=True)
    assert judge.judge(request("30 days [2].", documents=())).details["passed"] is True
    assert judge.judge(request("30 days (Source: policy).", documents=())).details["passed"] is True
    missing = judge.judge(request("30 days.", documents=()))
    assert "no documents in the request" in missing.details["rules"]["citation_required"]["detail"]


def test_async_api_and_no_worker_thread() -> None:
    judge = RuleJudge(required=("days",))
    assert judge.blocking is False
    assert asyncio.run(judge.ajudge(request("30 days"))).details["passed"] is True


@pytest.mark.parametrize("kwargs, match", [
    ({}, "no checks"),
    ({"min_chars": -1}, "min_chars"),
    ({"max_chars": True}, "max_chars"),
    ({"min_chars": 10, "max_chars": 5}, "greater than max_chars"),
    ({"required": "refund"}, "not one string"),
    ({"required": ("",)}, "non-empty"),
    ({"forbidden": ("Refund", "refund")}, "given twice"),
    ({"required_regex": ("[unclosed",)}, r"required_regex pattern '\[unclosed' does not compile"),
    ({"forbidden_regex": ("ok", "(?P<x")}, r"forbidden_regex pattern '\(\?P<x' does not compile"),
    ({"forbidden_regex": (re.compile(b"bytes"),)}, "text"),
    ({"json_valid": True, "maps_to": "correctness"}, "maps_to"),
    ({"json_valid": "yes"}, "True or False"),
])
def test_bad_configuration_is_rejected_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RuleJudge(**kwargs)


def test_precompiled_patterns_and_config_key() -> None:
    judge = RuleJudge(required_regex=(re.compile(r"\d+ days", re.IGNORECASE),))
    assert judge.judge(request("30 DAYS")).details["passed"] is True
    assert judge.checks == (r"required_regex:\d+ days",)
    assert judge.config_key() != RuleJudge(required_regex=(r"\d+ days",)).config_key()  # flags differ


# --- TieredJudge --------------------------------------------------------------------------------------


def counting_detailed() -> FakeJudge:
    return FakeJudge(lambda r: Judgement(faithfulness=0.9, context_relevance=0.8, answer_relevance=0.7,
                                         reason="detailed", judge="detailed", usage={"calls": 1, "prompt_tokens": 50},
                                         details={"model": "m"}), name="detailed")


def test_sampling_is_deterministic_and_close_to_the_rate() -> None:
    tiered = TieredJudge(RuleJudge(max_chars=500), counting_detailed(), detailed_rate=0.1)
    requests = [JudgeRequest(query=f"question {i}", answer=f"answer {i}", context="c") for i in range(1000)]
    picked = [tiered.in_sample(r) for r in requests]
    assert picked == [tiered.in_sample(r) for r in requests]  # the same answers, every time
    assert 70 <= sum(picked) <= 130
    assert picked == [sampled(sample_key(r), 0.1, salt=DETAILED_SALT) for r in requests]


def test_turn_id_in_metadata_is_the_sample_key() -> None:
    a = JudgeRequest(query="q1", answer="a1", context="c", metadata={"turn_id": "turn-42"})
    b = JudgeRequest(query="q2", answer="a2", context="c", metadata={"turn_id": "turn-42"})
    assert sample_key(a) == sample_key(b) == "turn-42"
    assert sample_key(JudgeRequest(query="q1", answer="a1", context="c")) != "turn-42"
    rate = 0.5
    tiered = TieredJudge(RuleJudge(max_chars=10), counting_detailed(), detailed_rate=rate)
    assert tiered.in_sample(a) == tiered.in_sample(b) == sampled("turn-42", rate, salt=DETAILED_SALT)


def test_merge_when_the_detailed_judge_ran_and_when_it_did_not() -> None:
    detailed = counting_detailed()
    always = TieredJudge(RuleJudge(forbidden=("guarantee",)), detailed, detailed_rate=1.0)
    merged = always.judge(request("We guarantee 30 days."))
    assert merged.scores() == {"faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 0.7}
    assert merged.reason == "detailed" and merged.judge == "tiered(rules,detailed)"
    assert merged.details["tiers"] == ["cheap", "detailed"]
    assert merged.details["passed"] is False and "forbidden:guarantee" in merged.details["rules"]
    assert merged.details["detailed"] == {"model": "m"}
    assert merged.usage == {"calls": 1, "prompt_tokens": 50} and merged.error is None

    never = TieredJudge(RuleJudge(forbidden=("guarantee",)), detailed, detailed_rate=0.0)
    cheap_only = never.judge(request("We guarantee 30 days."))
    assert cheap_only.details["tiers"] == ["cheap"] and "detailed" not in cheap_only.details
    assert cheap_only.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    assert cheap_only.details["rules"] == merged.details["rules"]
    assert cheap_only.reason is not None and "forbidden:guarantee" in cheap_only.reason
    assert detailed.calls == 1


def test_a_failing_detailed_judge_is_reported_with_its_tier() -> None:
    def boom(r: JudgeRequest) -> Judgement:
        raise RuntimeError("model down")

    tiered = TieredJudge(RuleJudge(max_chars=100), FakeJudge(boom, name="llm"), detailed_rate=1.0)
    merged = asyncio.run(tiered.ajudge(request("30 days")))
    assert merged.error == "detailed: RuntimeError: model down"
    assert merged.details["passed"] is True  # the cheap checks still count


def test_configuration_of_tiered() -> None:
    with pytest.raises(ConfigurationError, match="detailed_rate"):
        TieredJudge(RuleJudge(max_chars=1), counting_detailed(), detailed_rate=1.5)
    with pytest.raises(ConfigurationError, match="cheap must be a RagJudge"):
        TieredJudge(object(), counting_detailed())  # type: ignore[arg-type]
    blocking = TieredJudge(RuleJudge(max_chars=1), counting_detailed())
    assert blocking.blocking is True  # the FakeJudge's function is sync


@pytest.fixture(scope="module")
def server() -> Iterator[LLMServer]:
    with LLMServer(default=judgement_json(0.9, 0.8, 0.7)) as srv:
        yield srv


def test_auditor_runs_rules_on_every_turn_and_the_llm_on_the_sample(server: LLMServer) -> None:
    server.reset()
    llm = ChatRagJudge("judge-model", base_url=server.base_url, timeout_s=5.0, max_retries=0)
    tiered = TieredJudge(RuleJudge(citation_required=True), llm, detailed_rate=0.2)
    assert tiered.blocking is False
    turns = [RagTurn(turn_id=f"turn-{i}", query=f"question {i}?", answer=f"Answer {i} [1].", documents=DOCS)
             for i in range(60)]
    judgements: list[Judgement] = []
    with Auditor(tiered, sample_rate=1.0, audit_log=None, on_judgement=lambda t, j: judgements.append(j)) as auditor:
        for turn in turns:
            auditor.submit(turn)
        assert auditor.force_flush(timeout_s=30)
        assert auditor.stats()["judged"] == 60
    llm.close()
    expected = sum(tiered.in_sample(JudgeRequest.from_turn(t)) for t in turns)
    assert 0 < expected < 60
    assert server.request_count == expected
    assert all(j.details["passed"] is True for j in judgements)
    ran = [j for j in judgements if j.details["tiers"] == ["cheap", "detailed"]]
    assert len(ran) == expected and all(j.faithfulness == 0.9 for j in ran)
    assert all(j.faithfulness is None for j in judgements if j not in ran)
