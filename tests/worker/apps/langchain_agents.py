"""LangChain 1.x agents as its current docs write them (``langchain.agents.create_agent``), with no
ragaudit code: shared by the app matrix (``tests/test_app_matrix_agents.py``, in process, under
ragaudit's callback handler) and the worker's end-to-end test (run as a process of its own, exported
through OpenInference's ``LangChainInstrumentor`` to ``ragaudit worker``).

Every style is a RAG agent over the topic knowledge base (a real Chroma collection behind
``langchain_chroma.Chroma``) with the real ``ChatOpenAI`` against the loopback chat-completions server
(``OPENAI_BASE_URL``); the server's rule (:func:`agent_reply`) plays the model:

* ``tool_strategy``: ``response_format=ToolStrategy(PolicyAnswer)`` (docs.langchain.com/oss/python/
  langchain/structured-output, "Tool calling strategy"): the model answers by calling the schema's tool,
  the user reads ``result["structured_response"].answer``.
* ``provider_strategy``: ``response_format=ProviderStrategy(PolicyAnswer)`` (the same page, "Provider
  strategy"): the model answers with the schema's JSON, the user reads the ``answer`` field.
* ``return_direct``: a ``@tool(return_direct=True)`` whose body is the LCEL RAG chain
  (docs.langchain.com/oss/python/langchain/tools, ``return_direct``; the chain of "Build a RAG app"):
  the agent stops on the tool's output, which is the reply.
* ``trimmed_tool``: a ``@wrap_tool_call`` middleware that cuts every tool result to
  :data:`MAX_TOOL_CHARS` characters (docs.langchain.com/oss/python/langchain/middleware/custom,
  "Wrap-style hooks", ``wrap_tool_call``): the model sees the first document whole, the second in part.
* ``memory``: the RAG agent of "Build a RAG agent" with ``checkpointer=InMemorySaver()``
  (docs.langchain.com/oss/python/langchain/short-term-memory): a first question retrieves, a follow-up on
  the same ``thread_id`` is answered from the conversation, with no retrieval of its own.

Usage (the worker's test): ``python -m tests.worker.apps.langchain_agents STYLE``: runs the style's
messages, prints one JSON line per user message, {question, answer}; spans go to
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from tests.worker.apps.kb import DOCUMENTS, QUESTIONS, HashEmbeddings, answer_for

__all__ = ["FOLLOW_UP", "MAX_TOOL_CHARS", "SCHEMA", "STYLES", "SYSTEM_PROMPT", "AgentApp", "PolicyAnswer",
           "agent_reply", "make_store"]

MODEL = "gpt-4o-mini"
SCHEMA = "PolicyAnswer"
MAX_TOOL_CHARS = 260
"""What the ``trimmed_tool`` middleware keeps of a tool result."""
FOLLOW_UP = "Could you repeat that?"
"""The ``memory`` style's second message: the model answers it from the conversation."""
SYSTEM_PROMPT = ("Answer questions about the store's policies. Use the retrieve_context tool to look up the "
                 "policy documents before you answer, and answer in one sentence.")
_TEXTS = [text for _, text, _ in DOCUMENTS]


class PolicyAnswer(BaseModel):
    """An answer about the store's policies."""

    answer: str = Field(description="The answer to the user's question, from the retrieved documents.")
    confidence: float = Field(description="How sure the answer is, from 0 to 1.")


def make_store() -> Any:
    """The topic documents in a fresh in-process Chroma collection (``langchain_chroma.Chroma``)."""
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(collection_name=f"agents-{uuid.uuid4().hex[:8]}", embedding_function=HashEmbeddings(),
                   client=chromadb.EphemeralClient())
    store.add_texts([t for _, t, _ in DOCUMENTS], metadatas=[m for _, _, m in DOCUMENTS],
                    ids=[i for i, _, _ in DOCUMENTS])
    return store


def _retrieve_tool(store: Any) -> Any:
    """The "Build a RAG agent" page's tool (docs.langchain.com/oss/python/langchain/rag)."""
    from langchain.tools import tool

    @tool(response_format="content_and_artifact")
    def retrieve_context(query: str) -> Any:
        """Retrieve information to help answer a query."""
        retrieved_docs = store.similarity_search(query, k=2)
        serialized = "\n\n".join(f"Source: {doc.metadata}\nContent: {doc.page_content}" for doc in retrieved_docs)
        return serialized, retrieved_docs

    return retrieve_context


@dataclass
class AgentApp:
    """One style: the agent, the user's messages in order, what the user reads of a result, and the run's
    config (``memory``: the thread the checkpointer keeps)."""

    agent: Any
    questions: list[str]
    read: Callable[[Any], str]
    config: dict[str, Any] = field(default_factory=dict)

    def ask(self, question: str, config: Mapping[str, Any]) -> str:
        """Send one user message (with *config*'s callbacks) and return the reply the user reads."""
        result = self.agent.invoke({"messages": [{"role": "user", "content": question}]},
                                   config={**config, **self.config})
        return self.read(result)


def _structured_answer(result: Any) -> str:
    return str(result["structured_response"].answer)


def _last_message(result: Any) -> str:
    return str(result["messages"][-1].content)


# --- the styles: each builds its AgentApp from (llm, store) ------------------------------------------------


def tool_strategy(llm: Any, store: Any) -> AgentApp:
    from langchain.agents import create_agent
    from langchain.agents.structured_output import ToolStrategy

    agent = create_agent(llm, tools=[_retrieve_tool(store)], system_prompt=SYSTEM_PROMPT,
                         response_format=ToolStrategy(PolicyAnswer))
    return AgentApp(agent, [QUESTIONS[7]], _structured_answer)


def provider_strategy(llm: Any, store: Any) -> AgentApp:
    from langchain.agents import create_agent
    from langchain.agents.structured_output import ProviderStrategy

    agent = create_agent(llm, tools=[_retrieve_tool(store)], system_prompt=SYSTEM_PROMPT,
                         response_format=ProviderStrategy(PolicyAnswer))
    return AgentApp(agent, [QUESTIONS[8]], _structured_answer)


def return_direct(llm: Any, store: Any) -> AgentApp:
    from langchain.agents import create_agent
    from langchain.tools import tool
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    retriever = store.as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])

    def format_docs(docs: list[Any]) -> str:
        return "\n\n".join(doc.page_content for doc in docs)

    rag_chain = ({"context": retriever | format_docs, "question": RunnablePassthrough()}
                 | prompt | llm | StrOutputParser())

    @tool(return_direct=True)
    def answer_policy_question(question: str) -> str:
        """Answer a question about the store's policies from its documents."""
        return rag_chain.invoke(question)

    agent = create_agent(llm, tools=[answer_policy_question], system_prompt=SYSTEM_PROMPT)
    return AgentApp(agent, [QUESTIONS[9]], _last_message)


def trimmed_tool(llm: Any, store: Any) -> AgentApp:
    from langchain.agents import create_agent
    from langchain.agents.middleware import wrap_tool_call
    from langchain_core.messages import ToolMessage

    @wrap_tool_call
    def limit_tool_output(request: Any, handler: Callable[[Any], Any]) -> Any:
        """Keep tool results within the model's context budget."""
        result = handler(request)
        if isinstance(result, ToolMessage) and len(result.text) > MAX_TOOL_CHARS:
            return result.model_copy(update={"content": result.text[:MAX_TOOL_CHARS]})
        return result

    agent = create_agent(llm, tools=[_retrieve_tool(store)], system_prompt=SYSTEM_PROMPT,
                         middleware=[limit_tool_output])
    return AgentApp(agent, [QUESTIONS[10]], _last_message)


def memory(llm: Any, store: Any) -> AgentApp:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    agent = create_agent(llm, tools=[_retrieve_tool(store)], system_prompt=SYSTEM_PROMPT,
                         checkpointer=InMemorySaver())
    return AgentApp(agent, [QUESTIONS[11], FOLLOW_UP], _last_message,
                    {"configurable": {"thread_id": uuid.uuid4().hex}})


STYLES: dict[str, Callable[[Any, Any], AgentApp]] = {
    "tool_strategy": tool_strategy, "provider_strategy": provider_strategy, "return_direct": return_direct,
    "trimmed_tool": trimmed_tool, "memory": memory,
}


# --- the model (the loopback server's rule; runs in the test's process) --------------------------------------


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content or "")


def _first_document(text: str) -> str | None:
    """The knowledge-base document that starts first in *text*, whole or cut (its first 24 characters)."""
    found = [(text.find(full[:24]), full) for full in _TEXTS if full[:24] in text]
    return min(found)[1] if found else None


_TOOL_ARG = re.compile(r"^[a-z_]+$")


def agent_reply(body: Mapping[str, Any]) -> Any:
    """What the agents' model says (None: not an agent's request): the first request of a run calls the
    first tool it is offered with the user's words (no tool when the conversation already holds a tool's
    result: a follow-up is answered from it); with the results in, it answers with the first sentence of
    the first document it was shown: through the ``PolicyAnswer`` tool (tool strategy), as its JSON
    (provider strategy), or as text."""
    from tests.support.llm_server import Reply, ToolCall

    messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
    tools = [t["function"] for t in body.get("tools") or () if isinstance(t, Mapping) and "function" in t]
    fmt = body.get("response_format")
    schema = fmt.get("json_schema", {}).get("name") if isinstance(fmt, Mapping) else None
    if not messages or (not tools and schema != SCHEMA):
        return None
    last = messages[-1]
    answered = any(m.get("role") == "tool" for m in messages)
    task_tools = [t for t in tools if t["name"] != SCHEMA]
    if last.get("role") == "user" and task_tools and not answered:
        function = task_tools[0]
        argument = next(iter(function["parameters"]["properties"]))
        assert _TOOL_ARG.match(argument)
        return Reply(tool_calls=[ToolCall(function["name"], {argument: _content(last)})])
    first = _first_document("\n".join(_content(m) for m in messages if m.get("role") == "tool"))
    answer = answer_for(first) if first else "I don't know."
    if schema == SCHEMA:
        return json.dumps({"answer": answer, "confidence": 1.0})
    if any(t["name"] == SCHEMA for t in tools):
        return Reply(tool_calls=[ToolCall(SCHEMA, {"answer": answer, "confidence": 1.0})])
    return answer


def main(argv: list[str] | None = None) -> int:
    from langchain_openai import ChatOpenAI
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from tests.worker.apps.tracing import tracer_provider

    parser = argparse.ArgumentParser()
    parser.add_argument("style", choices=sorted(STYLES))
    args = parser.parse_args(argv)
    provider = tracer_provider("lc-agents-app")
    LangChainInstrumentor().instrument(tracer_provider=provider)
    llm = ChatOpenAI(model=MODEL, temperature=0, max_retries=0, timeout=10)
    app = STYLES[args.style](llm, make_store())
    for question in app.questions:
        print(json.dumps({"question": question, "answer": app.ask(question, {})}), flush=True)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
