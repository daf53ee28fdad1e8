"""Reading LlamaIndex values: span names, questions, answers, nodes, messages, usage.

Everything here reads objects LlamaIndex made (duck-typed where LlamaIndex has several shapes
for one thing) and never raises for a value of an unexpected type: it answers None or empty.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import AsyncStreamingResponse, PydanticResponse, StreamingResponse
from llama_index.core.chat_engine.types import BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.workflow import StopEvent, Workflow

from ...content import exception_type_name
from ...records import RetrievedDoc
from .._common import retrieved_doc
from ..steps import ModelToolCall

__all__ = [
    "CHAT_WRITE_METHODS",
    "FRAMEWORK",
    "JUDGE_CONTEXT_KEY",
    "LEGACY_ROOT",
    "STREAM_KEY",
    "UNSET",
    "WORKFLOW_QUERY_KEYS",
    "agent_name",
    "answer_from",
    "convert_nodes",
    "error_text",
    "messages_of",
    "messages_text",
    "model_from",
    "output_of",
    "provider_from",
    "provider_of",
    "query_from_args",
    "query_text",
    "retriever_name",
    "snapshot",
    "source_nodes_of",
    "span_name",
    "stop_result",
    "structured_from",
    "template_variables",
    "tool_calls_of",
    "turn_kind",
    "usage_of",
    "user_message_of",
]

FRAMEWORK = "llamaindex"
JUDGE_CONTEXT_KEY = "ragaudit.judge_context"
"""Turn metadata key: ``"source_nodes"`` when the turn's documents (what the judge saw) are the
nodes the answer was built from (after node post-processors and rerankers), ``"retrieval"`` when
they are the retriever's output (a retriever called on its own, or an engine reporting no sources)."""
STREAM_KEY = "ragaudit.stream"
"""Turn metadata key of a streamed answer: ``"consumed"``, ``"abandoned"`` (dropped by its consumer
before the end; the answer is the text received so far) or ``"error"``."""

_QUERY_METHODS = frozenset({"query", "aquery"})
_CHAT_METHODS = frozenset({"chat", "achat", "stream_chat", "astream_chat"})
_RETRIEVE_METHODS = frozenset({"retrieve", "aretrieve"})
CHAT_WRITE_METHODS = frozenset({"write_response_to_history", "awrite_response_to_history"})
WORKFLOW_QUERY_KEYS = ("query", "user_msg", "input", "question")
"""The ``StartEvent`` fields a workflow's question is read from, in this order (after a configured key)."""
_QUERY_ARGS = ("str_or_query_bundle", "message", "query_bundle", "query", "query_str")
UNSET: Any = object()
LEGACY_ROOT = "root"  # CallbackManager's BASE_TRACE_EVENT: the parent of a trace's first event
_UUID_SUFFIX = 37  # "-" + str(uuid4()) at the end of a dispatcher span id



def error_text(error: BaseException | str) -> str:
    return error if isinstance(error, str) else f"{exception_type_name(error)}: {error}"


def span_name(span_id: str) -> str:
    """``"RetrieverQueryEngine.query"`` from the dispatcher's ``"RetrieverQueryEngine.query-<uuid4>"``."""
    if len(span_id) > _UUID_SUFFIX and span_id[-_UUID_SUFFIX] == "-":
        return span_id[:-_UUID_SUFFIX]
    return span_id.partition("-")[0]


_AGENT_CLASSES = frozenset({"BaseWorkflowAgent", "AgentWorkflow"})
_AGENT_TYPES: dict[type, bool] = {}


def is_agent(instance: object) -> bool:
    """Whether *instance* is a LlamaIndex workflow agent (``FunctionAgent``, ``ReActAgent``,
    ``CodeActAgent``, ``AgentWorkflow``), without importing the agent package."""
    kind = type(instance)
    found = _AGENT_TYPES.get(kind)
    if found is None:
        found = _AGENT_TYPES[kind] = any(
            base.__name__ in _AGENT_CLASSES and base.__module__.startswith("llama_index.core.agent")
            for base in kind.__mro__)
    return found


def turn_kind(name: str, instance: object) -> str | None:
    if instance is None:
        return None
    method = name.rpartition(".")[2]
    if method == "run" and isinstance(instance, Workflow):
        return "agent" if is_agent(instance) else "workflow"
    if method in _QUERY_METHODS and isinstance(instance, BaseQueryEngine):
        return "query"
    if method in _CHAT_METHODS and isinstance(instance, BaseChatEngine):
        return "chat"
    if method in _RETRIEVE_METHODS and isinstance(instance, BaseRetriever):
        return "retrieve"
    return None


def agent_name(agent: object) -> str | None:
    """The name an app gave its agent (``FunctionAgent(name=...)``; an ``AgentWorkflow``'s root
    agent), None when it has none."""
    name = getattr(agent, "name", None)
    if not isinstance(name, str) or not name:
        name = getattr(agent, "root_agent", None)
    return name if isinstance(name, str) and name else None


def retriever_name(retriever: object) -> str:
    """The name of a retrieval span's source: the vector store a vector-index retriever searches
    (``ChromaVectorStore`` -> ``Chroma``, as LangChain names it), else the retriever's class."""
    store = getattr(retriever, "_vector_store", None)
    if store is None:
        return type(retriever).__name__
    name = type(store).__name__
    short = name[: -len("VectorStore")] if name.endswith("VectorStore") else name
    return name if short in ("", "Base", "Simple") else short


_PROVIDERS: dict[type, str] = {}


def provider_of(llm: object) -> str:
    """The provider of an LLM from its integration package: ``llama_index.llms.openai`` ->
    ``"openai"``; for LLMs defined elsewhere (``MockLLM``, an application's own) its class name in
    lower case, as LangChain's ``ls_provider`` names a model class of its own (a chat span's
    ``gen_ai.provider.name`` is required: every path sets one)."""
    llm_type = type(llm)
    if llm_type not in _PROVIDERS:
        parts = llm_type.__module__.split(".")
        _PROVIDERS[llm_type] = (parts[2] if len(parts) > 2 and parts[:2] == ["llama_index", "llms"]
                                else llm_type.__name__.lower())
    return _PROVIDERS[llm_type]  # type: ignore[return-value]


def provider_from(model_dict: object) -> str | None:
    """The provider of the LLM an event's ``model_dict`` (``llm.to_dict()``) describes, from its
    ``class_name`` (``"openai_llm"`` -> ``"openai"``): for the paths that never see the LLM object
    (the legacy callback manager, events without a span)."""
    name = model_dict.get("class_name") if isinstance(model_dict, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    name = name.lower()
    return name[: -len("_llm")] if name.endswith("_llm") and len(name) > 4 else name


def query_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    query_str = getattr(value, "query_str", None)  # QueryBundle
    if isinstance(query_str, str):
        return query_str
    content = getattr(value, "content", None)  # ChatMessage
    return content if isinstance(content, str) else None


def user_message_of(start_event: object, keys: Sequence[str] = WORKFLOW_QUERY_KEYS) -> str | None:
    """The user's message of a workflow's (or a workflow agent's) start event: the first of *keys*
    it holds as text (a string, a ``ChatMessage``, a ``QueryBundle``), else the last user message of
    its ``chat_history``."""
    get = getattr(start_event, "get", None)  # a StartEvent is dict-like: its fields are the run's kwargs
    for key in keys:
        text = query_text(get(key) if callable(get) else getattr(start_event, key, None))
        if text:
            return text
    for role, content in reversed(messages_of(getattr(start_event, "chat_history", None))):
        if role == "user":
            return content
    return None


def query_from_args(bound_args: object, keys: Sequence[str] = WORKFLOW_QUERY_KEYS) -> str | None:
    """The question of a root call from its arguments; for a workflow run, from its start event
    (*keys*, see `user_message_of`)."""
    arguments = getattr(bound_args, "arguments", None)
    if not isinstance(arguments, Mapping):
        return None
    if "start_event" in arguments:  # a workflow's or a workflow agent's run
        start_event = arguments["start_event"]
        if start_event is None and isinstance(arguments.get("kwargs"), Mapping):
            start_event = arguments["kwargs"]  # Workflow.run(**kwargs) of llama-index-core < 0.13
        return user_message_of(start_event, keys)
    for key in _QUERY_ARGS:
        if key in arguments:
            found = query_text(arguments[key])
            if found is not None:
                return found
    for value in arguments.values():
        found = query_text(value)
        if found is not None:
            return found
    return None


def stop_result(result: object) -> object:
    """What a workflow run returned: its ``StopEvent``'s result (text, a ``Response``, a stream)."""
    return result.result if isinstance(result, StopEvent) else result


def answer_from(response: object) -> str | None:
    """The answer text of an engine's return value (``Response``, ``AgentChatResponse``, a finished
    ``StreamingAgentChatResponse``, ``PydanticResponse``, a string); None for anything else."""
    if response is None or isinstance(response, list):
        return None
    if isinstance(response, str):
        return response
    agent_output = getattr(response, "result", None)  # an agent workflow's StopEvent
    reply = getattr(agent_output, "response", None)
    if reply is not None and hasattr(reply, "role"):  # AgentOutput.response, a ChatMessage
        content = getattr(reply, "content", None)
        return content if isinstance(content, str) else ""
    if isinstance(response, StreamingResponse):
        return response.response_txt
    if isinstance(response, AsyncStreamingResponse):
        return response.response_txt
    if isinstance(response, StreamingAgentChatResponse):
        return response.response or response.unformatted_response.strip() or None
    value = getattr(response, "response", None)
    if isinstance(value, str):
        return value
    if value is not None and callable(getattr(value, "model_dump_json", None)):  # PydanticResponse
        try:
            return str(value.model_dump_json())
        except Exception:
            return None
    return None


def structured_from(response: object) -> dict[str, Any] | None:
    """The structured answer in an engine's or agent's return value, as a dict: an agent's
    ``AgentOutput.structured_response`` (``output_cls=`` or ``structured_output_fn=``), a
    ``PydanticResponse``'s object (a query engine with ``output_cls``); None when there is none."""
    for holder in (getattr(response, "result", None), response):  # a workflow's StopEvent, or the output
        value = getattr(holder, "structured_response", None)
        if isinstance(value, Mapping):
            return {k: v for k, v in value.items() if isinstance(k, str)}
    if isinstance(response, PydanticResponse) and response.response is not None:
        try:
            dumped = response.response.model_dump(mode="json")
        except Exception:
            return None
        return dumped if isinstance(dumped, dict) else None
    return None


def source_nodes_of(response: object) -> list[object] | None:
    """The nodes *response* was built from; for a chat response whose own list is empty (the async
    streaming chat engines leave it so), those of the query results it carries as ``sources``."""
    nodes = getattr(response, "source_nodes", None)
    if not isinstance(nodes, list):
        return None
    if not nodes:
        for tool_output in getattr(response, "sources", None) or ():
            inner = getattr(getattr(tool_output, "raw_output", None), "source_nodes", None)
            if isinstance(inner, list):
                nodes = nodes + inner
    return nodes


def _finite_score(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def snapshot(nodes: object) -> list[tuple[Any, float | None]]:
    """``(node, score)`` pairs as they are now: a reranker may later rescore the same objects."""
    if not isinstance(nodes, (list, tuple)):
        return []
    return [(getattr(n, "node", n), _finite_score(getattr(n, "score", None))) for n in nodes]


def convert_nodes(pairs: Sequence[tuple[Any, float | None]]) -> tuple[RetrievedDoc, ...]:
    out = []
    for rank, (node, score) in enumerate(pairs, 1):
        try:
            content = node.get_content()
        except Exception:
            content = getattr(node, "text", None)
        metadata = getattr(node, "metadata", None)
        out.append(retrieved_doc(rank, getattr(node, "node_id", None), content,
                                 metadata if isinstance(metadata, Mapping) else {}, score))
    return tuple(out)


def model_from(model_dict: object) -> str | None:
    if not isinstance(model_dict, Mapping):
        return None
    for key in ("model", "model_name", "deployment_name", "class_name"):
        value = model_dict.get(key)
        if isinstance(value, str) and value and value != "unknown":
            return value
    return None


_ROLES = {"chatbot": "assistant", "model": "assistant", "function": "tool", "developer": "system"}


def messages_of(messages: object) -> tuple[tuple[str, str], ...]:
    """Chat messages as ``(role, content)`` pairs (user, assistant, system, tool)."""
    if not isinstance(messages, (list, tuple)):
        return ()
    out = []
    for message in messages:
        role = getattr(message, "role", "")
        role = str(getattr(role, "value", role))
        content = getattr(message, "content", None)
        out.append((_ROLES.get(role, role), content if isinstance(content, str) else ""))
    return tuple(out)


def messages_text(messages: object) -> str | None:
    if not isinstance(messages, (list, tuple)):
        return None
    lines = []
    for message in messages:
        role = getattr(message, "role", "")
        role = getattr(role, "value", role)
        content = getattr(message, "content", None)
        lines.append(f"{role}: {content if isinstance(content, str) else ''}")
    return "\n".join(lines)


def template_variables(template: object, arguments: object) -> dict[str, str]:
    """The text values a prompt template was filled with: its partial variables, then the call's
    arguments (``llm.predict(template, context_str=..., query_str=...)``)."""
    values: dict[str, str] = {}
    for source in (getattr(template, "kwargs", None), arguments):
        if isinstance(source, Mapping):
            values.update((k, v) for k, v in source.items()
                          if isinstance(k, str) and isinstance(v, str) and k not in _ANSWER_VARIABLES)
    return values


# A refine call's earlier answer: the model's own output, not context the answer can be faithful to.
_ANSWER_VARIABLES = frozenset({"existing_answer"})


def output_of(response: object) -> str | None:
    """The text of a ``ChatResponse`` or ``CompletionResponse``."""
    if response is None:
        return None
    message = getattr(response, "message", None)
    if message is not None:
        content = getattr(message, "content", None)
        return content if isinstance(content, str) else None
    text = getattr(response, "text", None)
    return text if isinstance(text, str) else None


def tool_calls_of(response: object) -> tuple[ModelToolCall, ...]:
    """The tool calls a ``ChatResponse``'s message asked for: its ``ToolCallBlock`` blocks (current
    LlamaIndex), else the OpenAI-style ``additional_kwargs["tool_calls"]``; arguments as JSON text."""
    message = getattr(response, "message", None)
    out = []
    for block in getattr(message, "blocks", None) or ():
        if getattr(block, "block_type", None) == "tool_call" and isinstance(getattr(block, "tool_name", None), str):
            kwargs = block.tool_kwargs
            text = kwargs if isinstance(kwargs, str) else json.dumps(kwargs, ensure_ascii=False, default=str)
            out.append(ModelToolCall(block.tool_name, block.tool_call_id, text))
    if out:
        return tuple(out)
    extra = getattr(message, "additional_kwargs", None)
    for call in (extra.get("tool_calls") if isinstance(extra, Mapping) else None) or ():
        function = call.get("function") if isinstance(call, Mapping) else getattr(call, "function", None)
        name = function.get("name") if isinstance(function, Mapping) else getattr(function, "name", None)
        arguments = (function.get("arguments") if isinstance(function, Mapping)
                     else getattr(function, "arguments", None))
        call_id = call.get("id") if isinstance(call, Mapping) else getattr(call, "id", None)
        if isinstance(name, str):
            out.append(ModelToolCall(name, call_id if isinstance(call_id, str) else None,
                                     arguments if isinstance(arguments, str) else None))
    return tuple(out)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_of(response: object) -> tuple[int | None, int | None]:
    """Input and output token counts a model reported: ``additional_kwargs`` (as the OpenAI
    integration sets them) or the raw response's ``usage``."""
    extra = getattr(response, "additional_kwargs", None)
    if isinstance(extra, Mapping):
        prompt = _int(extra.get("prompt_tokens", extra.get("input_tokens")))
        completion = _int(extra.get("completion_tokens", extra.get("output_tokens")))
        if prompt is not None or completion is not None:
            return prompt, completion
    raw = getattr(response, "raw", None)
    usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
    if usage is None:
        return None, None
    if isinstance(usage, Mapping):
        return (_int(usage.get("prompt_tokens", usage.get("input_tokens"))),
                _int(usage.get("completion_tokens", usage.get("output_tokens"))))
    return (_int(getattr(usage, "prompt_tokens", getattr(usage, "input_tokens", None))),
            _int(getattr(usage, "completion_tokens", getattr(usage, "output_tokens", None))))
