"""Token and money caps hold under concurrency (issue 46 items 8 and 9).

Sixteen turns submitted at once reach a slow judge (the loopback server, 0.3 s a call, 600 tokens a
call as the issue's probe had it) through the real ``openai`` SDK: every call is admitted before the
first one ends. A cap used to be checked against what finished calls had spent, so all sixteen saw
the whole budget free: ``Budget(max_tokens=1000)`` spent 9,600 tokens. Now each call reserves its
estimated tokens and money before it is made (the judge's exact prompt and a typical reply, the
same estimate as ``ragaudit eval --dry-run``) and settles the real usage after, in-process and in a
real ``redis-server`` (one Lua script), so a cap ends at most one call's worth over, as the cost
guide says. What is spent is counted at the server: requests times the usage it reported.
"""

from __future__ import annotations

import logging

import pytest

from ragaudit import Auditor, Budget, ChatRagJudge, ConfigurationError, CostControl, Limits, RagTurn, RetrievedDoc
from tests.support.judges import closing
from tests.support.llm_server import LLMServer, Reply, judgement_json
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

DOC = RetrievedDoc(id="returns", content="Items can be returned within 30 days of delivery.", rank=1)
CALLS = 16
PROMPT, COMPLETION = 500, 100  # the usage every reply reports: 600 tokens a call
PRICE = (10.0, 10.0)  # $ per million tokens in and out: $0.006 a call


def turn(i: int) -> RagTurn:
    return RagTurn(turn_id=f"t-{i}", query="How long do I have to return an item?", answer="Within 30 days.",
                   documents=(DOC,))


def spend_with(budget: Budget, store: str | None) -> tuple[int, dict[str, int]]:
    """(judge calls that reached the server, the Auditor's stats) for 16 turns submitted at once."""
    reply = Reply(content=judgement_json(), usage={"prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
                                                   "total_tokens": PROMPT + COMPLETION}, delay=0.3)
    with LLMServer(default=reply) as srv:
        judge = closing(ChatRagJudge("gpt-4o-mini", base_url=srv.base_url, api_key="sk-test", max_retries=0,
                                     timeout_s=30))
        auditor = Auditor(judge, audit_log=None, limits=Limits(max_concurrency=CALLS),
                          cost=CostControl(budget=budget, store=store, prices={"gpt-4o-mini": PRICE}))
        for i in range(CALLS):
            auditor.submit(turn(i))
        assert auditor.force_flush(60)
        stats = auditor.stats()
        auditor.shutdown()
        return srv.request_count, stats


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> str | None:
    if request.param == "memory":
        return None
    server: RedisServer = request.getfixturevalue("redis")
    return server.url


def test_a_token_cap_ends_at_most_one_call_over_under_16_concurrent_calls(store: str | None) -> None:
    calls, stats = spend_with(Budget(max_tokens=1_000), store)
    spent = calls * (PROMPT + COMPLETION)
    assert spent <= 1_000 + (PROMPT + COMPLETION), f"{calls} calls, {spent} tokens against a cap of 1,000"
    assert calls >= 1 and stats["judge_tokens"] == spent
    assert stats["judged"] == calls and stats["over_budget"] == CALLS - calls  # every turn accounted for


def test_a_money_cap_ends_at_most_one_call_over_under_16_concurrent_calls(store: str | None) -> None:
    per_call = (PROMPT * PRICE[0] + COMPLETION * PRICE[1]) / 1_000_000
    calls, stats = spend_with(Budget(max_usd=0.01), store)
    spent = calls * per_call
    assert spent <= 0.01 + per_call + 1e-12, f"{calls} calls, ${spent:.4f} against a cap of $0.01"
    assert calls >= 1 and stats["judge_usd"] == pytest.approx(spent)
    assert stats["judged"] == calls and stats["over_budget"] == CALLS - calls


def test_a_money_cap_on_a_judge_model_with_no_price_is_refused_at_construction() -> None:
    judge = closing(ChatRagJudge("judge-model-nobody-prices", base_url="http://127.0.0.1:9/v1", api_key="sk-test"))
    with pytest.raises(ConfigurationError) as refused:
        Auditor(judge, audit_log=None, cost=CostControl(budget=Budget(max_usd=1.0)))
    said = str(refused.value)
    assert "judge-model-nobody-prices" in said and "prices=" in said and "ragaudit[prices]" in said
    # A price given, or no money cap: accepted.
    Auditor(judge, audit_log=None,
            cost=CostControl(budget=Budget(max_usd=1.0), prices={"judge-model-nobody-prices": (1.0, 1.0)})).shutdown()
    Auditor(judge, audit_log=None, cost=CostControl(budget=Budget(max_tokens=1_000))).shutdown()


def test_a_money_cap_fails_closed_when_the_judge_model_shows_unpriced_only_in_its_replies(
        caplog: pytest.LogCaptureFixture) -> None:
    # A judge of the user's own names no model until it answers: the first unpriced call closes the cap.
    from ragaudit import Judgement
    from ragaudit.judges.base import BaseRagJudge
    from ragaudit.records import JudgeIdentity

    class Unnamed(BaseRagJudge):
        name = "unnamed"

        def judge(self, request: object) -> Judgement:
            return Judgement(judge="unnamed", faithfulness=1.0, usage={"prompt_tokens": 50, "completion_tokens": 5},
                             identity=JudgeIdentity(model="judge-model-nobody-prices"))

    caplog.set_level(logging.WARNING, logger="ragaudit")
    auditor = Auditor(Unnamed(), audit_log=None, limits=Limits(max_concurrency=1),
                      cost=CostControl(budget=Budget(max_usd=100.0)))
    for i in range(60):
        auditor.submit(turn(i))
    assert auditor.force_flush(30)
    stats = auditor.stats()
    auditor.shutdown()
    assert stats["judged"] == 1 and stats["over_budget"] == 59
    said = [r.getMessage() for r in caplog.records if "no price is known" in r.getMessage()]
    assert len(said) == 1 and "over_budget" in said[0]
