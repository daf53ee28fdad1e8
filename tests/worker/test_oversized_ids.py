"""Every attribute the worker emits is capped, session ids included, and an export that fails is counted
(issue 46 item 11).

A 10 MB ``session.id`` used to travel uncapped on the session evaluation events and log records: the
export batch reached ~84 MB, the exporter dropped it whole (0 of the judge spans, 0 of the session
spans at the receiver) and ``export_errors`` stayed 0. Now every string attribute of every span, span
event, link and log record goes through the content policy's cap (8,192 characters,
``docs/guides/content.md``), and what an exporter fails to deliver is in ``stats()["export_errors"]``.
Real parts: OTel SDK spans over OTLP/HTTP into the worker, the loopback judge through the ``openai``
SDK, a real OTLP receiver that refuses bodies over 20 MiB as the Collector does by default.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from ragaudit import ChatRagJudge, Sessions
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer
from tests.support.sessions import Clock, judge_rule
from tests.worker.conftest import wait_for
from tests.worker.spans import SpanMaker
from tests.worker.test_sessions_worker import CONVERSATION, agent_turn, judge_turns, send

pytestmark = pytest.mark.timeout(180)

CAP = 8192
COLLECTOR_LIMIT = 20 * 1024 * 1024  # the Collector's default max_request_body_size


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest_string(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    return 0


def test_a_10_mb_session_id_is_capped_and_every_judgement_arrives(make_worker: Any, collector: Any) -> None:
    collector.max_body_bytes = COLLECTOR_LIMIT
    session = "s" * 10_000_000
    clock = Clock()
    with LLMServer(judge_rule) as judge_llm:
        worker = make_worker(judge=open_judge(ChatRagJudge, judge_llm), clock=clock, quiet_s=2.0, tick_s=0.02,
                             sessions=Sessions(clock=clock, session_idle_s=120))
        maker = SpanMaker()
        for number in range(len(CONVERSATION)):
            send(worker, agent_turn(maker, number, session))
        judge_turns(worker, clock, len(CONVERSATION))
        clock.now += 120
        assert worker.auditor.check_sessions() == 1
        assert worker.auditor.force_flush(60)
        judge_spans = collector.wait_for_spans(len(CONVERSATION), predicate=lambda s: s["name"] == "ragaudit.judge",
                                               timeout=60)
        [session_span] = collector.wait_for_spans(1, predicate=lambda s: s["name"] == "ragaudit.session", timeout=60)
        logs = collector.wait_for_logs(len(CONVERSATION) * 3 + 4, timeout=60)
        stats = worker.stats()
    assert len(judge_spans) == len(CONVERSATION)
    for span in [*judge_spans, session_span]:  # attributes, events and links: nothing past the cap
        assert _longest_string([span["attributes"], span["events"], span["links"]]) <= CAP + 48
    assert session_span["attributes"]["session.id"].startswith("s" * 100)
    session_logs = [r for r in logs if str(r["attributes"].get("gen_ai.evaluation.name", "")).startswith("session.")]
    assert len(session_logs) == 4
    assert all(len(r["attributes"]["session.id"]) <= CAP + 48 for r in session_logs)
    assert all(r.get("status") != 413 for r in collector.requests)
    assert stats["auditor"]["export_errors"] == 0 and stats["turns_judged"] == len(CONVERSATION)


def test_an_export_the_backend_refuses_is_counted_in_export_errors_and_stats(make_worker: Any,
                                                                           collector: Any) -> None:
    collector.max_body_bytes = 200  # every export batch is "too large" for this backend
    clock = Clock()
    with LLMServer(judge_rule) as judge_llm:
        worker = make_worker(judge=open_judge(ChatRagJudge, judge_llm), clock=clock, quiet_s=2.0, tick_s=0.02)
        send(worker, agent_turn(SpanMaker(), 0, "conv-1"))
        clock.now += 2.5  # past quiet_s: the trace is complete
        wait_for(lambda: worker.stats()["turns_judged"] == 1, what="the judgement")
        assert not worker.auditor.force_flush(30)  # said truthfully: nothing was delivered
        wait_for(lambda: worker.stats()["auditor"]["export_errors"] >= 4, what="the refused exports counted")
        with urllib.request.urlopen(worker.url + "/stats", timeout=10) as reply:
            served = json.load(reply)
    assert any(r.get("status") == 413 for r in collector.requests)
    # One judge span and three evaluation log records that never reached the backend, each counted.
    assert served["auditor"]["export_errors"] >= 4
