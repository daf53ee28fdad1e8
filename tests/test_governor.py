"""The cost-control core (budgets, rate, pause) on its own, with the in-process store and a real Redis.

The end-to-end behaviour through the Auditor, the loopback judge server and several processes is in
tests/reliability/test_cost_control.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from ragaudit import Budget, ConfigurationError, Judgement
from ragaudit.auditor._governor import RETRY_AFTER_CEILING_S, Governor, Hold, Need, price_of
from tests.support.redis_server import RedisServer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def admit(governor: Governor, endpoint: str = "judge:1", wait_s: float = 5.0) -> str:
    return asyncio.run(governor.admit(endpoint, time.monotonic() + wait_s)).verdict


def judged(tokens: int = 100, **details: object) -> Judgement:
    return Judgement(judge="j", faithfulness=1.0, usage={"prompt_tokens": tokens - 10, "completion_tokens": 10},
                     details=details)


def failed(status: int, error: str = "AuthenticationError: invalid api key", **details: object) -> Judgement:
    return Judgement.failed("j", error, details={"status_code": status, **details})


@pytest.mark.parametrize("kwargs, message", [
    ({}, "at least one"), ({"max_calls": 0}, "max_calls"), ({"max_calls": 1.5}, "max_calls"),
    ({"max_tokens": -1}, "max_tokens"), ({"max_usd": 0}, "max_usd"), ({"max_usd": float("nan")}, "max_usd"),
    ({"max_calls": 3, "per_s": 0}, "per_s"), ({"max_calls": True}, "max_calls"),
])
def test_budget_rejects_what_it_cannot_mean(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Budget(**kwargs)


def test_calls_budget_admits_exactly_its_calls_then_counts_the_rest() -> None:
    governor = Governor([Budget(max_calls=3)])
    verdicts = [admit(governor) for _ in range(5)]
    assert verdicts == ["ok", "ok", "ok", "over_budget", "over_budget"]
    assert governor.counts["over_budget"] == 2


def test_token_and_money_budgets_are_spent_when_the_call_ends() -> None:
    governor = Governor([Budget(max_tokens=250), Budget(max_usd=1.0)], prices={"m": (1.0, 0.0)})
    assert admit(governor) == "ok"
    governor.settle(judged(100), model="m")
    assert admit(governor) == "ok"
    governor.settle(judged(200), model="m")
    assert admit(governor) == "over_budget"  # 300 tokens spent of 250
    money = Governor([Budget(max_usd=0.5)], prices={"m": (10_000.0, 0.0)})  # $0.01 per million... per token
    assert admit(money) == "ok"
    money.settle(judged(100), model="m")  # 90 prompt tokens at $10,000 per million: $0.90
    assert money.counts["judge_usd"] == pytest.approx(0.9)
    assert admit(money) == "over_budget"


def test_windows_renew() -> None:
    governor = Governor([Budget(max_calls=1, per_s=1)])
    assert admit(governor) == "ok"
    assert admit(governor) == "over_budget"
    time.sleep(1.05)
    assert admit(governor) == "ok"


def test_price_table_and_user_prices() -> None:
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 0}
    assert price_of("gpt-4o-mini", usage, {}) == pytest.approx(0.15)
    assert price_of("gpt-4o-mini", usage, {"gpt-4o-mini": (2.0, 8.0)}) == pytest.approx(2.0)
    assert price_of("judge-model-nobody-prices", usage, {}) is None
    assert price_of(None, usage, {}) is None


def test_unknown_price_closes_the_money_budget_and_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    # A judge whose model is only known from its replies: the first unpriced call closes money budgets.
    governor = Governor([Budget(max_usd=1.0)])
    assert admit(governor) == "ok"
    for _ in range(3):
        governor.settle(judged(50), model="judge-model-nobody-prices")
    assert [admit(governor) for _ in range(3)] == ["over_budget"] * 3
    said = [r for r in caplog.records if "no price is known" in r.getMessage()]
    assert len(said) == 1 and governor.counts["judge_tokens"] == 150 and governor.counts["over_budget"] == 3
    assert "judge-model-nobody-prices" in said[0].getMessage() and "prices=" in said[0].getMessage()
    tokens_only = Governor([Budget(max_tokens=1_000)])  # no money budget: an unpriced model is fine
    tokens_only.settle(judged(50), model="judge-model-nobody-prices")
    assert admit(tokens_only) == "ok"


def test_401_pauses_once_then_one_probe_resumes(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    governor = Governor(pause_s=60, clock=clock)
    assert admit(governor) == "ok"
    governor.settle(failed(401), model="m")
    assert [admit(governor) for _ in range(3)] == ["paused"] * 3
    clock.now += 61
    assert admit(governor) == "ok"  # the probe
    assert admit(governor) == "paused"  # the others wait for it
    governor.settle(failed(401), model="m")  # still refused: paused again
    clock.now += 30
    assert admit(governor) == "paused"
    clock.now += 31
    assert admit(governor) == "ok"
    governor.settle(judged(), model="m")  # fixed
    assert admit(governor) == "ok"
    warnings = [r for r in caplog.records if "judging is paused" in r.getMessage()]
    assert len(warnings) == 1 and "HTTP 401" in warnings[0].getMessage()
    assert any("judging resumed" in r.getMessage() for r in caplog.records)
    assert governor.counts["paused"] == 5


def test_missing_model_pauses_and_a_server_error_does_not() -> None:
    governor = Governor()
    governor.settle(failed(500, "InternalServerError: boom"), model="m")
    assert admit(governor) == "ok"
    governor.settle(failed(404, "NotFoundError: The model `gpt-9` does not exist"), model="m")
    assert admit(governor) == "paused"


def test_rate_limit_holds_a_process_to_max_rps() -> None:
    # Counted per window of the governor's own clock, not by elapsed time: under load the calls may
    # themselves be slow enough to cross windows without waiting, and the cap must hold either way.
    governor = Governor(max_rps=4)  # windows of one second of its clock, time.time
    spans: list[tuple[int, int]] = []  # the window before and after each admission
    for _ in range(9):
        before = int(time.time())
        assert admit(governor) == "ok"
        spans.append((before, int(time.time())))
    within = [start for start, end in spans if start == end]  # admitted in a window known for sure
    assert max((within.count(w) for w in within), default=0) <= 4
    assert spans[-1][1] - spans[0][0] >= 2  # 9 calls at 4 per window need a third window


def test_rate_limit_gives_up_at_the_deadline() -> None:
    governor = Governor(max_rps=1, clock=Clock())  # the window's clock stands still: no second slot comes
    assert admit(governor) == "ok"
    assert admit(governor, wait_s=0.01) == "rate_limited"
    assert governor.counts["rate_limited"] == 1


def test_429_halves_the_share_and_retry_after_holds_calls_back() -> None:
    clock = Clock()
    governor = Governor(max_rps=8, clock=clock)
    governor.settle(failed(429, "RateLimitError: slow down", retry_after_s=30), model="m")
    assert governor._window() == (1, 4)
    assert admit(governor, wait_s=1) == "rate_limited"  # held back by Retry-After for 30 s
    clock.now += 31
    assert admit(governor) == "ok"
    for _ in range(5):
        governor.settle(judged(), model="m")
    assert governor._window() == (1, 8)  # won back


def test_a_day_long_retry_after_holds_calls_back_for_the_ceiling_only() -> None:
    # Issue 46 item 10: one `Retry-After: 86400` stopped judging for a day. The hold is capped at
    # RETRY_AFTER_CEILING_S (120 s, the openai SDK's ceiling).
    clock = Clock()
    governor = Governor(max_rps=8, clock=clock)
    governor.settle(failed(429, "RateLimitError: slow down", retry_after_s=86_400), model="m")
    assert admit(governor, wait_s=1) == "rate_limited"
    clock.now += RETRY_AFTER_CEILING_S - 1
    assert admit(governor, wait_s=0.5) == "rate_limited"  # still held back within the ceiling
    clock.now += 2
    assert admit(governor) == "ok"


def test_redis_budget_is_shared_between_governors(redis: RedisServer) -> None:
    a = Governor([Budget(max_calls=5)], store=redis.url)
    b = Governor([Budget(max_calls=5)], store=redis.url)
    verdicts = [admit(g) for _ in range(4) for g in (a, b)]
    assert verdicts.count("ok") == 5 and verdicts.count("over_budget") == 3


def test_redis_down_fails_open_or_closed_and_is_counted(redis: RedisServer) -> None:
    open_ = Governor([Budget(max_calls=100)], store=redis.url)
    closed = Governor([Budget(max_calls=100)], store=redis.url, fail="closed")
    assert admit(open_) == admit(closed) == "ok"
    redis.stop()
    started = time.monotonic()
    assert [admit(open_) for _ in range(3)] == ["ok"] * 3
    assert [admit(closed) for _ in range(3)] == ["budget_unavailable"] * 3
    assert time.monotonic() - started < 5  # a dead store costs a quarter second once, then is skipped
    assert open_.counts["budget_store_errors"] == 3 and closed.counts["budget_unavailable"] == 3


def test_bad_store_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"CostControl\.store"):
        Governor([Budget(max_calls=1)], store="nosuch://x")


def test_cost_figures_are_otel_metrics() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from ragaudit.auditor import _governor

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    _governor._METER = None
    try:
        from opentelemetry.metrics import _internal as metrics_internal

        saved = metrics_internal._METER_PROVIDER
        metrics_internal._METER_PROVIDER = provider  # this test's own provider, put back below
        governor = Governor([Budget(max_calls=1)], prices={"m": (1_000_000.0, 0.0)})
        assert admit(governor) == "ok"
        governor.settle(judged(100), model="m")
        assert admit(governor) == "over_budget"
        points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics
                  for sm in rm.scope_metrics for m in sm.metrics}
    finally:
        metrics_internal._METER_PROVIDER = saved
        _governor._METER = None
    assert points["ragaudit.judge.tokens"][0].value == 100
    assert points["ragaudit.judge.cost"][0].value == pytest.approx(90.0)
    assert points["ragaudit.judge.not_sent"][0].attributes == {"ragaudit.reason": "over_budget"}


@pytest.mark.parametrize("where", ["memory", "redis"])
def test_reservations_are_seen_at_once_and_settled_with_the_real_usage(where: str,
                                                                       request: pytest.FixtureRequest) -> None:
    store = request.getfixturevalue("redis").url if where == "redis" else None
    a = Governor([Budget(max_tokens=1_000)], store=store)
    b = Governor([Budget(max_tokens=1_000)], store=store) if store else a  # two replicas share one store

    def take(governor: Governor) -> Any:
        return asyncio.run(governor.admit("judge:1", time.monotonic() + 5, lambda: Need(550, 50, "m")))

    first, second = take(a), take(b)  # nothing has ended yet: the second sees the first's 600 reserved
    assert (first.verdict, second.verdict) == ("ok", "ok") and first.hold == Hold(600, 0, True)
    assert take(a).verdict == "over_budget"  # 1,200 reserved of 1,000
    a.settle(judged(100), model="m", hold=first.hold)  # it cost 100: 500 of its 600 go back
    b.settle(judged(100), model="m", hold=second.hold)
    third = take(b)
    assert third.verdict == "ok"  # 200 spent: room again
    assert third.hold.tokens == 600


def test_a_call_the_rate_turns_away_gives_its_reservation_back() -> None:
    governor = Governor([Budget(max_calls=2)], max_rps=1, clock=Clock())  # one window, whatever the load
    assert admit(governor) == "ok"  # takes the only rate slot of this second, and one of 2 calls
    assert admit(governor, wait_s=0.01) == "rate_limited"  # reserved the second call, then gave it back
    assert governor._counters.get(f"calls:{Budget(max_calls=2).key()}") == 1
