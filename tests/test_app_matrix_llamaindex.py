"""LlamaIndex apps as the current official docs write them, judged on what reached the final model call (issue 23).

Every style is a real app: the real LlamaIndex ``OpenAI`` / ``OpenAILike`` classes against the loopback
chat-completions server, a real Chroma collection behind a ``VectorStoreIndex``, and a real
``ChatRagJudge`` against a second loopback server, so judge calls are counted where they arrive. The
app's model is played by :func:`app_rule`: an LLM reranker keeps only the second document it is
shown, a refine call answers from its new context, every other call answers with the first sentence
of the first knowledge-base document in its prompt.

For each user message the test asserts: the question the judge got, the evidence ids (equal to the
knowledge-base documents whose text is in the input of the message's final model call, in order),
the answer, one judge call per judged message at the judge's server (none for the others), one
trace per message (turn span, every step and the judge span under it) and, for a message that is
not judged, the ``stats()`` counter it went to.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragaudit import Auditor, ChatRagJudge, Judgement, RagTurn
from ragaudit.tracing import conventions as c
from tests.support.app_servers import check_judged_turns, check_turn_traces, check_unjudged_counts
from tests.support.judges import open_judge
from tests.support.llm_server import Fault, LLMServer, Scripted
from tests.support.topics import QUESTIONS, answer_for, topic_documents

pytestmark = pytest.mark.timeout(120)

TEXTS = {doc_id: text for doc_id, text, _ in topic_documents()}
MODEL = "gpt-4o-mini"
NO_ANSWER = "I don't know."
_RERANK = "A list of documents is shown below."
_REFINE = "We have the opportunity to refine the existing answer"
_DOC_HEADER = re.compile(r"^Document (\d+):", re.MULTILINE)


# --- the scripted model ----------------------------------------------------------------------------------


def _text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


def docs_in(text: str) -> list[str]:
    """The knowledge-base documents whose full text is in *text*, in the order they appear."""
    found = [(text.find(full), doc_id) for doc_id, full in TEXTS.items() if full in text]
    return [doc_id for _, doc_id in sorted(found)]


def reached_final_call(calls: list[tuple[str, str]]) -> list[str]:
    """The documents that reached the final model call of *calls* (``(input, reply)`` in order): those
    in its input, and in the input of every earlier call whose reply is in the input of one that
    reached it (a refine call's existing answer, a tree's summaries), earliest call first."""
    if not calls:
        return []
    reached = [calls[-1][0]]
    for text, reply in reversed(calls[:-1]):
        if reply and any(reply in later for later in reached):
            reached.append(text)
    ids: list[str] = []
    for text in reversed(reached):
        ids.extend(doc_id for doc_id in docs_in(text) if doc_id not in ids)
    return ids


class AppModel:
    """The app's model (the server's rule); ``fail_answers`` makes every answering call fail with HTTP
    500. ``calls`` keeps every call's input text and reply."""

    def __init__(self) -> None:
        self.fail_answers = False
        self.calls: list[tuple[str, str]] = []

    def __call__(self, body: dict[str, Any]) -> Scripted:
        reply = self._reply(_text(body))
        self.calls.append((_text(body), reply if isinstance(reply, str) else ""))
        return reply

    def _reply(self, text: str) -> Scripted:
        if _RERANK in text:  # LLMRerank's choice prompt: keep the second document shown, drop the rest
            numbers = _DOC_HEADER.findall(text)
            return f"Doc: {numbers[1]}, Relevance: 9" if len(numbers) > 1 else "Doc: 1, Relevance: 9"
        if self.fail_answers:
            return Fault.server_error()
        if _REFINE in text:  # a refine call: answer from the new context, not from the existing answer
            text = text.split(_REFINE, 1)[1]
        found = docs_in(text)
        return answer_for(TEXTS[found[0]]) if found else NO_ANSWER


# --- the harness -------------------------------------------------------------------------------------------


@dataclass
class Expect:
    """One user message: what the judge must get; ``unjudged`` names the stats counter of one that is not."""

    question: str
    ids: list[str]
    answer: str | None
    unjudged: str | None = None
    chats: int = 1  # model calls of the message: that many chat spans in its trace
    retrievals: int = 1


class Env:
    """One style's run: the app's server and model, a ChatRagJudge on its own server, the spans."""

    def __init__(self, app: LLMServer, model: AppModel, judge_srv: LLMServer, exporter: InMemorySpanExporter,
                 provider: TracerProvider) -> None:
        self.app, self.model, self.judge_srv, self.exporter = app, model, judge_srv, exporter
        self.judged: list[RagTurn] = []
        judge = open_judge(ChatRagJudge, judge_srv, protocol="three-score")
        self.auditor = Auditor(judge, tracer_provider=provider, audit_log=None, on_judgement=self._judged)
        self.expects: list[Expect] = []
        self.final_inputs: list[list[str]] = []  # per message: the documents that reached its last model call
        self.flush: Callable[[], Any] = lambda: None

    def _judged(self, turn: RagTurn, judgement: Judgement) -> None:
        self.judged.append(turn)

    def llm(self, **kwargs: Any) -> Any:
        from llama_index.llms.openai import OpenAI

        return OpenAI(model=MODEL, api_base=self.app.base_url, api_key="sk-test", max_retries=0, timeout=10, **kwargs)

    def ask(self, expect: Expect, run: Callable[[], Any]) -> Any:
        before = len(self.model.calls)
        try:
            result = run()
        finally:
            self.final_inputs.append(reached_final_call(self.model.calls[before:]))
            self.expects.append(expect)
        return result

    def check(self) -> None:
        self.flush()
        assert self.auditor.force_flush(20)
        check_judged_turns(self)
        judge_prompts = [_text({"messages": r.messages}) for r in self.judge_srv.requests]
        for turn in self.judged:  # the judge saw the question and the evidence's text
            prompt = next(p for p in judge_prompts if turn.query in p)
            assert all(d.content in prompt for d in turn.documents)
        for expect, in_trace in check_turn_traces(self):
            names = [s.name for s in in_trace]
            assert names.count(c.chat_span_name(MODEL)) == expect.chats, names
            assert sum(n.startswith(c.SPAN_RETRIEVAL) for n in names) == expect.retrievals, names
            if expect.unjudged == "failed":  # the model call that failed carries the error too
                failed = [s for s in in_trace if s.name == c.chat_span_name(MODEL) and s.status.status_code
                          is StatusCode.ERROR]
                assert len(failed) == 1 and "500" in str(failed[0].status.description), failed
        check_unjudged_counts(self)


# --- the knowledge base ---------------------------------------------------------------------------------------


class KB:
    """The topic nodes in a Chroma-backed ``VectorStoreIndex``, with what each question retrieves (top 2)."""

    def __init__(self) -> None:
        from tests.support.llamaindex_support import build_index

        self.index = build_index()
        retriever = self.index.as_retriever(similarity_top_k=2)
        self.expected = {q: [n.node.node_id for n in retriever.retrieve(q)] for q in QUESTIONS}


@pytest.fixture(scope="module")
def kb() -> Iterator[KB]:
    from tests.support.llamaindex_support import offline_settings

    with offline_settings(llm=False):  # nothing may fall back to a default model: every app names its own
        yield KB()


@pytest.fixture(scope="module")
def app_model() -> AppModel:
    """The rule of ``app_server`` (``tests/support/app_servers.py``, with ``judge_server``)."""
    return AppModel()


# --- the styles -------------------------------------------------------------------------------------------------


def rag_workflow_class(env: Env) -> type:
    """The workflow of LlamaIndex's "RAG Workflow with Reranking" example
    (developers.llamaindex.ai/python/examples/workflow/rag): a retrieve step, an ``LLMRerank`` step and
    a streaming ``CompactAndRefine`` synthesis step, written as the page writes them; the page's
    ingest step builds the index from a directory with OpenAI embeddings, here the index is the
    shared Chroma one, passed in the ``StartEvent`` as the page does."""
    from llama_index.core.postprocessor.llm_rerank import LLMRerank
    from llama_index.core.response_synthesizers import CompactAndRefine
    from llama_index.core.schema import NodeWithScore
    from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

    class RetrieverEvent(Event):
        """Result of running retrieval"""

        nodes: list[NodeWithScore]

    class RerankEvent(Event):
        """Result of running reranking on retrieved nodes"""

        nodes: list[NodeWithScore]

    class RAGWorkflow(Workflow):
        @step
        async def retrieve(self, ctx: Context, ev: StartEvent) -> RetrieverEvent | None:
            "Entry point for RAG, triggered by a StartEvent with `query`."
            query = ev.get("query")
            index = ev.get("index")
            if not query:
                return None
            await ctx.store.set("query", query)
            if index is None:
                return None
            retriever = index.as_retriever(similarity_top_k=2)
            nodes = await retriever.aretrieve(query)
            return RetrieverEvent(nodes=nodes)

        @step
        async def rerank(self, ctx: Context, ev: RetrieverEvent) -> RerankEvent:
            ranker = LLMRerank(choice_batch_size=5, top_n=3, llm=env.llm())
            new_nodes = ranker.postprocess_nodes(ev.nodes, query_str=await ctx.store.get("query", default=None))
            return RerankEvent(nodes=new_nodes)

        @step
        async def synthesize(self, ctx: Context, ev: RerankEvent) -> StopEvent:
            """Return a streaming response using reranked nodes."""
            summarizer = CompactAndRefine(llm=env.llm(), streaming=True, verbose=True)
            query = await ctx.store.get("query", default=None)
            response = await summarizer.asynthesize(query, nodes=ev.nodes)
            return StopEvent(result=response)

    return RAGWorkflow


def _run_streamed(workflow: Any, question: str, index: Any) -> str:
    """``result = await w.run(query=..., index=index)`` and the page's ``async for chunk in
    result.async_response_gen()``, in one ``asyncio.run`` (the page runs it in a notebook)."""
    async def main() -> str:
        result = await workflow.run(query=question, index=index)
        text = ""
        async for chunk in result.async_response_gen():
            text += chunk
        return text

    return asyncio.run(main())


def li_rag_workflow_reranking(env: Env, kb: KB) -> None:
    """The reranker drops the first retrieved node: the evidence is the node the synthesis call got,
    the retrieval span still shows both."""
    q = QUESTIONS[5]
    kept = kb.expected[q][1]
    w = rag_workflow_class(env)()
    text = env.ask(Expect(q, [kept], answer_for(TEXTS[kept]), chats=2), lambda: _run_streamed(w, q, kb.index))
    assert text == answer_for(TEXTS[kept])


def li_rag_workflow_failing_model(env: Env, kb: KB) -> None:
    """The streaming synthesis call fails (HTTP 500) while the app consumes the stream: the turn is
    traced with the error and counted, not judged."""
    from openai import InternalServerError

    q = QUESTIONS[6]
    w = rag_workflow_class(env)()
    env.model.fail_answers = True
    try:
        with pytest.raises(InternalServerError):
            env.ask(Expect(q, [], None, unjudged="failed", chats=2), lambda: _run_streamed(w, q, kb.index))
    finally:
        env.model.fail_answers = False


def li_refine(env: Env, kb: KB) -> None:
    """``get_response_synthesizer(response_mode="refine")`` in a query engine, as the "Response
    Synthesizer" module guide writes it (developers.llamaindex.ai/python/framework/module_guides/
    querying/response_synthesizers): one call per node; the last refines the first call's answer with
    the second node, so both nodes reached it (the first through that answer)."""
    from llama_index.core import get_response_synthesizer

    q = QUESTIONS[7]
    second = kb.expected[q][1]
    synthesizer = get_response_synthesizer(response_mode="refine", llm=env.llm())
    engine = kb.index.as_query_engine(similarity_top_k=2, response_synthesizer=synthesizer)
    response = env.ask(Expect(q, kb.expected[q], answer_for(TEXTS[second]), chats=2), lambda: engine.query(q))
    assert str(response) == answer_for(TEXTS[second])


def li_tree_summarize(env: Env, kb: KB) -> None:
    """``get_response_synthesizer(response_mode="tree_summarize")`` (the same guide) over ``OpenAILike``:
    both nodes fit one summary prompt, so the one call saw both."""
    from llama_index.core import get_response_synthesizer
    from llama_index.llms.openai_like import OpenAILike

    q = QUESTIONS[8]
    ids = kb.expected[q]
    llm = OpenAILike(model=MODEL, api_base=env.app.base_url, api_key="sk-test", is_chat_model=True,
                     max_retries=0, timeout=10)
    synthesizer = get_response_synthesizer(response_mode="tree_summarize", llm=llm)
    engine = kb.index.as_query_engine(similarity_top_k=2, response_synthesizer=synthesizer)
    response = env.ask(Expect(q, ids, answer_for(TEXTS[ids[0]])), lambda: engine.query(q))
    assert str(response) == answer_for(TEXTS[ids[0]])


def li_query_engine_failing_model(env: Env, kb: KB) -> None:
    """A query engine whose model call fails (HTTP 500): the error reaches the app, the turn is
    traced with it and counted, not judged."""
    from openai import InternalServerError

    q = QUESTIONS[9]
    engine = kb.index.as_query_engine(similarity_top_k=2, llm=env.llm())
    env.model.fail_answers = True
    try:
        with pytest.raises(InternalServerError):
            env.ask(Expect(q, [], None, unjudged="failed"), lambda: engine.query(q))
    finally:
        env.model.fail_answers = False


STYLES = [li_rag_workflow_reranking, li_rag_workflow_failing_model, li_refine, li_tree_summarize,
          li_query_engine_failing_model]


@pytest.mark.parametrize("style", STYLES, ids=lambda f: f.__name__)
def test_llamaindex_doc_style(style: Callable[[Env, KB], None], app_server: LLMServer, app_model: AppModel,
                              judge_server: LLMServer, kb: KB, memory_exporter: InMemorySpanExporter,
                              memory_provider: TracerProvider) -> None:
    from ragaudit.integrations import llamaindex

    app_server.reset()
    judge_server.reset()
    env = Env(app_server, app_model, judge_server, memory_exporter, memory_provider)
    try:
        installed = llamaindex.instrument(auditor=env.auditor)
        env.flush = installed.force_flush
        style(env, kb)
        env.check()
    finally:
        llamaindex.uninstrument()
        env.auditor.shutdown()
