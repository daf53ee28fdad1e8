"""JuryJudge and ConsensusJudge over FakeJudges and ChatRagJudges talking to the loopback server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import scipy.stats

from ragaudit.errors import ConfigurationError
from ragaudit.judges.base import FakeJudge, RagJudge
from ragaudit.judges.chat import ChatRagJudge
from ragaudit.judges.combinators.ensemble import ConsensusJudge, JuryJudge, trimmed_mean
from ragaudit.records import SCORE_NAMES, Judgement, JudgeRequest
from tests.support.judges import open_judge
from tests.support.llm_server import Fault, LLMServer, Scripted, judgement_json

pytestmark = pytest.mark.timeout(60)

REQUEST = JudgeRequest(query="Refund window?", answer="30 days [1].", context="[1] Refunds within 30 days.")


def chat_rule(body: Mapping[str, Any]) -> Scripted:
    """Replies by model name: 'good' judges, 'broken' fails with HTTP 500."""
    if body.get("model") == "broken":
        return Fault.server_error()
    return judgement_json(0.9, 0.5, 0.7, reason="good judge")


@pytest.fixture(scope="module")
def module_server() -> Iterator[LLMServer]:
    with LLMServer(chat_rule) as srv:
        yield srv


def chat(srv: LLMServer, model: str) -> ChatRagJudge:
    return open_judge(ChatRagJudge, srv, model, name=f"chat:{model}")


def fake(name: str, f: float | None, c: float | None = 0.5, a: float | None = 0.5, calls: int = 0) -> FakeJudge:
    return FakeJudge(lambda req: {"faithfulness": f, "context_relevance": c, "answer_relevance": a,
                                  "reason": name, "usage": {"calls": calls, "prompt_tokens": 10 * calls}},
                     name=name)


def mixed_jury(srv: LLMServer, **kwargs: Any) -> JuryJudge:
    jurors: list[RagJudge] = [
        chat(srv, "good"),            # faithfulness 0.9
        chat(srv, "broken"),          # fails: left out and counted
        fake("low", 0.1),
        fake("mid", 0.6, calls=1),
        fake("mid2", 0.7),
        fake("high", 1.0),
    ]
    return JuryJudge(jurors, **kwargs)


def check_mixed(result: Judgement) -> None:
    valid = [0.9, 0.1, 0.6, 0.7, 1.0]
    # five valid scores, trim 0.2: one cut from each end (0.1 and 1.0)
    assert result.faithfulness == pytest.approx(np.mean([0.6, 0.7, 0.9]))
    assert result.faithfulness == pytest.approx(scipy.stats.trim_mean(valid, 0.2))
    assert result.context_relevance == pytest.approx(0.5)
    assert result.error is None
    assert result.details["failed"] == 1
    faith = result.details["per_dimension"]["faithfulness"]
    assert (faith["n"], faith["missing"]) == (5, 1)
    assert faith["spread"] == pytest.approx(0.9)
    assert faith["stdev"] == pytest.approx(np.std(valid))
    assert faith["agreement"] is False
    assert result.details["per_dimension"]["context_relevance"]["agreement"] is True
    assert result.details["agreement"] is False
    jurors = result.details["jurors"]
    assert [j["judge"] for j in jurors] == ["chat:good", "chat:broken", "low", "mid", "mid2", "high"]
    assert jurors[1]["error"] is not None and "InternalServerError" in jurors[1]["error"]
    # usage summed: two chat calls (one failed) + the fake juror's reported call
    assert result.usage["calls"] == 3
    assert result.usage["prompt_tokens"] > 10


def test_jury_trimmed_mean_with_one_failing_judge(srv: LLMServer) -> None:
    check_mixed(mixed_jury(srv).judge(REQUEST))
    assert sorted(r.body["model"] for r in srv.requests) == ["broken", "good"]


def test_jury_async_runs_jurors_concurrently(srv: LLMServer) -> None:
    started = 0
    all_in: asyncio.Event | None = None

    async def waiting(req: JudgeRequest) -> Mapping[str, Any]:
        nonlocal started
        assert all_in is not None
        started += 1
        if started == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=10)  # only returns if all three run at once
        return {"faithfulness": 0.5 + 0.1 * started, "context_relevance": 0.5, "answer_relevance": 0.5}

    jury = JuryJudge([FakeJudge(waiting, name=f"w{i}") for i in range(3)], aggregate="mean")

    async def main() -> Judgement:
        nonlocal all_in
        all_in = asyncio.Event()
        return await jury.ajudge(REQUEST)

    result = asyncio.run(main())
    assert result.error is None and result.faithfulness == pytest.approx(0.8)


def test_jury_async_with_chat_jurors(srv: LLMServer) -> None:
    jury = mixed_jury(srv)

    async def main() -> Judgement:
        try:
            return await jury.ajudge(REQUEST)
        finally:
            for juror in jury.judges:
                if isinstance(juror, ChatRagJudge):
                    await juror.aclose()

    check_mixed(asyncio.run(main()))


def test_jury_is_none_aware_per_dimension() -> None:
    jury = JuryJudge([fake("a", 0.2, None), fake("b", 0.4, 0.8), fake("c", 0.6, None)], aggregate="median")
    result = jury.judge(REQUEST)
    assert result.faithfulness == pytest.approx(0.4)
    assert result.context_relevance == pytest.approx(0.8)  # the one juror that gave it
    ctx = result.details["per_dimension"]["context_relevance"]
    assert (ctx["n"], ctx["missing"], ctx["agreement"]) == (1, 2, None)
    assert result.details["failed"] == 0


@pytest.mark.parametrize(("aggregate", "expected"), [("mean", 0.5), ("median", 0.4), ("trimmed_mean", 0.5)])
def test_jury_aggregates(aggregate: str, expected: float) -> None:
    jury = JuryJudge([fake("a", 0.1), fake("b", 0.4), fake("c", 1.0)], aggregate=aggregate)  # type: ignore[arg-type]
    assert jury.judge(REQUEST).faithfulness == pytest.approx(expected)


def test_jury_agreement_threshold() -> None:
    close = JuryJudge([fake("a", 0.7), fake("b", 0.8), fake("c", 0.85)], agreement_threshold=0.2)
    assert close.judge(REQUEST).details["per_dimension"]["faithfulness"]["agreement"] is True
    strict = JuryJudge([fake("a", 0.7), fake("b", 0.8), fake("c", 0.85)], agreement_threshold=0.1)
    assert strict.judge(REQUEST).details["agreement"] is False


def test_jury_with_every_juror_failing(srv: LLMServer) -> None:
    jury = JuryJudge([chat(srv, "broken"), FakeJudge(lambda r: 1 / 0, name="boom")])
    result = jury.judge(REQUEST)
    assert result.scores() == dict.fromkeys(SCORE_NAMES)
    assert result.error is not None and result.error.startswith("all 2 jurors failed")
    assert "ZeroDivisionError" in result.error


@pytest.mark.parametrize("trim", [0.0, 0.1, 0.2, 0.25, 0.4])
def test_trimmed_mean_matches_scipy(trim: float) -> None:
    values = [0.3, 0.9, 0.1, 0.5, 0.5, 0.8, 0.2, 1.0, 0.0, 0.45, 0.6]
    for n in range(1, len(values) + 1):
        assert trimmed_mean(values[:n], trim) == pytest.approx(scipy.stats.trim_mean(values[:n], trim))


def test_jury_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        JuryJudge([])
    with pytest.raises(ConfigurationError):
        JuryJudge([object()])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError):
        JuryJudge([fake("a", 0.1)], aggregate="max")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        JuryJudge([fake("a", 0.1)], trim=0.5)


def sequence_judge(values: list[float | None], name: str = "seq") -> FakeJudge:
    it = itertools.cycle(values)

    def fn(req: JudgeRequest) -> Mapping[str, Any]:
        value = next(it)
        if value is None:
            raise RuntimeError("run failed")
        return {"faithfulness": value, "context_relevance": 0.5, "answer_relevance": 0.5,
                "usage": {"calls": 1}}

    return FakeJudge(fn, name=name)


@pytest.mark.parametrize(
    ("values", "label"),
    [([0.8, 0.8, 0.8], "high"), ([0.6, 0.8, 1.0], "medium"), ([0.2, 0.6, 1.0], "low")],
)
def test_consensus_mean_variance_and_confidence(values: list[float], label: str) -> None:
    result = ConsensusJudge(sequence_judge(values), n=3).judge(REQUEST)  # type: ignore[arg-type]
    faith = result.details["per_dimension"]["faithfulness"]
    assert result.faithfulness == pytest.approx(np.mean(values))
    assert faith["variance"] == pytest.approx(np.var(values))
    assert faith["scores"] == pytest.approx(values)
    assert faith["confidence"] == label
    assert result.details["per_dimension"]["context_relevance"]["confidence"] == "high"
    assert result.details["confidence"] == label
    assert result.usage["calls"] == 3


def test_consensus_leaves_failed_runs_out() -> None:
    result = ConsensusJudge(sequence_judge([0.4, None, 0.6]), n=3).judge(REQUEST)
    assert result.faithfulness == pytest.approx(0.5)
    assert result.details["failed"] == 1 and "run failed" in result.details["errors"][0]
    lonely = ConsensusJudge(sequence_judge([0.4, None, None]), n=3).judge(REQUEST)
    assert lonely.faithfulness == pytest.approx(0.4)
    assert lonely.details["confidence"] == "low"  # one run cannot say how stable the score is
    none = ConsensusJudge(sequence_judge([None]), n=2).judge(REQUEST)
    assert none.error is not None and none.error.startswith("all 2 runs failed")


def test_consensus_with_a_sampling_chat_judge(srv: LLMServer) -> None:
    replies = iter([judgement_json(0.9, 0.5, 0.7), judgement_json(0.7, 0.5, 0.7), judgement_json(0.8, 0.5, 0.7)])
    srv.rule = lambda body: next(replies)
    inner = open_judge(ChatRagJudge, srv, "sampler", temperature=0.7)
    consensus = ConsensusJudge(inner, n=3)

    async def main() -> Judgement:
        try:
            return await consensus.ajudge(REQUEST)
        finally:
            await inner.aclose()

    result = asyncio.run(main())
    assert len(srv.requests) == 3 and {r.body["temperature"] for r in srv.requests} == {0.7}
    assert result.faithfulness == pytest.approx(0.8)
    assert result.details["per_dimension"]["faithfulness"]["variance"] == pytest.approx(np.var([0.9, 0.7, 0.8]))
    assert result.details["per_dimension"]["faithfulness"]["confidence"] == "high"
    assert result.usage["calls"] == 3 and result.usage["prompt_tokens"] == sum(
        len(" ".join(m["content"] for m in r.messages).split()) for r in srv.requests)
    assert result.judge == "consensus:chat:samplerx3"


def test_consensus_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        ConsensusJudge(fake("a", 0.1), n=1)
    with pytest.raises(ConfigurationError):
        ConsensusJudge(fake("a", 0.1), confidence_thresholds=(0.1, 0.01))
    with pytest.raises(ConfigurationError):
        ConsensusJudge("judge")  # type: ignore[arg-type]


def test_config_keys_name_the_members() -> None:
    jury = JuryJudge([fake("a", 0.1), fake("b", 0.2)])
    assert jury.name == "jury:a+b" and '"aggregate": "trimmed_mean"' in jury.config_key()
    assert ConsensusJudge(fake("a", 0.1), n=4).config_key() != ConsensusJudge(fake("a", 0.1), n=3).config_key()


def test_cost_estimates_add_up(srv: LLMServer) -> None:
    from ragaudit.judges.cost import estimate_request

    one = estimate_request(chat(srv, "good"), REQUEST)
    jury = JuryJudge([chat(srv, "a"), chat(srv, "b"), fake("free", 0.5)])
    assert estimate_request(jury, REQUEST).calls == 2
    assert estimate_request(jury, REQUEST).prompt_tokens == 2 * one.prompt_tokens
    consensus = estimate_request(ConsensusJudge(chat(srv, "c"), n=3), REQUEST)
    assert (consensus.calls, consensus.completion_tokens) == (3, 3 * one.completion_tokens)
    assert srv.requests == []
