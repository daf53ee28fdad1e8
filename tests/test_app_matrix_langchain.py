"""LangChain and LangGraph apps as the current official docs write them, judged on what reached the final
model call (issue 23).

Every style is a real app: ``langchain.agents.create_agent`` with its middleware, LangGraph ``StateGraph`` s,
the real ``ChatOpenAI`` against the loopback chat-completions server, a real Chroma collection behind
``langchain_chroma.Chroma`` (searched with ``similarity_search`` as the tutorials do), and a real
``ChatRagJudge`` against a second loopback server, so judge calls are counted where they arrive. Each
style runs with the per-call handler and with ``instrument()``.

The app's model is played by :class:`AppModel`: it calls the first tool it is offered with the user's
words, grades the first retrieval of a run "no" and the next "yes", rewrites a question to
:data:`REWRITTEN`, fills a ``CitedAnswer`` with the first sentence of the first document it is shown and
that document's source id, and otherwise answers with the first sentence of the first knowledge-base
document in its prompt.

For each user message the test asserts: the question the judge got, the evidence ids (equal to the
knowledge-base documents whose text is in the input of the message's final model call, in order), the
answer, one judge call per judged message at the judge's server (none for the others), one trace per
message (the turn span, every step and the judge span under it) and, for a message that is not judged,
the ``stats()`` counter it went to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from langchain_core.documents import Document
from langgraph.graph import MessagesState
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from ragaudit import Auditor, ChatRagJudge, Judgement, RagTurn
from tests.support.app_servers import check_judged_turns, check_turn_traces, check_unjudged_counts
from tests.support.judges import open_judge
from tests.support.llm_server import Fault, LLMServer, Reply, Scripted, ToolCall
from tests.support.topics import QUESTIONS, answer_for, topic_documents
from tests.worker.apps import langchain_agents as agents

pytestmark = pytest.mark.timeout(120)

TEXTS = {doc_id: text for doc_id, text, _ in topic_documents()}
MODEL = "gpt-4o-mini"
NO_ANSWER = "I don't know."
REWRITTEN = QUESTIONS[15]  # what the agentic RAG's rewrite node makes of the question
_SOURCE_ID = re.compile(r"^Source ID: (\d+)$", re.MULTILINE)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def docs_in(text: str) -> list[str]:
    """The knowledge-base documents in *text*, whole or cut (their first 24 characters are), in the order
    they appear."""
    found = [(text.find(full[:24]), doc_id) for doc_id, full in TEXTS.items() if full[:24] in text]
    return [doc_id for _, doc_id in sorted(found)]


def part_in(full: str, text: str) -> str:
    """The longest first part of *full* that is in *text* (all of it when it is there whole)."""
    low, high = 0, len(full)
    while low < high:  # a first part that is in text has every shorter first part in text too
        mid = (low + high + 1) // 2
        low, high = (mid, high) if full[:mid] in text else (low, mid - 1)
    return full[:low]


class AppModel:
    """The app's model (the server's rule); ``fail`` makes every call fail with HTTP 500."""

    def __init__(self) -> None:
        self.fail = False
        self.graded: set[str] = set()  # the grading prompts seen: the first one is graded "no"

    def __call__(self, body: dict[str, Any]) -> Scripted:
        if self.fail:
            return Fault.server_error()
        messages = body["messages"]
        if any(_content(m) == agents.SYSTEM_PROMPT for m in messages):  # the create_agent apps of issue 45
            reply = agents.agent_reply(body)
            if reply is not None:
                return reply
        text = "\n".join(_content(m) for m in messages)
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema == "GradeDocuments":  # the first retrieval is graded out, the rewritten question's kept
            first = not self.graded
            self.graded.add(text)
            return json.dumps({"binary_score": "no" if first else "yes"})
        if schema == "CitedAnswer":
            found = docs_in(text)
            ids = _SOURCE_ID.findall(text)
            return json.dumps({"answer": answer_for(TEXTS[found[0]]) if found else NO_ANSWER,
                               "citations": [int(ids[0])] if ids and found else []})
        if "Formulate an improved question" in text:
            return REWRITTEN
        tools = body.get("tools") or ()
        if tools and messages[-1].get("role") == "user":
            function = tools[0]["function"]
            argument = next(iter(function["parameters"]["properties"]))
            return Reply(tool_calls=[ToolCall(function["name"], {argument: _content(messages[-1])})])
        found = docs_in(_content(messages[-1]) if messages[-1].get("role") == "user" else text) or docs_in(text)
        return answer_for(TEXTS[found[0]]) if found else NO_ANSWER


# --- the harness ------------------------------------------------------------------------------------------


@dataclass
class Expect:
    """One user message: what the judge must get, or (``unjudged``) the counter it goes to."""

    question: str
    ids: list[str]
    answer: str
    unjudged: str | None = None
    citations: list[str] | None = None  # structured citations: the cited ids
    dropped: int = 0  # retrieved documents that did not reach the final call (retrieval spans show it)


class Env:
    """One style's run: the app's server and model, a ChatRagJudge on its own server, the spans."""

    def __init__(self, app: LLMServer, judge_srv: LLMServer, exporter: InMemorySpanExporter,
                 provider: TracerProvider, handler: Any) -> None:
        self.app, self.judge_srv, self.exporter = app, judge_srv, exporter
        self.judged: list[RagTurn] = []
        judge = open_judge(ChatRagJudge, judge_srv, protocol="three-score")
        self.auditor = Auditor(judge, tracer_provider=provider, audit_log=None, on_judgement=self._judged)
        self.handler = handler(self.auditor)
        self.expects: list[Expect] = []
        self.final_inputs: list[list[str]] = []  # per message: the documents in its last model call
        self.final_texts: list[str] = []  # per message: the text of its last model call's messages

    def _judged(self, turn: RagTurn, judgement: Judgement) -> None:
        self.judged.append(turn)

    def llm(self) -> Any:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=MODEL, base_url=self.app.base_url, api_key="sk-test", max_retries=0, timeout=10)

    def config(self) -> dict[str, Any]:
        """The run config: the handler in handler mode, nothing under instrument()."""
        return {"callbacks": [self.handler.handler]} if self.handler.mode == "handler" else {}

    def ask(self, expect: Expect, run: Callable[[], Any]) -> Any:
        before = self.app.request_count
        try:
            return run()
        finally:
            calls = self.app.requests[before:]
            final = "\n".join(_content(m) for m in calls[-1].messages) if calls else ""
            self.final_inputs.append(docs_in(final))
            self.final_texts.append(final)
            self.expects.append(expect)

    def check_evidence_text(self, expect: Expect, turn: RagTurn) -> None:
        """The judge saw each document as the message's final model call received it: whole, or the
        first part that reached it (``truncated``), with its id."""
        final = self.final_texts[self.expects.index(expect)]
        for doc in turn.documents:
            part = part_in(TEXTS[doc.id], final)
            assert (doc.content, doc.truncated) == (part, part != TEXTS[doc.id]), (doc, final)
        prompts = [r.prompt_text for r in self.judge_srv.requests]
        assert any(expect.question in p and all(d.content in p for d in turn.documents) for p in prompts)

    def check(self) -> None:
        self.handler.force_flush(20)
        assert self.auditor.force_flush(20)
        for expect, turn in check_judged_turns(self):
            self.check_evidence_text(expect, turn)
            if expect.citations is not None:
                assert [(x.doc_id, x.method) for x in turn.citations] == [(i, "structured") for i in expect.citations]
            used = [d for r in turn.retrievals for d in r.documents if d.id not in (r.used_ids or ())]
            assert len(used) == expect.dropped, turn.retrievals
        for expect, in_trace in check_turn_traces(self):
            if expect.unjudged == "failed":  # the model call that failed carries the error too
                assert any(s.status.status_code is StatusCode.ERROR for s in in_trace if s.name.startswith("chat"))
        check_unjudged_counts(self)


# --- the knowledge base ------------------------------------------------------------------------------------


class KB:
    """The topic documents in a Chroma-backed ``langchain_chroma.Chroma``; what each question's search finds."""

    def __init__(self) -> None:
        from tests.support.langchain_support import KB as Base

        self.store = Base().store
        self.found = {q: [str(d.id) for d in self.store.similarity_search(q)] for q in QUESTIONS}  # k=4
        self.top2 = {q: [str(d.id) for d in self.store.similarity_search(q, k=2)] for q in QUESTIONS}

    def answer(self, ids: list[str]) -> str:
        return answer_for(TEXTS[ids[0]])


@pytest.fixture(scope="module")
def kb() -> KB:
    return KB()


@pytest.fixture(scope="module")
def app_model() -> AppModel:
    """The rule of ``app_server`` (``tests/support/app_servers.py``, with ``judge_server``)."""
    return AppModel()


# --- the styles ---------------------------------------------------------------------------------------------
# The docs' state and schema classes (module level, as the docs write them: LangGraph reads their hints).


class RagState(TypedDict):
    """The RAG tutorial's LangGraph state."""

    question: str
    context: list[Document]
    answer: str


class CitedAnswer(BaseModel):
    """Answer the user question based only on the given sources, and cite the sources used."""

    answer: str = Field(..., description="The answer to the user question, based only on the given sources.")
    citations: list[int] = Field(..., description="The integer IDs of the SPECIFIC sources which justify the answer.")


class CitedState(TypedDict):
    """The citations how-to's state: the answer is the structured ``CitedAnswer``."""

    question: str
    context: list[Document]
    answer: CitedAnswer



def lc_rag_agent(env: Env, kb: KB) -> None:
    """LangChain "Build a RAG agent" (docs.langchain.com/oss/python/langchain/rag), the RAG agent: a
    ``@tool(response_format="content_and_artifact")`` around ``vector_store.similarity_search(query, k=2)``
    and ``create_agent(model, tools, system_prompt=prompt)``."""
    from langchain.agents import create_agent
    from langchain.tools import tool

    vector_store = kb.store

    @tool(response_format="content_and_artifact")
    def retrieve_context(query: str) -> Any:
        """Retrieve information to help answer a query."""
        retrieved_docs = vector_store.similarity_search(query, k=2)
        serialized = "\n\n".join(f"Source: {doc.metadata}\nContent: {doc.page_content}" for doc in retrieved_docs)
        return serialized, retrieved_docs

    prompt = ("You have access to a tool that retrieves context from a blog post. "
              "Use the tool to help answer user queries.")
    agent = create_agent(env.llm(), [retrieve_context], system_prompt=prompt)
    q = QUESTIONS[0]
    ids = kb.top2[q]
    out = env.ask(Expect(q, ids, kb.answer(ids)),
                  lambda: agent.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))
    assert out["messages"][-1].content == kb.answer(ids)


def lc_rag_chain_dynamic_prompt(env: Env, kb: KB) -> None:
    """The same page, the RAG chain: ``@dynamic_prompt`` middleware that runs
    ``vector_store.similarity_search(last_query)`` and puts the documents in the system message, in
    ``create_agent(model, tools=[], middleware=[prompt_with_context])``. No retriever callback fires: the
    search itself is the retrieval."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelRequest, dynamic_prompt

    vector_store = kb.store

    @dynamic_prompt
    def prompt_with_context(request: ModelRequest) -> str:
        """Inject context into state messages."""
        last_query = request.state["messages"][-1].text
        retrieved_docs = vector_store.similarity_search(last_query)
        docs_content = "\n\n".join(doc.page_content for doc in retrieved_docs)
        return f"You are a helpful assistant. Use the following context in your response:\n\n{docs_content}"

    agent = create_agent(env.llm(), tools=[], middleware=[prompt_with_context])
    q = QUESTIONS[1]
    ids = kb.found[q]
    env.ask(Expect(q, ids, kb.answer(ids)),
            lambda: agent.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))


def lc_rag_chain_before_model(env: Env, kb: KB) -> None:
    """The same page, "Returning source documents": an ``AgentMiddleware`` whose ``before_model`` searches
    and rewrites the user's message with the context, keeping the documents in the state."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware, AgentState

    vector_store = kb.store

    class State(AgentState):
        context: list[Document]

    class RetrieveDocumentsMiddleware(AgentMiddleware[State]):
        state_schema = State

        def before_model(self, state: AgentState, runtime: Any = None) -> dict[str, Any] | None:
            last_message = state["messages"][-1]
            retrieved_docs = vector_store.similarity_search(last_message.text)
            docs_content = "\n\n".join(doc.page_content for doc in retrieved_docs)
            augmented = f"{last_message.text}\n\nUse the following context to answer the query:\n{docs_content}"
            return {"messages": [last_message.model_copy(update={"content": augmented})],
                    "context": retrieved_docs}

    agent = create_agent(env.llm(), tools=[], middleware=[RetrieveDocumentsMiddleware()])
    q = QUESTIONS[2]
    ids = kb.found[q]
    env.ask(Expect(q, ids, kb.answer(ids)),
            lambda: agent.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))


def lc_langgraph_retrieve_generate(env: Env, kb: KB) -> None:
    """The RAG tutorial's LangGraph application (docs.langchain.com/oss/python/langchain/rag, "Build a RAG
    App" with LangGraph): ``State(question, context, answer)``, a ``retrieve`` node calling
    ``vector_store.similarity_search`` and a ``generate`` node filling a prompt template,
    ``StateGraph(State).add_sequence([retrieve, generate])``."""
    from langchain_core.prompts import ChatPromptTemplate
    from langgraph.graph import START, StateGraph

    vector_store, llm = kb.store, env.llm()
    prompt = ChatPromptTemplate.from_messages([("human", (
        "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
        "answer the question. If you don't know the answer, just say that you don't know. Use three sentences "
        "maximum and keep the answer concise.\nQuestion: {question} \nContext: {context} \nAnswer:"))])

    def retrieve(state: RagState) -> dict[str, Any]:
        return {"context": vector_store.similarity_search(state["question"])}

    def generate(state: RagState) -> dict[str, Any]:
        docs_content = "\n\n".join(doc.page_content for doc in state["context"])
        messages = prompt.invoke({"question": state["question"], "context": docs_content})
        return {"answer": llm.invoke(messages).content}

    graph_builder = StateGraph(RagState).add_sequence([retrieve, generate])
    graph_builder.add_edge(START, "retrieve")
    graph = graph_builder.compile()
    q = QUESTIONS[3]
    ids = kb.found[q]
    out = env.ask(Expect(q, ids, kb.answer(ids)), lambda: graph.invoke({"question": q}, config=env.config()))
    assert out["answer"] == kb.answer(ids)


def lc_agentic_rag(env: Env, kb: KB) -> None:
    """LangGraph's agentic RAG tutorial (docs.langchain.com/oss/python/langgraph/agentic-rag):
    ``generate_query_or_respond`` with the retriever tool bound, a ``ToolNode``, ``grade_documents`` with
    ``with_structured_output(GradeDocuments)`` (grades the first retrieval out), ``rewrite_question``, a
    second retrieval, ``generate_answer``. The graded-out documents are not evidence."""
    from langchain.tools import tool
    from langchain_core.messages import HumanMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    retriever = kb.store.as_retriever(search_kwargs={"k": 2})
    response_model = grader_model = env.llm()

    @tool
    def retrieve_blog_posts(query: str) -> str:
        """Search and return information about the store's policies."""
        docs = retriever.invoke(query)
        return "\n\n".join([doc.page_content for doc in docs])

    def generate_query_or_respond(state: MessagesState) -> dict[str, Any]:
        return {"messages": [response_model.bind_tools([retrieve_blog_posts]).invoke(state["messages"])]}

    class GradeDocuments(BaseModel):
        """Grade documents using a binary score for relevance check."""

        binary_score: str = Field(description="Relevance score: 'yes' if relevant, or 'no' if not relevant")

    def grade_documents(state: MessagesState) -> Literal["generate_answer", "rewrite_question"]:
        question = state["messages"][0].content
        context = state["messages"][-1].content
        prompt = (f"You are a grader assessing relevance of a retrieved document to a user question. \n"
                  f"Here is the retrieved document: \n\n<context>\n{context}\n</context>\n\n"
                  f"Here is the user question: {question} \n"
                  "Give a binary score 'yes' or 'no' score to indicate whether the document is relevant.")
        response = grader_model.with_structured_output(GradeDocuments).invoke([{"role": "user", "content": prompt}])
        return "generate_answer" if response.binary_score == "yes" else "rewrite_question"

    def rewrite_question(state: MessagesState) -> dict[str, Any]:
        question = state["messages"][0].content
        prompt = ("Look at the input and try to reason about the underlying semantic intent / meaning.\n"
                  f"Here is the initial question:\n ------- \n{question}\n ------- \nFormulate an improved question:")
        response = response_model.invoke([{"role": "user", "content": prompt}])
        return {"messages": [HumanMessage(content=response.content)]}

    def generate_answer(state: MessagesState) -> dict[str, Any]:
        question = state["messages"][0].content
        context = state["messages"][-1].content
        prompt = ("You are an assistant for question-answering tasks. Use the following pieces of retrieved "
                  "context to answer the question. If you don't know the answer, just say that you don't know. "
                  f"Use three sentences maximum and keep the answer concise.\nQuestion: {question} \n"
                  f"Context: {context}")
        return {"messages": [response_model.invoke([{"role": "user", "content": prompt}])]}

    workflow = StateGraph(MessagesState)
    workflow.add_node(generate_query_or_respond)
    workflow.add_node("retrieve", ToolNode([retrieve_blog_posts]))
    workflow.add_node(rewrite_question)
    workflow.add_node(generate_answer)
    workflow.add_edge(START, "generate_query_or_respond")
    workflow.add_conditional_edges("generate_query_or_respond", tools_condition, {"tools": "retrieve", END: END})
    workflow.add_conditional_edges("retrieve", grade_documents)
    workflow.add_edge("generate_answer", END)
    workflow.add_edge("rewrite_question", "generate_query_or_respond")
    graph = workflow.compile()
    q = QUESTIONS[4]
    ids = kb.top2[REWRITTEN]
    assert not set(ids) & set(kb.top2[q])  # the rewrite retrieves other documents
    env.ask(Expect(q, ids, kb.answer(ids), dropped=len(kb.top2[q])),
            lambda: graph.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))


def lc_structured_citations(env: Env, kb: KB) -> None:
    """LangChain's citations how-to ("How to get a RAG application to add citations",
    python.langchain.com/docs/how_to/qa_citations), tool-calling / structured output: documents numbered
    ``Source ID: i`` by ``format_docs_with_id``, ``llm.with_structured_output(CitedAnswer)`` in the
    ``generate`` node of a retrieve -> generate ``StateGraph``. The answer is the ``answer`` field, the
    cited ids are citations."""
    from langchain_core.prompts import ChatPromptTemplate
    from langgraph.graph import START, StateGraph

    vector_store, llm = kb.store, env.llm()

    def format_docs_with_id(docs: list[Document]) -> str:
        formatted = [f"Source ID: {i}\nArticle Snippet: {doc.page_content}" for i, doc in enumerate(docs)]
        return "\n\n" + "\n\n".join(formatted)

    prompt = ChatPromptTemplate.from_messages([
        ("system", "You're a helpful AI assistant. Given a user question and some article snippets, answer the "
                   "user question. If none of the articles answer the question, just say you don't know.\n\n"
                   "Here are the articles: {context}"),
        ("human", "{question}")])

    def retrieve(state: CitedState) -> dict[str, Any]:
        return {"context": vector_store.similarity_search(state["question"], k=2)}

    def generate(state: CitedState) -> dict[str, Any]:
        messages = prompt.invoke({"question": state["question"], "context": format_docs_with_id(state["context"])})
        return {"answer": llm.with_structured_output(CitedAnswer).invoke(messages)}

    graph_builder = StateGraph(CitedState).add_sequence([retrieve, generate])
    graph_builder.add_edge(START, "retrieve")
    graph = graph_builder.compile()
    q = QUESTIONS[5]
    ids = kb.top2[q]
    out = env.ask(Expect(q, ids, kb.answer(ids), citations=ids[:1]),
                  lambda: graph.invoke({"question": q}, config=env.config()))
    assert out["answer"].answer == kb.answer(ids) and out["answer"].citations == [0]


def lc_failing_model(env: Env, kb: KB, app_model: AppModel) -> None:
    """The RAG chain of the "Build a RAG agent" page with a model endpoint that answers HTTP 500: the run
    raises into the app as it would without ragaudit, the turn is traced with the error, not judged, and
    counted in ``stats()["unjudged_failed"]``."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelRequest, dynamic_prompt

    vector_store = kb.store

    @dynamic_prompt
    def prompt_with_context(request: ModelRequest) -> str:
        docs = vector_store.similarity_search(request.state["messages"][-1].text)
        return "Use the following context in your response:\n\n" + "\n\n".join(d.page_content for d in docs)

    agent = create_agent(env.llm(), tools=[], middleware=[prompt_with_context])
    q = QUESTIONS[6]
    app_model.fail = True
    try:
        with pytest.raises(Exception, match=r"500|Internal|error"):
            env.ask(Expect(q, [], "", unjudged="failed"),
                    lambda: agent.invoke({"messages": [{"role": "user", "content": q}]}, config=env.config()))
    finally:
        app_model.fail = False


# --- create_agent as LangChain 1.x writes it (issue 45): the apps are tests/worker/apps/langchain_agents.py,
# shared with the worker's end-to-end test (tests/worker/test_e2e_agents.py), which runs them as processes
# exported through OpenInference.


def _run_agent(env: Env, build: Callable[[Any, Any], agents.AgentApp], kb: KB, *expects: Expect) -> None:
    app = build(env.llm(), kb.store)
    assert [e.question for e in expects] == app.questions
    for expect in expects:
        read = env.ask(expect, lambda q=expect.question: app.ask(q, env.config()))
        assert read == expect.answer  # the reply the user reads is the answer judged


def lc_agent_tool_strategy(env: Env, kb: KB) -> None:
    """LangChain "Structured output" (docs.langchain.com/oss/python/langchain/structured-output, "Tool
    calling strategy"): ``create_agent(model, tools=[retrieve_context], response_format=ToolStrategy(
    PolicyAnswer))``. The user reads ``result["structured_response"].answer``; the last AI message is a tool
    call with empty content."""
    q = QUESTIONS[7]
    _run_agent(env, agents.tool_strategy, kb, Expect(q, kb.top2[q], kb.answer(kb.top2[q])))


def lc_agent_provider_strategy(env: Env, kb: KB) -> None:
    """The same page, "Provider strategy": ``response_format=ProviderStrategy(PolicyAnswer)``; the model
    answers with the schema's JSON, the user reads its ``answer`` field (not the JSON text)."""
    q = QUESTIONS[8]
    _run_agent(env, agents.provider_strategy, kb, Expect(q, kb.top2[q], kb.answer(kb.top2[q])))


def lc_agent_return_direct(env: Env, kb: KB) -> None:
    """LangChain "Tools" (docs.langchain.com/oss/python/langchain/tools), ``@tool(return_direct=True)`` around
    the LCEL RAG chain of "Build a RAG app": the agent stops on the tool's output, the reply; the final model
    call is the chain's, inside the tool."""
    q = QUESTIONS[9]
    _run_agent(env, agents.return_direct, kb, Expect(q, kb.top2[q], kb.answer(kb.top2[q])))


def lc_agent_trimmed_tool(env: Env, kb: KB) -> None:
    """LangChain "Custom middleware" (docs.langchain.com/oss/python/langchain/middleware/custom, wrap-style
    hooks): a ``@wrap_tool_call`` that cuts tool results to ``MAX_TOOL_CHARS``. The model saw the first
    document whole and the second cut inside a word: the judge sees the same, the second ``truncated``."""
    q = QUESTIONS[10]
    ids = kb.top2[q]
    _run_agent(env, agents.trimmed_tool, kb, Expect(q, ids, kb.answer(ids)))
    cut = part_in(TEXTS[ids[1]], env.final_texts[-1])
    assert TEXTS[ids[0]] in env.final_texts[-1] and 24 < len(cut) < len(TEXTS[ids[1]])


def lc_agent_memory(env: Env, kb: KB) -> None:
    """LangChain "Short-term memory" (docs.langchain.com/oss/python/langchain/short-term-memory): the RAG
    agent with ``checkpointer=InMemorySaver()``; a follow-up on the same ``thread_id`` is answered from the
    conversation, with no retrieval of its own: its evidence is the first message's documents, with their
    ids, and never the agent's system prompt."""
    q = QUESTIONS[11]
    ids = kb.top2[q]
    _run_agent(env, agents.memory, kb, Expect(q, ids, kb.answer(ids)), Expect(agents.FOLLOW_UP, ids, kb.answer(ids)))
    assert agents.SYSTEM_PROMPT in env.final_texts[-1]


STYLES = [lc_rag_agent, lc_rag_chain_dynamic_prompt, lc_rag_chain_before_model, lc_langgraph_retrieve_generate,
          lc_agentic_rag, lc_structured_citations, lc_failing_model, lc_agent_tool_strategy,
          lc_agent_provider_strategy, lc_agent_return_direct, lc_agent_trimmed_tool, lc_agent_memory]


class _Handler:
    """The handler of one mode: a per-call handler passed in ``config``, or the ``instrument()`` one."""

    def __init__(self, mode: str, auditor: Auditor) -> None:
        from ragaudit.integrations.langchain import RagAuditCallbackHandler, instrument

        self.mode = mode
        self.handler = RagAuditCallbackHandler(auditor=auditor) if mode == "handler" else instrument(auditor=auditor)

    def force_flush(self, timeout_s: float) -> bool:
        return self.handler.force_flush(timeout_s)


@pytest.mark.parametrize("mode", ["handler", "instrument"])
@pytest.mark.parametrize("style", STYLES, ids=lambda f: f.__name__)
def test_langchain_doc_style(style: Callable[..., None], mode: str, app_server: LLMServer, app_model: AppModel,
                             judge_server: LLMServer, kb: KB, memory_exporter: InMemorySpanExporter,
                             memory_provider: TracerProvider) -> None:
    from ragaudit.integrations.langchain import uninstrument

    app_server.reset()
    judge_server.reset()
    app_model.graded.clear()
    env = Env(app_server, judge_server, memory_exporter, memory_provider, lambda a: _Handler(mode, a))
    try:
        if style is lc_failing_model:
            style(env, kb, app_model)
        else:
            style(env, kb)
        env.check()
    finally:
        if mode == "instrument":
            uninstrument()
        env.auditor.shutdown()

