"""Sessions across traces in ``ragaudit worker`` (issue 30): every turn of a conversation is a trace of
its own; one worker that receives them all (the Collector routing by the session attribute) judges the
session once, complete; two workers that each get some of its traces (routing by trace id) each judge
the part they saw and say it is partial. Real OTel SDK spans (OTel GenAI conventions, the conversation
id and earlier messages as an instrumented agent sends them) over real OTLP/HTTP, a real OTLP receiver
for the worker's output, the loopback judge; the clock is stepped by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ragaudit import ChatRagJudge, Sessions
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer, is_session_request
from tests.support.sessions import Clock, judge_rule
from tests.worker.conftest import wait_for
from tests.worker.spans import SpanMaker

pytestmark = pytest.mark.timeout(90)

DOC = ("refunds", "Refunds take 14 days. Exchanges are free.")
CONVERSATION = [("How long do refunds take?", "Refunds take 14 days."),
                ("Are exchanges free?", "Exchanges are free."),
                ("And refunds, how long again?", "Refunds take 30 days.")]



def _messages(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def agent_turn(maker: SpanMaker, number: int, session: str) -> list[ReadableSpan]:
    """Turn *number* (0-based) of :data:`CONVERSATION` as an agent instrumented with the OTel GenAI
    conventions sends it: ``gen_ai.conversation.id``, and the earlier messages in the model's input."""
    question, answer = CONVERSATION[number]
    earlier = [m for q, a in CONVERSATION[:number] for m in (_messages("user", q), _messages("assistant", a))]
    t = maker.tracer
    with t.start_as_current_span("invoke_agent support", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", "gen_ai.conversation.id": session,
            "gen_ai.input.messages": json.dumps([_messages("user", question)]),
            "gen_ai.output.messages": json.dumps([_messages("assistant", answer)])}):
        with t.start_as_current_span("retrieval kb", attributes={
                "gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": question,
                "gen_ai.retrieval.documents": json.dumps([{"id": DOC[0], "score": 0.9, "content": DOC[1]}])}):
            pass
        with t.start_as_current_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps([*earlier, _messages("user", f"{DOC[1]}\n\n{question}")]),
                "gen_ai.output.messages": json.dumps([_messages("assistant", answer)])}):
            pass
    return maker.take()


@pytest.fixture
def judge_llm() -> Iterator[LLMServer]:
    with LLMServer(judge_rule) as srv:
        yield srv


def send(worker: Any, spans: Sequence[ReadableSpan]) -> None:
    assert OTLPSpanExporter(endpoint=worker.url + "/v1/traces").export(spans) is SpanExportResult.SUCCESS


def judge_turns(worker: Any, clock: Clock, count: int) -> None:
    clock.now += 2.5  # past quiet_s: the traces are complete
    wait_for(lambda: worker.stats()["turns_judged"] + worker.stats()["turns_judge_failed"] >= count,
             what=f"{count} judgement(s)")
    assert worker.auditor.force_flush(10)


def session_spans(collector: Any, count: int) -> list[dict[str, Any]]:
    return collector.wait_for_spans(count, predicate=lambda s: s["name"] == "ragaudit.session")


def test_one_worker_sees_the_whole_session_and_judges_it_once(make_worker: Any, judge_llm: LLMServer,
                                                               collector: Any) -> None:
    clock = Clock()
    worker = make_worker(judge=open_judge(ChatRagJudge, judge_llm), clock=clock, quiet_s=2.0, tick_s=0.02,
                         sessions=Sessions(clock=clock, session_idle_s=120))
    maker = SpanMaker()
    roots = []
    for number in range(len(CONVERSATION)):
        spans = agent_turn(maker, number, "conv-9")
        roots.append(next(s for s in spans if s.parent is None))
        send(worker, spans)
    judge_turns(worker, clock, 3)
    assert worker.auditor.check_sessions() == 0  # the session is not idle yet on the clock
    clock.now += 120
    assert worker.auditor.check_sessions() == 1
    assert worker.auditor.force_flush(10)
    [span] = session_spans(collector, 1)
    assert [(link["trace_id"], link["span_id"]) for link in span["links"]] == [
        (f"{r.context.trace_id:032x}", f"{r.context.span_id:016x}") for r in roots]
    attrs = span["attributes"]
    assert attrs["session.id"] == "conv-9" and attrs["ragaudit.session.partial"] is False
    assert attrs["ragaudit.session.turns"] == 3 and attrs["ragaudit.session.contradictions"] == 1
    [event] = [e for e in span["events"] if e["name"] == "ragaudit.session.contradiction"]
    assert event["attributes"]["first_text"] == "Refunds take 14 days."
    assert event["attributes"]["second_text"] == "Refunds take 30 days."
    assert sum(is_session_request(r.body) for r in judge_llm.requests) == 1
    logs = [r for r in collector.logs if str(r["attributes"].get("gen_ai.evaluation.name", "")).startswith("session.")]
    assert len(logs) == 4 and all(r["attributes"]["session.id"] == "conv-9" for r in logs)


def test_without_session_routing_each_worker_judges_its_part_flagged_partial(
        make_worker: Any, judge_llm: LLMServer, collector: Any) -> None:
    clock = Clock()
    workers = [make_worker(judge=open_judge(ChatRagJudge, judge_llm), clock=clock, quiet_s=2.0, tick_s=0.02,
                           sessions=Sessions(clock=clock)) for _ in range(2)]
    maker = SpanMaker()
    # what routing by trace id may do: turns 1 and 3 to one worker, turn 2 to the other
    for number, worker in zip(range(3), (workers[0], workers[1], workers[0]), strict=True):
        send(worker, agent_turn(maker, number, "conv-split"))
    judge_turns(workers[0], clock, 2)
    judge_turns(workers[1], clock, 1)
    clock.now += 300
    for worker in workers:
        assert worker.auditor.check_sessions() == 1
        assert worker.auditor.force_flush(10)
    spans = session_spans(collector, 2)
    by_turns = {s["attributes"]["ragaudit.session.turns"]: s["attributes"] for s in spans}
    assert set(by_turns) == {1, 2}
    # each says it is partial and what it missed: the turns its last turn's history names but it never saw
    assert by_turns[2]["ragaudit.session.partial"] is True and by_turns[2]["ragaudit.session.missed.unseen"] == 1
    assert by_turns[1]["ragaudit.session.partial"] is True and by_turns[1]["ragaudit.session.missed.unseen"] == 1
    assert all(w.auditor.stats()["sessions_partial"] == 1 for w in workers)
