"""RagAuditCallbackHandler with real LangChain runnables, real Chroma and the real OTel SDK.

The knowledge base (tests/support/topics.py) has 20 topics with two documents each and a question per topic whose words
occur only in that topic's documents, so every question retrieves its own two documents and the
stand-in model (which answers with the first sentence of its context) gives an answer tied to
them. Each test checks that every turn got exactly its own question, documents and answer, and
one judge span; the FakeJudge writes the document ids it was shown into its reason, so the audit
log also proves the judge saw the turn's documents.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragaudit import Auditor, BaseRagJudge, ContentPolicy, FakeJudge, Judgement, JudgeRequest
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler, instrument, uninstrument
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.support.langchain_support import KB, PROMPT, ContextEchoModel, format_docs, rag_chain
from tests.support.topics import QUESTIONS, WORDS, check_own_documents
from tests.support.turns import AuditedRun, children, doc_ids_judge

pytestmark = pytest.mark.timeout(60)

# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kb() -> KB:
    kb = KB()
    check_own_documents(kb.expected)
    return kb


class Setup(AuditedRun):
    framework = "langchain"

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider, log: Path,
                 **kw: Any) -> None:
        super().__init__(exporter, provider, log, **kw)
        self.handler = RagAuditCallbackHandler(auditor=self.auditor)
        self.config: dict[str, Any] = {"callbacks": [self.handler]}


@pytest.fixture
def setup(memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider,
          audit_log_path: Path) -> Iterator[Setup]:
    s = Setup(memory_exporter, memory_provider, audit_log_path)
    yield s
    s.auditor.shutdown()


# --- the run modes ------------------------------------------------------------------------------------


def test_session_and_user_from_config_metadata_reach_the_turn_span(setup: Setup, kb: KB) -> None:
    config = {**setup.config, "metadata": {"langfuse_session_id": "sess-1", "session_id": "other",
                                           "user_id": "user-1", "tier": "gold"}}
    rag_chain(kb.retriever).invoke(QUESTIONS[2], config=config)
    (turn,) = setup.spans(c.SPAN_TURN)
    a = turn.attributes or {}
    assert (a[c.SESSION_ID], a[c.USER_ID]) == ("sess-1", "user-1")  # Langfuse's own key first
    assert a[c.langfuse_metadata_key(c.LANGFUSE_OBSERVATION_METADATA, "tier")] == "gold"


def test_invoke_records_turn_with_retrieval_generation_citation_and_judgement(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[3]
    result = rag_chain(kb.retriever).invoke(q, config=setup.config)
    assert result == kb.answers[q]
    (turn,) = setup.check(kb, [q])
    spans = setup.spans()
    kids = children(spans, turn)
    names = sorted(s.name for s in kids)
    assert names == ["chat context-echo-1", c.SPAN_JUDGE, "retrieval Chroma"]
    retrieval = next(s for s in kids if s.name == "retrieval Chroma")
    assert retrieval.attributes["retrieval.documents.0.document.id"] == kb.expected[q][0]
    assert retrieval.attributes[c.GEN_AI_RETRIEVAL_QUERY_TEXT] == q
    chat = next(s for s in kids if s.name.startswith("chat"))
    assert chat.attributes[c.GEN_AI_USAGE_OUTPUT_TOKENS] == len(kb.answers[q].split())
    assert "Context:" in str(chat.attributes[c.INPUT_VALUE])
    messages = json.loads(str(chat.attributes[c.LANGFUSE_OBSERVATION_INPUT]))  # the real messages, with roles
    assert messages[-1]["role"] == "user" and "Context:" in messages[-1]["content"]
    judge = next(s for s in kids if s.name == c.SPAN_JUDGE)
    # its parent is the turn (children() above), and its one link (OpenInference) names the turn too
    assert [link.context.span_id for link in judge.links] == [judge.parent.span_id]
    assert judge.attributes[c.judge_score_key("faithfulness")] == 1.0
    assert turn.attributes[c.ATTR_JUDGE_STATUS] == "queued"
    (line,) = read_audit_log(setup.log)
    assert line["documents"][0]["source"] == f"{WORDS[3]}.md"
    assert line["documents"][0]["metadata"]["section"] == "rule"
    assert [cit["doc_id"] for cit in line["citations"]] == [kb.expected[q][0]]
    assert line["citations"][0]["method"] == "overlap"
    assert setup.handler.stats() == {"open_turns": 0, "closed_turns": 1, "evicted": 0}


def test_the_closing_gauge_is_zero_once_a_flush_has_recorded_every_turn(setup: Setup, kb: KB) -> None:
    # The closing thread reports the gauge at each batch, counting the batch it is running; a flush
    # must leave it saying what still waits (it once read closing=1 after every turn was judged).
    chain = rag_chain(kb.retriever)
    for q in QUESTIONS[:3]:
        chain.invoke(q, config=setup.config)
    assert setup.handler.force_flush(10)
    stats = setup.auditor.stats()
    assert stats["judged"] == 3 and stats["closing"] == 0


def test_ainvoke_20_concurrent(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)

    async def main() -> list[str]:
        return await asyncio.gather(*(chain.ainvoke(q, config=setup.config) for q in QUESTIONS))

    results = asyncio.run(main())
    assert results == [kb.answers[q] for q in QUESTIONS]
    setup.check(kb, QUESTIONS)


def test_batch_20(setup: Setup, kb: KB) -> None:
    results = rag_chain(kb.retriever).batch(QUESTIONS, config=setup.config)
    assert results == [kb.answers[q] for q in QUESTIONS]
    setup.check(kb, QUESTIONS)


def test_abatch_20(setup: Setup, kb: KB) -> None:
    results = asyncio.run(rag_chain(kb.retriever).abatch(QUESTIONS, config=setup.config))
    assert results == [kb.answers[q] for q in QUESTIONS]
    setup.check(kb, QUESTIONS)


def test_stream(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)
    for q in QUESTIONS[:3]:
        chunks = list(chain.stream(q, config=setup.config))
        assert len(chunks) > 1 and "".join(chunks) == kb.answers[q]
    setup.check(kb, QUESTIONS[:3])


def test_astream_concurrent(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)

    async def consume(q: str) -> str:
        return "".join([chunk async for chunk in chain.astream(q, config=setup.config)])

    async def main() -> list[str]:
        return await asyncio.gather(*(consume(q) for q in QUESTIONS[:8]))

    assert asyncio.run(main()) == [kb.answers[q] for q in QUESTIONS[:8]]
    setup.check(kb, QUESTIONS[:8])


def test_astream_events(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)

    async def main() -> list[str]:
        kinds = []
        async for event in chain.astream_events(QUESTIONS[5], config=setup.config, version="v2"):
            kinds.append(event["event"])
        return kinds

    kinds = asyncio.run(main())
    assert "on_retriever_end" in kinds and "on_chat_model_stream" in kinds
    setup.check(kb, [QUESTIONS[5]])


def test_abandoned_stream_closes_when_the_model_ends(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[7]
    for chunk in rag_chain(kb.retriever).stream(q, config=setup.config):
        assert chunk
        break
    assert setup.handler.stats()["open_turns"] == 0
    turns = setup.spans(c.SPAN_TURN)
    assert len(turns) == 1
    assert list(turns[0].attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[q]
    # The root produced no output; the answer is what the model generated before it was stopped.
    answer = str(turns[0].attributes[c.OUTPUT_VALUE])
    assert answer and kb.answers[q].startswith(answer)
    assert len(setup.spans(c.SPAN_JUDGE)) == 1


# --- shapes of chains ---------------------------------------------------------------------------------


def test_two_retrievers_in_parallel_are_merged_without_duplicates(setup: Setup, kb: KB) -> None:
    wide = kb.store.as_retriever(search_kwargs={"k": 3}).with_config(run_name="wide")
    both = RunnableParallel(narrow=kb.retriever.with_config(run_name="narrow"), wide=wide)
    merge = RunnableLambda(
        lambda d: d["narrow"] + [x for x in d["wide"] if x.id not in {y.id for y in d["narrow"]}])
    chain = ({"context": both | merge | format_docs, "question": RunnablePassthrough()} | PROMPT
             | ContextEchoModel() | StrOutputParser())
    questions = QUESTIONS[:6]
    results = chain.batch(questions, config=setup.config)
    wide_ids = {q: [str(d.id) for d in kb.store.similarity_search(q, k=3)] for q in questions}
    assert results == [kb.answers[q] for q in questions]
    spans = setup.spans()
    turns = [s for s in spans if s.name == c.SPAN_TURN]
    assert len(turns) == len(questions)
    for turn in turns:
        q = str(turn.attributes[c.INPUT_VALUE])
        ids = list(turn.attributes[c.ATTR_DOCUMENT_IDS])
        assert len(ids) == 3 and set(ids) == set(wide_ids[q])  # 2 + 3 documents, 2 shared
        retrievals = {s.name: s for s in children(spans, turn) if s.name.startswith("retrieval")}
        assert set(retrievals) == {"retrieval narrow", "retrieval wide"}
        assert retrievals["retrieval narrow"].attributes[c.ATTR_DOCUMENT_COUNT] == 2
        assert retrievals["retrieval wide"].attributes[c.ATTR_DOCUMENT_COUNT] == 3
    assert len(setup.spans(c.SPAN_JUDGE)) == len(questions)


def test_retrieval_chain_dict_output(setup: Setup, kb: KB) -> None:
    # What langchain's create_retrieval_chain builds: {"input", "context", "answer"}.
    answer_chain = ({"context": itemgetter("context") | format_docs, "question": itemgetter("input")}
                    | PROMPT | ContextEchoModel() | StrOutputParser())
    chain = RunnablePassthrough.assign(context=itemgetter("input") | kb.retriever).assign(answer=answer_chain)
    questions = QUESTIONS[10:14]
    outputs = chain.batch([{"input": q} for q in questions], config=setup.config)
    assert [o["answer"] for o in outputs] == [kb.answers[q] for q in questions]
    assert all(isinstance(o["context"][0], Document) for o in outputs)
    setup.check(kb, questions)


def test_bare_retriever_and_bare_model_are_traced_but_not_judged(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[1]
    docs = kb.retriever.invoke(q, config=setup.config)
    assert [d.id for d in docs] == kb.expected[q]
    message = ContextEchoModel().invoke(f"Context:\nSky is blue. Grass is green.\n\nQuestion: {q}",
                                        config=setup.config)
    assert message.content == "Sky is blue."
    spans = setup.spans()
    turns = {s.attributes[c.ATTR_DOCUMENT_COUNT]: s for s in spans if s.name == c.SPAN_TURN}
    assert set(turns) == {0, 2}
    retriever_turn, model_turn = turns[2], turns[0]
    assert retriever_turn.attributes[c.INPUT_VALUE] == q and c.OUTPUT_VALUE not in retriever_turn.attributes
    assert [s.name for s in children(spans, retriever_turn)] == ["retrieval Chroma"]
    assert model_turn.attributes[c.OUTPUT_VALUE] == "Sky is blue."
    assert [s.name for s in children(spans, model_turn)] == ["chat context-echo-1"]
    assert all(c.ATTR_JUDGE_STATUS not in t.attributes for t in turns.values())
    assert not [s for s in spans if s.name == c.SPAN_JUDGE]
    assert setup.auditor.stats()["submitted"] == 0


# --- failures -----------------------------------------------------------------------------------------


def test_retriever_error_is_recorded_and_the_chain_error_is_its_own(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)
    with pytest.raises(RuntimeError, match="vector index unavailable"):
        chain.invoke("What about FAIL_RETRIEVER warranty?", config=setup.config)
    assert chain.invoke(QUESTIONS[0], config=setup.config) == kb.answers[QUESTIONS[0]]
    spans = setup.spans()
    turns = {str(s.attributes[c.INPUT_VALUE]): s for s in spans if s.name == c.SPAN_TURN}
    failed = turns["What about FAIL_RETRIEVER warranty?"]
    assert failed.status.status_code == StatusCode.ERROR
    assert "vector index unavailable" in str(failed.status.description)
    (retrieval,) = children(spans, failed)
    assert retrieval.name == "retrieval Chroma" and retrieval.status.status_code == StatusCode.ERROR
    assert turns[QUESTIONS[0]].status.status_code != StatusCode.ERROR
    assert len([s for s in spans if s.name == c.SPAN_JUDGE]) == 1  # only the good turn is judged
    assert [line["query"] for line in read_audit_log(setup.log)] == [QUESTIONS[0]]


def test_model_error_keeps_the_documents(setup: Setup, kb: KB) -> None:
    chain = {"context": kb.retriever | format_docs, "question": RunnablePassthrough()} | PROMPT \
        | ContextEchoModel() | StrOutputParser()
    q = "What about FAIL_MODEL lockers?"
    with pytest.raises(RuntimeError, match="model overloaded"):
        asyncio.run(chain.ainvoke(q, config=setup.config))
    spans = setup.spans()
    (turn,) = [s for s in spans if s.name == c.SPAN_TURN]
    assert turn.status.status_code == StatusCode.ERROR
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == ["lockers-rule", "lockers-desk"]
    chat = next(s for s in children(spans, turn) if s.name.startswith("chat"))
    assert chat.status.status_code == StatusCode.ERROR and "model overloaded" in str(chat.status.description)
    assert not [s for s in spans if s.name == c.SPAN_JUDGE]
    assert setup.handler.stats()["open_turns"] == 0


class ExplodingJudge(BaseRagJudge):
    name = "exploding"

    def judge(self, request: JudgeRequest) -> Judgement:
        raise RuntimeError("judge backend is down")


@pytest.mark.parametrize("mode", ["background", "inline"])
def test_failing_judge_leaves_the_chain_result_unchanged(
    memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, audit_log_path: Path,
    kb: KB, mode: str,
) -> None:
    s = Setup(memory_exporter, memory_provider, audit_log_path, judge=ExplodingJudge(), mode=mode)
    try:
        chain = rag_chain(kb.retriever)
        assert chain.batch(QUESTIONS[:4], config=s.config) == [kb.answers[q] for q in QUESTIONS[:4]]
        judges = s.spans(c.SPAN_JUDGE)
        assert len(judges) == 4
        assert all("judge backend is down" in str(j.attributes[c.ATTR_JUDGE_ERROR]) for j in judges)
        statuses = {t.attributes[c.ATTR_JUDGE_STATUS] for t in s.spans(c.SPAN_TURN)}
        assert statuses == ({"queued"} if mode == "background" else {"failed"})
        assert s.auditor.stats()["failed"] == 4
    finally:
        s.auditor.shutdown()


def test_handler_never_raises_on_odd_events(setup: Setup, caplog: pytest.LogCaptureFixture) -> None:
    h = setup.handler
    run, child = uuid.uuid4(), uuid.uuid4()
    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        h.on_chain_end({"answer": "x"}, run_id=uuid.uuid4())  # never started
        h.on_chain_start(None, {"question": "odd?"}, run_id=run, parent_run_id=None, metadata={
            "ragaudit_relevant_ids": "not-a-list"})
        h.on_retriever_start(None, "odd?", run_id=child, parent_run_id=run)
        h.on_retriever_end([object(), Document(page_content="ok", metadata={"score": float("nan")})],
                           run_id=child, parent_run_id=run)
        h.on_llm_end(None, run_id=uuid.uuid4(), parent_run_id=run)
        h.on_chain_end(object(), run_id=run)
    (turn,) = setup.spans(c.SPAN_TURN)
    assert turn.attributes[c.INPUT_VALUE] == "odd?"
    assert turn.attributes[c.ATTR_DOCUMENT_COUNT] == 2
    assert c.ATTR_RELEVANT_IDS not in turn.attributes
    assert "ragaudit_relevant_ids" in caplog.text


# --- ground truth, registration, context, content -----------------------------------------------------


def test_relevant_ids_put_metrics_on_the_turn_span(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[2]
    relevant = {kb.expected[q][1]: 2, "not-retrieved": 1}
    config = {**setup.config, "metadata": {"ragaudit_relevant_ids": relevant,
                                           "ragaudit_reference_answer": "Within 4 days.", "user": "u1"}}
    rag_chain(kb.retriever).invoke(q, config=config)
    (turn,) = setup.spans(c.SPAN_TURN)
    assert json.loads(str(turn.attributes[c.ATTR_RELEVANT_IDS])) == relevant
    assert turn.attributes[c.retrieval_metric_key("recall@5")] == pytest.approx(0.5)
    assert turn.attributes[c.retrieval_metric_key("mrr@10")] == pytest.approx(0.5)
    assert 0.0 < float(turn.attributes[c.retrieval_metric_key("ndcg@10")]) < 1.0  # type: ignore[arg-type]
    metadata = json.loads(str(turn.attributes[c.METADATA]))
    assert metadata["reference_answer"] == "Within 4 days." and metadata["user"] == "u1"
    assert "ragaudit_relevant_ids" not in metadata


def test_instrument_audits_every_chain_in_every_thread_until_uninstrument(setup: Setup, kb: KB) -> None:
    chain = rag_chain(kb.retriever)
    handler = instrument(auditor=setup.auditor)
    try:
        assert chain.invoke(QUESTIONS[0]) == kb.answers[QUESTIONS[0]]
        worker = threading.Thread(target=lambda: chain.invoke(QUESTIONS[1]))
        worker.start()
        worker.join(30)
        assert asyncio.run(chain.ainvoke(QUESTIONS[2])) == kb.answers[QUESTIONS[2]]
        assert instrument(auditor=setup.auditor) is handler  # idempotent: installs once
        chain.invoke(QUESTIONS[3])
    finally:
        assert uninstrument() is not None
    assert uninstrument() is None
    chain.invoke(QUESTIONS[4])
    setup.check(kb, QUESTIONS[:4])


def test_turns_nest_under_the_current_span(setup: Setup, kb: KB, memory_provider: TracerProvider) -> None:
    tracer = memory_provider.get_tracer("app")
    chain = rag_chain(kb.retriever)
    with tracer.start_as_current_span("http request") as outer:
        chain.batch(QUESTIONS[:3], config=setup.config)
    with tracer.start_as_current_span("async request") as outer_async:
        asyncio.run(chain.ainvoke(QUESTIONS[3], config=setup.config))
    turns = setup.check(kb, QUESTIONS[:4])
    parents = {str(t.attributes[c.INPUT_VALUE]): t.parent.span_id for t in turns if t.parent}
    ids = outer.get_span_context().span_id, outer_async.get_span_context().span_id
    assert parents == {**{q: ids[0] for q in QUESTIONS[:3]}, QUESTIONS[3]: ids[1]}
    traces = {str(t.attributes[c.INPUT_VALUE]): t.context.trace_id for t in turns}
    assert traces[QUESTIONS[0]] == outer.get_span_context().trace_id
    assert traces[QUESTIONS[3]] == outer_async.get_span_context().trace_id
    assert trace.get_current_span().get_span_context().is_valid is False  # nothing left attached


def test_capture_content_false_keeps_text_out_of_spans(
    memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, audit_log_path: Path, kb: KB,
) -> None:
    auditor = Auditor(FakeJudge(doc_ids_judge), audit_log=audit_log_path, tracer_provider=memory_provider,
                      content=ContentPolicy(capture_content=False))
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=memory_provider, capture_content=False)
    try:
        q = QUESTIONS[9]
        rag_chain(kb.retriever).invoke(q, config={"callbacks": [handler]})
        assert closer_for(auditor).force_flush(10)
    finally:
        auditor.shutdown()
    spans = memory_exporter.get_finished_spans()
    assert {s.name for s in spans} == {c.SPAN_TURN, "retrieval Chroma", "chat context-echo-1", c.SPAN_JUDGE}
    texts = [q, WORDS[9] + " requests", "Context:"]
    for span in spans:
        dumped = json.dumps({k: str(v) for k, v in (span.attributes or {}).items()})
        dumped += json.dumps([dict(e.attributes or {}) for e in span.events], default=str)
        assert not any(t in dumped for t in texts), (span.name, dumped)
    (turn,) = [s for s in spans if s.name == c.SPAN_TURN]
    assert turn.attributes[c.ATTR_QUERY_CHARS] == len(q)
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == kb.expected[q]
    (line,) = read_audit_log(audit_log_path)
    assert line["query"] is None and line["answer"] is None


def test_judge_without_auditor_gets_the_auditor_of_that_judge(
    memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider, kb: KB,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)  # the judge's auditor writes the default audit log here
    judge = FakeJudge(doc_ids_judge)
    handler = RagAuditCallbackHandler(judge=judge, tracer_provider=memory_provider)
    # Handlers made per call with the same judge share its auditor (one worker, one file); another
    # judge object has its own; neither is the process default.
    assert RagAuditCallbackHandler(judge=judge, redact=str.upper).auditor is handler.auditor
    other = RagAuditCallbackHandler(judge=FakeJudge(doc_ids_judge))
    assert other.auditor is not handler.auditor and handler.auditor.judge is judge
    released = weakref.ref(other.auditor)
    del other
    gc.collect()
    assert released() is None  # nobody holds that judge's auditor any more: it is gone
    try:
        rag_chain(kb.retriever).invoke(QUESTIONS[0], config={"callbacks": [handler]})
        assert handler.force_flush(10)
    finally:
        handler.auditor.shutdown()
    assert judge.calls == 1
    # A shut-down auditor is never handed out again.
    assert RagAuditCallbackHandler(judge=judge).auditor is not handler.auditor
    names = Counter(s.name for s in memory_exporter.get_finished_spans())
    assert names[c.SPAN_TURN] == 1 and names[c.SPAN_JUDGE] == 1
    assert (tmp_path / "ragaudit-audit.jsonl").exists()
    with pytest.raises(ValueError, match="not both"):
        RagAuditCallbackHandler(judge=judge, auditor=handler.auditor)


def test_open_turns_are_bounded(setup: Setup, kb: KB, memory_provider: TracerProvider) -> None:
    handler = RagAuditCallbackHandler(auditor=setup.auditor, max_runs=2)
    chain = rag_chain(kb.retriever)
    streams = [chain.stream(q, config={"callbacks": [handler]}) for q in QUESTIONS[:3]]
    for stream in streams:
        next(stream)  # each root is open, suspended mid-stream
    assert handler.stats()["evicted"] == 1 and handler.stats()["open_turns"] == 2
    for stream in streams:
        stream.close()
    stats = handler.stats()
    assert stats["open_turns"] == 0 and stats["closed_turns"] == 3
    turns = setup.spans(c.SPAN_TURN)
    assert len(turns) == 3  # the evicted turn's late events did not start a new one
    evicted = [t for t in turns if t.status.status_code == StatusCode.ERROR]
    assert len(evicted) == 1 and "evicted" in str(evicted[0].status.description)
    assert evicted[0].attributes[c.INPUT_VALUE] == QUESTIONS[0]


def test_spans_reach_a_real_otlp_http_receiver(kb: KB, audit_log_path: Path) -> None:
    otlp = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from ragaudit import LexicalJudge
    from tests.support.otlp_receiver import OTLPReceiver

    with OTLPReceiver() as rx:
        provider = TracerProvider(shutdown_on_exit=False)
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(otlp.OTLPSpanExporter(endpoint=rx.traces_url)))
        auditor = Auditor(LexicalJudge(), audit_log=audit_log_path, tracer_provider=provider)
        handler = RagAuditCallbackHandler(auditor=auditor)
        questions = QUESTIONS[:5]
        try:
            rag_chain(kb.retriever).batch(questions, config={"callbacks": [handler]})
            assert closer_for(auditor).force_flush(10)
            provider.force_flush()
            spans = rx.wait_for_spans(5 * 4, timeout=20)
        finally:
            auditor.shutdown()
            provider.shutdown()
    turns = {s["attributes"][c.INPUT_VALUE]: s for s in spans if s["name"] == c.SPAN_TURN}
    assert set(turns) == set(questions)
    judges = [s for s in spans if s["name"] == c.SPAN_JUDGE]
    for q, turn in turns.items():
        assert turn["attributes"][c.ATTR_DOCUMENT_IDS] == kb.expected[q]
        assert turn["attributes"][c.OUTPUT_VALUE] == kb.answers[q]
        kids = [s for s in spans if s["parent_span_id"] == turn["span_id"]]
        assert sorted(s["name"] for s in kids) == ["chat context-echo-1", c.SPAN_JUDGE, "retrieval Chroma"]
        (judge,) = [j for j in judges if j["parent_span_id"] == turn["span_id"]]
        assert judge["trace_id"] == turn["trace_id"]
        # a child of the turn, and linked to it once, as child_of (Jaeger keeps CHILD_OF)
        assert [(link["span_id"], link["attributes"].get(c.LINK_REF_TYPE)) for link in judge["links"]] == [
            (turn["span_id"], c.REF_TYPE_CHILD_OF)]
        assert 0.0 <= judge["attributes"][c.judge_score_key("context_relevance")] <= 1.0
    assert len(judges) == len(questions)


def test_otel_provider_unused_when_tracing_is_off(kb: KB, audit_log_path: Path) -> None:
    # No SDK provider anywhere: turns are still judged and logged, with no trace ids.
    auditor = Auditor(FakeJudge(doc_ids_judge), audit_log=audit_log_path,
                      tracer_provider=trace.NoOpTracerProvider())
    handler = RagAuditCallbackHandler(auditor=auditor)
    try:
        assert rag_chain(kb.retriever).batch(QUESTIONS[:3], config={"callbacks": [handler]}) == [
            kb.answers[q] for q in QUESTIONS[:3]]
        assert closer_for(auditor).force_flush(10)
    finally:
        auditor.shutdown()
    lines = read_audit_log(audit_log_path)
    assert sorted(line["query"] for line in lines) == sorted(QUESTIONS[:3])
    assert all(line["trace_id"] is None for line in lines)
    assert all([d["id"] for d in line["documents"]] == kb.expected[line["query"]] for line in lines)



def test_message_state_inputs_and_outputs(setup: Setup) -> None:
    # The shape of a LangGraph agent's state: {"messages": [...]} in and out.
    from langchain_core.messages import HumanMessage

    h = setup.handler
    root, retriever = uuid.uuid4(), uuid.uuid4()
    h.on_chain_start(None, {"messages": [HumanMessage(content="Where is my parcel?")]}, run_id=root)
    h.on_retriever_start(None, "parcel", run_id=retriever, parent_run_id=root, name="kb")
    h.on_retriever_end([Document(page_content="Parcels ship from Leeds.", metadata={"doc_id": "p1"})],
                       run_id=retriever, parent_run_id=root)
    out = {"messages": [HumanMessage(content="Where is my parcel?"),
                        AIMessage(content="It ships from Leeds.")]}
    h.on_chain_end(out, run_id=root)
    (turn,) = setup.spans(c.SPAN_TURN)
    assert turn.attributes[c.INPUT_VALUE] == "Where is my parcel?"
    assert turn.attributes[c.OUTPUT_VALUE] == "It ships from Leeds."
    assert list(turn.attributes[c.ATTR_DOCUMENT_IDS]) == ["p1"]
    assert len(setup.spans(c.SPAN_JUDGE)) == 1


def test_a_root_under_a_parent_never_seen_is_a_turn(setup: Setup, kb: KB) -> None:
    # As when a LangSmith @traceable function calls the chain: the root's parent run id is foreign.
    q = QUESTIONS[12]
    h = setup.handler
    foreign, root, retriever = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    h.on_chain_start(None, q, run_id=root, parent_run_id=foreign)
    h.on_retriever_start(None, q, run_id=retriever, parent_run_id=root)
    h.on_retriever_end(kb.store.similarity_search(q, k=2), run_id=retriever, parent_run_id=root)
    h.on_chain_end(kb.answers[q], run_id=root, parent_run_id=foreign)
    h.on_chain_end("late", run_id=retriever, parent_run_id=root)  # a late event of a closed turn
    setup.check(kb, [q])


def test_bad_arguments_fail_at_construction(setup: Setup) -> None:
    from ragaudit import ConfigurationError, MetricError

    with pytest.raises(MetricError):
        RagAuditCallbackHandler(auditor=setup.auditor, turn_measures=["recall@five"])
    with pytest.raises(ConfigurationError, match="max_runs"):
        RagAuditCallbackHandler(auditor=setup.auditor, max_runs=0)
    with pytest.raises(ConfigurationError, match="auditor"):
        RagAuditCallbackHandler(auditor=object())  # type: ignore[arg-type]


# --- vector-store searches (issue 23) --------------------------------------------------------------------


class _Retrievals(BaseCallbackHandler):
    """Another handler of the same run: what it is told of retrievals."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
        self.started.append(query)


def test_a_vector_store_search_in_a_runnable_is_a_retrieval_with_the_store_ids(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[4]
    other = _Retrievals()
    search = RunnableLambda(lambda question: "\n\n".join(d.page_content for d in kb.store.similarity_search(question,
                                                                                                          k=2)))
    chain = {"context": search, "question": RunnablePassthrough()} | PROMPT | ContextEchoModel() | StrOutputParser()
    assert chain.invoke(q, config={"callbacks": [setup.handler, other]}) == kb.answers[q]
    setup.handler.force_flush(10)
    assert setup.auditor.force_flush(10)
    (retrieval,) = setup.spans("retrieval Chroma")
    ids = [retrieval.attributes[f"retrieval.documents.{i}.document.id"] for i in range(2)]
    assert ids == kb.expected[q] and retrieval.attributes[c.GEN_AI_RETRIEVAL_QUERY_TEXT] == q
    assert list(retrieval.attributes[c.ATTR_DOCUMENT_USED]) == [True, True]
    assert other.started == []  # reported to ragaudit only: other handlers see the run as before
    (line,) = read_audit_log(setup.log)
    assert [d["id"] for d in line["documents"]] == kb.expected[q]


def test_async_searches_with_scores_and_failing_searches(setup: Setup, kb: KB) -> None:
    q = QUESTIONS[5]

    async def search(question: str) -> str:
        found = await kb.store.asimilarity_search_with_score(question, k=2)
        return "\n\n".join(d.page_content for d, _ in found)

    chain = {"context": RunnableLambda(search), "question": RunnablePassthrough()} | PROMPT | ContextEchoModel()
    asyncio.run(chain.ainvoke(q, config=setup.config))
    failing = RunnableLambda(lambda question: kb.store.similarity_search(question))
    with pytest.raises(RuntimeError, match="vector index unavailable"):  # the app's error, unchanged
        failing.invoke("FAIL_RETRIEVER", config=setup.config)
    setup.handler.force_flush(10)
    spans = setup.spans("retrieval Chroma")
    assert len(spans) == 2
    scored = next(s for s in spans if s.status.status_code is not StatusCode.ERROR)
    assert [scored.attributes[f"retrieval.documents.{i}.document.id"] for i in range(2)] == kb.expected[q]
    assert "retrieval.documents.0.document.score" in scored.attributes
    failed = next(s for s in spans if s.status.status_code is StatusCode.ERROR)
    assert "vector index unavailable" in str(failed.status.description) or failed.events


def test_a_search_outside_any_run_is_not_reported_and_a_subclass_defined_later_is_wrapped(kb: KB) -> None:
    from langchain_chroma import Chroma

    from ragaudit.integrations._langchain_stores import outside_searches

    class MyChroma(Chroma):
        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
            return super().similarity_search(query, k=k, **kwargs)

    before = outside_searches()
    kb.store.similarity_search(QUESTIONS[0], k=1)  # no run: nothing to report to
    assert outside_searches() == before + 1
    # defined after the patch, wrapped by VectorStore.__init_subclass__
    assert MyChroma.__dict__["similarity_search"].__wrapped__.__qualname__.endswith("MyChroma.similarity_search")
