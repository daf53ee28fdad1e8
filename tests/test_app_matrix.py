"""What gets judged, across the app styles LangChain and LlamaIndex users write (issue 12).

Every style is a real app: real LangChain / LangGraph / LlamaIndex objects, the real ``ChatOpenAI``
(langchain-openai) and LlamaIndex ``OpenAI`` (llama-index-llms-openai) against the loopback
chat-completions server, a real Chroma collection. The server plays the model by a fixed rule
(:func:`app_rule`): it calls the first tool offered with the user's words, rewrites follow-ups to
the earlier question they refer to, and answers with the first sentence of the first knowledge-base
document in its prompt, so every answer is tied to what the model saw.

For each user message of each style the test asserts: the question the judge got, the evidence
ids (and that they are exactly the knowledge-base documents whose text reached a model prompt of
that message), the answer, the history and standalone question, the number of judge calls, and
that the turn is one trace (turn span, its steps and its judge span). LangChain styles run with
the per-call handler and with ``instrument()``; LlamaIndex styles with ``instrument()`` and, for the
query-engine styles the legacy callback manager reports, with ``RagAuditLlamaIndexHandler``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, Field

from ragaudit import Auditor, FakeJudge, JudgeRequest
from ragaudit.integrations import closer_for
from ragaudit.records import UNSUBMITTED_REASONS, stable_doc_id
from ragaudit.tracing import conventions as c
from tests.support.llm_server import LLMServer, Reply, Scripted, ToolCall
from tests.support.topics import QUESTIONS, answer_for, topic_documents

pytestmark = pytest.mark.timeout(120)

TEXTS = {doc_id: text for doc_id, text, _ in topic_documents()}
SENTENCES = {doc_id: answer_for(text).rstrip(".") for doc_id, text in TEXTS.items()}
NO_ANSWER = "I don't know."
MODEL = "gpt-4o-mini"


# --- the scripted model -------------------------------------------------------------------------------


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def answer_from(texts: list[str]) -> str:
    """The first sentence of the knowledge-base document that comes first (by its full text or its
    first sentence) in the last of *texts* that has one, else :data:`NO_ANSWER`."""
    for text in reversed(texts):
        found = []
        for doc_id, full in TEXTS.items():
            at = [i for i in (text.find(full), text.find(SENTENCES[doc_id])) if i >= 0]
            if at:
                found.append((min(at), doc_id))
        if found:
            return answer_for(TEXTS[min(found)[1]])
    return NO_ANSWER


def this_turns_text(messages: list[dict[str, Any]]) -> str:
    """What a prompt shows of the current turn: its system messages, the last user message and what
    follows it (tool results); not the earlier conversation, which an earlier turn's evidence made."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    return "\n".join(_content(m) for i, m in enumerate(messages) if i >= last_user or m.get("role") == "system")


def app_rule(body: dict[str, Any]) -> Scripted:
    messages = body["messages"]
    texts = [_content(m) for m in messages]
    joined = "\n".join(texts)
    conversation = "\n".join(t for m, t in zip(messages, texts, strict=True) if m.get("role") != "system")
    if "alternative" in joined and "Original question:" in joined:  # MultiQueryRetriever's query writer
        question = texts[-1].rsplit("Original question:", 1)[-1].strip()
        return f"{question}\n{question.upper()}"
    if "standalone question" in joined.lower():  # a follow-up rewritten to the question it refers to
        earlier = [q for q in QUESTIONS if q in joined]
        return earlier[0] if earlier else texts[-1]
    if "Action Input" in joined and not body.get("tools"):  # a ReAct agent's text protocol
        if "Observation:" in conversation:
            return f"Thought: I can answer without using any more tools.\nAnswer: {answer_from([conversation])}"
        question = next(t for m, t in zip(reversed(messages), reversed(texts), strict=True) if m["role"] == "user")
        return f'Thought: I need to use a tool.\nAction: policies\nAction Input: {json.dumps({"input": question})}'
    tools = [t for t in body.get("tools") or () if t["function"]["name"] != "handoff"]
    if "format the output according to the provided schema" in joined:  # an agent's output_cls (structured)
        filled = {"answer": f"In short: {answer_from([conversation])}", "confidence": 1.0}
        if tools:  # by function calling
            return Reply(tool_calls=[ToolCall(tools[0]["function"]["name"], filled)])
        return json.dumps(filled)  # by the provider's JSON mode
    if tools and messages[-1].get("role") == "user":
        function = tools[0]["function"]
        argument = next(iter(function["parameters"]["properties"]))
        return Reply(tool_calls=[ToolCall(function["name"], {argument: texts[-1]})])
    return answer_from(texts)


def _reply_text(body: Any) -> str:
    """The text the scripted model answered *body* with ("" for a tool call)."""
    reply = app_rule(body) if isinstance(body, dict) else ""
    return reply if isinstance(reply, str) else reply.text() if isinstance(reply, Reply) else ""


def final_inputs(prompts: list[tuple[str, str]], expect: Expect) -> list[str]:
    """The input of the model call that produced the answer (the last whose reply is the answer, else
    the last), and the inputs of earlier calls whose reply reached it (a query engine tool's synthesis)."""
    if not prompts:
        return []
    final = next((p for p, reply in reversed(prompts) if reply == expect.answer), prompts[-1][0])
    fed = [p for p, reply in prompts if p != final and len(reply.split()) >= 4 and reply in final]
    return [final, *fed]


# --- the harness ---------------------------------------------------------------------------------------


@dataclass
class Expect:
    """One user message: what the judge must get (``judged`` False: traced, not judged)."""

    question: str
    ids: list[str]  # evidence ids in order; "tool:NAME" is a tool output (source NAME, id the tool call's)
    answer: str
    judged: bool = True
    history: tuple[tuple[str, str], ...] = ()
    standalone: str | None = None
    unjudged: str | None = None  # "no_evidence" / "empty_answer": the stats counter it goes to
    tools: int = 0  # an agent's tool calls: that many tool spans, and a model span per agent step


class Env:
    """One style's run: the loopback model, an Auditor with a recording FakeJudge, the spans."""

    def __init__(self, srv: LLMServer, mode: str, exporter: InMemorySpanExporter,
                 provider: TracerProvider) -> None:
        self.srv = srv
        self.mode = mode
        self.exporter = exporter
        self.judged: list[JudgeRequest] = []
        self.auditor = Auditor(FakeJudge(self._judge), tracer_provider=provider)
        self.expects: list[Expect] = []
        self.prompts: list[list[tuple[str, str]]] = []  # per user message, the app's model prompts and replies
        self.handler: Any = None
        self.flushers: list[Callable[[], Any]] = [lambda: closer_for(self.auditor).force_flush(20)]
        self.extra_turns: list[str] = []  # questions of retrievers traced on their own (not user messages)

    def _judge(self, request: JudgeRequest) -> dict[str, Any]:
        self.judged.append(request)
        return {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0, "reason": "ok"}

    def ask(self, expect: Expect, run: Callable[[], Any]) -> Any:
        """Run one user message; the model prompts it caused are kept for the evidence check."""
        before = self.srv.request_count
        result = run()
        self.prompts.append([(this_turns_text(r.messages), _reply_text(r.body)) for r in self.srv.requests[before:]])
        self.expects.append(expect)
        return result

    def config(self, **extra: Any) -> dict[str, Any]:
        """A LangChain run config: with the handler in handler mode, nothing to add under instrument()."""
        if self.handler is not None:
            extra["callbacks"] = [self.handler]
        return extra

    def check(self) -> None:
        for flush in self.flushers:
            flush()
        expects = self.expects
        judged = [e for e in expects if e.judged]
        assert sorted(r.query for r in self.judged) == sorted(e.question for e in judged)
        requests = {r.query: r for r in self.judged}
        for expect, prompts in zip(expects, self.prompts, strict=True):
            seen = {doc_id for doc_id, text in TEXTS.items() if any(text in p for p in final_inputs(prompts, expect))}
            if not expect.judged:
                continue
            request = requests[expect.question]
            assert request.answer == expect.answer, expect.question
            ids = [d.id for d in request.documents]
            assert len(ids) == len(expect.ids), (ids, expect.ids)
            for doc, want in zip(request.documents, expect.ids, strict=True):
                if want.startswith("tool:"):
                    assert doc.source == want[5:] and doc.id.startswith("call_"), (doc, want)
                elif want.startswith("prompt:"):  # a passage of the prompt: id from its text
                    assert doc.source == "prompt" and doc.id == stable_doc_id(TEXTS[want[7:]], "prompt"), (doc, want)
                else:
                    assert doc.id == want, (ids, expect.ids)
            # the evidence is exactly the knowledge-base documents whose text reached the final model call
            in_evidence = {doc_id for doc_id, text in TEXTS.items()
                           if any(text in d.content for d in request.documents)}
            assert in_evidence == seen, (in_evidence, seen)
            assert request.history == expect.history, request.history
            assert request.standalone_query == expect.standalone
        stats = self.auditor.stats()
        for reason in UNSUBMITTED_REASONS:
            # a retriever traced on its own (an extra turn) is counted as standalone
            extra = len(self.extra_turns) if reason == "standalone" else 0
            assert stats[f"unjudged_{reason}"] == sum(e.unjudged == reason for e in expects) + extra, stats
        assert stats["evidence_from_prompt"] == sum(any(i.startswith("prompt:") for i in e.ids) for e in expects)
        self.check_traces()

    def check_traces(self) -> None:
        spans = list(self.exporter.get_finished_spans())
        # the turn span: ragaudit.turn, or invoke_agent {name} for an agent's turn
        turns = [s for s in spans if s.name == c.SPAN_TURN or s.name.startswith(c.SPAN_AGENT)]
        assert sorted(str(t.attributes[c.INPUT_VALUE]) for t in turns) == sorted(
            [e.question for e in self.expects] + self.extra_turns)
        judged = {e.question for e in self.expects if e.judged}
        assert len({t.context.trace_id for t in turns}) == len(turns)  # a trace per user message
        judge_spans: dict[str, int] = {}
        for turn in turns:
            in_trace = [s for s in spans if s.context.trace_id == turn.context.trace_id]
            question = str(turn.attributes[c.INPUT_VALUE])
            judge_spans[question] = judge_spans.get(question, 0) + sum(s.name == c.SPAN_JUDGE for s in in_trace)
            expect = next((e for e in self.expects if e.question == turn.attributes[c.INPUT_VALUE]), None)
            if expect is not None and expect.tools:
                assert len([s for s in in_trace if s.name.startswith(c.SPAN_TOOL + " ")]) == expect.tools
                assert len([s for s in in_trace if s.name == c.chat_span_name(MODEL)]) >= expect.tools + 1
            for span in in_trace:  # every step and the judge hang under the turn span
                if span is not turn:
                    assert span.parent is not None and span.parent.span_id == turn.context.span_id, span.name
        # one judge span per judged user message (a retriever traced on its own with the same question: none)
        assert judge_spans == {q: int(q in judged) for q in judge_spans}, judge_spans


@pytest.fixture(scope="module")
def server() -> Iterator[LLMServer]:
    with LLMServer(app_rule) as srv:
        yield srv


# --- LangChain -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lc_kb() -> Any:
    from tests.support.langchain_support import KB

    return KB()


def chat_openai(srv: LLMServer) -> Any:
    import httpx
    from langchain_openai import ChatOpenAI

    # A fresh async client: langchain-openai's shared one is bound to the first asyncio.run's loop.
    return ChatOpenAI(model=MODEL, base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=10,
                      http_async_client=httpx.AsyncClient(timeout=10))


def _rag_prompt() -> Any:
    from langchain_core.prompts import ChatPromptTemplate

    return ChatPromptTemplate.from_messages([
        ("system", "Answer from the context only.\n\nContext:\n{context}"), ("human", "{question}")])


def _join(docs: list[Any]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def _lcel(retriever: Any, srv: LLMServer) -> Any:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    return ({"context": retriever | RunnableLambda(_join), "question": RunnablePassthrough()}
            | _rag_prompt() | chat_openai(srv) | StrOutputParser())


def lc_lcel_chain(env: Env, kb: Any) -> None:
    """retriever | prompt | ChatOpenAI | parser, invoked with a string."""
    q = QUESTIONS[0]
    answer = env.ask(Expect(q, kb.expected[q], kb.answers[q]),
                     lambda: _lcel(kb.retriever, env.srv).invoke(q, config=env.config()))
    assert answer == kb.answers[q]


def lc_lcel_stream(env: Env, kb: Any) -> None:
    """The same chain, streamed (the model streams from the server)."""
    q = QUESTIONS[1]
    chunks = env.ask(Expect(q, kb.expected[q], kb.answers[q]),
                     lambda: list(_lcel(kb.retriever, env.srv).stream(q, config=env.config())))
    assert "".join(chunks) == kb.answers[q] and len(chunks) > 2


def lc_lcel_async(env: Env, kb: Any) -> None:
    """The same chain with ainvoke."""
    q = QUESTIONS[2]
    env.ask(Expect(q, kb.expected[q], kb.answers[q]),
            lambda: asyncio.run(_lcel(kb.retriever, env.srv).ainvoke(q, config=env.config())))


def lc_retrieval_chain(env: Env, kb: Any) -> None:
    """create_retrieval_chain + create_stuff_documents_chain, invoked with {"input": q}."""
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain
    from langchain_core.prompts import ChatPromptTemplate

    prompt = ChatPromptTemplate.from_messages([("system", "Context:\n{context}"), ("human", "{input}")])
    chain = create_retrieval_chain(kb.retriever, create_stuff_documents_chain(chat_openai(env.srv), prompt))
    q = QUESTIONS[3]
    out = env.ask(Expect(q, kb.expected[q], kb.answers[q]), lambda: chain.invoke({"input": q}, config=env.config()))
    assert out["answer"] == kb.answers[q]


def _keep_first_compressor() -> Any:
    """A reranker as users write one: a document compressor that keeps the best document only."""
    from langchain_core.documents import BaseDocumentCompressor

    class KeepFirst(BaseDocumentCompressor):
        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
            return list(documents)[:1]

    return KeepFirst()


def lc_compression(env: Env, kb: Any) -> None:
    """ContextualCompressionRetriever with a reranker keeping one document (failure 1: the judge
    got the inner retriever's documents too)."""
    from langchain_classic.retrievers import ContextualCompressionRetriever

    retriever = ContextualCompressionRetriever(base_compressor=_keep_first_compressor(), base_retriever=kb.retriever)
    q = QUESTIONS[4]
    env.ask(Expect(q, kb.expected[q][:1], kb.answers[q]),
            lambda: _lcel(retriever, env.srv).invoke(q, config=env.config()))


def lc_ensemble(env: Env, kb: Any) -> None:
    """EnsembleRetriever over two retrievers: the evidence is its fused list, not each inner one."""
    from langchain_classic.retrievers import EnsembleRetriever

    one = kb.store.as_retriever(search_kwargs={"k": 1})
    retriever = EnsembleRetriever(retrievers=[one, kb.retriever], weights=[0.5, 0.5])
    q = QUESTIONS[5]
    # Reciprocal rank fusion of [top-1] and [top-1, top-2] keeps the order of the top 2.
    env.ask(Expect(q, kb.expected[q], kb.answers[q]),
            lambda: _lcel(retriever, env.srv).invoke(q, config=env.config()))


def lc_multi_query(env: Env, kb: Any) -> None:
    """MultiQueryRetriever: a model writes query variants, each retrieves; the evidence is the
    union the outer retriever returned, not each inner retrieval."""
    from langchain_classic.retrievers import MultiQueryRetriever

    retriever = MultiQueryRetriever.from_llm(retriever=kb.retriever, llm=chat_openai(env.srv))
    q = QUESTIONS[13]
    env.ask(Expect(q, kb.expected[q], kb.answers[q]), lambda: _lcel(retriever, env.srv).invoke(q, config=env.config()))


def lc_thread_pool(env: Env, kb: Any) -> None:
    """A retriever called from a plain thread pool inside a RunnableLambda (failure 5): it leaves the
    callback tree, but its documents reach the prompt: judged on the prompt's passages, counted in
    ``evidence_from_prompt``. Under ``instrument()`` the lost retrieval is a turn of its own, closed first:
    its documents keep their ids in the prompt (an earlier turn's documents, issue 45)."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    def retrieve(question: str) -> str:
        with ThreadPoolExecutor(1) as pool:
            return _join(pool.submit(kb.retriever.invoke, question).result())

    chain = ({"context": RunnableLambda(retrieve), "question": RunnablePassthrough()}
             | _rag_prompt() | chat_openai(env.srv) | StrOutputParser())
    q = QUESTIONS[6]
    # What reached the model is still seen: the prompt's context, as passages with ids from their text.
    ids = [f"prompt:{i}" for i in kb.expected[q]]
    if env.mode == "instrument":  # the process-wide handler sees the lost retrieval as a turn of its own
        env.extra_turns.append(q)
        ids = kb.expected[q]  # which closed first: its documents keep their ids in the prompt (issue 45)
    env.ask(Expect(q, ids, kb.answers[q]), lambda: chain.invoke(q, config=env.config()))


def lc_history_aware(env: Env, kb: Any) -> None:
    """create_history_aware_retriever + RunnableWithMessageHistory (failure 4): the follow-up is
    judged with the history and the standalone question retrieval used."""
    from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    llm = chat_openai(env.srv)
    contextualize = ChatPromptTemplate.from_messages([
        ("system", "Given the chat history and the latest user question, which may refer to the chat history, "
                   "write a standalone question. Do not answer it."),
        MessagesPlaceholder("chat_history"), ("human", "{input}")])
    qa = ChatPromptTemplate.from_messages([
        ("system", "Answer from the context.\n\n{context}"), MessagesPlaceholder("chat_history"), ("human", "{input}")])
    rag = create_retrieval_chain(create_history_aware_retriever(llm, kb.retriever, contextualize),
                                 create_stuff_documents_chain(llm, qa))
    histories: dict[str, InMemoryChatMessageHistory] = {}
    chain = RunnableWithMessageHistory(
        rag, lambda sid: histories.setdefault(sid, InMemoryChatMessageHistory()),
        input_messages_key="input", history_messages_key="chat_history", output_messages_key="answer")
    config = env.config(configurable={"session_id": "s1"})
    first, follow_up = QUESTIONS[7], "And how long do they take?"
    env.ask(Expect(first, kb.expected[first], kb.answers[first]),
            lambda: chain.invoke({"input": first}, config=config))
    env.ask(Expect(follow_up, kb.expected[first], kb.answers[first],
                   history=(("user", first), ("assistant", kb.answers[first])), standalone=first),
            lambda: chain.invoke({"input": follow_up}, config=config))


def _retriever_tool(kb: Any) -> Any:
    from langchain_core.tools import create_retriever_tool

    return create_retriever_tool(kb.retriever, "search_policies", "Search the store's policies.")


def lc_react_agent_tuple(env: Env, kb: Any) -> None:
    """langgraph.prebuilt.create_react_agent with a retriever tool, messages as (role, text) tuples
    (failure 2: the judged question was the tool's search query)."""
    import warnings

    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of create_agent
        agent = create_react_agent(chat_openai(env.srv), [_retriever_tool(kb)])
    q = QUESTIONS[8]
    out = env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1),
                  lambda: agent.invoke({"messages": [("user", q)]}, config=env.config()))
    assert out["messages"][-1].content == kb.answers[q]


def lc_create_agent_dict(env: Env, kb: Any) -> None:
    """langchain.agents.create_agent, messages as {"role", "content"} dicts."""
    from langchain.agents import create_agent

    agent = create_agent(chat_openai(env.srv), [_retriever_tool(kb)], system_prompt="Use the search tool.")
    q = QUESTIONS[9]
    env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1),
            lambda: agent.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))


def lc_create_agent_streamed(env: Env, kb: Any) -> None:
    """create_agent streamed token by token (``stream_mode="messages"``): the model streams its tool
    call and its reply from the server; the turn closes when the stream is consumed."""
    from langchain.agents import create_agent

    agent = create_agent(chat_openai(env.srv), [_retriever_tool(kb)])
    q = QUESTIONS[14]

    def run() -> str:
        tokens = [chunk.content for chunk, meta in agent.stream({"messages": [{"role": "user", "content": q}]},
                                                                 config=env.config(), stream_mode="messages")
                  if meta.get("langgraph_node") == "model" and isinstance(chunk.content, str)]
        return "".join(tokens)

    reply = env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1), run)
    assert reply == kb.answers[q]


def lc_create_agent_text_tool(env: Env, kb: Any) -> None:
    """create_agent with a @tool that returns text: the tool output is the evidence (source = tool
    name, id = the tool call's id); the question comes as content blocks."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def lookup_policy(topic: str) -> str:
        """Look up the store's policy on a topic."""
        word = next(w for w in TEXTS if w.endswith("-rule") and w[:-5] in topic)
        return TEXTS[word]

    agent = create_agent(chat_openai(env.srv), [lookup_policy])
    q = QUESTIONS[10]
    blocks = [{"type": "text", "text": q}]
    env.ask(Expect(q, ["tool:lookup_policy"], answer_for(TEXTS[f"{q.split()[-1][:-1]}-rule"]), tools=1),
            lambda: agent.invoke({"messages": [{"role": "user", "content": blocks}]}, config=env.config()))


def lc_state_graph(env: Env, kb: Any) -> None:
    """A hand-built StateGraph with a ToolNode and tools_condition, a HumanMessage as input, and a
    checkpointer: the second message is judged with the conversation so far as history."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    tools = [_retriever_tool(kb)]
    llm = chat_openai(env.srv).bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=InMemorySaver())
    config = env.config(configurable={"thread_id": "t1"})
    first, second = QUESTIONS[11], QUESTIONS[12]
    env.ask(Expect(first, kb.expected[first], kb.answers[first], tools=1),
            lambda: app.invoke({"messages": [HumanMessage(first)]}, config=config))
    env.ask(Expect(second, kb.expected[second], kb.answers[second], tools=1,
                   history=(("user", first), ("assistant", kb.answers[first]))),
            lambda: app.invoke({"messages": [HumanMessage(second)]}, config=config))


LANGCHAIN_STYLES = [lc_lcel_chain, lc_lcel_stream, lc_lcel_async, lc_retrieval_chain, lc_compression, lc_ensemble,
                    lc_multi_query, lc_thread_pool, lc_history_aware, lc_react_agent_tuple, lc_create_agent_dict,
                    lc_create_agent_streamed, lc_create_agent_text_tool, lc_state_graph]


@pytest.mark.parametrize("mode", ["handler", "instrument"])
@pytest.mark.parametrize("style", LANGCHAIN_STYLES, ids=lambda f: f.__name__)
def test_langchain_style(style: Callable[[Env, Any], None], mode: str, server: LLMServer, lc_kb: Any,
                         memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider,
                         caplog: pytest.LogCaptureFixture) -> None:
    from ragaudit.integrations.langchain import RagAuditCallbackHandler, instrument, uninstrument

    server.reset()
    env = Env(server, mode, memory_exporter, memory_provider)
    try:
        if mode == "handler":
            env.handler = RagAuditCallbackHandler(auditor=env.auditor)
            env.flushers.insert(0, env.handler.force_flush)
        else:
            handler = instrument(auditor=env.auditor)
            env.flushers.insert(0, handler.force_flush)
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            style(env, lc_kb)
            env.check()
    finally:
        if mode == "instrument":
            uninstrument()
        env.auditor.shutdown()
    warned = [r for r in caplog.records if "unjudged_no_evidence" in r.getMessage()]
    assert len(warned) == (1 if any(e.unjudged == "no_evidence" for e in env.expects) else 0)
    if warned:
        assert "ContextThreadPoolExecutor" in warned[0].getMessage()


# --- LlamaIndex ----------------------------------------------------------------------------------------


class LiKB:
    """The topic nodes in a Chroma-backed index, with the ids each question retrieves (top 2)."""

    def __init__(self) -> None:
        from tests.support.llamaindex_support import build_index

        self.index = build_index()
        retriever = self.index.as_retriever(similarity_top_k=2)
        self.expected = {q: [n.node.node_id for n in retriever.retrieve(q)] for q in QUESTIONS}
        self.answers = {q: answer_for(TEXTS[ids[0]]) for q, ids in self.expected.items()}


@pytest.fixture(scope="module")
def li_kb() -> Iterator[LiKB]:
    from llama_index.core import Settings

    from tests.support.llamaindex_support import HashEmbedding

    saved = Settings._llm, Settings._embed_model, Settings._callback_manager
    Settings.embed_model = HashEmbedding()
    Settings.llm = None  # nothing may fall back to a default model: every app below names its own
    yield LiKB()
    Settings._llm, Settings._embed_model, Settings._callback_manager = saved


def li_openai(srv: LLMServer) -> Any:
    from llama_index.llms.openai import OpenAI

    return OpenAI(model=MODEL, api_base=srv.base_url, api_key="sk-test", max_retries=0, timeout=10)


def _query_tool(env: Env, kb: LiKB) -> Any:
    from llama_index.core.tools import QueryEngineTool

    engine = kb.index.as_query_engine(similarity_top_k=2, llm=li_openai(env.srv))
    return QueryEngineTool.from_defaults(engine, name="policies", description="Answers questions on store policies.")


def _run_agent(agent: Any, question: str, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> str:
    """``await agent.run(user_msg=question, **kwargs)`` on *loop* (a fresh one when None: the LLM's
    async client is bound to the loop it first ran on, so a conversation keeps one loop)."""
    async def run() -> str:
        return str(await agent.run(user_msg=question, **kwargs))

    if loop is None:
        return asyncio.run(run())
    return loop.run_until_complete(run())


def li_query_engine(env: Env, kb: LiKB) -> None:
    """VectorStoreIndex.as_query_engine with the OpenAI LLM."""
    q = QUESTIONS[13]
    engine = kb.index.as_query_engine(similarity_top_k=2, llm=li_openai(env.srv))
    response = env.ask(Expect(q, kb.expected[q], kb.answers[q]), lambda: engine.query(q))
    assert str(response) == kb.answers[q]


def li_query_engine_stream(env: Env, kb: LiKB) -> None:
    """A streaming query engine (the model streams from the server), consumed to the end."""
    q = QUESTIONS[14]
    engine = kb.index.as_query_engine(similarity_top_k=2, llm=li_openai(env.srv), streaming=True)
    text = env.ask(Expect(q, kb.expected[q], kb.answers[q]), lambda: "".join(engine.query(q).response_gen))
    assert text == kb.answers[q]


def li_reranker(env: Env, kb: LiKB) -> None:
    """A node post-processor that reorders the nodes: the evidence is what the answer was built from."""
    from tests.support.llamaindex_support import ReverseReranker

    q = QUESTIONS[15]
    engine = kb.index.as_query_engine(similarity_top_k=2, llm=li_openai(env.srv),
                                      node_postprocessors=[ReverseReranker()])
    ids = kb.expected[q][::-1]
    env.ask(Expect(q, ids, answer_for(TEXTS[ids[0]])), lambda: engine.query(q))


def li_empty_response(env: Env, kb: LiKB) -> None:
    """Every node dropped by a post-processor (failure 6): LlamaIndex answers "Empty Response",
    which is traced and counted, not judged."""
    from llama_index.core.postprocessor import SimilarityPostprocessor

    q = QUESTIONS[16]
    engine = kb.index.as_query_engine(similarity_top_k=2, llm=li_openai(env.srv),
                                      node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=1.5)])
    response = env.ask(Expect(q, [], "Empty Response", judged=False, unjudged="empty_answer"),
                       lambda: engine.query(q))
    assert str(response) == "Empty Response"


def li_query_fusion(env: Env, kb: LiKB) -> None:
    """A retriever over two retrievers (QueryFusionRetriever): the inner retrievals are child spans."""
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import QueryFusionRetriever

    llm = li_openai(env.srv)
    inner = [kb.index.as_retriever(similarity_top_k=1), kb.index.as_retriever(similarity_top_k=2)]
    fusion = QueryFusionRetriever(inner, llm=llm, num_queries=1, similarity_top_k=2, mode="reciprocal_rerank",
                                  use_async=False)
    engine = RetrieverQueryEngine.from_args(fusion, llm=llm)
    q = QUESTIONS[17]
    env.ask(Expect(q, kb.expected[q], kb.answers[q]), lambda: engine.query(q))


def li_condense_plus_context(env: Env, kb: LiKB) -> None:
    """CondensePlusContextChatEngine (failure 4): the follow-up is judged with the history and the
    condensed question retrieval used."""
    from llama_index.core.chat_engine import CondensePlusContextChatEngine

    engine = CondensePlusContextChatEngine.from_defaults(kb.index.as_retriever(similarity_top_k=2),
                                                         llm=li_openai(env.srv))
    first, follow_up = QUESTIONS[18], "And how long do they take?"
    env.ask(Expect(first, kb.expected[first], kb.answers[first]), lambda: engine.chat(first))
    env.ask(Expect(follow_up, kb.expected[first], kb.answers[first],
                   history=(("user", first), ("assistant", kb.answers[first])), standalone=first),
            lambda: engine.chat(follow_up))


def li_function_agent(env: Env, kb: LiKB) -> None:
    """FunctionAgent with a QueryEngineTool (failure 3: each tool call was its own turn and the
    agent's reply was never judged): one turn, one judgement, the tool's retrieval as evidence."""
    from llama_index.core.agent.workflow import FunctionAgent

    agent = FunctionAgent(tools=[_query_tool(env, kb)], llm=li_openai(env.srv), system_prompt="Use the tool.")
    q = QUESTIONS[19]
    reply = env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1), lambda: _run_agent(agent, q))
    assert reply == kb.answers[q]


class PolicyAnswer(BaseModel):
    """An answer about the store's policies."""

    answer: str = Field(description="The answer to the user's question.")
    confidence: float = Field(description="How sure the answer is, from 0 to 1.")


def li_function_agent_structured(env: Env, kb: LiKB) -> None:
    """LlamaIndex "Structured output" of agents (developers.llamaindex.ai, agents, ``output_cls``):
    ``FunctionAgent(tools=[...], output_cls=PolicyAnswer)``; the app reads ``response.structured_response``.
    Its ``answer`` field is the answer judged (issue 45), the model call that filled it the final call."""
    from llama_index.core.agent.workflow import FunctionAgent

    agent = FunctionAgent(tools=[_query_tool(env, kb)], llm=li_openai(env.srv), system_prompt="Use the tool.",
                          output_cls=PolicyAnswer)
    q = QUESTIONS[5]

    async def run() -> Any:
        return await agent.run(user_msg=q)

    answer = f"In short: {kb.answers[q]}"  # the structured field, not the agent's chat reply
    out = env.ask(Expect(q, kb.expected[q], answer, tools=1), lambda: asyncio.run(run()))
    assert out.structured_response == {"answer": answer, "confidence": 1.0}


def li_function_agent_memory(env: Env, kb: LiKB) -> None:
    """A FunctionAgent given the conversation's memory: the second message has history."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.memory import ChatMemoryBuffer

    agent = FunctionAgent(tools=[_query_tool(env, kb)], llm=li_openai(env.srv), system_prompt="Use the tool.")
    memory = ChatMemoryBuffer.from_defaults()
    first, second = QUESTIONS[0], QUESTIONS[1]
    loop = asyncio.new_event_loop()
    try:
        env.ask(Expect(first, kb.expected[first], kb.answers[first], tools=1),
                lambda: _run_agent(agent, first, loop, memory=memory))
        env.ask(Expect(second, kb.expected[second], kb.answers[second], tools=1,
                       history=(("user", first), ("assistant", kb.answers[first]))),
                lambda: _run_agent(agent, second, loop, memory=memory))
    finally:
        loop.close()


def li_react_agent(env: Env, kb: LiKB) -> None:
    """ReActAgent (the model speaks the Thought / Action / Observation protocol) with a QueryEngineTool."""
    from llama_index.core.agent.workflow import ReActAgent

    agent = ReActAgent(tools=[_query_tool(env, kb)], llm=li_openai(env.srv))
    q = QUESTIONS[2]
    reply = env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1), lambda: _run_agent(agent, q))
    assert reply == kb.answers[q]


def li_agent_workflow_retriever_tool(env: Env, kb: LiKB) -> None:
    """AgentWorkflow with one FunctionAgent and a RetrieverTool: the nodes it returned keep their ids."""
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.core.tools import RetrieverTool

    tool = RetrieverTool.from_defaults(kb.index.as_retriever(similarity_top_k=2), name="search_policies",
                                       description="Finds store policy passages.")
    agent = FunctionAgent(name="policy_agent", description="Answers policy questions.", tools=[tool],
                          llm=li_openai(env.srv), system_prompt="Use the search tool.")
    workflow = AgentWorkflow(agents=[agent], root_agent="policy_agent")
    q = QUESTIONS[3]
    env.ask(Expect(q, kb.expected[q], kb.answers[q], tools=1), lambda: _run_agent(workflow, q))


def li_function_agent_text_tool(env: Env, kb: LiKB) -> None:
    """FunctionAgent with a plain function tool: its text output is the evidence (source = tool
    name, id = the tool call's id)."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    def lookup_policy(topic: str) -> str:
        """Look up the store's policy on a topic."""
        return next(TEXTS[w] for w in TEXTS if w.endswith("-rule") and w[:-5] in topic)

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup_policy)], llm=li_openai(env.srv))
    q = QUESTIONS[4]
    env.ask(Expect(q, ["tool:lookup_policy"], answer_for(TEXTS[f"{q.split()[-1][:-1]}-rule"]), tools=1),
            lambda: _run_agent(agent, q))


LLAMAINDEX_STYLES = [li_query_engine, li_query_engine_stream, li_reranker, li_empty_response, li_query_fusion,
                     li_condense_plus_context, li_function_agent, li_function_agent_structured,
                     li_function_agent_memory, li_react_agent,
                     li_agent_workflow_retriever_tool, li_function_agent_text_tool]
# What LlamaIndex's legacy CallbackManager reports (query engines); workflows and agents emit no
# legacy callback events, so there instrument() is the one way in.
LEGACY_STYLES = {li_query_engine, li_reranker, li_empty_response, li_query_fusion}


@pytest.mark.parametrize("mode", ["instrument", "handler"])
@pytest.mark.parametrize("style", LLAMAINDEX_STYLES, ids=lambda f: f.__name__)
def test_llamaindex_style(style: Callable[[Env, Any], None], mode: str, server: LLMServer, li_kb: LiKB,
                          memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider) -> None:
    from llama_index.core import Settings
    from llama_index.core.callbacks import CallbackManager

    from ragaudit.integrations import llamaindex

    if mode == "handler" and style not in LEGACY_STYLES:
        pytest.skip("LlamaIndex workflows and chat engines report no legacy callback events; use instrument()")
    server.reset()
    env = Env(server, mode, memory_exporter, memory_provider)
    saved = Settings._callback_manager
    try:
        if mode == "instrument":
            installed = llamaindex.instrument(auditor=env.auditor)
            env.flushers.insert(0, installed.force_flush)
        else:
            handler = llamaindex.RagAuditLlamaIndexHandler(auditor=env.auditor)
            Settings.callback_manager = CallbackManager([handler])
            env.flushers.insert(0, handler.force_flush)
        style(env, li_kb)
        env.check()
    finally:
        llamaindex.uninstrument()
        Settings._callback_manager = saved
        env.auditor.shutdown()
