"""Conversations judged as a whole with real chat apps (issue 30).

Each app is written the way the framework's current docs write it, with the frameworks' real OpenAI
classes against the loopback chat-completions server (the app's model) and a real Chroma collection:

- LangChain ``RunnableWithMessageHistory`` over a history-aware retrieval chain (API reference
  "RunnableWithMessageHistory", langchain_core.runnables.history; how-to "How to add message history");
- a LangGraph checkpointer agent: ``langchain.agents.create_agent`` with ``checkpointer=InMemorySaver()``
  and ``config={"configurable": {"thread_id": ...}}`` (docs "Short-term memory", LangChain v1);
- a LlamaIndex chat engine: ``CondensePlusContextChatEngine.from_defaults`` (docs "Chat Engine -
  Condense Plus Context Mode"), the session named with ``instrument_tags``.

The judge is ``ChatRagJudge`` against a second loopback server whose rule reads the prompts it gets
(:mod:`tests.support.sessions`): sentence verdicts against the context shown, and for a session the
contradictions, repeats and resolution it finds in the conversation shown. The app's model says
"Refunds take 14 days." at turn 2 and, planted, "Refunds take 30 days." at turn 4. The session clock is
injected: the session is judged when the test moves it past ``session_idle_s``, never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragaudit import Auditor, ChatRagJudge, Sessions
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer, Reply, Scripted, ToolCall, is_session_request
from tests.support.sessions import Clock, Kept, judge_rule

pytestmark = pytest.mark.timeout(180)

MODEL = "gpt-4o-mini"
DOCS = {"refunds": "Refunds take 14 days. Refunds go back to the original card.",
        "exchanges": "Exchanges are free within 30 days. Exchanges need the receipt.",
        "shipping": "Shipping takes 3 days. Express shipping takes 1 day."}
PLANTED = "Refunds take 30 days."
NO_ANSWER = "I don't know."
# A 4-turn conversation: turn 4 asks turn 2's question again and gets a contradicting answer.
CONVERSATION = ["Do exchanges cost anything?", "How long do refunds take?", "How long does shipping take?",
                "And refunds, how long again?"]
ANSWERS = ["Exchanges are free within 30 days.", "Refunds take 14 days.", "Shipping takes 3 days.", PLANTED]
UNRESOLVED = ["Can I return opened software?", "Can I return opened software?"]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def app_rule(body: dict[str, Any]) -> Scripted:
    """The app's model: rewrites a follow-up as itself, calls the first tool offered with the user's
    words, answers "again" with the planted contradiction, software with "I don't know", else with the
    first sentence of the first document in this turn's context (system messages, the last user
    message and what follows it; never the history)."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    question = _text(messages[last_user])
    joined = "\n".join(_text(m) for m in messages)
    if "standalone question" in joined.lower():
        return question.rsplit("Follow Up Input:", 1)[-1].split("\n")[0].strip() or question
    tools = body.get("tools") or ()
    if tools and messages[-1].get("role") == "user":
        function = tools[0]["function"]
        return Reply(tool_calls=[ToolCall(function["name"], {next(iter(function["parameters"]["properties"])):
                                                             question})])
    if "again" in question:
        return PLANTED
    if "software" in question:
        return NO_ANSWER
    shown = "\n".join(_text(m) for i, m in enumerate(messages) if i >= last_user or m.get("role") == "system")
    found = sorted((shown.find(text), text) for text in DOCS.values() if text in shown)
    return found[0][1].split(". ")[0].rstrip(".") + "." if found else NO_ANSWER



@pytest.fixture(scope="module")
def app_llm() -> Iterator[LLMServer]:
    with LLMServer(app_rule) as srv:
        yield srv


@pytest.fixture
def judge_llm() -> Iterator[LLMServer]:
    with LLMServer(judge_rule) as srv:
        yield srv


@pytest.fixture
def run(judge_llm: LLMServer) -> Iterator[Callable[..., Any]]:
    """``run(app, **session_options)``: *app(auditor, ask)* runs the conversations; the result has the
    session records, the stats and the number of session judge calls at the judge's server."""
    made: list[Auditor] = []

    def go(app: Callable[[Auditor], None], **options: Any) -> dict[str, Any]:
        clock, kept = Clock(), Kept()
        auditor = Auditor(open_judge(ChatRagJudge, judge_llm), audit_log=None, handle_signals=False, exporters=[kept],
                          sessions=Sessions(clock=clock, session_idle_s=300, **options))
        made.append(auditor)
        app(auditor)
        assert auditor.force_flush(30)
        assert auditor.check_sessions() == 0 and kept.sessions == []  # not idle yet
        clock.now += 300
        due = auditor.check_sessions()
        assert auditor.force_flush(30)
        return {"sessions": {r.session_id: r for r in kept.sessions}, "due": due, "stats": auditor.stats(),
                "calls": sum(1 for r in judge_llm.requests if is_session_request(r.body))}

    yield go
    for auditor in made:
        auditor.shutdown(10)


def check_contradiction(result: dict[str, Any], session_id: str) -> None:
    record = result["sessions"][session_id]
    j = record.judgement
    assert [t.answer for t in record.request.turns] == ANSWERS
    [pair] = j.contradictions
    assert (pair.first_turn, pair.first_sentence, pair.first_text) == (2, 1, "Refunds take 14 days.")
    assert (pair.second_turn, pair.second_sentence, pair.second_text) == (4, 1, PLANTED)
    assert j.resolved == "yes" and j.resolved_turn == 4
    assert j.groundedness == 0.75  # turn 4's sentence is unsupported by its own evidence: 3 of 4
    assert j.turns == 4 and not j.partial


def check_unresolved(result: dict[str, Any], session_id: str) -> None:
    j = result["sessions"][session_id].judgement
    assert j.resolved == "no" and j.resolved_turn is None and j.contradictions == ()
    assert [(r.turn, r.repeats) for r in j.repeated] == [(2, 1)]


# --- LangChain: RunnableWithMessageHistory -----------------------------------------------------------


def chat_openai(srv: LLMServer) -> Any:
    import httpx
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=10,
                      http_async_client=httpx.AsyncClient(timeout=10))


def lc_retriever() -> Any:
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.documents import Document

    from tests.support.langchain_support import HashEmbeddings

    store = Chroma(client=chromadb.EphemeralClient(), collection_name=f"s-{uuid.uuid4().hex[:10]}",
                   embedding_function=HashEmbeddings())
    store.add_documents([Document(page_content=text, id=doc_id) for doc_id, text in DOCS.items()],
                        ids=list(DOCS))
    return store.as_retriever(search_kwargs={"k": 1})


def test_langchain_runnable_with_message_history(app_llm: LLMServer, run: Callable[..., Any]) -> None:
    from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    def app(auditor: Auditor) -> None:
        llm = chat_openai(app_llm)
        contextualize = ChatPromptTemplate.from_messages([
            ("system", "Given a chat history and the latest user question which might reference context in the "
                       "chat history, formulate a standalone question. Do NOT answer the question."),
            MessagesPlaceholder("chat_history"), ("human", "{input}")])
        qa = ChatPromptTemplate.from_messages([
            ("system", "Answer from the context.\n\n{context}"), MessagesPlaceholder("chat_history"),
            ("human", "{input}")])
        rag = create_retrieval_chain(create_history_aware_retriever(llm, lc_retriever(), contextualize),
                                     create_stuff_documents_chain(llm, qa))
        store: dict[str, InMemoryChatMessageHistory] = {}

        def get_session_history(session_id: str) -> InMemoryChatMessageHistory:
            return store.setdefault(session_id, InMemoryChatMessageHistory())

        chain = RunnableWithMessageHistory(rag, get_session_history, input_messages_key="input",
                                           history_messages_key="chat_history", output_messages_key="answer")
        handler = RagAuditCallbackHandler(auditor=auditor)
        for session_id, questions in (("lc-good", CONVERSATION), ("lc-bad", UNRESOLVED)):
            for question in questions:
                # configurable: the message history's key; metadata: the session the turns belong to
                # (as for Langfuse, whose LangChain docs put langfuse_session_id there too)
                chain.invoke({"input": question},
                             config={"configurable": {"session_id": session_id}, "callbacks": [handler],
                                     "metadata": {"session_id": session_id}})
        handler.force_flush()

    result = run(app)
    check_contradiction(result, "lc-good")
    check_unresolved(result, "lc-bad")
    assert result["due"] == 2 and result["calls"] == 2  # one judge call per session, at the server
    assert result["stats"]["sessions_judged"] == 2 and result["stats"]["judged"] == 6


# --- LangGraph: a checkpointer agent ----------------------------------------------------------------


def test_langgraph_checkpointer_agent(app_llm: LLMServer, run: Callable[..., Any]) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import create_retriever_tool
    from langgraph.checkpoint.memory import InMemorySaver

    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    def app(auditor: Auditor) -> None:
        tool = create_retriever_tool(lc_retriever(), "search_policies", "Search the store's policies.")
        agent = create_agent(chat_openai(app_llm), [tool], checkpointer=InMemorySaver())
        handler = RagAuditCallbackHandler(auditor=auditor)
        for thread_id, questions in (("lg-good", CONVERSATION), ("lg-bad", UNRESOLVED)):
            config = {"configurable": {"thread_id": thread_id}, "callbacks": [handler]}
            for question in questions:
                agent.invoke({"messages": [{"role": "user", "content": question}]}, config=config)
        handler.force_flush()

    result = run(app)
    check_contradiction(result, "lg-good")
    check_unresolved(result, "lg-bad")
    assert result["calls"] == 2


# --- LlamaIndex: a chat engine ----------------------------------------------------------------------


@pytest.fixture
def li_index() -> Iterator[Any]:
    from llama_index.core import Settings
    from llama_index.core.schema import TextNode

    from tests.support.llamaindex_support import HashEmbedding, build_index

    saved = Settings._llm, Settings._embed_model
    Settings.embed_model = HashEmbedding()
    yield build_index([TextNode(id_=doc_id, text=text) for doc_id, text in DOCS.items()])
    Settings._llm, Settings._embed_model = saved


def li_conversations(app_llm: LLMServer, index: Any, auditor: Auditor) -> None:
    from llama_index.core.chat_engine import CondensePlusContextChatEngine
    from llama_index.core.instrumentation.dispatcher import instrument_tags
    from llama_index.llms.openai import OpenAI

    from ragaudit.integrations import llamaindex

    installed = llamaindex.instrument(auditor=auditor)
    try:
        llm = OpenAI(model=MODEL, api_base=app_llm.base_url, api_key="sk-test", max_retries=0, timeout=10)
        for session_id, questions in (("li-good", CONVERSATION), ("li-bad", UNRESOLVED)):
            engine = CondensePlusContextChatEngine.from_defaults(index.as_retriever(similarity_top_k=1), llm=llm)
            for question in questions:
                with instrument_tags({"session_id": session_id}):
                    engine.chat(question)
        installed.force_flush()
    finally:
        llamaindex.uninstrument()


def test_llamaindex_chat_engine(app_llm: LLMServer, li_index: Any, run: Callable[..., Any]) -> None:
    result = run(lambda auditor: li_conversations(app_llm, li_index, auditor))
    check_contradiction(result, "li-good")
    check_unresolved(result, "li-bad")
    assert result["calls"] == 2


def test_llamaindex_chat_engine_over_the_turn_cap_is_partial(app_llm: LLMServer, li_index: Any,
                                                              run: Callable[..., Any]) -> None:
    result = run(lambda auditor: li_conversations(app_llm, li_index, auditor), max_session_turns=3)
    j = result["sessions"]["li-good"].judgement
    # the oldest turn went: judged on turns 2-4 (numbered 1-3 now), partial, and it says what it missed
    assert j.partial and j.missed == {"evicted": 1} and j.turns == 3
    [pair] = j.contradictions
    assert (pair.first_text, pair.second_text) == ("Refunds take 14 days.", PLANTED)
    assert result["stats"]["session_turns_evicted"] == 1 and result["stats"]["sessions_partial"] == 1


def test_async_chat_turns_share_the_session(app_llm: LLMServer, li_index: Any, run: Callable[..., Any]) -> None:
    """``achat`` on one event loop (a web app's handler): the same session, judged once."""
    from llama_index.core.chat_engine import CondensePlusContextChatEngine
    from llama_index.core.instrumentation.dispatcher import instrument_tags
    from llama_index.llms.openai import OpenAI

    from ragaudit.integrations import llamaindex

    def app(auditor: Auditor) -> None:
        installed = llamaindex.instrument(auditor=auditor)
        llm = OpenAI(model=MODEL, api_base=app_llm.base_url, api_key="sk-test", max_retries=0, timeout=10)
        engine = CondensePlusContextChatEngine.from_defaults(li_index.as_retriever(similarity_top_k=1), llm=llm)

        async def chat() -> None:
            for question in CONVERSATION:
                with instrument_tags({"session_id": "li-async"}):
                    await engine.achat(question)

        try:
            asyncio.run(chat())
            installed.force_flush()
        finally:
            llamaindex.uninstrument()

    result = run(app)
    check_contradiction(result, "li-async")
    assert result["calls"] == 1
