"""ragaudit.integrations.llamaindex with real LlamaIndex engines, real Chroma and the real OTel SDK.

The knowledge base (tests/support/topics.py, llamaindex_support.py) has 20 topics with two nodes each and a
question per topic whose words occur only in that topic's nodes, so every question retrieves its
own two nodes, and the stand-in LLM (first sentence of its context) gives an answer tied to them.
Each test checks that every turn got exactly its own question, nodes and answer, and one judge
span; the FakeJudge writes the node ids it was shown into its reason, so the audit log also proves
what the judge saw.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Settings
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragaudit import Auditor, BaseRagJudge, ContentPolicy, FakeJudge, Judgement, JudgeRequest, LexicalJudge
from ragaudit.integrations import closer_for, llamaindex
from ragaudit.integrations.llamaindex import (
    JUDGE_CONTEXT_KEY,
    STREAM_KEY,
    LlamaIndexInstrumentation,
    RagAuditLlamaIndexHandler,
)
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.support.llamaindex_support import ContextEchoLLM, ReverseReranker, build_index, make_nodes
from tests.support.llamaindex_support import offline_settings as llamaindex_offline_settings
from tests.support.topics import QUESTIONS, WORDS, answer_for, check_own_documents
from tests.support.turns import AuditedRun, children, doc_ids_judge

pytestmark = pytest.mark.timeout(60)

RETRIEVAL = "retrieval Chroma"
CHAT = "chat context-echo-1"


@pytest.fixture(scope="module", autouse=True)
def offline_settings() -> Iterator[None]:
    """Nothing may fall back to OpenAI: the LLM and the embedding are set explicitly."""
    with llamaindex_offline_settings():
        yield


class KB:
    def __init__(self, reference: KB | None = None) -> None:
        self.index = build_index()
        self.texts = {n.node_id: n.text for n in make_nodes()}
        if reference is not None:  # same nodes and embedding: same results, without retrieving again
            self.expected, self.scores, self.answers = reference.expected, reference.scores, reference.answers
            return
        retriever = self.index.as_retriever(similarity_top_k=2)
        self.expected: dict[str, list[str]] = {}
        self.scores: dict[str, list[float]] = {}
        self.answers: dict[str, str] = {}
        for q in QUESTIONS:
            found = retriever.retrieve(q)
            self.expected[q] = [n.node.node_id for n in found]
            self.scores[q] = [float(n.score or 0.0) for n in found]
            self.answers[q] = answer_for(found[0].node.get_content())

    def engine(self, **kwargs: Any) -> Any:
        return self.index.as_query_engine(similarity_top_k=2, **kwargs)


@pytest.fixture(scope="module")
def kb() -> KB:
    kb = KB()
    check_own_documents(kb.expected)
    return kb


class Setup(AuditedRun):
    framework = "llamaindex"

    def check_turn(self, turn: ReadableSpan, spans: list[ReadableSpan]) -> None:
        retrieval = [s for s in children(spans, turn) if s.name.startswith("retrieval")]
        assert retrieval, str(turn.attributes[c.INPUT_VALUE])


@pytest.fixture
def setup(memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider,
          audit_log_path: Path) -> Iterator[Setup]:
    s = Setup(memory_exporter, memory_provider, audit_log_path)
    yield s
    s.auditor.shutdown()


@pytest.fixture
def inst(setup: Setup) -> Iterator[LlamaIndexInstrumentation]:
    installed = llamaindex.instrument(auditor=setup.auditor)
    yield installed
    llamaindex.uninstrument()


def metadata_of(turn: ReadableSpan) -> dict[str, Any]:
    return dict(json.loads(str(turn.attributes[c.METADATA])))


def ours_on_dispatcher() -> int:
    d = get_dispatcher()
    return sum(type(h).__module__.startswith(llamaindex.__name__ + ".") for h in [*d.span_handlers, *d.event_handlers])


# --- query engines ------------------------------------------------------------------------------------


def test_query_engine_turn_has_retrieval_generation_citation_and_judgement(
        setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    q = QUESTIONS[3]
    response = kb.engine().query(q)
    assert str(response) == kb.answers[q]
    (turn,) = setup.check(kb, [q])
    spans = setup.spans()
    kids = children(spans, turn)
    assert sorted(s.name for s in kids) == sorted([RETRIEVAL, CHAT, c.SPAN_JUDGE])
    retrieval = next(s for s in kids if s.name == RETRIEVAL)
    for i, node in enumerate(response.source_nodes):
        assert retrieval.attributes[f"retrieval.documents.{i}.document.id"] == node.node.node_id
        assert retrieval.attributes[f"retrieval.documents.{i}.document.score"] == pytest.approx(node.score)
    assert [retrieval.attributes[f"retrieval.documents.{i}.document.score"] for i in range(2)] == \
        pytest.approx(kb.scores[q])
    assert retrieval.attributes[c.GEN_AI_RETRIEVAL_QUERY_TEXT] == q
    chat = next(s for s in kids if s.name == CHAT)
    assert chat.attributes[c.OUTPUT_VALUE] == kb.answers[q]
    assert chat.attributes[c.GEN_AI_USAGE_OUTPUT_TOKENS] == len(kb.answers[q].split())
    assert "Context information is below." in str(chat.attributes[c.INPUT_VALUE])
    # a completion model: its prompt is the input Langfuse shows too
    assert chat.attributes[c.LANGFUSE_OBSERVATION_INPUT] == chat.attributes[c.INPUT_VALUE]
    judge = next(s for s in kids if s.name == c.SPAN_JUDGE)
    # its parent is the turn, and its one link (OpenInference) names the turn too, as child_of
    assert [(link.context.span_id, (link.attributes or {}).get(c.LINK_REF_TYPE)) for link in judge.links] == [
        (judge.parent.span_id, c.REF_TYPE_CHILD_OF)]
    assert judge.attributes[c.judge_score_key("faithfulness")] == 1.0
    assert turn.attributes[c.ATTR_JUDGE_STATUS] == "queued"
    assert metadata_of(turn) == {"run_name": "RetrieverQueryEngine.query", JUDGE_CONTEXT_KEY: "source_nodes"}
    (line,) = read_audit_log(setup.log)
    assert line["framework"] == "llamaindex" and line["model"] == "context-echo-1"
    assert line["documents"][0]["source"] == f"{WORDS[3]}.md"
    assert line["documents"][0]["metadata"]["section"] == "rule"
    assert line["documents"][0]["score"] == pytest.approx(kb.scores[q][0])
    assert [cit["doc_id"] for cit in line["citations"]] == [kb.expected[q][0]]
    assert inst.stats() == {"open_turns": 0, "closed_turns": 1, "evicted": 0}


def test_sequential_queries_each_get_their_own_nodes(setup: Setup, inst: LlamaIndexInstrumentation,
                                                     kb: KB) -> None:
    engine = kb.engine()
    for q in QUESTIONS[:6]:
        assert str(engine.query(q)) == kb.answers[q]
    setup.check(kb, QUESTIONS[:6])


def test_ten_concurrent_aquery_with_mock_llm_do_not_mix(setup: Setup, inst: LlamaIndexInstrumentation,
                                                        kb: KB) -> None:
    engine = kb.engine(llm=MockLLM())  # echoes its prompt: each answer quotes the nodes it was built from
    questions = QUESTIONS[:10]

    async def main() -> list[Any]:
        return await asyncio.gather(*(engine.aquery(q) for q in questions))

    responses = asyncio.run(main())
    answers = {q: str(r) for q, r in zip(questions, responses)}
    for q in questions:
        own = [kb.texts[i] for i in kb.expected[q]]
        assert all(text in answers[q] for text in own) and f"Query: {q}" in answers[q]
        others = [t for i, t in kb.texts.items() if i not in kb.expected[q]]
        assert not any(text in answers[q] for text in others)
    turns = setup.check(kb, questions, answers=answers)
    assert {metadata_of(t)["run_name"] for t in turns} == {"RetrieverQueryEngine.aquery"}


def test_queries_from_many_threads_do_not_mix(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    engine = kb.engine()
    questions = QUESTIONS[:12]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda q: str(engine.query(q)), questions))
    assert answers == [kb.answers[q] for q in questions]
    setup.check(kb, questions)


def test_chat_llm_over_completion_counts_one_generation(setup: Setup, inst: LlamaIndexInstrumentation,
                                                        kb: KB) -> None:
    llm = ContextEchoLLM(chat_model=True)  # engines call chat(), which CustomLLM implements over complete()
    q = QUESTIONS[4]
    assert str(kb.engine(llm=llm).query(q)) == kb.answers[q]
    assert llm.calls == 1
    (turn,) = setup.check(kb, [q])
    chats = [s for s in children(setup.spans(), turn) if s.name.startswith("chat")]
    assert len(chats) == 1
    assert chats[0].attributes[c.OUTPUT_VALUE] == kb.answers[q]
    # the chat messages with their roles (Langfuse renders them as a conversation), not the prompt
    messages = json.loads(str(chats[0].attributes[c.LANGFUSE_OBSERVATION_INPUT]))
    assert messages[0]["role"] == "system" and "Query: " in messages[-1]["content"]
    assert chats[0].attributes[c.INPUT_VALUE] == chats[0].attributes[c.LANGFUSE_OBSERVATION_INPUT]


def test_post_processed_nodes_are_what_the_judge_sees(setup: Setup, inst: LlamaIndexInstrumentation,
                                                      kb: KB) -> None:
    q = QUESTIONS[5]
    reranked = list(reversed(kb.expected[q]))
    response = kb.engine(node_postprocessors=[ReverseReranker()]).query(q)
    answer = answer_for(kb.texts[reranked[0]])  # built from the reranked first node
    assert str(response) == answer
    (turn,) = setup.check(kb, [q], answers={q: answer}, expected={q: reranked})
    assert metadata_of(turn)[JUDGE_CONTEXT_KEY] == "source_nodes"
    (retrieval,) = [s for s in children(setup.spans(), turn) if s.name == RETRIEVAL]
    assert [retrieval.attributes[f"retrieval.documents.{i}.document.id"] for i in range(2)] == kb.expected[q]


# --- retrievers and chat engines ----------------------------------------------------------------------


def test_retriever_called_alone_is_traced_but_not_judged(setup: Setup, inst: LlamaIndexInstrumentation,
                                                         kb: KB) -> None:
    q = QUESTIONS[6]
    nodes = kb.index.as_retriever(similarity_top_k=2).retrieve(q)
    assert [n.node.node_id for n in nodes] == kb.expected[q]
    spans = setup.spans()
    (turn,) = [s for s in spans if s.name == c.SPAN_TURN]
    assert turn.attributes[c.INPUT_VALUE] == q and c.OUTPUT_VALUE not in turn.attributes
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[q]
    assert metadata_of(turn) == {"run_name": "VectorIndexRetriever.retrieve", JUDGE_CONTEXT_KEY: "retrieval"}
    (retrieval,) = children(spans, turn)
    assert retrieval.name == RETRIEVAL
    assert retrieval.attributes["retrieval.documents.1.document.id"] == kb.expected[q][1]
    assert retrieval.attributes["retrieval.documents.1.document.score"] == pytest.approx(kb.scores[q][1])
    assert not [s for s in spans if s.name == c.SPAN_JUDGE]
    assert setup.auditor.stats()["submitted"] == 0
    assert inst.stats()["closed_turns"] == 1


def test_condense_question_chat_engine_turns(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    chat = CondenseQuestionChatEngine.from_defaults(query_engine=kb.engine(), llm=ContextEchoLLM())
    first, follow_up = QUESTIONS[1], QUESTIONS[2]
    assert chat.chat(first).response == kb.answers[first]
    assert chat.chat(follow_up).response == kb.answers[follow_up]
    turns = setup.check(kb, [first, follow_up])
    spans = setup.spans()
    by_query = {str(t.attributes[c.INPUT_VALUE]): t for t in turns}
    assert metadata_of(by_query[first])["run_name"] == "CondenseQuestionChatEngine.chat"
    # The first message needs no condensing; the follow-up has the condense call and the answer.
    assert Counter(s.name for s in children(spans, by_query[first]))[CHAT] == 1
    follow_chats = [s for s in children(spans, by_query[follow_up]) if s.name == CHAT]
    assert [s.attributes[c.OUTPUT_VALUE] for s in sorted(follow_chats, key=lambda s: s.start_time or 0)] == \
        [follow_up, kb.answers[follow_up]]


def test_streaming_chat_closes_when_the_stream_is_written(setup: Setup, inst: LlamaIndexInstrumentation,
                                                          kb: KB) -> None:
    chat = CondenseQuestionChatEngine.from_defaults(query_engine=kb.engine(), llm=ContextEchoLLM())
    q = QUESTIONS[8]
    response = chat.stream_chat(q)
    assert "".join(response.response_gen) == kb.answers[q]
    setup.check(kb, [q])


def test_async_streaming_chat(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    chat = CondenseQuestionChatEngine.from_defaults(query_engine=kb.engine(), llm=ContextEchoLLM())
    q = QUESTIONS[9]

    async def main() -> str:
        response = await chat.astream_chat(q)
        return "".join([t async for t in response.async_response_gen()])

    assert asyncio.run(main()) == kb.answers[q]
    (turn,) = setup.check(kb, [q])
    assert metadata_of(turn)["run_name"] == "CondenseQuestionChatEngine.astream_chat"


# --- streaming ----------------------------------------------------------------------------------------


def test_streaming_query_consumed_fully(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    engine = kb.engine(streaming=True)
    for q in QUESTIONS[:3]:
        response = engine.query(q)
        tokens = list(response.response_gen)
        assert len(tokens) > 1 and "".join(tokens) == kb.answers[q]
    turns = setup.check(kb, QUESTIONS[:3])
    spans = setup.spans()
    for turn in turns:
        assert metadata_of(turn)[STREAM_KEY] == "consumed"
        assert metadata_of(turn)[JUDGE_CONTEXT_KEY] == "source_nodes"
        (chat,) = [s for s in children(spans, turn) if s.name == CHAT]  # made lazily, outside the query span
        assert chat.attributes[c.OUTPUT_VALUE] == turn.attributes[c.OUTPUT_VALUE]
        assert chat.status.status_code != StatusCode.ERROR


def test_streaming_query_abandoned_half_way(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    q = QUESTIONS[7]
    response = kb.engine(streaming=True).query(q)
    received = ""
    for i, token in enumerate(response.response_gen):
        received += token
        if i == 1:
            break
    assert inst.stats()["open_turns"] == 1  # still waiting for the stream
    del response, token
    gc.collect()
    assert inst.force_flush(15)
    assert inst.stats() == {"open_turns": 0, "closed_turns": 1, "evicted": 0}
    (turn,) = setup.check(kb, [q], answers={q: received})
    assert received and kb.answers[q].startswith(received) and received != kb.answers[q]
    assert metadata_of(turn)[STREAM_KEY] == "abandoned"
    assert metadata_of(turn)[JUDGE_CONTEXT_KEY] == "source_nodes"


def test_stream_closed_by_its_consumer(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    q = QUESTIONS[12]
    response = kb.engine(streaming=True).query(q)
    first = next(response.response_gen)
    response.response_gen.close()
    assert inst.stats()["closed_turns"] == 1  # at once, not when the response is collected
    (turn,) = setup.check(kb, [q], answers={q: first})
    assert metadata_of(turn)[STREAM_KEY] == "abandoned"
    assert metadata_of(turn)[JUDGE_CONTEXT_KEY] == "source_nodes"


def test_stream_failing_mid_way_is_an_error_turn(setup: Setup, inst: LlamaIndexInstrumentation,
                                                 kb: KB) -> None:
    response = kb.engine(streaming=True).query("FAIL_MODEL_STREAM warranty")
    received = []
    with pytest.raises(RuntimeError, match="stream interrupted"):
        for token in response.response_gen:
            received.append(token)
    assert len(received) == 2
    (turn,) = setup.spans(c.SPAN_TURN)
    assert turn.status.status_code == StatusCode.ERROR
    assert "stream interrupted" in str(turn.status.description)
    assert metadata_of(turn)[STREAM_KEY] == "error"
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[QUESTIONS[0]]
    assert not setup.spans(c.SPAN_JUDGE)


def test_async_streaming_query(setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    engine = kb.engine(streaming=True)

    async def consume(q: str) -> str:
        response = await engine.aquery(q)
        return "".join([t async for t in response.async_response_gen()])

    async def main() -> list[str]:
        return await asyncio.gather(*(consume(q) for q in QUESTIONS[10:14]))

    assert asyncio.run(main()) == [kb.answers[q] for q in QUESTIONS[10:14]]
    turns = setup.check(kb, QUESTIONS[10:14])
    spans = setup.spans()
    for turn in turns:
        assert len([s for s in children(spans, turn) if s.name == CHAT]) == 1


# --- failures never reach the engine ------------------------------------------------------------------


class ExplodingJudge(BaseRagJudge):
    name = "exploding"

    def judge(self, request: JudgeRequest) -> Judgement:
        raise ConnectionError("judge backend is down")


class ExplodingExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise OSError("collector unreachable")

    def shutdown(self) -> None:
        pass


def test_failing_judge_and_exporter_never_reach_the_engine(
        memory_exporter: InMemorySpanExporter, audit_log_path: Path, kb: KB,
        caplog: pytest.LogCaptureFixture) -> None:
    exploding = ExplodingExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exploding))
    provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
    s = Setup(memory_exporter, provider, audit_log_path, judge=ExplodingJudge())
    llamaindex.instrument(auditor=s.auditor)
    try:
        with caplog.at_level(logging.CRITICAL):
            assert [str(kb.engine().query(q)) for q in QUESTIONS[:3]] == [kb.answers[q] for q in QUESTIONS[:3]]
            response = kb.engine(streaming=True).query(QUESTIONS[3])
            assert "".join(response.response_gen) == kb.answers[QUESTIONS[3]]
            judges = s.spans(c.SPAN_JUDGE)
    finally:
        llamaindex.uninstrument()
        s.auditor.shutdown()
    assert exploding.calls > 0
    assert len(judges) == 4
    assert all("judge backend is down" in str(j.attributes[c.ATTR_JUDGE_ERROR]) for j in judges)
    assert s.auditor.stats()["failed"] == 4
    assert {line["judge_status"] for line in read_audit_log(audit_log_path)} == {"failed"}


def test_engine_error_propagates_unchanged_and_turn_is_an_error(
        setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    with pytest.raises(RuntimeError, match="vector index unavailable"):
        kb.engine().query("FAIL_RETRIEVER warranty")
    with pytest.raises(RuntimeError, match="model overloaded"):
        kb.engine().query("FAIL_MODEL shipping")
    turns = {str(t.attributes[c.INPUT_VALUE]): t for t in setup.spans(c.SPAN_TURN)}
    retriever_failed, model_failed = turns["FAIL_RETRIEVER warranty"], turns["FAIL_MODEL shipping"]
    assert retriever_failed.status.status_code == model_failed.status.status_code == StatusCode.ERROR
    assert "vector index unavailable" in str(retriever_failed.status.description)
    assert "model overloaded" in str(model_failed.status.description)
    # The model failed after the retriever: its nodes are kept, as retrieved.
    assert list(model_failed.attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[QUESTIONS[1]]
    assert metadata_of(model_failed)[JUDGE_CONTEXT_KEY] == "retrieval"
    assert not setup.spans(c.SPAN_JUDGE)
    assert inst.stats() == {"open_turns": 0, "closed_turns": 2, "evicted": 0}


class OddRetriever(BaseRetriever):
    """Returns a node with a NaN score and one with no id-worthy metadata."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_="odd-1", text="Odd fact one."), score=float("nan")),
                NodeWithScore(node=TextNode(id_="odd-2", text="Odd fact two.", metadata={"file_name": "o.txt"}),
                              score=0.25)]


def test_odd_nodes_are_recorded_without_raising(setup: Setup, inst: LlamaIndexInstrumentation) -> None:
    engine = RetrieverQueryEngine.from_args(OddRetriever(), llm=ContextEchoLLM())
    assert str(engine.query("odd?")) == "Odd fact one."
    (turn,) = setup.spans(c.SPAN_TURN)
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == ["odd-1", "odd-2"]
    (retrieval,) = [s for s in children(setup.spans(), turn) if s.name.startswith("retrieval")]
    assert "retrieval.documents.0.document.score" not in retrieval.attributes  # NaN is no score
    assert retrieval.attributes["retrieval.documents.1.document.score"] == 0.25
    (line,) = read_audit_log(setup.log)
    assert line["documents"][1]["source"] == "o.txt"


# --- ground truth, registration, bounds, content ------------------------------------------------------


def test_relevant_ids_from_instrument_tags_put_metrics_on_the_turn(
        setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    q = QUESTIONS[2]
    relevant = {kb.expected[q][1]: 2, "not-retrieved": 1}
    with instrument_tags({"ragaudit_relevant_ids": relevant, "ragaudit_reference_answer": "Within 4 days.",
                          "user": "u1"}):
        kb.engine().query(q)
    (turn,) = setup.spans(c.SPAN_TURN)
    assert json.loads(str(turn.attributes[c.ATTR_RELEVANT_IDS])) == relevant
    assert turn.attributes[c.retrieval_metric_key("recall@5")] == pytest.approx(0.5)
    assert turn.attributes[c.retrieval_metric_key("mrr@10")] == pytest.approx(0.5)
    metadata = metadata_of(turn)
    assert metadata["reference_answer"] == "Within 4 days." and metadata["user"] == "u1"
    assert "ragaudit_relevant_ids" not in metadata


def test_session_and_user_from_instrument_tags_reach_the_turn_span(
        setup: Setup, inst: LlamaIndexInstrumentation, kb: KB) -> None:
    with instrument_tags({"session_id": "sess-9", "user_id": "user-3"}):
        kb.engine().query(QUESTIONS[1])
    (turn,) = setup.spans(c.SPAN_TURN)
    assert (turn.attributes[c.SESSION_ID], turn.attributes[c.USER_ID]) == ("sess-9", "user-3")


def test_instrument_is_idempotent_replaces_on_other_arguments_and_uninstrument_detaches(
        setup: Setup, kb: KB) -> None:
    assert llamaindex.uninstrument() is None
    first = llamaindex.instrument(auditor=setup.auditor)
    assert llamaindex.instrument(auditor=setup.auditor) is first  # the same arguments: installed once
    assert ours_on_dispatcher() == 2
    second = llamaindex.instrument(auditor=setup.auditor, max_runs=5000)
    try:
        assert first is not second and not first.attached and second.attached
        assert ours_on_dispatcher() == 2  # one span handler, one event handler
        kb.engine().query(QUESTIONS[0])
    finally:
        assert llamaindex.uninstrument() is second
    assert llamaindex.uninstrument() is None
    assert ours_on_dispatcher() == 0
    kb.engine().query(QUESTIONS[1])
    setup.check(kb, QUESTIONS[:1])


def test_open_turns_are_bounded(setup: Setup, kb: KB) -> None:
    installed = llamaindex.instrument(auditor=setup.auditor, max_runs=2)
    try:
        engine = kb.engine(streaming=True)
        responses = [engine.query(q) for q in QUESTIONS[:3]]  # three streams left open
        assert installed.stats()["evicted"] == 1 and installed.stats()["open_turns"] == 2
        answers = ["".join(r.response_gen) for r in responses]
    finally:
        llamaindex.uninstrument()
    assert answers == [kb.answers[q] for q in QUESTIONS[:3]]  # the host sees nothing of it
    assert installed.stats() == {"open_turns": 0, "closed_turns": 3, "evicted": 1}
    turns = setup.spans(c.SPAN_TURN)
    assert len(turns) == 3  # the evicted turn's late stream did not start a new one
    evicted = [t for t in turns if t.status.status_code == StatusCode.ERROR]
    assert len(evicted) == 1 and "evicted" in str(evicted[0].status.description)
    assert evicted[0].attributes[c.INPUT_VALUE] == QUESTIONS[0]


def test_capture_content_false_keeps_text_out_of_spans(
        memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, audit_log_path: Path,
        kb: KB) -> None:
    auditor = Auditor(LexicalJudge(), audit_log=audit_log_path, tracer_provider=memory_provider,
                      content=ContentPolicy(capture_content=False))
    llamaindex.instrument(auditor=auditor, tracer_provider=memory_provider, capture_content=False)
    q = QUESTIONS[9]
    try:
        kb.engine().query(q)
        assert closer_for(auditor).force_flush(10)
    finally:
        llamaindex.uninstrument()
        auditor.shutdown()
    spans = memory_exporter.get_finished_spans()
    assert {s.name for s in spans} == {c.SPAN_TURN, RETRIEVAL, CHAT, c.SPAN_JUDGE}
    texts = [q, WORDS[9] + " requests", "Context information"]
    for span in spans:
        dumped = json.dumps({k: str(v) for k, v in (span.attributes or {}).items()})
        dumped += json.dumps([dict(e.attributes or {}) for e in span.events], default=str)
        assert not any(t in dumped for t in texts), (span.name, dumped)
    (judge,) = [s for s in spans if s.name == c.SPAN_JUDGE]
    assert judge.attributes[c.judge_score_key("faithfulness")] is not None  # LexicalJudge scored it
    (line,) = read_audit_log(audit_log_path)
    assert line["query"] is None and line["documents"][0]["id"] == kb.expected[q][0]


def test_judge_without_auditor_gets_a_private_auditor(
        memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, kb: KB,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # the private auditor writes the default audit log here
    judge = FakeJudge(doc_ids_judge)
    installed = llamaindex.instrument(judge=judge, tracer_provider=memory_provider)
    try:
        kb.engine().query(QUESTIONS[0])
        assert installed.force_flush(10)
    finally:
        llamaindex.uninstrument()
        installed.auditor.shutdown()
    assert judge.calls == 1
    names = Counter(s.name for s in memory_exporter.get_finished_spans())
    assert names[c.SPAN_TURN] == 1 and names[c.SPAN_JUDGE] == 1
    (line,) = read_audit_log(tmp_path / "ragaudit-audit.jsonl")
    assert line["reason"] == ",".join(kb.expected[QUESTIONS[0]])


def test_judge_or_auditor_not_both(setup: Setup) -> None:
    with pytest.raises(ValueError, match="not both"):
        llamaindex.instrument(judge=FakeJudge(doc_ids_judge), auditor=setup.auditor)
    with pytest.raises(ValueError, match="not both"):
        RagAuditLlamaIndexHandler(judge=FakeJudge(doc_ids_judge), auditor=setup.auditor)
    assert ours_on_dispatcher() == 0


# --- the legacy CallbackManager -----------------------------------------------------------------------


@pytest.fixture
def legacy(setup: Setup, kb: KB) -> Iterator[tuple[RagAuditLlamaIndexHandler, KB]]:
    """Code that still sets ``Settings.callback_manager`` before building its index."""
    handler = RagAuditLlamaIndexHandler(auditor=setup.auditor)
    saved = Settings._callback_manager
    Settings.callback_manager = CallbackManager([handler])
    try:
        yield handler, KB(reference=kb)
    finally:
        Settings._callback_manager = saved


def test_legacy_handler_query_stream_and_chat_model(setup: Setup,
                                                   legacy: tuple[RagAuditLlamaIndexHandler, KB]) -> None:
    handler, kb = legacy
    engine = kb.engine()
    for q in QUESTIONS[:3]:
        assert str(engine.query(q)) == kb.answers[q]
    response = kb.engine(streaming=True).query(QUESTIONS[3])
    assert "".join(response.response_gen) == kb.answers[QUESTIONS[3]]
    assert str(kb.engine(llm=ContextEchoLLM(chat_model=True)).query(QUESTIONS[4])) == kb.answers[QUESTIONS[4]]
    assert handler.force_flush(15)
    turns = setup.check(kb, QUESTIONS[:5])
    spans = setup.spans()
    for turn in turns:  # the chat model over completion is one generation
        kids = Counter(s.name for s in children(spans, turn))
        assert kids == {"retrieval retriever": 1, CHAT: 1, c.SPAN_JUDGE: 1}
        assert metadata_of(turn)[JUDGE_CONTEXT_KEY] == "source_nodes"
    assert handler.stats() == {"open_turns": 0, "closed_turns": 5, "evicted": 0}


def test_legacy_handler_retriever_alone(setup: Setup, legacy: tuple[RagAuditLlamaIndexHandler, KB]) -> None:
    handler, kb = legacy
    q = QUESTIONS[5]
    kb.index.as_retriever(similarity_top_k=2).retrieve(q)
    spans = setup.spans()
    (turn,) = [s for s in spans if s.name == c.SPAN_TURN]
    assert turn.attributes[c.INPUT_VALUE] == q and c.OUTPUT_VALUE not in turn.attributes
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[q]
    (retrieval,) = children(spans, turn)
    assert retrieval.attributes["retrieval.documents.0.document.score"] == pytest.approx(kb.scores[q][0])
    assert not [s for s in spans if s.name == c.SPAN_JUDGE]
    assert handler.stats()["closed_turns"] == 1


def test_legacy_handler_ten_concurrent_aquery(setup: Setup, legacy: tuple[RagAuditLlamaIndexHandler, KB]) -> None:
    handler, kb = legacy
    engine = kb.engine()
    questions = QUESTIONS[10:20]

    async def main() -> list[Any]:
        return await asyncio.gather(*(engine.aquery(q) for q in questions))

    assert [str(r) for r in asyncio.run(main())] == [kb.answers[q] for q in questions]
    setup.check(kb, questions)
    assert handler.stats()["closed_turns"] == 10


# --- the same turn as the LangChain integration --------------------------------------------------------


def test_same_spans_and_audit_line_as_langchain_for_the_same_question(
        memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, tmp_path: Path, kb: KB) -> None:
    """The same knowledge base, question, answer and judge through both integrations give the same
    turn: the same spans with the same attributes and the same audit line, apart from ids, times
    and the framework's own names."""
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support import langchain_support as lc

    q = QUESTIONS[4]
    relevant = {kb.expected[q][1]: 1}
    recorded: dict[str, tuple[list[ReadableSpan], dict[str, Any]]] = {}

    def record(framework: str, run: Any) -> None:
        log = tmp_path / f"{framework}.jsonl"
        auditor = Auditor(FakeJudge(doc_ids_judge), audit_log=log, tracer_provider=memory_provider)
        try:
            assert run(auditor) == kb.answers[q]
            assert closer_for(auditor).force_flush(10)
        finally:
            auditor.shutdown()
        recorded[framework] = list(memory_exporter.get_finished_spans()), read_audit_log(log)[0]
        memory_exporter.clear()

    lc_kb = lc.KB()
    assert lc_kb.expected[q] == kb.expected[q]
    record("langchain", lambda auditor: lc.rag_chain(lc_kb.retriever).invoke(q, config={
        "callbacks": [RagAuditCallbackHandler(auditor=auditor)],
        "metadata": {"ragaudit_relevant_ids": relevant}}))

    def llama(auditor: Auditor) -> str:
        llamaindex.instrument(auditor=auditor)
        try:
            with instrument_tags({"ragaudit_relevant_ids": relevant}):
                return str(kb.engine().query(q))
        finally:
            llamaindex.uninstrument()

    record("llamaindex", llama)

    (lc_spans, lc_line), (li_spans, li_line) = recorded["langchain"], recorded["llamaindex"]
    own = {"ts", "turn_id", "trace_id", "span_id", "framework", "latency_s"}
    assert set(lc_line) == set(li_line)
    for key in set(lc_line) - own - {"documents"}:
        assert lc_line[key] == li_line[key], key
    # LangChain's Chroma retriever reports no scores; LlamaIndex's does.
    assert [{**d, "score": None} for d in lc_line["documents"]] == \
        [{**d, "score": None} for d in li_line["documents"]]
    assert li_line["framework"] == "llamaindex" and lc_line["framework"] == "langchain"

    def by_name(spans: list[ReadableSpan]) -> dict[str, dict[str, Any]]:
        out = {s.name: dict(s.attributes or {}) for s in spans}
        retrieval = out.get(RETRIEVAL, {})
        for key in (c.GEN_AI_RETRIEVAL_DOCUMENTS, c.LANGFUSE_OBSERVATION_OUTPUT, c.OUTPUT_VALUE):  # with scores
            if key in retrieval:
                retrieval[key] = [{**d, "score": None} for d in json.loads(str(retrieval[key]))]
        return out

    lc_by, li_by = by_name(lc_spans), by_name(li_spans)
    assert sorted(lc_by) == sorted(li_by) == sorted([c.SPAN_TURN, RETRIEVAL, CHAT, c.SPAN_JUDGE])
    differ = {c.ATTR_TURN_ID, c.ATTR_FRAMEWORK, c.METADATA, c.ATTR_JUDGE_LATENCY_S}
    # Each framework has its own prompt template: the prompt and what is counted from it differ.
    differ |= {c.INPUT_VALUE, c.input_message_keys(0)[1], c.ATTR_PROMPT_CHARS, c.GEN_AI_USAGE_INPUT_TOKENS,
               c.LLM_TOKEN_COUNT_PROMPT, c.LLM_TOKEN_COUNT_TOTAL, c.LANGFUSE_OBSERVATION_USAGE_DETAILS,
               c.LANGFUSE_OBSERVATION_INPUT, c.INPUT_MIME_TYPE}  # LangChain's are chat messages (JSON)
    # The stand-in models: each framework names a provider (required on a chat span), from the model's
    # class where it is no provider package's (LangChain's ls_provider; ours the same way), so they differ.
    provider = {c.GEN_AI_PROVIDER_NAME, c.LLM_PROVIDER}
    assert provider <= set(lc_by[CHAT]) and provider <= set(li_by[CHAT])
    assert li_by[CHAT][c.GEN_AI_PROVIDER_NAME] == "contextechollm"
    # the per-key copies of the turn's metadata (Langfuse) differ as the metadata does
    per_key = (c.LANGFUSE_OBSERVATION_METADATA + ".", c.LANGFUSE_TRACE_METADATA + ".")
    for name in lc_by:
        lc_attrs = {k: v for k, v in lc_by[name].items()
                    if ("score" not in k or name == c.SPAN_JUDGE) and k not in provider
                    and not k.startswith(per_key)}
        li_attrs = {k: v for k, v in li_by[name].items()
                    if ("score" not in k or name == c.SPAN_JUDGE) and k not in provider
                    and not k.startswith(per_key)}
        assert set(lc_attrs) == set(li_attrs), name
        assert {k for k in set(lc_attrs) - differ if lc_attrs[k] != li_attrs[k]} == set(), name
    assert lc_by[c.SPAN_TURN][c.INPUT_VALUE] == li_by[c.SPAN_TURN][c.INPUT_VALUE] == q
    assert li_by[c.SPAN_TURN][c.retrieval_metric_key("mrr@10")] == pytest.approx(0.5)


def test_structured_answers_are_read_from_llamaindex_return_values() -> None:
    # issue 45: an agent's structured_response (output_cls) and a query engine's PydanticResponse; an
    # agent's chat reply (a pydantic ChatMessage) and a text response are none
    from llama_index.core.agent.workflow import AgentOutput
    from llama_index.core.base.response.schema import PydanticResponse, Response
    from llama_index.core.llms import ChatMessage
    from pydantic import BaseModel

    from ragaudit.integrations.llamaindex._values import structured_from

    class Answer(BaseModel):
        answer: str
        confidence: float

    reply = ChatMessage(role="assistant", content="Returns take 30 days.")
    filled = {"answer": "Returns take 30 days.", "confidence": 1.0}
    assert structured_from(AgentOutput(response=reply, structured_response=filled, current_agent_name="a")) == filled
    assert structured_from(PydanticResponse(response=Answer(**filled))) == filled
    assert structured_from(AgentOutput(response=reply, current_agent_name="a")) is None
    assert structured_from(Response(response="Returns take 30 days.")) is None
