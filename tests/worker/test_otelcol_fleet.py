"""The two-tier deployment of examples/collector/, end to end, on the real OpenTelemetry Collector.

apps (real LangChain apps, OpenInference and OpenLLMetry, OTLP/HTTP) -> tier 1 (tier1-gateway.yaml:
``loadbalancing`` by trace id over 3 workers) -> each worker's tier 2 (tier2-worker-sidecar.yaml:
``tail_sampling``) -> 3 worker processes sharing one judge budget in a real redis-server -> judge spans
and evaluation log records back through tier 1 -> a real OTLP receiver (the backend).

The fleet is tests/support/fleet.py. The Collector configs are the example files as they are: their
endpoints come from the environment (``${env:VAR:-default}``), the sampling share is set to 100 % the
same way, and one overlay (a second ``--config``, merged by the Collector) replaces what one machine has
not got: the k8s resolver (no Kubernetes API here) by a static resolver over the 3 tier-2 Collectors,
and the internal-metrics port each Collector would otherwise share. Skipped, with the reason, where the
Collector is not built.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.fleet import fleet, judge_calls, send_load, settled, wait_decided
from tests.support.llm_server import LLMServer, is_session_request
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.redis_server import RedisServer
from tests.support.sessions import judge_rule
from tests.support.topics import QUESTIONS
from tests.worker.conftest import check_judged_once, run_app, wait_for
from tests.worker.spans import SpanMaker, rag_trace

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAULT_TURNS = int(os.environ.get("RAGAUDIT_FLEET_FAULT_TURNS", "1000"))


def _apps(rag_llm: LLMServer, gateway_url: str, questions: list[str]) -> list[dict[str, Any]]:
    """The LangChain app twice, as OpenInference and as OpenLLMetry instrument it, through tier 1."""
    env = {"OPENAI_BASE_URL": rag_llm.base_url, "OPENAI_API_KEY": "test",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": gateway_url + "/v1/traces"}
    half = len(questions) // 2
    return [*run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openinference", *questions[:half]], env),
            *run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openllmetry", *questions[half:]], env)]


def _judged_questions(judge: LLMServer, questions: list[str]) -> Counter[str]:
    """How many judge calls named each question (the loopback judge's own request log)."""
    counts: Counter[str] = Counter()
    for request in judge.requests:
        counts.update(q for q in questions if q in request.prompt_text)
    return counts


@pytest.mark.timeout(600)
def test_each_turn_judged_once_through_both_tiers(tmp_path: Path, rag_llm: LLMServer, redis: RedisServer) -> None:
    questions = QUESTIONS[:12]
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=1000) as f:
            expected = _apps(rag_llm, f.gateway_url, questions)
            assert [t["question"] for t in expected] == questions
            judges = check_judged_once(backend, expected)
            stats = wait_decided(f, len(questions), timeout=60)  # counters read once every turn is decided
        # Counted at the judge: one call per turn, each turn's question in exactly one call.
        assert judge.request_count == len(questions)
        assert _judged_questions(judge, questions) == Counter(questions)
    assert len(judges) == len(questions)
    # Tier 1 spread the traces (12 trace ids over 3 workers: all on one is a 1-in-177,147 chance).
    assert sum(1 for s in stats if s["turns_judged"]) >= 2, [s["turns_judged"] for s in stats]
    # Every turn reached exactly one worker whole, and no span after it was judged: the judge spans go
    # from tier 1's otlp/judgements to the backend only, never back to a worker.
    assert sum(s["turns_found"] for s in stats) == len(questions)
    assert all(s["spans_own"] == 0 and s["late_spans"] == 0 for s in stats), [
        {k: s[k] for k in ("spans_own", "late_spans", "spans_received", "turns_found")} for s in stats]
    assert all(s["auditor"]["budget_store_errors"] == 0 for s in stats)


@pytest.mark.timeout(600)
def test_the_fleet_shares_one_budget_in_redis(tmp_path: Path, rag_llm: LLMServer, redis: RedisServer) -> None:
    questions = QUESTIONS[:12]
    budget = 5
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=budget) as f:
            _apps(rag_llm, f.gateway_url, questions)
            wait_for(lambda: sum(s["turns_found"] for s in f.stats()) == len(questions), timeout=60,
                     what="every turn at a worker")
            # A turn found is decided a moment later (judged, or counted over the budget): wait for both.
            wait_for(lambda: sum(s["turns_judged"] + s["auditor"]["over_budget"] for s in f.stats()) == len(questions),
                     timeout=60, what="every turn judged or counted over the budget")
            backend.wait_for_spans(budget, timeout=30, predicate=lambda s: s["name"] == "ragaudit.judge")
            stats = f.stats()
        calls = judge.request_count
    # Each worker alone would have judged up to 5 of its own turns (up to 12 in all); together they
    # judged 5, and said of every other turn that it was over the budget.
    assert calls == budget
    assert sum(s["turns_judged"] for s in stats) == budget
    assert sum(s["auditor"]["over_budget"] for s in stats) == len(questions) - budget
    assert sum(1 for s in stats if s["turns_found"]) >= 2
    assert len(backend.spans_named("ragaudit.judge")) == budget


@pytest.mark.timeout(900)
def test_a_worker_killed_mid_run_and_restarted(tmp_path: Path, redis: RedisServer) -> None:
    """Half the load; worker 1 is SIGKILLed while it judges it (its tier-2 Collector paused around the
    kill with SIGSTOP/SIGCONT, so what the worker held is exactly its /stats then); the other half while
    it is down; then it is restarted on its port.

    Said and counted: no turn judged twice; every turn judged but those the killed worker held (traces
    in flight and turns waiting for the judge) and those in batches a sender's exporter saw fail; what
    tier 2 decided while the worker was down its exporter retried (``retry_on_failure`` and
    ``sending_queue``, the Collector's defaults) and the restarted worker judged."""
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=10 * FAULT_TURNS) as f:
            outputs = [send_load(f.gateway_url, FAULT_TURNS // 2, "s0")]
            victim, sidecar = f.worker_urls[1], f.collectors[1]
            wait_for(lambda: f.stats()[1]["turns_judged"] > 0, timeout=300, what="the victim judging")
            os.kill(sidecar.process.pid, signal.SIGSTOP)
            try:
                at_kill = settled(victim)
                f.workers[1].kill()
                f.workers[1].wait(30)
            finally:
                os.kill(sidecar.process.pid, signal.SIGCONT)
            outputs.append(send_load(f.gateway_url, FAULT_TURNS - FAULT_TURNS // 2, "s1"))
            wait_for(lambda: "Will retry the request" in sidecar.tail(1_000_000), timeout=120,
                     what="tier 2 retrying the dead worker")
            f.restart_worker(1)
            turns = {q.split("item ")[1].rstrip("?") for o in outputs for q in o["turns"].values()}
            failed = {t for o in outputs for t in o["failed"]}
            assert not any(o["unsent"] for o in outputs)
            held = at_kill["traces_in_flight"] + at_kill["judge_pending"]
            wait_for(lambda: len(judge_calls(judge)) >= len(turns) - held - len(failed)
                     and all(s["traces_in_flight"] == 0 and s["judge_pending"] == 0 for s in f.stats()),
                     timeout=600, what="every turn not held by the killed worker judged")
            restarted = f.stats()[1]
        calls = judge_calls(judge)
    assert len(turns) == FAULT_TURNS
    assert max(calls.values()) == 1, "a turn was judged twice"
    lost = turns - set(calls)
    assert len(lost) <= held + len(failed), (len(lost), held, len(failed))
    assert restarted["turns_judged"] > 0
    print(f"\nfleet fault: {len(turns)} turns, {len(calls)} judged once, {len(lost)} lost (the killed worker "
          f"held {held}: {at_kill['traces_in_flight']} traces in flight, {at_kill['judge_pending']} turns for the "
          f"judge; {len(failed)} in batches a sender saw fail); the restarted worker judged "
          f"{restarted['turns_judged']}, what tier 2 retried included")


class _SessionOnEverySpan(SpanProcessor):
    """What OpenInference's ``using_session()`` does: the session id on every span started within it, so
    the gateway can route every span of a turn by it."""

    def __init__(self) -> None:
        self.session: str | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.session is not None:
            span.set_attribute("session.id", self.session)


@pytest.mark.timeout(600)
def test_sessions_routed_by_session_id_each_judged_once_whole(tmp_path: Path, redis: RedisServer) -> None:
    """tier1-gateway-sessions.yaml (``routing_key: attributes``, ``session.id``) in front of 3 workers with
    sessions on: 6 conversations of 3 turns, their turns interleaved, each turn a trace of its own. Each
    session reaches one worker whole and is judged once, complete (not partial)."""
    sessions, turns = [f"conv-{k}" for k in range(6)], 3
    maker = SpanMaker("chat-app")
    tag = _SessionOnEverySpan()
    maker.provider.add_span_processor(tag)
    with OTLPReceiver() as backend, LLMServer(judge_rule) as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=1000, gateway="tier1-gateway-sessions.yaml",
                   worker_args=("--session-idle", "3")) as f:
            exporter = OTLPSpanExporter(endpoint=f.gateway_url + "/v1/traces")
            for _round in range(turns):
                for session in sessions:
                    tag.session = session
                    assert exporter.export(rag_trace(maker, session=session)) is SpanExportResult.SUCCESS
            spans = backend.wait_for_spans(len(sessions), timeout=120,
                                           predicate=lambda s: s["name"] == "ragaudit.session")
            stats = wait_decided(f, len(sessions) * turns)
        session_calls = sum(is_session_request(r.body) for r in judge.requests)
    assert sorted(s["attributes"]["session.id"] for s in spans) == sessions
    assert all(s["attributes"]["ragaudit.session.partial"] is False
               and s["attributes"]["ragaudit.session.turns"] == turns for s in spans), [s["attributes"] for s in spans]
    assert session_calls == len(sessions)
    assert sum(s["turns_judged"] for s in stats) == len(sessions) * turns
    assert all(s["turns_found"] % turns == 0 for s in stats), [s["turns_found"] for s in stats]


@pytest.mark.timeout(600)
def test_a_full_worker_pushes_back_and_the_collector_retries(tmp_path: Path, redis: RedisServer) -> None:
    """A worker with room for 30 buffered spans (``max_spans``) under a burst of 120 three-span turns: it
    answers 503 with ``Retry-After``; the tier-2 Collector's exporter keeps the data and retries after that
    interval (``retry_on_failure``, ``sending_queue``: the Collector's defaults). Every turn is judged once
    in the end, none lost."""
    turns = 120
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=1000, workers=1,
                   worker_args=("--max-spans", "30")) as f:
            sent = send_load(f.gateway_url, turns, "burst")
            wait_for(lambda: len(judge_calls(judge)) == turns and f.stats()[0]["turns_judged"] == turns, timeout=300,
                     what="every turn judged")
            stats = f.stats()[0]
            tier2 = f.collectors[0].tail(1_000_000)
        calls = judge_calls(judge)
    assert len(sent["turns"]) == turns and not sent["failed"] and not sent["unsent"]
    assert max(calls.values()) == 1
    assert stats["requests_refused_full"] > 0 and stats["judge_dropped"] == 0
    assert "Will retry the request" in tier2
