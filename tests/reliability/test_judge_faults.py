"""Judge faults: the host chain is unaffected, the failure is recorded, retries stay bounded.

Each case runs a real LCEL chain (Chroma with the hash embedding, a stand-in chat model) with
``RagAuditCallbackHandler(auditor=Auditor(ChatRagJudge(base_url=loopback, max_retries=1)))`` while
the loopback server produces one kind of fault. The server holds every judge request at a gate
until the chain has returned, so "the chain did not wait for the judge" is checked structurally:
when ``invoke`` returns, no judge request has completed (no judgement exists yet) and the turn
span says ``judge.status = queued``. Only then is the gate opened and the fault delivered.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import Auditor, ChatRagJudge, FakeJudge, JudgeRequest, Limits, RagTurn
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.records import SCORE_NAMES
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.reliability._support import QUESTIONS, Collected, answer_for, chroma_store, rag_chain
from tests.support.llm_server import Fault, LLMServer, Reply, Scripted, judgement_json

pytestmark = pytest.mark.timeout(60)

MAX_RETRIES = 1
JUDGE_TIMEOUT_S = 0.5
QUESTION = QUESTIONS["returns"]


class Gate:
    """A server rule that holds each request until :meth:`open`, then answers with *scripted*."""

    def __init__(self, scripted: Scripted) -> None:
        self.scripted = scripted
        self.arrived = threading.Event()
        self._open = threading.Event()

    def __call__(self, body: Any) -> Scripted:
        self.arrived.set()
        self._open.wait(30)
        return self.scripted

    def open(self) -> None:
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()


@pytest.fixture(scope="module")
def retriever() -> Any:
    return chroma_store().as_retriever(search_kwargs={"k": 2})


@pytest.fixture(scope="module")
def expected_answer(retriever: Any) -> str:
    return answer_for(retriever.invoke(QUESTION)[0].page_content)


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as srv:
        yield srv


class Rig:
    """The chain, its handler and an Auditor of a ChatRagJudge pointed at *base_url*."""

    def __init__(self, base_url: str, log: Path, provider: TracerProvider, exporter: InMemorySpanExporter,
                 judge_timeout_s: float = JUDGE_TIMEOUT_S, **auditor_kwargs: Any) -> None:
        self.exporter = exporter
        self.log = log
        self.judge = ChatRagJudge(base_url=base_url, api_key="test", timeout_s=judge_timeout_s,
                                  max_retries=MAX_RETRIES)
        self.collected = Collected()
        auditor_kwargs.setdefault("limits", Limits(timeout_s=30.0))
        self.auditor = Auditor(self.judge, audit_log=log, tracer_provider=provider,
                               on_judgement=self.collected, **auditor_kwargs)
        self.handler = RagAuditCallbackHandler(auditor=self.auditor)

    def spans(self, name: str) -> list[Any]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def close(self) -> None:
        self.auditor.shutdown(10)
        self.judge.close()


@pytest.fixture
def rig_factory(tmp_path: Path, memory_provider: TracerProvider,
                memory_exporter: InMemorySpanExporter) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(base_url: str, **kwargs: Any) -> Rig:
        rig = Rig(base_url, tmp_path / f"audit-{len(rigs)}.jsonl", memory_provider, memory_exporter, **kwargs)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def assert_recorded_failure(rig: Rig, error_part: str, answer: str) -> None:
    """One judgement, failed: error set and every score None, in the callback, audit log, span, stats."""
    (judgement,) = rig.collected.judgements
    assert judgement.error is not None and error_part in judgement.error
    assert all(getattr(judgement, name) is None for name in SCORE_NAMES)
    (line,) = read_audit_log(rig.log)
    assert line["judge_status"] == "failed"
    assert line["error"] == judgement.error
    assert all(line[name] is None for name in SCORE_NAMES)
    assert line["query"] == QUESTION and line["answer"] == answer
    (judge_span,) = rig.spans(c.SPAN_JUDGE)
    assert error_part in str(judge_span.attributes[c.ATTR_JUDGE_ERROR])
    assert not any(c.judge_score_key(name) in judge_span.attributes for name in SCORE_NAMES)
    stats = rig.auditor.stats()
    assert stats["submitted"] == 1 and stats["failed"] == 1 and stats["judged"] == 0
    assert stats["pending"] == 0 and stats["dropped"] == 0


# fault, the error text the judgement must carry, how many HTTP requests one judgement makes
FAULTS: dict[str, tuple[Scripted, str, int]] = {
    "http_500": (Fault.server_error(), "InternalServerError", 1 + MAX_RETRIES),
    "http_503": (Fault.server_error(503), "InternalServerError", 1 + MAX_RETRIES),
    "http_429_retry_after": (Fault.rate_limit(retry_after=0.05), "RateLimitError", 1 + MAX_RETRIES),
    "hang_past_timeout": (Fault.hang(5.0), "APITimeoutError", 1 + MAX_RETRIES),
    "connection_drop": (Fault.drop(), "APIConnectionError", 1 + MAX_RETRIES),
    "malformed_body": (Fault.malformed(), "JSONDecodeError", 1),
    "empty_choices": (Fault.empty_choices(), "no choices", 1),
    # A reply that is not the JSON verdict: one repair request, then a failed judgement.
    "unparseable_reply": (Reply(content="I am sorry, I cannot evaluate this."), "unparseable", 2),
    "truncated_reply": (Reply(content='{"faithfulnessScore": ', finish_reason="length"), "unparseable", 2),
}


@pytest.mark.parametrize("case", list(FAULTS))
def test_fault_leaves_chain_alone_and_is_recorded(case: str, server: LLMServer, retriever: Any,
                                                  rig_factory: Any, expected_answer: str) -> None:
    scripted, error_part, requests_per_judgement = FAULTS[case]
    gate = Gate(scripted)
    server.rule = gate
    rig = rig_factory(server.base_url)

    result = rag_chain(retriever).invoke(QUESTION, config={"callbacks": [rig.handler]})

    # The chain returned while no judge request could complete (they are held at the gate).
    assert not gate.is_open
    assert len(rig.collected) == 0
    assert server.request_count <= 1
    assert result == expected_answer
    # The turn is closed and submitted in the background; its judge request reaches the server,
    # and is still held there.
    assert gate.arrived.wait(10)
    assert len(rig.collected) == 0 and rig.auditor.stats()["pending"] == 1

    gate.open()
    assert closer_for(rig.auditor).force_flush(30)
    (turn_span,) = rig.spans(c.SPAN_TURN)
    assert turn_span.attributes[c.ATTR_JUDGE_STATUS] == "queued"  # submitted, not judged inline
    assert turn_span.attributes[c.OUTPUT_VALUE] == expected_answer
    assert_recorded_failure(rig, error_part, expected_answer)
    # Retries stay within their bound: 1 + max_retries per call, plus one repair for unreadable output.
    assert server.request_count == requests_per_judgement
    assert requests_per_judgement <= 2 * (1 + MAX_RETRIES)


def test_server_down_from_the_start(retriever: Any, rig_factory: Any, expected_answer: str) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rig = rig_factory(f"http://127.0.0.1:{port}/v1")
    result = rag_chain(retriever).invoke(QUESTION, config={"callbacks": [rig.handler]})
    assert result == expected_answer
    assert closer_for(rig.auditor).force_flush(30)
    (turn_span,) = rig.spans(c.SPAN_TURN)
    assert turn_span.attributes[c.ATTR_JUDGE_STATUS] == "queued"  # submitted, not judged inline
    assert_recorded_failure(rig, "APIConnectionError", expected_answer)
    (judgement,) = rig.collected.judgements
    assert judgement.usage["calls"] == 1  # one logical call; the SDK's own retries are bounded by max_retries


def test_auditor_deadline_cuts_a_judge_that_outlives_it(server: LLMServer, retriever: Any,
                                                        rig_factory: Any, expected_answer: str) -> None:
    # The judge's own HTTP timeout (4 s x 2 tries) is longer than the Auditor's 1.5 s deadline, which is
    # long enough for the one request to reach the server even on a loaded machine (a 0.3 s deadline
    # sometimes cut the judge before its request was sent).
    server.rule = lambda body: Fault.hang(10.0)
    rig = rig_factory(server.base_url, limits=Limits(timeout_s=1.5), judge_timeout_s=4.0)
    assert rag_chain(retriever).invoke(QUESTION, config={"callbacks": [rig.handler]}) == expected_answer
    assert closer_for(rig.auditor).force_flush(30)
    assert_recorded_failure(rig, "timeout", expected_answer)
    assert server.request_count == 1  # cancelled before any retry


def test_rate_limit_then_success_is_retried_once_and_scored(server: LLMServer, retriever: Any,
                                                            rig_factory: Any, expected_answer: str) -> None:
    server.fail_next(Fault.rate_limit(retry_after=0.05))
    server.default = judgement_json(0.9, 0.8, 0.7)
    rig = rig_factory(server.base_url)
    assert rag_chain(retriever).invoke(QUESTION, config={"callbacks": [rig.handler]}) == expected_answer
    assert closer_for(rig.auditor).force_flush(30)
    (judgement,) = rig.collected.judgements
    assert judgement.error is None
    assert (judgement.faithfulness, judgement.context_relevance, judgement.answer_relevance) == (0.9, 0.8, 0.7)
    assert server.request_count == 2
    assert rig.auditor.stats()["judged"] == 1


def test_many_turns_against_a_failing_server_all_recorded(server: LLMServer, retriever: Any,
                                                          rig_factory: Any) -> None:
    gate = Gate(Fault.server_error())
    server.rule = gate
    rig = rig_factory(server.base_url)
    questions = [*QUESTIONS.values()] * 3
    results = rag_chain(retriever).batch(questions, config={"callbacks": [rig.handler]})
    assert not gate.is_open and len(rig.collected) == 0
    assert len(results) == len(questions) and all(isinstance(r, str) and r for r in results)
    gate.open()
    assert closer_for(rig.auditor).force_flush(30)
    stats = rig.auditor.stats()
    assert stats["submitted"] == stats["failed"] == len(questions)
    lines = read_audit_log(rig.log)
    assert len(lines) == len(questions)
    assert all(line["error"] and line["faithfulness"] is None for line in lines)
    assert server.request_count <= len(questions) * (1 + MAX_RETRIES)


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError(), GeneratorExit()],
                         ids=lambda e: type(e).__name__)
def test_judge_raising_a_base_exception_is_counted_and_the_worker_survives(kind: str, exc: BaseException,
                                                                           tmp_path: Path) -> None:
    """A judge that raises what ``except Exception`` does not catch: the judgement is recorded as
    failed, and the next turn is still judged (the worker loop did not die with it)."""
    def fn(request: JudgeRequest) -> dict[str, float]:
        if request.query == "bad":
            raise exc
        return {"faithfulness": 1.0}

    async def afn(request: JudgeRequest) -> dict[str, float]:
        return fn(request)

    collected = Collected()
    log = tmp_path / "audit.jsonl"
    auditor = Auditor(FakeJudge(afn if kind == "async" else fn), audit_log=log, on_judgement=collected)
    try:
        assert auditor.submit(RagTurn(turn_id="t-bad", query="bad", answer="a")) == "queued"
        assert auditor.force_flush(10)
        assert auditor.submit(RagTurn(turn_id="t-good", query="good", answer="a")) == "queued"
        assert auditor.force_flush(10)
        stats = auditor.stats()
    finally:
        auditor.shutdown(5)
    assert stats["failed"] == 1 and stats["judged"] == 1 and stats["pending"] == 0
    assert stats["submitted"] == stats["judged"] + stats["failed"]
    bad = next(j for t, j in collected.items if t.turn_id == "t-bad")
    assert bad.error is not None and type(exc).__name__ in bad.error and bad.faithfulness is None
    assert sorted(line["judge_status"] for line in read_audit_log(log)) == ["failed", "judged"]
