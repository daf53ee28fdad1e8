"""The convention readers, on spans made with the real OTel SDK and decoded as the worker decodes them."""

from __future__ import annotations

import json

from ragaudit.integrations import TurnAssembler
from ragaudit.integrations.otlp._buffer import PendingTrace
from ragaudit.integrations.otlp._decode import decode_traces
from ragaudit.integrations.otlp._turns import turns_of
from ragaudit.integrations.steps import RunKind, dispatch
from ragaudit.records import RagTurn
from tests.worker.spans import ANSWER, DOCS, QUESTION, SpanMaker, encode, genai_trace, rag_trace


def _turns(spans: list) -> list[tuple[RagTurn, RunKind]]:  # type: ignore[type-arg]
    """The turns the worker makes of *spans*: decoded, read, and built by the assembler."""
    decoded, rejected = decode_traces(encode(spans), json_body=False)
    assert rejected == 0
    pending = PendingTrace(decoded[0].trace_id, 0.0, 0.0, decoded, has_root=True)
    out = []
    for found in turns_of(pending, "ragaudit-worker").turns:
        assembler = TurnAssembler(framework=found.convention)
        assert all(dispatch(assembler, step) for step in found.steps)
        out.append((assembler.build(), assembler.kind))
    return out


def test_openinference_session_and_user() -> None:
    maker = SpanMaker()
    spans = rag_trace(maker, session="sess-1")
    [(turn, _)] = _turns(spans)
    assert turn.metadata["session_id"] == "sess-1" and turn.query == QUESTION and turn.answer == ANSWER


def test_genai_conversation_is_the_session() -> None:
    [(turn, kind)] = _turns(genai_trace(SpanMaker()))
    assert turn.metadata["session_id"] == "conv-7" and kind is RunKind.AGENT
    # the agent's own name (gen_ai.agent.name), not its span's "invoke_agent support"
    assert turn.metadata["run_name"] == "support"
    assert (turn.query, turn.answer) == (QUESTION, ANSWER)
    assert [d.id for d in turn.documents] == [d for d, _ in DOCS]


def test_openllmetry_association_properties_and_ids_from_serialised_documents() -> None:
    maker = SpanMaker()
    t = maker.tracer
    assoc = "traceloop.association.properties."
    docs = [{"page_content": text, "metadata": {"source": "kb.md"}} for _, text in DOCS]
    serialised = [{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
                   "kwargs": {"id": doc_id, "page_content": text, "metadata": {}}} for doc_id, text in DOCS]
    with t.start_as_current_span("RunnableSequence.workflow", attributes={
            "traceloop.span.kind": "workflow", assoc + "session_id": "s-9", assoc + "user_id": "u-3",
            "traceloop.entity.input": json.dumps({"inputs": QUESTION}),
            "traceloop.entity.output": json.dumps({"outputs": ANSWER})}):
        with t.start_as_current_span("VectorStoreRetriever", attributes={
                "traceloop.span.kind": "task", "gen_ai.operation.name": "vector_db_retrieve",
                "traceloop.entity.input": json.dumps({"query": QUESTION}),
                "traceloop.entity.output": json.dumps({"documents": docs, "count": 2})}):
            pass
        with t.start_as_current_span("format_docs.task", attributes={
                "traceloop.span.kind": "task", "traceloop.entity.input": json.dumps({"inputs": serialised})}):
            pass
        with t.start_as_current_span("ChatOpenAI.chat", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": "\n\n".join(text for _, text in DOCS) + "\n" + QUESTION,
                "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": ANSWER}):
            pass
    [(turn, _)] = _turns(maker.take())
    assert (turn.metadata["session_id"], turn.metadata["user_id"]) == ("s-9", "u-3")
    assert (turn.query, turn.answer) == (QUESTION, ANSWER)
    assert [d.id for d in turn.documents] == [d for d, _ in DOCS]
    [generation] = turn.generations
    assert generation.output == ANSWER and generation.messages[0][0] == "user"


def test_two_chains_under_one_request_span_are_two_turns() -> None:
    maker = SpanMaker()
    with maker.tracer.start_as_current_span("POST /chat"):  # a web framework's server span, no convention
        first = rag_trace(maker, question="What about warranty?")
        second = rag_trace(maker, question="What about shipping?")
    turns = _turns([*first, *second, *maker.take()])
    assert [t.query for t, _ in turns] == ["What about warranty?", "What about shipping?"]


def test_openinference_langchain_agent_state_structured_response_and_tool_artifact() -> None:
    # issue 45: OpenInference serialises a create_agent's state and a tool's ToolMessage as LangChain's
    # messages_to_dict writes them ({"type": ..., "data": {...}}); the documents are the ToolMessage's
    # artifact, the answer the state's structured_response
    maker = SpanMaker()
    t = maker.tracer
    tool_text = "\n\n".join(f"Content: {text}" for _, text in DOCS)
    artifact = [{"id": doc_id, "metadata": {}, "page_content": text, "type": "Document"} for doc_id, text in DOCS]

    def message(kind: str, content: str, **extra: object) -> dict[str, object]:
        return {"type": kind, "data": {"content": content, "type": kind, **extra}}

    state = {"messages": [message("human", QUESTION), message("ai", ""), message("tool", tool_text), message("ai", ""),
                          message("tool", "Returning structured response: ...")],
             "structured_response": {"answer": ANSWER, "confidence": 1.0}}
    with t.start_as_current_span("LangGraph", attributes={
            "openinference.span.kind": "CHAIN", "input.value": json.dumps({"messages": [
                {"role": "user", "content": QUESTION}]}), "output.value": json.dumps(state)}):
        with t.start_as_current_span("retrieve_context", attributes={
                "openinference.span.kind": "TOOL", "tool.name": "retrieve_context", "input.value": QUESTION,
                "output.value": json.dumps(message("tool", tool_text, tool_call_id="c1", artifact=artifact))}):
            pass
        with t.start_as_current_span("ChatOpenAI", attributes={
                "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": QUESTION, "llm.input_messages.1.message.role": "tool",
                "llm.input_messages.1.message.content": tool_text, "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "PolicyAnswer",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": json.dumps(
                    {"answer": ANSWER, "confidence": 1.0})}):
            pass
    [(turn, _)] = _turns(maker.take())
    assert (turn.query, turn.answer) == (QUESTION, ANSWER)
    assert [(d.id, d.content) for d in turn.documents] == list(DOCS)
