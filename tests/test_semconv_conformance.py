"""Every span and log record ragaudit writes, read against the convention packages (issue 28).

Five runs send their spans through the real OTLP/HTTP exporter to a real receiver
(:mod:`tests.support.otlp_receiver`): the demo (LangChain and LlamaIndex, lexical judge), an agent
(``langchain.agents.create_agent``, the LangGraph-built agent of LangChain's "Build a RAG agent" page,
docs.langchain.com/oss/python/langchain/rag, with the real ``ChatOpenAI`` against the loopback
chat-completions server), a LlamaIndex ``FunctionAgent`` (the real ``OpenAI`` LLM), a failing run
(the retriever raises) and an LLM-judged run (``ChatRagJudge`` against a second loopback server, with
:class:`EvaluationLogExporter` sending the ``gen_ai.evaluation.result`` log records to the same receiver).

Every ``gen_ai.*`` key must be a name of ``opentelemetry-semantic-conventions``' GenAI registry
(``_incubating.attributes.gen_ai_attributes``), or one of the evaluator names proposed in
semantic-conventions-genai PR #359 (listed below, the only exception); every OpenInference key a name
of ``openinference-semantic-conventions`` (flattened lists resolved by their index); each value of the
type the convention gives it; the required attributes present; span kinds and names as the
conventions say. The type tables are the conventions' own (``model/gen-ai/registry.yaml`` of
semantic-conventions-genai; OpenInference's ``spec/semantic_conventions.md``): the Python packages
ship names and enum values, not types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from openinference.semconv import trace as oi
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, opentracing_attributes
from opentelemetry.semconv.attributes import error_attributes

from ragaudit import Auditor
from ragaudit.integrations import closer_for
from ragaudit.judges import ChatRagJudge
from ragaudit.judges.lexical import LexicalJudge
from ragaudit.tracing import conventions as c
from ragaudit.tracing.evaluation_logs import EvaluationLogExporter
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer, Reply, ToolCall
from tests.support.otlp_receiver import OTLPReceiver

# --- the conventions ------------------------------------------------------------------------------

GEN_AI_NAMES = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
PROPOSED_PR_359 = {  # semantic-conventions-genai PR #359 (open): evaluator provenance
    "gen_ai.evaluation.evaluator.id", "gen_ai.evaluation.evaluator.version", "gen_ai.evaluation.evaluator.type",
    "gen_ai.evaluation.reference_set.id",
}
# registry.yaml types; "any" attributes go out as JSON strings (see tracing/spans.py for why)
STR, INT, FLOAT, JSON_TEXT = "string", "int", "double", "json"
GEN_AI_TYPES = {
    "gen_ai.operation.name": STR, "gen_ai.provider.name": STR, "gen_ai.request.model": STR,
    "gen_ai.response.model": STR, "gen_ai.response.id": STR, "gen_ai.usage.input_tokens": INT,
    "gen_ai.usage.output_tokens": INT, "gen_ai.conversation.id": STR, "gen_ai.agent.name": STR,
    "gen_ai.tool.name": STR, "gen_ai.tool.call.id": STR, "gen_ai.tool.call.arguments": JSON_TEXT,
    "gen_ai.tool.call.result": STR, "gen_ai.data_source.id": STR, "gen_ai.retrieval.query.text": STR,
    "gen_ai.retrieval.documents": JSON_TEXT, "gen_ai.output.messages": JSON_TEXT,
    "gen_ai.evaluation.name": STR, "gen_ai.evaluation.score.value": FLOAT, "gen_ai.evaluation.score.label": STR,
    "gen_ai.evaluation.explanation": STR, **dict.fromkeys(PROPOSED_PR_359, STR),
}
OPERATIONS = {v.value for v in gen_ai_attributes.GenAiOperationNameValues}
SPAN_KINDS = {v.value for v in oi.OpenInferenceSpanKindValues}
MIME_TYPES = {v.value for v in oi.OpenInferenceMimeTypeValues}
OI_SPAN_NAMES = {v for k, v in vars(oi.SpanAttributes).items() if k.isupper() and isinstance(v, str)}
OI_MESSAGE_NAMES = {v for k, v in vars(oi.MessageAttributes).items() if k.isupper()}
OI_DOCUMENT_NAMES = {v for k, v in vars(oi.DocumentAttributes).items() if k.isupper()}
OI_TOOL_CALL_NAMES = {v for k, v in vars(oi.ToolCallAttributes).items() if k.isupper()}
OI_TYPES = {  # spec/semantic_conventions.md
    "input.value": STR, "input.mime_type": STR, "output.value": STR, "output.mime_type": STR,
    "openinference.span.kind": STR, "llm.model_name": STR, "llm.provider": STR, "llm.token_count.prompt": INT,
    "llm.token_count.completion": INT, "llm.token_count.total": INT, "tool.name": STR, "session.id": STR,
    "user.id": STR, "metadata": JSON_TEXT, "message.role": STR, "message.content": STR,
    "tool_call.id": STR, "tool_call.function.name": STR, "tool_call.function.arguments": JSON_TEXT,
    "document.id": STR, "document.content": STR, "document.score": FLOAT, "document.metadata": JSON_TEXT,
}
OI_PREFIXES = ("openinference.", "input.", "output.", "llm.", "retrieval.", "tool.", "session.", "user.")
_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.\d+\.(message\..+)$")
_TOOL_CALL = re.compile(r"^llm\.(input|output)_messages\.\d+\.message\.tool_calls\.\d+\.(tool_call\..+)$")
_DOCUMENT = re.compile(r"^retrieval\.documents\.\d+\.(document\..+)$")
CLIENT, INTERNAL = 3, 1  # OTLP span kinds


def oi_leaf(key: str) -> str | None:
    """The OpenInference name *key* is an instance of, or None when it is none."""
    for pattern, names in ((_TOOL_CALL, OI_TOOL_CALL_NAMES), (_MESSAGE, OI_MESSAGE_NAMES),
                           (_DOCUMENT, OI_DOCUMENT_NAMES)):
        match = pattern.match(key)
        if match:
            leaf = match.group(match.lastindex or 0)
            return leaf if leaf in names else None
    return key if key in OI_SPAN_NAMES else None


def type_ok(value: Any, kind: str) -> bool:
    if kind == STR:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == FLOAT:
        return isinstance(value, float)
    try:
        json.loads(value)
    except (TypeError, ValueError):
        return False
    return True


def problems_of_attributes(where: str, attrs: dict[str, Any]) -> list[str]:
    """Names and types of every gen_ai.* and OpenInference key of *attrs*."""
    out = []
    for key, value in attrs.items():
        if key.startswith("gen_ai."):
            if key not in GEN_AI_NAMES and key not in PROPOSED_PR_359:
                out.append(f"{where}: {key} is no GenAI attribute")
            elif key not in GEN_AI_TYPES:
                out.append(f"{where}: {key} has no type in this test's table")
            elif not type_ok(value, GEN_AI_TYPES[key]):
                out.append(f"{where}: {key}={value!r} is not {GEN_AI_TYPES[key]}")
        elif key.startswith(OI_PREFIXES) or key == oi.SpanAttributes.METADATA:
            leaf = oi_leaf(key)
            if leaf is None:
                out.append(f"{where}: {key} is no OpenInference attribute")
            elif leaf in OI_TYPES and not type_ok(value, OI_TYPES[leaf]):
                out.append(f"{where}: {key}={value!r} is not {OI_TYPES[leaf]}")
    out += [f"{where}: {problem}" for problem in _schema_problems(attrs)]
    if attrs.get(c.GEN_AI_OPERATION_NAME, next(iter(OPERATIONS))) not in OPERATIONS:
        out.append(f"{where}: operation {attrs[c.GEN_AI_OPERATION_NAME]!r} is not the registry's")
    return out


def _schema_problems(attrs: dict[str, Any]) -> list[str]:
    """The JSON schemas of docs/gen-ai: retrieval documents (``id`` string, ``score`` a number when
    present, never null) and output messages (``role``, ``parts`` with a ``type`` each)."""
    out = []
    if c.GEN_AI_RETRIEVAL_DOCUMENTS in attrs:
        for doc in json.loads(attrs[c.GEN_AI_RETRIEVAL_DOCUMENTS]):
            if not isinstance(doc.get("id"), str) or ("score" in doc and not isinstance(doc["score"], (int, float))):
                out.append(f"retrieval document {doc} breaks the schema")
    if c.GEN_AI_OUTPUT_MESSAGES in attrs:
        for message in json.loads(attrs[c.GEN_AI_OUTPUT_MESSAGES]):
            if not isinstance(message.get("role"), str) or not all(
                    isinstance(part.get("type"), str) for part in message.get("parts", [None])):
                out.append(f"output message {message} breaks the schema")
    return out


def problems_of_span(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """Everything the conventions say of one span that it does not do."""
    name, attrs, kind = span["name"], span["attributes"], span["kind"]
    where = f"{name} ({span['span_id']})"
    out = problems_of_attributes(where, attrs)
    for event in span["events"]:
        out += problems_of_attributes(f"{where} event {event['name']}", event["attributes"])
        if event["name"] == c.GEN_AI_EVALUATION_RESULT and c.GEN_AI_EVALUATION_NAME not in event["attributes"]:
            out.append(f"{where}: an evaluation event without gen_ai.evaluation.name (required)")
    # OpenInference: a kind from the enum on every span; no mime type without its value
    if attrs.get(oi.SpanAttributes.OPENINFERENCE_SPAN_KIND) not in SPAN_KINDS:
        out.append(f"{where}: openinference.span.kind {attrs.get('openinference.span.kind')!r}")
    for side in ("input", "output"):
        if f"{side}.mime_type" in attrs:
            if f"{side}.value" not in attrs:
                out.append(f"{where}: {side}.mime_type without {side}.value")
            if attrs[f"{side}.mime_type"] not in MIME_TYPES:
                out.append(f"{where}: {side}.mime_type {attrs[f'{side}.mime_type']!r}")
    if span["status"]["code"] == 2 and error_attributes.ERROR_TYPE not in attrs:
        out.append(f"{where}: an error span without error.type (conditionally required)")
    operation = attrs.get(c.GEN_AI_OPERATION_NAME)
    if operation is not None:
        out += _operation_rules(where, name, kind, attrs, operation)
    if attrs.get(oi.SpanAttributes.OPENINFERENCE_SPAN_KIND) == "EVALUATOR":
        out += _evaluator_rules(where, span, by_id)
    return out


def _operation_rules(where: str, name: str, kind: int, attrs: dict[str, Any], operation: str) -> list[str]:
    """Required attributes, span kind and span name per GenAI operation (gen-ai-spans.md,
    gen-ai-agent-spans.md)."""
    out = []
    required = {"chat": (c.GEN_AI_PROVIDER_NAME,), "invoke_agent": (c.GEN_AI_PROVIDER_NAME,),
                "execute_tool": (c.GEN_AI_TOOL_NAME,), "retrieval": ()}[operation]
    out += [f"{where}: {key} missing (required for {operation})" for key in required if key not in attrs]
    kinds = {"chat": {CLIENT}, "retrieval": {CLIENT}, "execute_tool": {INTERNAL},
             "invoke_agent": {INTERNAL, CLIENT}}[operation]
    if kind not in kinds:
        out.append(f"{where}: span kind {kind} for {operation}")
    subject = {"chat": c.GEN_AI_REQUEST_MODEL, "retrieval": c.GEN_AI_DATA_SOURCE_ID,
               "execute_tool": c.GEN_AI_TOOL_NAME, "invoke_agent": c.GEN_AI_AGENT_NAME}[operation]
    expected = f"{operation} {attrs[subject]}" if subject in attrs else operation
    # The one exception: an LLM judge's span keeps its name, ragaudit.judge (an EVALUATOR span).
    if name != expected and not (name == c.SPAN_JUDGE and operation == "chat"):
        out.append(f"{where}: named {name!r}, the convention says {expected!r}")
    return out


def _evaluator_rules(where: str, span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """OpenInference: an evaluation written after its subject ended links to it, exactly once."""
    turn_id = span["attributes"].get(c.ATTR_TURN_ID)
    turns = [s for s in by_id.values() if s["attributes"].get(c.ATTR_TURN_ID) == turn_id and s is not span
             and s["attributes"].get(oi.SpanAttributes.OPENINFERENCE_SPAN_KIND) in ("CHAIN", "AGENT")]
    if not turns or span["start_time_ns"] < turns[0]["end_time_ns"]:
        return []
    links = [(link["trace_id"], link["span_id"]) for link in span["links"]]
    if links != [(turns[0]["trace_id"], turns[0]["span_id"])]:
        return [f"{where}: written after its turn ended, links {links} (one link to the turn required)"]
    return []


# --- the runs -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as rx:
        yield rx


def otlp_provider(rx: OTLPReceiver, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=rx.traces_url)))
    return provider


def spans_of(rx: OTLPReceiver, service: str, count: int) -> list[dict[str, Any]]:
    spans = rx.wait_for_spans(count, timeout=30, predicate=lambda s: s["resource"].get("service.name") == service)
    return [s for s in spans if s["resource"].get("service.name") == service]


def finish(auditor: Auditor, provider: TracerProvider) -> None:
    try:
        assert closer_for(auditor).force_flush(timeout_s=60)  # top down: the turns closed, then judged
    finally:
        auditor.shutdown(timeout_s=30)
        provider.shutdown()


def demo_spans(rx: OTLPReceiver) -> list[dict[str, Any]]:
    from ragaudit.demo import run as demo

    provider = otlp_provider(rx, "conformance-demo")
    auditor = Auditor(LexicalJudge(), audit_log=None, tracer_provider=provider)
    result = demo.DemoResult("langchain", "stand-in", "lexical")
    try:
        demo._run_langchain(demo.QUESTIONS[:2], auditor, provider, False, result)
        demo._run_llamaindex(demo.QUESTIONS[:2], auditor, provider, False, result)
    finally:
        finish(auditor, provider)
    return spans_of(rx, "conformance-demo", 4 * 4)  # per question: turn, retrieval, chat, judge


def agent_spans(rx: OTLPReceiver, llm: LLMServer) -> list[dict[str, Any]]:
    """LangChain's RAG agent (docs.langchain.com/oss/python/langchain/rag): a content-and-artifact
    retrieval tool and ``create_agent(model, tools, system_prompt=prompt)``."""
    from langchain.agents import create_agent
    from langchain.tools import tool
    from langchain_openai import ChatOpenAI

    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support.langchain_support import KB
    from tests.support.topics import QUESTIONS

    vector_store = KB().store

    @tool(response_format="content_and_artifact")
    def retrieve_context(query: str) -> Any:
        """Retrieve information to help answer a query."""
        retrieved_docs = vector_store.similarity_search(query, k=2)
        serialized = "\n\n".join(f"Source: {doc.metadata}\nContent: {doc.page_content}" for doc in retrieved_docs)
        return serialized, retrieved_docs

    question = QUESTIONS[0]
    llm.enqueue(Reply(tool_calls=[ToolCall("retrieve_context", {"query": question}, id="call_1")]),
                Reply(content="The refund window is 30 days [1]."))
    model = ChatOpenAI(model="gpt-4o-mini", base_url=llm.base_url, api_key="sk-test", max_retries=0)
    agent = create_agent(model, [retrieve_context],
                         system_prompt="You have access to a tool that retrieves context from a blog post. "
                                       "Use the tool to help answer user queries.")
    provider = otlp_provider(rx, "conformance-agent")
    auditor = Auditor(LexicalJudge(), audit_log=None, tracer_provider=provider)
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    try:
        agent.invoke({"messages": [{"role": "user", "content": question}]},
                     config={"callbacks": [handler], "configurable": {"thread_id": "conv-7"},
                             "metadata": {"thread_id": "conv-7"}})
    finally:
        finish(auditor, provider)
    # turn, two chat calls, the tool, the judge
    return spans_of(rx, "conformance-agent", 5)


def llamaindex_agent_spans(rx: OTLPReceiver, llm: LLMServer) -> list[dict[str, Any]]:
    """LlamaIndex's agent page (docs.llamaindex.ai, "Building an agent"): a plain function as a tool,
    ``FunctionAgent(tools=[...], llm=OpenAI(...), system_prompt=...)``, ``await agent.run(user_msg=...)``."""
    import asyncio

    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai import OpenAI

    from ragaudit.integrations import llamaindex

    def search_policies(query: str) -> str:
        """Search the shop's return policies."""
        return "Items can be returned within 30 days of purchase for a full refund."

    question = "How long do I have to return an item?"
    llm.enqueue(Reply(tool_calls=[ToolCall("search_policies", {"query": question}, id="call_2")]),
                Reply(content="Items can be returned within 30 days of purchase for a full refund."))
    agent = FunctionAgent(tools=[search_policies], system_prompt="Answer from the shop's policies.",
                          llm=OpenAI(model="gpt-4o-mini", api_base=llm.base_url, api_key="sk-test", max_retries=0))
    provider = otlp_provider(rx, "conformance-li-agent")
    auditor = Auditor(LexicalJudge(), audit_log=None, tracer_provider=provider)
    llamaindex.instrument(auditor=auditor, tracer_provider=provider)
    async def main() -> str:
        return str(await agent.run(user_msg=question))

    try:
        asyncio.run(main())
    finally:
        llamaindex.uninstrument()
        finish(auditor, provider)
    return spans_of(rx, "conformance-li-agent", 4)  # the turn, two chat calls, the tool (and the judge)


def failing_spans(rx: OTLPReceiver) -> list[dict[str, Any]]:
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support.langchain_support import KB, rag_chain

    provider = otlp_provider(rx, "conformance-failing")
    auditor = Auditor(LexicalJudge(), audit_log=None, tracer_provider=provider)
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    try:
        with pytest.raises(RuntimeError, match="vector index unavailable"):
            rag_chain(KB().retriever).invoke("FAIL_RETRIEVER what is the refund window?",
                                             config={"callbacks": [handler]})
    finally:
        finish(auditor, provider)
    return spans_of(rx, "conformance-failing", 2)  # the turn and its failed retrieval


def judged_spans(rx: OTLPReceiver, judge_srv: LLMServer) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support.langchain_support import KB, rag_chain
    from tests.support.topics import QUESTIONS

    provider = otlp_provider(rx, "conformance-judged")
    judge = open_judge(ChatRagJudge, judge_srv, protocol="three-score")
    logs = EvaluationLogExporter(endpoint=rx.endpoint, resource={"service.name": "conformance-judged"})
    auditor = Auditor(judge, audit_log=None, tracer_provider=provider, exporters=[logs])
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    try:
        rag_chain(KB().retriever).invoke(QUESTIONS[0], config={"callbacks": [handler],
                                                               "metadata": {"session_id": "sess-1",
                                                                            c.REFERENCE_SET_METADATA_KEY: "golden-1"}})
    finally:
        finish(auditor, provider)
    records = rx.wait_for_logs(3, timeout=30, predicate=lambda r: r["resource"].get("service.name")
                               == "conformance-judged")
    return spans_of(rx, "conformance-judged", 4), records


@pytest.fixture(scope="module")
def runs(receiver: OTLPReceiver) -> dict[str, Any]:
    with LLMServer() as llm, LLMServer() as judge_srv:
        spans, records = judged_spans(receiver, judge_srv)
        return {"demo": demo_spans(receiver), "agent": agent_spans(receiver, llm),
                "llamaindex-agent": llamaindex_agent_spans(receiver, llm),
                "failing": failing_spans(receiver), "judged": spans, "logs": records}


# --- the checks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("run", ["demo", "agent", "llamaindex-agent", "failing", "judged"])
def test_every_span_follows_the_conventions(runs: dict[str, Any], run: str) -> None:
    spans = runs[run]
    by_id = {s["span_id"]: s for s in spans}
    problems = [p for s in spans for p in problems_of_span(s, by_id)]
    assert problems == []


def test_the_runs_show_what_each_rule_is_about(runs: dict[str, Any]) -> None:
    """The checks above would pass on runs that lack the spans they are about: each is here."""
    def ops(run: str) -> list[str]:
        return [s["attributes"].get(c.GEN_AI_OPERATION_NAME) for s in runs[run]]

    assert {"chat", "retrieval"} <= set(ops("demo"))
    agent = runs["agent"]
    (turn,) = [s for s in agent if s["attributes"].get(c.GEN_AI_OPERATION_NAME) == "invoke_agent"]
    assert turn["name"] == f"invoke_agent {turn['attributes'][c.GEN_AI_AGENT_NAME]}"
    chats = [s for s in agent if s["name"].startswith("chat ")]
    assert len(chats) == 2 and all(s["attributes"][c.GEN_AI_CONVERSATION_ID] == "conv-7" for s in chats)
    # the model's first reply was a tool call: recorded with its call, not as empty content
    calls = [s["attributes"] for s in chats if s["attributes"].get(c.output_tool_call_keys(0, 0)[1])]
    assert len(calls) == 1 and calls[0][c.output_tool_call_keys(0, 0)[0]] == "call_1"
    reply = json.loads(calls[0][c.GEN_AI_OUTPUT_MESSAGES])
    assert reply[0]["parts"][-1] == {"type": "tool_call", "id": "call_1", "name": "retrieve_context",
                                     "arguments": {"query": reply[0]["parts"][-1]["arguments"]["query"]}}
    assert "execute_tool" in ops("agent")
    li_turn = [s for s in runs["llamaindex-agent"] if s["attributes"].get(c.GEN_AI_OPERATION_NAME) == "invoke_agent"]
    assert len(li_turn) == 1 and li_turn[0]["attributes"][c.GEN_AI_PROVIDER_NAME] == "openai"
    assert li_turn[0]["name"] == "invoke_agent Agent"  # FunctionAgent's default name
    # one chat span per model call: the agent's astream_chat_with_tools and the astream_chat its stream
    # makes lazily, under the agent's span, are one call (two requests reached the server)
    li_chats = [s for s in runs["llamaindex-agent"] if s["name"].startswith(c.SPAN_CHAT)]
    assert len(li_chats) == 2 and all(s["attributes"][c.GEN_AI_PROVIDER_NAME] == "openai" for s in li_chats)
    assert any(s["attributes"].get(c.output_tool_call_keys(0, 0)[1]) == "search_policies" for s in li_chats)
    failed = [s for s in runs["failing"] if s["status"]["code"] == 2]
    assert failed and all(s["attributes"][error_attributes.ERROR_TYPE] == "RuntimeError" for s in failed)
    (judge,) = [s for s in runs["judged"] if s["name"] == c.SPAN_JUDGE]
    ja = judge["attributes"]
    assert judge["kind"] == CLIENT and ja[c.GEN_AI_OPERATION_NAME] == "chat"
    assert ja[c.GEN_AI_PROVIDER_NAME] == "openai"  # a loopback OpenAI-compatible endpoint
    assert ja[c.GEN_AI_EVALUATION_EVALUATOR_TYPE] == "llm_judge"
    assert ja[c.GEN_AI_EVALUATION_EVALUATOR_ID] == f"{ja[c.ATTR_JUDGE_NAME]}/judge-model"
    assert ja[c.GEN_AI_EVALUATION_EVALUATOR_VERSION] == (
        f"{ja[c.ATTR_JUDGE_PROTOCOL_VERSION]}+{ja[c.ATTR_JUDGE_PROMPT_HASH]}")
    assert [link["attributes"].get(opentracing_attributes.OPENTRACING_REF_TYPE) for link in judge["links"]] == [
        "child_of"]
    # LangChain's Chroma retriever gives no scores: its documents have none (no null, no made-up number)
    (unscored,) = [s for s in runs["judged"] if s["attributes"].get(c.GEN_AI_OPERATION_NAME) == "retrieval"]
    documents = json.loads(unscored["attributes"][c.GEN_AI_RETRIEVAL_DOCUMENTS])
    assert documents and all("score" not in d and isinstance(d["id"], str) for d in documents)
    assert unscored["attributes"][c.OUTPUT_VALUE] == unscored["attributes"][c.GEN_AI_RETRIEVAL_DOCUMENTS]
    retrievals = [s for s in runs["demo"] if s["attributes"].get(c.GEN_AI_OPERATION_NAME) == "retrieval"]
    assert retrievals and all(s["kind"] == CLIENT for s in retrievals)
    for s in retrievals:
        assert all(d.get("score", 0.0) is not None for d in json.loads(s["attributes"][c.GEN_AI_RETRIEVAL_DOCUMENTS]))


def test_evaluation_log_records_reach_the_receiver_and_follow_the_conventions(runs: dict[str, Any]) -> None:
    records, spans = runs["logs"], runs["judged"]
    (turn,) = [s for s in spans if s["name"] == c.SPAN_TURN]
    assert [r["attributes"][c.GEN_AI_EVALUATION_NAME] for r in records] == [
        "faithfulness", "context_relevance", "answer_relevance"]
    problems = []
    for record in records:
        assert record["event_name"] == c.GEN_AI_EVALUATION_RESULT
        # on the evaluated span's context (the turn: this source names no other operation)
        assert (record["trace_id"], record["span_id"]) == (turn["trace_id"], turn["span_id"])
        problems += problems_of_attributes("log record", record["attributes"])
        assert record["attributes"][c.GEN_AI_EVALUATION_EVALUATOR_TYPE] == "llm_judge"
        assert record["attributes"][c.GEN_AI_EVALUATION_REFERENCE_SET_ID] == "golden-1"
        assert isinstance(record["attributes"][c.GEN_AI_EVALUATION_SCORE_VALUE], float)
    assert problems == []


def test_the_checker_finds_what_breaks_the_conventions() -> None:
    """The rules fail where they should (a test that cannot fail proves nothing)."""
    span = {"name": "chat", "span_id": "1", "kind": INTERNAL, "status": {"code": 2}, "events": [], "links": [],
            "attributes": {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.made.up": 1,
                           "openinference.span.kind": "LLM", "output.mime_type": "text/plain",
                           "llm.output_messages.0.message.bogus": "x", "gen_ai.usage.input_tokens": "12",
                           "gen_ai.output.messages": '[{"role": "assistant", "parts": [{}]}]'}}
    found = "\n".join(problems_of_span(span, {}))
    for expected in ("gen_ai.made.up is no GenAI attribute", "message.bogus is no OpenInference",
                     "gen_ai.usage.input_tokens='12' is not int", "output.mime_type without output.value",
                     "without error.type", "gen_ai.provider.name missing", "span kind 1 for chat",
                     "named 'chat', the convention says 'chat m'", "breaks the schema"):
        assert expected in found


def test_a_worker_reads_the_tool_calls_back(runs: dict[str, Any]) -> None:
    """What we write is what an OTLP source reads (``ragaudit worker``): the reply's tool calls from
    OpenInference's ``message.tool_calls`` and from GenAI ``tool_call`` parts alike."""
    from ragaudit.integrations.otlp._conventions import read_span
    from ragaudit.integrations.otlp._decode import SpanData
    from ragaudit.integrations.steps import ModelToolCall

    (chat,) = [s for s in runs["agent"] if c.GEN_AI_OUTPUT_MESSAGES in s["attributes"]]
    expected = json.loads(chat["attributes"][c.output_tool_call_keys(0, 0)[2]])
    for drop in (("gen_ai.",), ("llm.", "openinference.")):  # each convention on its own
        attrs = {k: v for k, v in chat["attributes"].items() if not k.startswith(drop) or k == c.GEN_AI_OPERATION_NAME}
        span = SpanData(chat["trace_id"], chat["span_id"], chat["parent_span_id"], chat["name"], chat["kind"],
                        chat["start_time_ns"], chat["end_time_ns"], attrs)
        (call,) = read_span(span).tool_calls
        assert (call.name, call.call_id) == ("retrieve_context", "call_1")
        assert isinstance(call, ModelToolCall) and json.loads(call.arguments or "") == expected
