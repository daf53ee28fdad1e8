"""Reading LangChain's values: messages, questions, answers, documents, model results, tool outputs.

Pure functions over what LangChain hands a callback handler; the handler
([`ragaudit.integrations.langchain`][ragaudit.integrations.langchain]) calls the cheap ones on the host's thread and the
rest when a turn closes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard, TypeVar

from langchain_core.messages import BaseMessage, ToolMessage
from pydantic import BaseModel

from ..content import exception_type_name
from ..records import RetrievedDoc
from ._common import each_or_none, report_failure, retrieved_doc, score_from
from .steps import ModelToolCall

__all__ = [
    "RawDoc",
    "answer_from",
    "conversation_of",
    "convert_documents",
    "error_text",
    "history_of",
    "is_documents",
    "messages_of",
    "model_name",
    "prompt_messages",
    "prompt_text",
    "query_from",
    "read_llm_result",
    "read_tool_calls",
    "read_tool_output",
    "readable",
    "retriever_name",
    "snapshot_documents",
    "structured_data",
    "structured_of",
    "template_variables",
    "text_of",
]

_In = TypeVar("_In")
_Out = TypeVar("_Out")

_QUERY_KEYS = ("question", "input", "query", "q")
_ANSWER_KEYS = ("answer", "output", "result", "text")


# --- reading LangChain values ----------------------------------------------------------------------


def text_of(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return "" if content is None else str(content)


_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant",
          "AIMessageChunk": "assistant", "system": "system", "developer": "system", "tool": "tool",
          "function": "tool"}


def _message_of(item: object) -> tuple[str, str] | None:
    """``(role, text)`` of one message in any form LangChain accepts: a message object, a
    ``(role, content)`` tuple, a ``{"role" | "type": ..., "content": ...}`` dict, or a string (a
    user message); None for anything else. Roles: user, assistant, system, tool."""
    if isinstance(item, BaseMessage):
        return _ROLES.get(item.type, item.type), text_of(item.content)
    if isinstance(item, str):
        return "user", item
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
        return _ROLES.get(item[0], item[0]), text_of(item[1])
    if isinstance(item, Mapping):
        role = item.get("role", item.get("type"))
        if isinstance(role, str) and "content" in item:
            return _ROLES.get(role, role), text_of(item["content"])
    return None


def messages_of(value: object) -> list[tuple[str, str]] | None:
    """The conversation in *value* (a list of messages, or one message), or None when it is none."""
    if isinstance(value, (BaseMessage, str)):
        single = _message_of(value)
        return [single] if single is not None else None
    if not isinstance(value, (list, tuple)) or not value:
        return None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) \
            and not isinstance(value[1], (list, tuple, BaseMessage)):
        single = _message_of(value)  # one ("user", "text") pair
        return [single] if single is not None else None
    return each_or_none(value, _message_of)


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, without the ABC's check for what most callbacks carry (a dict, a
    string, None): it runs several times per callback on the host's thread."""
    kind = type(value)
    if kind is dict:
        return True
    if kind is str or value is None:
        return False
    return isinstance(value, Mapping)


def _last_user(messages: Sequence[tuple[str, str]] | None) -> str | None:
    if not messages:
        return None
    for role, text in reversed(messages):
        if role == "user":
            return text
    return messages[-1][1]


def query_from(inputs: object) -> str | None:
    """The question of a root run: a string, a message, a dict's question/input/query/q (else the
    user's last message in its ``messages``, else its first non-empty string), a list of messages.
    None for streaming placeholders (``{"input": ""}``)."""
    if isinstance(inputs, str):
        return inputs or None
    if isinstance(inputs, BaseMessage):
        return text_of(inputs.content) or None
    if is_mapping(inputs):
        for key in _QUERY_KEYS:
            value = inputs.get(key)
            if isinstance(value, str):
                if value:
                    return value
            elif value is not None:
                found = query_from(value)
                if found:
                    return found
        if "messages" in inputs:
            return _last_user(messages_of(inputs["messages"])) or None
        for value in inputs.values():
            if isinstance(value, str) and value:
                return value
        return None
    if isinstance(inputs, (list, tuple)) and inputs:
        return _last_user(messages_of(inputs)) or None
    return None


def conversation_of(inputs: object) -> object:
    """The raw message list of a conversation-shaped root input (``{"messages": [...]}`` as agents
    take, or a list of messages), read into messages when the turn closes; None otherwise."""
    if is_mapping(inputs):
        messages = inputs.get("messages")
        return messages if isinstance(messages, (list, tuple, str, BaseMessage)) else None
    if isinstance(inputs, list) and inputs and not isinstance(inputs[0], str):
        return inputs
    return None


def history_of(inputs: object) -> object:
    """A chain input's ``chat_history`` / ``history`` (what ``RunnableWithMessageHistory`` inserts
    and history-aware retrievers read), raw; None when there is none."""
    if is_mapping(inputs):
        for key in ("chat_history", "history"):
            value = inputs.get(key)
            if isinstance(value, (list, tuple)) and value:
                return value
    return None


def readable(read: Callable[[_In], _Out], inputs: _In, what: str) -> _Out | None:
    """``read(inputs)``, or None (reported) when *inputs* cannot be read: the run is still tracked."""
    try:
        return read(inputs)
    except Exception as exc:
        report_failure(f"reading a run's {what}", exc)
        return None


def answer_from(outputs: object) -> str | None:
    """The answer of a root run: a string, a message's text, a dict's answer/output/result/text, or
    the last AI message of a dict's ``messages`` (a LangGraph agent's state)."""
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, BaseMessage):
        return text_of(outputs.content)
    if isinstance(outputs, Mapping):
        for key in _ANSWER_KEYS:
            value = outputs.get(key)
            if isinstance(value, (str, BaseMessage)):
                return answer_from(value)
        messages = outputs.get("messages")
        if isinstance(messages, list):
            for message in reversed(messages):
                if isinstance(message, BaseMessage) and message.type == "ai":
                    return text_of(message.content)
    return None


def error_text(error: BaseException) -> str:
    try:
        return f"{exception_type_name(error)}: {error}"
    except Exception:  # an exception whose __str__ fails
        return f"{exception_type_name(error)} (its message could not be read)"


RawDoc = tuple[Any, Any, Mapping[str, Any]]  # (id, page_content, metadata copy) as the retriever returned it


def snapshot_documents(documents: Sequence[object] | None) -> tuple[RawDoc, ...]:
    """What a retriever returned, as it is now (a later step may edit a document's metadata); cheap,
    so it can run on the host's thread. `convert_documents` does the rest in the background."""
    out = []
    for doc in documents or ():
        metadata = getattr(doc, "metadata", None)
        out.append((getattr(doc, "id", None), getattr(doc, "page_content", None),
                    dict(metadata) if is_mapping(metadata) else {}))
    return tuple(out)


def convert_documents(documents: Sequence[RawDoc]) -> tuple[RetrievedDoc, ...]:
    return tuple(retrieved_doc(rank, doc_id, content, metadata, score_from(metadata))
                 for rank, (doc_id, content, metadata) in enumerate(documents, 1))


def is_documents(value: object) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        hasattr(item, "page_content") for item in value)


def read_tool_output(output: object, call_id: str | None, name: str
                      ) -> tuple[str | None, tuple[RetrievedDoc, ...] | None, str | None, str | None]:
    """``(text, documents, call id, error)`` of a tool's output: a ``ToolMessage`` (its content, its
    artifact's documents as ``create_retriever_tool`` returns them, its call id, an error status),
    a list of documents, or any value (its text)."""
    error = None
    artifact = None
    if isinstance(output, ToolMessage):
        call_id = output.tool_call_id or call_id
        artifact = output.artifact
        if output.status == "error":
            error = f"tool {name} failed"
        content: Any = output.content
    else:
        content = output
    documents = None
    for candidate in (artifact, content):
        if is_documents(candidate):
            documents = convert_documents(snapshot_documents(candidate))
            break
    if content is None:
        text = None
    elif is_documents(content):
        text = "\n\n".join(str(doc.page_content) for doc in content)
    elif isinstance(content, (str, list)):
        text = text_of(content)
    else:
        text = str(content)
    return text, documents, call_id, error


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_llm_result(response: object) -> tuple[str | None, int | None, int | None, str | None]:
    """``(output text, input tokens, output tokens, response model)`` of an ``LLMResult``."""
    text: str | None = None
    message = None
    generations = getattr(response, "generations", None)
    if generations and generations[0]:
        first = generations[0][0]
        message = getattr(first, "message", None)
        text = getattr(first, "text", None)
        if not text and isinstance(message, BaseMessage):
            text = text_of(message.content)
    llm_output = getattr(response, "llm_output", None)
    llm_output = llm_output if isinstance(llm_output, Mapping) else {}
    input_tokens = output_tokens = None
    usage = llm_output.get("token_usage") or llm_output.get("usage")
    if isinstance(usage, Mapping):
        input_tokens = _int_or_none(usage.get("prompt_tokens", usage.get("input_tokens")))
        output_tokens = _int_or_none(usage.get("completion_tokens", usage.get("output_tokens")))
    usage_metadata = getattr(message, "usage_metadata", None)
    if input_tokens is None and output_tokens is None and isinstance(usage_metadata, Mapping):
        input_tokens = _int_or_none(usage_metadata.get("input_tokens"))
        output_tokens = _int_or_none(usage_metadata.get("output_tokens"))
    model = llm_output.get("model_name") or llm_output.get("model")
    if not model:
        response_metadata = getattr(message, "response_metadata", None)
        if isinstance(response_metadata, Mapping):
            model = response_metadata.get("model_name") or response_metadata.get("model")
    return text if isinstance(text, str) else None, input_tokens, output_tokens, (
        model if isinstance(model, str) and model else None)


def read_tool_calls(response: object) -> tuple[ModelToolCall, ...]:
    """The tool calls the reply of an ``LLMResult`` asked for (``AIMessage.tool_calls``), arguments
    as JSON text."""
    generations = getattr(response, "generations", None)
    message = getattr(generations[0][0], "message", None) if generations and generations[0] else None
    calls = getattr(message, "tool_calls", None) if isinstance(message, BaseMessage) else None
    out = []
    for call in calls or ():
        if isinstance(call, Mapping) and isinstance(call.get("name"), str):
            call_id = call.get("id")
            out.append(ModelToolCall(call["name"], call_id if isinstance(call_id, str) else None,
                                     json.dumps(call.get("args") or {}, ensure_ascii=False, default=str)))
    return tuple(out)


def prompt_messages(prompt: object) -> tuple[tuple[str, str], ...]:
    """A chat model's input as ``(role, content)`` pairs (user, assistant, system, tool); () for a
    plain-text prompt."""
    if not isinstance(prompt, list):
        return ()
    return tuple((_ROLES.get(m.type, str(getattr(m, "role", m.type))), text_of(m.content))
                 for m in prompt if isinstance(m, BaseMessage))


def prompt_text(prompt: object) -> str | None:
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], str):
            return "\n".join(prompt)
        return "\n".join(f"{m.type}: {text_of(m.content)}" for m in prompt if isinstance(m, BaseMessage))
    return None


def retriever_name(serialized: object, metadata: Mapping[str, object] | None, name: object) -> str:
    if not isinstance(name, str) or not name:
        name = serialized.get("name") if is_mapping(serialized) else None
    store = metadata.get("ls_vector_store_provider") if metadata else None
    if isinstance(store, str) and store and (not name or name == "VectorStoreRetriever"):
        return store
    return name if isinstance(name, str) and name else "retriever"


def model_name(invocation_params: object, metadata: Mapping[str, object] | None) -> str | None:
    if is_mapping(invocation_params):
        for key in ("model", "model_name", "model_id", "deployment_name"):
            value = invocation_params.get(key)
            if isinstance(value, str) and value:
                return value
    value = metadata.get("ls_model_name") if metadata else None
    return value if isinstance(value, str) and value else None




def template_variables(inputs: object) -> dict[str, str]:
    """The values a prompt template run filled in, as text: strings as they are, a list of documents
    as their texts joined by blank lines (the join the assembler splits at); other values (a
    message list: the history) are left out."""
    if not isinstance(inputs, Mapping):
        return {}
    out: dict[str, str] = {}
    for key, value in inputs.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, str):
            out[key] = value
        elif is_documents(value):
            out[key] = "\n\n".join(str(doc.page_content) for doc in value)
    return out


_STRUCTURED_HINTS = frozenset({"citations", "sources", "source_ids", "cited_ids", "citation_ids", "quotes"})


def structured_of(outputs: object) -> object:
    """A root output that is a structured answer (``with_structured_output``), raw, or None: a pydantic
    object; the ``parsed`` value of ``include_raw=True``; a dict's ``answer`` that is an object (a
    LangGraph state holding the structured answer); an agent state's ``structured_response``
    (``create_agent(response_format=...)``, LangGraph's ``create_react_agent``); a dict with a
    ``citations``-like key."""
    if type(outputs) is str:  # the common answer: no structure (and no ABC checks on the host's thread)
        return None
    if isinstance(outputs, BaseModel):
        return outputs
    if not is_mapping(outputs):
        return None
    response = outputs.get("structured_response")
    if isinstance(response, (BaseModel, Mapping)):
        return response
    if "parsed" in outputs and "raw" in outputs:
        return structured_of(outputs["parsed"]) if outputs["parsed"] is not None else None
    for key in _ANSWER_KEYS:
        value = outputs.get(key)
        if isinstance(value, BaseModel):
            return value
    return outputs if _STRUCTURED_HINTS.intersection(k for k in outputs if isinstance(k, str)) else None


def structured_data(value: object) -> dict[str, Any] | None:
    """*value* (from `structured_of`) as a plain dict, when the turn closes."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if isinstance(k, str)}
    return None
