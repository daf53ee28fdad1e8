"""Cost control at run time, end to end: budgets, rates and pauses that hold across processes.

Real parts: the real ``openai`` SDK inside ChatRagJudge against the loopback chat-completions server
(which counts what reaches it), a real ``redis-server`` (Debian's, started here on a free port) as
the shared store, and separate app processes (tests/support/cost_app.py) as replicas.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragaudit import Auditor, Budget, ChatRagJudge, CostControl, RagTurn, RetrievedDoc
from tests.support.judges import closing
from tests.support.llm_server import Fault, LLMServer
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
DOC = RetrievedDoc(id="returns", content="Items can be returned within 30 days of delivery.", rank=1)




def turn(i: int | str) -> RagTurn:
    return RagTurn(turn_id=f"t-{i}", query="How long do I have to return an item?", answer="Within 30 days.",
                   documents=(DOC,))


def judge_for(srv: LLMServer) -> ChatRagJudge:
    return closing(ChatRagJudge("gpt-4o-mini", base_url=srv.base_url, api_key="sk-test", max_retries=0,
                                timeout_s=10))


def run_apps(srv: LLMServer, store: str, processes: int, *args: str) -> list[dict[str, int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    env.pop("OPENAI_API_KEY", None)
    apps = [subprocess.Popen([sys.executable, "-m", "tests.support.cost_app", "--judge-url", srv.base_url,
                              "--store", store, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    outputs = [app.communicate(timeout=240) for app in apps]
    for app, (_, err) in zip(apps, outputs):
        assert app.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.slow
def test_four_processes_share_one_budget_of_300_calls(redis: RedisServer) -> None:
    with LLMServer() as srv:
        stats = run_apps(srv, redis.url, 4, "--turns", "200", "--max-calls", "300", "--run-s", "150")
        calls = srv.request_count
    judged = sum(s["judged"] + s["failed"] for s in stats)  # failed: a judge timeout on a loaded machine
    over = sum(s["over_budget"] for s in stats)
    assert calls == judged == 300, (calls, stats)
    assert over == 500 and judged + over == 800
    assert all(s["pending"] == s["dropped"] == 0 for s in stats)


@pytest.mark.slow
def test_a_shared_rate_of_5_rps_holds_over_30_s_at_the_server(redis: RedisServer) -> None:
    with LLMServer() as srv:
        started = time.time()
        stats = run_apps(srv, redis.url, 4, "--turns", "60", "--max-rps", "5", "--run-s", "36")
        times = sorted(r.received_at for r in srv.requests)
    # The window opens at the 11th arrival, not the first: each process's first call also opens its
    # HTTP connection, and on a loaded machine that call can reach the server seconds after its rate
    # slot was granted -- a window opened by it would then also hold the calls granted before it.
    first = times[10]
    in_window = [t for t in times if 0.0 <= t - first < 30.0]
    print(f"\nshared max_rps=5, 4 processes: {len(in_window)} calls in 30 s at the server "
          f"({len(in_window) / 30:.2f}/s)")
    assert len(in_window) <= 5.5 * 30, f"{len(in_window)} calls in 30 s"
    assert len(in_window) >= 4 * 30, "the rate was used, not starved"
    assert all(s["rate_waits"] > 0 for s in stats)
    assert time.time() - started >= 36


def test_a_401_pauses_the_judge_with_one_warning_until_a_probe_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    with LLMServer() as srv:
        srv.fail_next(Fault.bad_request("Incorrect API key provided: sk-test.", status=401), times=2)
        auditor = Auditor(judge_for(srv), audit_log=None, cost=CostControl(pause_s=1.0))
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            auditor.submit(turn(0))
            assert auditor.force_flush(10)
            for i in range(1, 21):
                auditor.submit(turn(i))
            assert auditor.force_flush(10)
            assert srv.request_count == 1, "no call while paused"
            time.sleep(1.1)
            auditor.submit(turn("probe-1"))  # the probe: still refused, paused again
            assert auditor.force_flush(10)
            time.sleep(1.1)
            auditor.submit(turn("probe-2"))  # the cause is gone: resumed
            assert auditor.force_flush(10)
            auditor.submit(turn("after"))
            assert auditor.force_flush(10)
        stats = auditor.stats()
        auditor.shutdown()
        assert srv.request_count == 4
    assert stats["paused"] == 20 and stats["failed"] == 2 and stats["judged"] == 2
    paused = [r for r in caplog.records if "judging is paused" in r.getMessage()]
    assert len(paused) == 1 and "HTTP 401" in paused[0].getMessage()


def test_redis_stopped_mid_run_leaves_the_host_unharmed_and_the_loss_counted(redis: RedisServer) -> None:
    with LLMServer() as srv:
        auditor = Auditor(judge_for(srv), audit_log=None,
                          cost=CostControl(budget=Budget(max_calls=1000), store=redis.url, fail="closed"))
        for i in range(5):
            auditor.submit(turn(i))
        assert auditor.force_flush(10)
        redis.stop()
        submit_s = []
        for i in range(5, 25):
            started = time.perf_counter()
            assert auditor.submit(turn(i)) == "queued"  # the host never waits on the store
            submit_s.append(time.perf_counter() - started)
        assert auditor.force_flush(20)
        stats = auditor.stats()
        auditor.shutdown()
    assert stats["judged"] == 5 and stats["budget_unavailable"] == 20
    assert stats["budget_store_errors"] == 20
    assert stats["submitted"] == stats["judged"] + stats["budget_unavailable"]
    assert max(submit_s) < 0.05


def test_retry_after_of_a_429_holds_the_next_calls_back() -> None:
    with LLMServer() as srv:
        srv.fail_next(Fault.rate_limit(retry_after=1.0))
        auditor = Auditor(judge_for(srv), audit_log=None, cost=CostControl(max_rps=50))
        auditor.submit(turn(0))
        assert auditor.force_flush(10)
        refused_at = srv.requests[0].received_at
        auditor.submit(turn(1))
        assert auditor.force_flush(10)
        stats = auditor.stats()
        auditor.shutdown()
        assert srv.requests[1].received_at - refused_at >= 0.95
    assert stats["failed"] == 1 and stats["judged"] == 1 and stats["rate_waits"] >= 1


def test_judge_if_and_a_thumbs_down_on_a_sampled_out_turn() -> None:
    with LLMServer() as srv:
        auditor = Auditor(judge_for(srv), audit_log=None, sample_rate=0.0,
                          cost=CostControl(retain_s=60, max_retained=3,
                                           judge_if=lambda t: not t.turn_id.endswith("skip")))
        assert auditor.submit(turn("skip")) == "filtered_out"
        for i in range(5):
            assert auditor.submit(turn(i)) == "sampled_out"
        assert auditor.feedback("t-0", "down") == "unmatched"  # evicted: only the last 3 are kept
        assert auditor.feedback("t-4", True) == "ignored"
        assert auditor.feedback("t-4", 0) == "queued"
        assert auditor.force_flush(10)
        stats = auditor.stats()
        auditor.shutdown()
        assert srv.request_count == 1
    assert stats["filtered_out"] == 1 and stats["judged"] == 1 and stats["retained_evicted"] == 2
    assert stats["feedback_judged"] == 1 and stats["feedback_unmatched"] == 1


def test_money_and_tokens_are_in_stats_and_a_money_budget_stops_judging() -> None:
    with LLMServer() as srv:
        auditor = Auditor(judge_for(srv), audit_log=None,
                          cost=CostControl(budget=Budget(max_usd=1e-9), prices={"gpt-4o-mini": (1.0, 1.0)}))
        auditor.submit(turn(0))
        assert auditor.force_flush(10)
        auditor.submit(turn(1))
        assert auditor.force_flush(10)
        stats = auditor.stats()
        auditor.shutdown()
    assert stats["judged"] == 1 and stats["over_budget"] == 1
    assert stats["judge_tokens"] > 0 and stats["judge_usd"] > 0
