"""Bad input into the LangChain handler and the judges: a recorded turn or a clear error, never an
exception of ours in the host.

Every chain case is run twice, without and with the handler: the host must see exactly the same
result (or exactly the same exception, its own). Then the turn must be on record (turn span in
memory and in the JSONL span file; audit line when it was judged) and ragaudit must not have
logged a failure of its own.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import Runnable, RunnableLambda

from ragaudit import Auditor, ChatRagJudge, FakeJudge, JudgeRequest, LexicalJudge, RagTurn, RetrievedDoc
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.records import TRUNCATION_MARKER
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.reliability._support import FAIL_MID_STREAM, FAIL_MODEL, FAIL_RETRIEVER, FixedRetriever, rag_chain
from tests.reliability.conftest import Traced
from tests.support.llm_server import LLMServer

pytestmark = pytest.mark.timeout(60)

FIVE_MB = 5 * 1024 * 1024
MARKER_PREFIX = TRUNCATION_MARKER.split("{", 1)[0]
SPAN_LIMIT = 8192  # SpanRecorder's default max_attribute_chars
CONTEXT_LIMIT = 24_000  # Auditor's default max_context_chars
WEIRD = "a\x00b\x1b[31mred\x1b[0m\x07\r\n\t\u2028\u202e\ufeff\ud800 end"
EMOJI = "Réponse 🎉 中文 עברית e\u0301 👩\u200d👩\u200d👧 ✓"


def doc(content: Any, id: str | None = None, metadata: Any = None) -> Document:
    """A LangChain Document built without validation, so content and metadata may be anything."""
    return Document.model_construct(page_content=content, metadata={} if metadata is None else metadata, id=id)


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    chunks: list[Any] = field(default_factory=list)

    def same_as(self, other: Outcome) -> bool:
        if (self.error is None) != (other.error is None):
            return False
        if self.error is not None and other.error is not None and (
                type(self.error) is not type(other.error) or repr(self.error) != repr(other.error)):
            return False
        return self.value == other.value and self.chunks == other.chunks


def run(chain: Runnable[Any, Any], question: Any, config: dict[str, Any] | None, stream: bool) -> Outcome:
    out = Outcome()
    try:
        if stream:
            for chunk in chain.stream(question, config=config):
                out.chunks.append(chunk)
            out.value = "".join(out.chunks)
        else:
            out.value = chain.invoke(question, config=config)
    except Exception as exc:  # the host's own exception: it must be identical with and without us
        out.error = exc
    return out


class Rig:
    def __init__(self, tmp_path: Path, traced: Traced) -> None:
        self.requests: list[JudgeRequest] = []
        self.log = tmp_path / "audit.jsonl"
        self.traced = traced

        def judge(request: JudgeRequest) -> dict[str, Any]:
            self.requests.append(request)
            return {"faithfulness": 1.0, "context_relevance": 0.5, "answer_relevance": 0.5}

        self.auditor = Auditor(FakeJudge(judge), audit_log=self.log, tracer_provider=traced.provider)
        self.handler = RagAuditCallbackHandler(auditor=self.auditor)

    def turn_span(self) -> Any:
        (span,) = self.traced.spans(c.SPAN_TURN)
        return span

    def audit(self) -> list[dict[str, Any]]:
        assert closer_for(self.auditor).force_flush(30)  # top down: the handler's turns closed, then judged
        # The audit log is opened with its first line: no judgement, no file.
        return read_audit_log(self.log) if self.log.exists() else []


@pytest.fixture
def rig(tmp_path: Path, traced: Traced) -> Any:
    r = Rig(tmp_path, traced)
    yield r
    r.auditor.shutdown(10)


def check_host_unaffected(rig: Rig, chain: Runnable[Any, Any], question: Any, caplog: pytest.LogCaptureFixture,
                          stream: bool = False) -> Outcome:
    baseline = run(chain, question, None, stream)
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        audited = run(chain, question, {"callbacks": [rig.handler]}, stream)
        assert closer_for(rig.auditor).force_flush(30)
    assert audited.same_as(baseline), (baseline, audited)
    ours = [r for r in caplog.records if r.name.startswith("ragaudit") and r.levelno >= logging.WARNING]
    assert ours == [], [r.getMessage() for r in ours]
    assert rig.handler.stats()["open_turns"] == 0
    assert rig.handler.stats()["closed_turns"] == 1
    # The turn is on record in memory and in the span file.
    assert len(rig.traced.spans(c.SPAN_TURN)) == 1
    assert [s["name"] for s in rig.traced.file_spans()].count(c.SPAN_TURN) == 1
    return audited


Case = Callable[[], tuple[list[Any], Any]]

JUDGED_CASES: dict[str, tuple[list[Any], str]] = {
    "empty_retrieval": ([], "Where is my order?"),
    "binary_content": ([doc(b"\x00\xffPDF-1.4 binary \x89PNG")], "What is in the file?"),
    "int_content": ([doc(12345)], "What is the number?"),
    "none_content_and_metadata": ([Document.model_construct(page_content=None, metadata=None, id=None)],
                                  "Anything there?"),
    "unicode_emoji": ([doc(EMOJI, id="emoji", metadata={"source": "ünïcödé-🎉.md"})], f"Quoi? {EMOJI}"),
    "control_characters": ([doc(WEIRD, id="weird", metadata={"note": WEIRD})], f"Control {WEIRD}?"),
    "documents_without_ids": ([doc("Alpha policy text."), doc("Beta policy text."), doc("Alpha policy text.")],
                              "Which policies?"),
    "duplicate_ids": ([doc("first version", id="d1"), doc("second version", id="d1"), doc("other", id="d2")],
                      "Which version?"),
    "huge_metadata": ([doc("small text", id="m", metadata={f"k{i}": "v" * 1000 for i in range(2000)})],
                      "Metadata?"),
    "odd_metadata": ([doc("odd", id="odd", metadata={"obj": object(), "nan": float("nan"), 3: "int key",
                                                     "bytes": b"\xff", "nested": {"a": [1, {"b": None}]},
                                                     "source": 42})], "Odd?"),
    "huge_question": ([doc("Answer text.", id="a")], "why? " * 200_000),
}


@pytest.mark.parametrize("case", list(JUDGED_CASES))
def test_bad_documents_give_a_recorded_judged_turn(case: str, rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    documents, question = JUDGED_CASES[case]
    outcome = check_host_unaffected(rig, rag_chain(FixedRetriever(documents=documents)), question, caplog)
    assert outcome.error is None and isinstance(outcome.value, str)
    (line,) = rig.audit()
    assert line["judge_status"] == "judged"
    assert line["query"] == question and line["answer"] == outcome.value
    ids = [d["id"] for d in line["documents"]]
    assert len(ids) == len(set(ids))  # each id once
    assert all(isinstance(d["content"], str) for d in line["documents"])
    assert list(rig.turn_span().attributes.get(c.ATTR_DOCUMENT_IDS, ())) == ids
    (request,) = rig.requests
    assert len(request.context) <= CONTEXT_LIMIT + 40
    for span in rig.traced.spans():
        for value in span.attributes.values():
            if isinstance(value, str):
                assert len(value) <= SPAN_LIMIT + 40, (span.name, len(value))
    if case == "documents_without_ids":
        assert len(ids) == 2 and all(i.startswith("doc-") for i in ids)
    if case == "duplicate_ids":
        assert ids == ["d1", "d2"] and line["documents"][0]["content"] == "first version"
    if case == "unicode_emoji":
        assert line["documents"][0]["content"] == EMOJI
        assert rig.turn_span().attributes[c.INPUT_VALUE] == question
    if case == "control_characters":
        assert "\x00" in line["documents"][0]["content"] and "\x1b[31m" in line["documents"][0]["content"]
    if case == "empty_retrieval":
        assert line["documents"] == [] and rig.requests[0].context == ""
    if case == "huge_question":
        assert rig.turn_span().attributes[c.INPUT_VALUE].startswith("why? ")
        assert MARKER_PREFIX in rig.turn_span().attributes[c.INPUT_VALUE]


def test_control_characters_and_lone_surrogates_survive_otlp_export(rig: Rig, caplog: pytest.LogCaptureFixture
                                                                     ) -> None:
    """An OTLP exporter cannot encode a lone surrogate and drops the whole attribute (logging an
    error per attribute): the recorder must hand it text it can send."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tests.support.otlp_receiver import OTLPReceiver

    question = f"Control {WEIRD}?"
    with OTLPReceiver() as receiver:
        rig.traced.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.traces_url)))
        chain = rag_chain(FixedRetriever(documents=[doc(WEIRD, id="weird", metadata={"note": WEIRD})]))
        with caplog.at_level(logging.WARNING):
            chain.invoke(question, config={"callbacks": [rig.handler]})
            assert closer_for(rig.auditor).force_flush(30)
            exported = receiver.wait_for_spans(4, timeout=10)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    (turn,) = [s for s in exported if s["name"] == c.SPAN_TURN]
    assert turn["attributes"][c.INPUT_VALUE] == question.replace("\ud800", "\ufffd")
    (retrieval,) = [s for s in exported if s["name"].startswith("retrieval")]
    assert "\x1b[31mred" in retrieval["attributes"][c.document_keys(0).content]
    (line,) = rig.audit()
    assert line["query"] == question  # the audit log keeps the text exactly (escaped in the JSON)


def test_five_megabyte_document_is_capped_for_the_judge_and_cut_in_spans(rig: Rig,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    big = ("Returns are accepted within 30 days. " * (FIVE_MB // 37 + 1))[:FIVE_MB]
    outcome = check_host_unaffected(rig, rag_chain(FixedRetriever(documents=[doc(big, id="big")])),
                                    "How long for returns?", caplog)
    assert outcome.value == "Returns are accepted within 30 days."
    (request,) = rig.requests
    assert len(request.context) < CONTEXT_LIMIT + 40 and MARKER_PREFIX in request.context  # capped, marked
    (retrieval,) = [s for s in rig.traced.spans() if s.name.startswith("retrieval")]
    content = retrieval.attributes[c.document_keys(0).content]
    assert len(content) < SPAN_LIMIT + 40 and MARKER_PREFIX in content  # cut, marked
    assert retrieval.attributes[c.ATTR_DOCUMENT_CHARS] == (FIVE_MB,)  # the size is still known
    assert max(len(json.dumps(s)) for s in rig.traced.file_spans()) < 100_000
    (line,) = rig.audit()
    assert line["judge_status"] == "judged"


@pytest.mark.parametrize("case", ["none_answer", "empty_answer", "non_string_answer"])
def test_odd_answers_are_recorded(case: str, rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    tail: Runnable[Any, Any] = RunnableLambda({"none_answer": lambda _: None, "empty_answer": lambda _: "",
                                               "non_string_answer": lambda _: {"answer": 42}}[case])
    chain = rag_chain(FixedRetriever(documents=[doc("Shipping takes 3 days.", id="s")])) | tail
    outcome = check_host_unaffected(rig, chain, "How long is shipping?", caplog)
    assert outcome.error is None
    span = rig.turn_span()
    assert span.attributes[c.INPUT_VALUE] == "How long is shipping?"
    if case == "empty_answer":
        # An empty answer is traced and counted, never judged as an answer.
        assert rig.audit() == [] and rig.requests == []
        assert span.attributes[c.OUTPUT_VALUE] == ""
        assert rig.auditor.stats()["unjudged_empty_answer"] == 1
    else:
        # No answer of the root run: the last model output is the answer (it was generated).
        (line,) = rig.audit()
        assert line["answer"] == "Shipping takes 3 days."


@pytest.mark.parametrize("case", ["retriever_raises", "model_raises", "model_raises_mid_stream",
                                  "unprintable_exception"])
def test_host_failures_propagate_unchanged_and_the_turn_is_recorded_as_failed(
        case: str, rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.trace import StatusCode

    question = {"retriever_raises": f"{FAIL_RETRIEVER} please", "model_raises": f"{FAIL_MODEL} please",
                "model_raises_mid_stream": f"{FAIL_MID_STREAM} please",
                "unprintable_exception": "Anything?"}[case]
    documents = [doc("Warranty covers two years of defects.", id="w")]
    chain = rag_chain(FixedRetriever(documents=documents))
    if case == "unprintable_exception":
        def fail(answer: str) -> str:
            raise UnprintableError()

        chain = chain | RunnableLambda(fail)
    outcome = check_host_unaffected(rig, chain, question, caplog, stream=case == "model_raises_mid_stream")
    # the host's own exception, unchanged
    assert isinstance(outcome.error, UnprintableError if case == "unprintable_exception" else RuntimeError)
    if case == "model_raises_mid_stream":
        assert outcome.chunks == ["Warranty", " covers"]
    span = rig.turn_span()
    assert span.status.status_code == StatusCode.ERROR
    if case == "unprintable_exception":
        assert "UnprintableError" in str(span.status.description)
    else:
        assert str(outcome.error) in str(span.status.description)
    # A failed run is traced, not judged.
    assert rig.auditor.stats()["submitted"] == 0 and rig.requests == []


BAD_TEXTS: dict[str, str] = {
    "empty": "",
    "emoji": EMOJI,
    "control_characters": WEIRD,
    "lone_surrogates": "half \ud83d of an emoji and \udfff",
    "five_mb": "x" * FIVE_MB,
}


@pytest.mark.parametrize("case", list(BAD_TEXTS))
def test_judges_take_bad_text_without_raising(case: str) -> None:
    text = BAD_TEXTS[case]
    docs = (RetrievedDoc(id="d1", content=text, rank=1),)
    turn = RagTurn(turn_id="t", query=text[:10_000], answer=text[:10_000], documents=docs)
    request = JudgeRequest.from_turn(turn)
    assert len(request.context) <= CONTEXT_LIMIT + 40
    lexical = LexicalJudge().judge(request)
    assert lexical.error is None, lexical.error
    for score in lexical.scores().values():
        assert score is None or 0.0 <= score <= 1.0
    with LLMServer() as srv:
        judge = ChatRagJudge(base_url=srv.base_url, api_key="test", timeout_s=5, max_retries=0)
        try:
            judgement = judge.judge(request)
        finally:
            judge.close()
        assert judgement.error is None, judgement.error  # the request was sent and read
        (sent,) = srv.requests
        assert sent.body is not None  # valid JSON on the wire
        assert len(sent.raw) < 200_000  # the 5 MB context was capped before sending


# --- any sequence of callback events ------------------------------------------------------------------

_IDS = [uuid.UUID(int=i + 1) for i in range(8)]
class UnprintableError(Exception):
    """An exception whose message cannot be read (its __str__ raises)."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ failed")


class HostileMapping(dict):  # type: ignore[type-arg]
    """A dict whose lookups raise."""

    def get(self, key: Any, default: Any = None) -> Any:
        raise KeyError(key)


_GARBAGE: list[Any] = [
    UnprintableError(), HostileMapping(question="q"),
    None, 42, "text", b"bytes", [object()], {"question": 5}, {"answer": None}, {"answer": "An answer."},
    "What is covered?", [Document(page_content="Covered for two years.", id="w")],
    [doc(None, metadata=None)], [doc(b"\xff", metadata={"source": 3})],
    LLMResult(generations=[[ChatGeneration(message=AIMessage(content="Two years."))]]), LLMResult(generations=[]),
    [[HumanMessage(content="q")]], [], ["a prompt"], ValueError("boom"), float("nan"),
    {"messages": [HumanMessage.model_construct(content=[{"type": "text", "text": "hi"}, 3], type="human")]},
]
_payload = st.sampled_from(_GARBAGE)


Event = tuple[str, uuid.UUID, "uuid.UUID | None", Any, Any]


@st.composite
def _event_trees(draw: Any) -> list[Event]:
    """Interleaved, malformed runs: up to four roots, each with child retriever/model/tool/chain
    runs whose events interleave across roots in any order (a child's end after its start, as a
    framework sends them, but possibly doubled, or an error), stray ends of unknown runs, and
    payloads of any type."""
    ids = iter(uuid.uuid4() for _ in range(200))
    roots: list[uuid.UUID] = []
    lanes: list[list[Event]] = []  # each child's own events, in their order
    for _ in range(draw(st.integers(1, 4))):
        root = next(ids)
        roots.append(root)
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["retriever", "chat", "llm", "tool", "chain"]))
            child = next(ids)
            lane: list[Event] = [(f"{kind}_start", child, root, draw(_payload), draw(_payload))]
            ending = draw(st.sampled_from(["end", "error", "twice"]))
            lane.append((f"{kind}_{'error' if ending == 'error' else 'end'}", child, root, draw(_payload), None))
            if ending == "twice":
                lane.append((f"{kind}_end", child, root, draw(_payload), None))
            lanes.append(lane)
    body: list[Event] = []
    while any(lanes):  # merge the lanes in a random interleaving, each lane kept in order
        lane = draw(st.sampled_from([lane for lane in lanes if lane]))
        body.append(lane.pop(0))
    stray = draw(st.lists(st.tuples(st.sampled_from(["chain_end", "retriever_end", "llm_end", "tool_end"]),
                                    st.sampled_from(_IDS), st.none(), _payload, st.none()), max_size=3))
    starts: list[Event] = [("chain_start", root, None, draw(_payload), draw(_payload)) for root in roots]
    ends: list[Event] = [(draw(st.sampled_from(["chain_end", "chain_error"])), root, None, draw(_payload), None)
                         for root in roots]
    return [*starts, *body, *stray, *ends]


def _call(handler: RagAuditCallbackHandler, event: Event) -> None:
    kind, run_id, parent, a, b = event
    kw: dict[str, Any] = {"run_id": run_id, "parent_run_id": parent}
    method = {"chain_start": lambda: handler.on_chain_start({"name": "chain"}, a, **kw),
              "chain_end": lambda: handler.on_chain_end(a, **kw),
              "chain_error": lambda: handler.on_chain_error(a if isinstance(a, BaseException) else
                                                           RuntimeError(repr(a)), **kw),
              "retriever_start": lambda: handler.on_retriever_start({"name": "r"}, a, **kw),
              "retriever_end": lambda: handler.on_retriever_end(a, **kw),
              "retriever_error": lambda: handler.on_retriever_error(UnprintableError(), **kw),
              "chat_start": lambda: handler.on_chat_model_start({}, a, invocation_params=b, **kw),
              "chat_end": lambda: handler.on_llm_end(a, **kw),
              "chat_error": lambda: handler.on_llm_error(RuntimeError("model"), **kw),
              "llm_start": lambda: handler.on_llm_start({}, a, **kw),
              "llm_end": lambda: handler.on_llm_end(a, **kw),
              "llm_error": lambda: handler.on_llm_error(RuntimeError("model"), **kw),
              "tool_start": lambda: handler.on_tool_start({}, a, **kw),
              "tool_end": lambda: handler.on_tool_end(a, **kw),
              "tool_error": lambda: handler.on_tool_error(RuntimeError("tool"), **kw)}[kind]
    method()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_event_trees())
def test_handler_survives_any_event_sequence(events: list[Event]) -> None:
    """Whatever events arrive, in whatever order, with whatever payloads: no callback raises, every
    root that ended is closed, and every closed turn is accounted for."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, tracer_provider=provider)
    handler = RagAuditCallbackHandler(auditor=auditor)
    try:
        for event in events:
            _call(handler, event)  # raises nothing: the handler reports its own failures
        assert closer_for(auditor).force_flush(10)
        roots = sum(1 for e in events if e[0] == "chain_start" and e[2] is None)
        assert handler.stats() == {"open_turns": 0, "closed_turns": roots, "evicted": 0}
        stats = auditor.stats()
        assert stats["submitted"] == stats["judged"] + stats["failed"] + stats["dropped"] + stats["sampled_out"]
        assert stats["close_dropped"] == 0 and stats["failed"] == 0
        assert len([s for s in exporter.get_finished_spans() if s.name == c.SPAN_TURN]) == roots
    finally:
        auditor.shutdown(5)
        provider.shutdown()


def test_a_child_run_that_never_ends_does_not_keep_its_turn_open_forever(traced: Traced) -> None:
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, tracer_provider=traced.provider)
    handler = RagAuditCallbackHandler(auditor=auditor)
    root, child = uuid.uuid4(), uuid.uuid4()
    try:
        handler.on_chain_start({"name": "chain"}, "What is covered?", run_id=root)
        handler.on_tool_start({"name": "slow-tool"}, "x", run_id=child, parent_run_id=root)  # never ends
        handler.on_chain_end({"answer": "Two years."}, run_id=root)
        assert handler.force_flush(5)
        assert handler.stats()["open_turns"] == 0
        assert len(traced.spans(c.SPAN_TURN)) == 1
    finally:
        auditor.shutdown(5)


def test_shutdown_closes_a_turn_left_open_by_a_hung_child_run(traced: Traced) -> None:
    """The exit path (the closer's shutdown, run by the exit hook before the Auditor's) records such a
    turn too: the closer closes its sources' ended turns, hands them down, then shuts the Auditor down."""
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, tracer_provider=traced.provider)
    handler = RagAuditCallbackHandler(auditor=auditor)
    root, child = uuid.uuid4(), uuid.uuid4()
    handler.on_chain_start({"name": "chain"}, "What is covered?", run_id=root)
    handler.on_tool_start({"name": "slow-tool"}, "x", run_id=child, parent_run_id=root)  # never ends
    handler.on_chain_end({"answer": "Two years."}, run_id=root)
    assert handler.stats()["open_turns"] == 1
    assert closer_for(auditor).shutdown(5)
    assert auditor.closed  # shut down by the closer, below it
    assert handler.stats()["open_turns"] == 0
    assert len(traced.spans(c.SPAN_TURN)) == 1
