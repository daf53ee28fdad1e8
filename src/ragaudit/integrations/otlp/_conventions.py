"""Convention readers: what one received span says, whatever instrumentation wrote it.

Each reader turns a `SpanData` into a `Reading` (kind,
input and output text, documents, messages, model, usage, ids); the turn builder maps readings onto
the integration contract's steps. One reader per convention, tried in this order, the first that
recognises the span wins:

* **OpenInference** (Python and JS, and ragaudit's own spans, which carry it):
  ``openinference.span.kind``, ``input.value`` / ``output.value``, ``retrieval.documents.{i}.document.*``,
  ``llm.input_messages.{i}.message.*``, ``llm.output_messages.*``, ``llm.model_name``,
  ``llm.token_count.*``, ``session.id``, ``user.id``, ``tool.*``. LangChain's instrumentation (JS,
  and Python for Chroma documents) writes no ``document.id``: the ids are read from the
  retriever's ``output.value`` JSON (``{"documents": [{"id", "page_content" | "pageContent"}]}``).
* **OpenLLMetry** (``traceloop.*``): ``traceloop.span.kind`` (workflow, task, agent, tool),
  ``traceloop.entity.input`` / ``.output`` JSON, the model call's ``gen_ai.prompt.{i}.*`` /
  ``gen_ai.completion.{i}.*`` (or, since 0.4x, ``gen_ai.input.messages``), session and user from
  ``traceloop.association.properties.{session_id,user_id}``.
* **OTel GenAI** (``gen_ai.operation.name``): ``chat`` / ``text_completion`` / ``generate_content``
  (a model call: ``gen_ai.input.messages``, ``gen_ai.output.messages``), ``retrieval``
  (``gen_ai.retrieval.documents``, ``gen_ai.retrieval.query.text``), ``execute_tool``,
  ``invoke_agent``; ``gen_ai.conversation.id`` is the session.

A document with no id anywhere gets [`stable_doc_id`][ragaudit.records.stable_doc_id] of its text, after the
trace-wide pass in the turn builder looked for the same text with an id in another span (OpenLLMetry
drops ids from retriever outputs but keeps them in the serialised documents later steps receive).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._common import each_or_none
from ..steps import ModelToolCall
from ._decode import SpanData

__all__ = ["DocReading", "Reading", "all_documents", "documents_in", "messages_in", "question_in", "read_span"]

Message = tuple[str, str]

KIND_CHAIN = "chain"
KIND_AGENT = "agent"
KIND_RETRIEVER = "retriever"
KIND_LLM = "llm"
KIND_TOOL = "tool"
KIND_JUDGE = "judge"
KIND_OTHER = "other"


@dataclass(slots=True)
class DocReading:
    """A retrieved document as a span states it (the id may be missing)."""

    content: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Reading:
    """What a span says, in convention-neutral terms (None: the span does not say)."""

    convention: str
    kind: str
    input_text: str | None = None
    input_json: Any = None
    output_text: str | None = None
    documents: list[DocReading] | None = None
    query: str | None = None
    messages: list[Message] = field(default_factory=list)
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_id: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: str | None = None
    tool_calls: list[ModelToolCall] = field(default_factory=list)
    """The calls an LLM span's reply asked for (OpenInference ``message.tool_calls``, GenAI ``tool_call`` parts)."""
    structured: dict[str, Any] | None = None
    """A structured answer in the output (an agent state's ``structured_response``)."""
    error: str | None = None


# --- small helpers ----------------------------------------------------------------------------------


def _json(value: object) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, (dict, list)) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


_INDEXED = re.compile(r"^(?P<prefix>.+?)\.(?P<i>\d+)\.(?P<rest>.+)$")


def _indexed(attrs: Mapping[str, object], prefix: str) -> list[dict[str, Any]]:
    """``prefix.{i}.rest`` keys as a list of ``{rest: value}`` in index order."""
    groups: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(start):
            continue
        head, _, rest = key[len(start):].partition(".")
        if head.isdigit() and rest:
            groups.setdefault(int(head), {})[rest] = value
    return [groups[i] for i in sorted(groups)]


_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant", "system": "system",
          "tool": "tool", "function": "tool", "developer": "system", "model": "assistant"}


def _role(value: object) -> str:
    return _ROLES.get(str(value).lower(), str(value).lower()) if value else "user"


def _text_of(content: object) -> str | None:
    """The text of a message content: a string, or a list of parts with text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") or p.get("content") for p in content if isinstance(p, dict)]
        joined = "".join(t for t in texts if isinstance(t, str))
        return joined or None
    return None


def _error(span: SpanData) -> str | None:
    if not span.failed:
        return None
    for name, attrs in span.events:
        if name == "exception":
            kind = _str(attrs.get("exception.type"))
            message = _str(attrs.get("exception.message")) or ""
            if kind:
                return f"{kind}: {message}" if message else kind
    return span.status_message or "error (span status ERROR)"


# --- documents in JSON outputs ------------------------------------------------------------------------


def _unwrapped(value: object) -> Any:
    """A LangChain message as ``messages_to_dict`` writes it (``{"type": "tool", "data": {...}}``, as
    OpenInference serialises an agent's state and a tool's ``ToolMessage``): its fields."""
    if isinstance(value, dict) and isinstance(value.get("type"), str) and isinstance(value.get("data"), dict):
        return {**value["data"], "type": value["type"]}
    return value


_DOCUMENT_KEYS = ("documents", "outputs", "output", "inputs", "nodes", "source_nodes", "artifact")


def documents_in(value: object) -> list[DocReading] | None:
    """Documents in a JSON value: LangChain ``Document`` s (Python ``page_content``, JS
    ``pageContent``, serialised ``{"lc": 1, "kwargs": {...}}``), LlamaIndex nodes (``text``), as a
    list or under ``documents`` / ``outputs`` / ``output`` (or a ``ToolMessage`` 's ``artifact``, as a
    ``content_and_artifact`` tool returns them). None when it holds none."""
    value = _unwrapped(value)
    if isinstance(value, dict):
        return _under_keys(value, _DOCUMENT_KEYS, documents_in)
    if not isinstance(value, list) or not value:
        return None
    return each_or_none(value, _document)


def _document(item: object) -> DocReading | None:
    if not isinstance(item, dict):
        return None
    fields: Any = item["kwargs"] if item.get("lc") == 1 and isinstance(item.get("kwargs"), dict) else item
    node = fields.get("node") if isinstance(fields.get("node"), dict) else None
    source = node if node is not None else fields
    content = source.get("page_content", source.get("pageContent", source.get("text")))
    if not isinstance(content, str):
        return None
    metadata = source.get("metadata") if isinstance(source.get("metadata"), dict) else {}
    doc_id = _str(source.get("id")) or _str(source.get("id_")) or _str(source.get("node_id")) \
        or _str(metadata.get("id")) or _str(metadata.get("doc_id"))
    return DocReading(content=content, id=doc_id, score=_float(fields.get("score")), metadata=dict(metadata))


def _attach_ids(docs: list[DocReading], from_json: list[DocReading] | None) -> None:
    """Give documents without an id the id of the same text in *from_json* (same position first)."""
    if not from_json:
        return
    by_text = {d.content: d.id for d in from_json if d.id}
    for i, doc in enumerate(docs):
        if doc.id:
            continue
        if i < len(from_json) and from_json[i].id and from_json[i].content == doc.content:
            doc.id = from_json[i].id
        else:
            doc.id = by_text.get(doc.content)


# --- OpenInference ------------------------------------------------------------------------------------

_OI_KINDS = {"CHAIN": KIND_CHAIN, "AGENT": KIND_AGENT, "RETRIEVER": KIND_RETRIEVER, "LLM": KIND_LLM,
             "TOOL": KIND_TOOL, "EVALUATOR": KIND_JUDGE, "RERANKER": KIND_OTHER, "EMBEDDING": KIND_OTHER,
             "PROMPT": KIND_OTHER, "GUARDRAIL": KIND_OTHER}


def _oi_messages(attrs: Mapping[str, object], prefix: str) -> list[Message]:
    out: list[Message] = []
    for m in _indexed(attrs, prefix):
        text = m.get("message.content")
        if not isinstance(text, str):
            parts = [v for k, v in sorted(m.items()) if k.startswith("message.contents.")
                     and k.endswith("message_content.text") and isinstance(v, str)]
            text = "".join(parts) if parts else None
        if isinstance(text, str):
            out.append((_role(m.get("message.role")), text))
    return out


def _oi_tool_calls(attrs: Mapping[str, object]) -> list[ModelToolCall]:
    """``llm.output_messages.{i}.message.tool_calls.{j}.tool_call.*`` of an LLM span, in order."""
    out = []
    for message in _indexed(attrs, "llm.output_messages"):
        for call in _indexed(message, "message.tool_calls"):
            name = _str(call.get("tool_call.function.name"))
            if name is not None:
                out.append(ModelToolCall(name, _str(call.get("tool_call.id")),
                                         _str(call.get("tool_call.function.arguments"))))
    return out


def _genai_tool_calls(value: object) -> list[ModelToolCall]:
    """The ``tool_call`` parts of ``gen_ai.output.messages`` (arguments an object or its JSON text)."""
    items = _json(value)
    out = []
    for item in items if isinstance(items, list) else ():
        for part in (item.get("parts") if isinstance(item, dict) else None) or ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and _str(part.get("name")):
                args = part.get("arguments")
                out.append(ModelToolCall(part["name"], _str(part.get("id")),
                                         args if isinstance(args, str) or args is None else json.dumps(args)))
    return out


def _oi_documents(attrs: Mapping[str, object], output: object) -> list[DocReading]:
    docs: list[DocReading] = []
    for d in _indexed(attrs, "retrieval.documents"):
        content = d.get("document.content")
        if not isinstance(content, str):
            continue
        meta = _json(d.get("document.metadata"))
        docs.append(DocReading(content=content, id=_str(d.get("document.id")), score=_float(d.get("document.score")),
                               metadata=meta if isinstance(meta, dict) else {}))
    from_json = documents_in(output)
    if not docs and from_json:
        return from_json
    _attach_ids(docs, from_json)
    return docs


def _oi_response_id(output: object) -> str | None:
    """The completion id in LangChain's LLMResult JSON: ``llm_output.id`` (Python), else the first
    generation's message id (JS: ``message.kwargs.id``; Python: ``response_metadata.id``)."""
    if not isinstance(output, dict):
        return None
    llm_output = output.get("llm_output")
    if isinstance(llm_output, dict) and _str(llm_output.get("id")):
        return _str(llm_output.get("id"))
    gens = output.get("generations")
    first = gens[0][0] if isinstance(gens, list) and gens and isinstance(gens[0], list) and gens[0] else None
    message = first.get("message") if isinstance(first, dict) else None
    if isinstance(message, dict):
        body: dict[str, Any] = message["kwargs"] if isinstance(message.get("kwargs"), dict) else message
        meta = body.get("response_metadata")
        for candidate in (body.get("id"), meta.get("id") if isinstance(meta, dict) else None):
            if isinstance(candidate, str) and candidate.startswith(("chatcmpl", "resp", "msg")):
                return candidate
    return None


def read_openinference(span: SpanData, kind_value: str) -> Reading:
    attrs = span.attributes
    kind = _OI_KINDS.get(str(kind_value).upper(), KIND_OTHER)
    if span.name == "ragaudit.judge":
        kind = KIND_JUDGE
    input_value = attrs.get("input.value")
    output_value = attrs.get("output.value")
    input_json = _json(input_value)
    output_json = _json(output_value)
    r = Reading("openinference", kind, input_text=_str(input_value), input_json=input_json,
                output_text=_str(output_value) if output_json is None else None,
                session_id=_str(attrs.get("session.id")), user_id=_str(attrs.get("user.id")),
                error=_error(span))
    if kind == KIND_RETRIEVER:
        r.documents = _oi_documents(attrs, output_json)
        r.query = _str(input_value) if input_json is None else question_in(input_json)
    elif kind == KIND_LLM:
        r.messages = _oi_messages(attrs, "llm.input_messages")
        out = _oi_messages(attrs, "llm.output_messages")
        r.tool_calls = _oi_tool_calls(attrs)
        r.output_text = next((t for role, t in reversed(out) if role == "assistant"), None)
        if r.output_text is None and output_json is not None:
            r.output_text = _llm_text_in(output_json)
        r.model = _str(attrs.get("llm.model_name"))
        r.provider = _str(attrs.get("llm.provider")) or _str(attrs.get("llm.system"))
        r.input_tokens = _int(attrs.get("llm.token_count.prompt"))
        r.output_tokens = _int(attrs.get("llm.token_count.completion"))
        r.response_id = _oi_response_id(output_json) or _str(attrs.get("gen_ai.response.id"))
    elif kind == KIND_TOOL:
        r.tool_name = _str(attrs.get("tool.name")) or span.name
        r.tool_call_id = _str(attrs.get("tool_call.id")) or _str(attrs.get("tool.id"))
        r.tool_arguments = _str(attrs.get("tool.parameters")) or _str(input_value)
        r.documents = documents_in(output_json)
        if r.output_text is None and output_json is not None:
            r.output_text = _answer_in(output_json)
    else:
        if output_json is not None:
            r.output_text = _answer_in(output_json)
        if isinstance(output_json, dict) and isinstance(output_json.get("structured_response"), dict):
            r.structured = output_json["structured_response"]
    return r


# --- JSON shapes of inputs and outputs ---------------------------------------------------------------

_QUESTION_KEYS = ("question", "query", "input", "query_str", "user_input", "prompt", "inputs", "str_or_query_bundle")
_ANSWER_KEYS = ("answer", "output", "response", "result", "text", "content", "outputs", "output_text")


def question_in(value: object) -> str | None:
    """A question in a JSON input: the string under a usual key (nested once), or None."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _under_keys(value, _QUESTION_KEYS, lambda inner: question_in(inner) or None)
    return None


_T = TypeVar("_T")


def _under_keys(value: Mapping[str, object], keys: Sequence[str], read: Callable[[object], _T | None]) -> _T | None:
    """What *read* finds under the first of *keys* in *value* where it finds something, or None."""
    for key in keys:
        if key in value:
            found = read(value[key])
            if found is not None:
                return found
    return None


def messages_in(value: object) -> list[Message]:
    """Chat messages in a JSON input (``{"messages": [...]}``, LangChain serialised or plain dicts)."""
    items = value.get("messages") if isinstance(value, dict) else value
    if isinstance(items, list) and len(items) == 1 and isinstance(items[0], list):
        items = items[0]
    out: list[Message] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            out.append((_role(item[0]), item[1]))
            continue
        if not isinstance(item, dict):
            return []
        item = _unwrapped(item)
        body: dict[str, Any] = item["kwargs"] if item.get("lc") == 1 and isinstance(item.get("kwargs"), dict) else item
        role = body.get("role") or body.get("type")
        if role is None and item.get("lc") == 1 and isinstance(item.get("id"), list) and item["id"]:
            role = str(item["id"][-1]).replace("MessageChunk", "").replace("Message", "")
        text = _text_of(body.get("content"))
        if text is None and isinstance(body.get("parts"), list):
            text = _text_of(body["parts"])
        if text is not None:
            out.append((_role(role), text))
    return out


def _answer_in(value: object) -> str | None:
    value = _unwrapped(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        found = _under_keys(value, _ANSWER_KEYS, _answer_in)
        if found is not None:
            return found
        if isinstance(value.get("messages"), list):
            msgs = messages_in(value)
            return next((t for role, t in reversed(msgs) if role == "assistant"), None)
    return None


def _llm_text_in(value: object) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("generations"), list):
        gens = value["generations"]
        first = gens[0] if gens else None
        if isinstance(first, list) and first and isinstance(first[0], dict):
            return _str(first[0].get("text"))
    return _answer_in(value)


# --- OTel GenAI and OpenLLMetry --------------------------------------------------------------------

_GENAI_LLM_OPS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_GENAI_KINDS = {"retrieval": KIND_RETRIEVER, "vector_db_retrieve": KIND_RETRIEVER, "execute_tool": KIND_TOOL,
                "invoke_agent": KIND_AGENT, "create_agent": KIND_OTHER, "embeddings": KIND_OTHER,
                "execute_task": KIND_CHAIN, "workflow": KIND_CHAIN}
_TRACELOOP_KINDS = {"workflow": KIND_CHAIN, "task": KIND_CHAIN, "agent": KIND_AGENT, "tool": KIND_TOOL,
                    "llm": KIND_LLM}


def _genai_messages(value: object) -> list[Message]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages``: ``[{role, parts: [{type, content}]}]``."""
    items = _json(value)
    out: list[Message] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, dict):
            continue
        parts = item.get("parts")
        text = None
        if isinstance(parts, list):
            texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type", "text") == "text"]
            text = "".join(t for t in texts if isinstance(t, str)) if texts else None
        if text is None:
            text = _text_of(item.get("content"))
        if text is not None:
            out.append((_role(item.get("role")), text))
    return out


def _prompt_attrs(attrs: Mapping[str, object], prefix: str) -> list[Message]:
    # The older OpenLLMetry / GenAI form: gen_ai.prompt.{i}.role / .content.
    return [(_role(m.get("role")), m["content"]) for m in _indexed(attrs, prefix)
            if isinstance(m.get("content"), str)]


def _genai_documents(value: object) -> list[DocReading] | None:
    items = _json(value)
    if not isinstance(items, list):
        return None
    docs: list[DocReading] = []
    for item in items:
        if isinstance(item, dict):
            content = item.get("content", item.get("text"))
            meta = item.get("metadata")
            docs.append(DocReading(content=content if isinstance(content, str) else "", id=_str(item.get("id")),
                                   score=_float(item.get("score")), metadata=meta if isinstance(meta, dict) else {}))
    return docs


def read_genai(span: SpanData, operation: str | None, traceloop_kind: str | None) -> Reading:
    attrs = span.attributes
    if operation in _GENAI_LLM_OPS:
        kind = KIND_LLM
    elif traceloop_kind in _TRACELOOP_KINDS and not (operation in _GENAI_KINDS and traceloop_kind == "task"):
        kind = _TRACELOOP_KINDS[traceloop_kind]
    else:
        kind = _GENAI_KINDS.get(operation or "", KIND_OTHER)
    convention = "openllmetry" if traceloop_kind is not None or any(k.startswith("traceloop.") for k in attrs) \
        else "genai"
    entity_in = _json(attrs.get("traceloop.entity.input"))
    entity_out = _json(attrs.get("traceloop.entity.output"))
    assoc = "traceloop.association.properties."
    r = Reading(convention, kind, input_json=entity_in, error=_error(span),
                session_id=_str(attrs.get("gen_ai.conversation.id")) or _str(attrs.get(assoc + "session_id")),
                user_id=_str(attrs.get("user.id")) or _str(attrs.get("enduser.id"))
                or _str(attrs.get(assoc + "user_id")))
    if isinstance(entity_in, dict):
        r.input_text = question_in(entity_in)
    messages = _genai_messages(attrs.get("gen_ai.input.messages"))
    if kind == KIND_LLM:
        r.messages = messages or _prompt_attrs(attrs, "gen_ai.prompt")
        system = _genai_messages(attrs.get("gen_ai.system_instructions"))
        if system and not any(role == "system" for role, _ in r.messages):
            r.messages = [("system", t) for _, t in system] + r.messages
        out = _genai_messages(attrs.get("gen_ai.output.messages")) or _prompt_attrs(attrs, "gen_ai.completion")
        r.tool_calls = _genai_tool_calls(attrs.get("gen_ai.output.messages"))
        r.output_text = next((t for role, t in reversed(out) if role == "assistant"), None)
        r.model = _str(attrs.get("gen_ai.response.model")) or _str(attrs.get("gen_ai.request.model"))
        r.provider = _str(attrs.get("gen_ai.provider.name")) or _str(attrs.get("gen_ai.system"))
        r.input_tokens = _int(attrs.get("gen_ai.usage.input_tokens")) or _int(attrs.get("gen_ai.usage.prompt_tokens"))
        r.output_tokens = (_int(attrs.get("gen_ai.usage.output_tokens"))
                           or _int(attrs.get("gen_ai.usage.completion_tokens")))
        r.response_id = _str(attrs.get("gen_ai.response.id"))
    elif kind == KIND_RETRIEVER:
        r.documents = _genai_documents(attrs.get("gen_ai.retrieval.documents"))
        if r.documents is None:
            r.documents = documents_in(entity_out) or []
        r.query = _str(attrs.get("gen_ai.retrieval.query.text")) or _str(attrs.get("db.query.text")) \
            or r.input_text
    elif kind == KIND_TOOL:
        r.tool_name = _str(attrs.get("gen_ai.tool.name")) or _str(attrs.get("traceloop.entity.name")) or span.name
        r.tool_call_id = _str(attrs.get("gen_ai.tool.call.id"))
        args = attrs.get("gen_ai.tool.call.arguments")
        r.tool_arguments = args if isinstance(args, str) else (json.dumps(args) if args is not None else None)
        result = attrs.get("gen_ai.tool.call.result")
        r.output_text = result if isinstance(result, str) else _answer_in(entity_out)
        r.documents = documents_in(entity_out)
    else:
        if messages:
            r.messages = messages
            r.input_text = r.input_text or next((t for role, t in reversed(messages) if role == "user"), None)
        out = _genai_messages(attrs.get("gen_ai.output.messages"))
        r.output_text = next((t for role, t in reversed(out) if role == "assistant"), None) or _answer_in(entity_out)
    return r


def read_span(span: SpanData) -> Reading:
    """The `Reading` of *span* under the first convention that recognises it."""
    attrs = span.attributes
    oi_kind = attrs.get("openinference.span.kind")
    if isinstance(oi_kind, str):
        return read_openinference(span, oi_kind)
    operation = _str(attrs.get("gen_ai.operation.name"))
    traceloop_kind = _str(attrs.get("traceloop.span.kind"))
    if operation is not None or traceloop_kind is not None:
        return read_genai(span, operation, traceloop_kind)
    return Reading("none", KIND_JUDGE if span.name == "ragaudit.judge" else KIND_OTHER, error=_error(span))


def all_documents(readings: Sequence[Reading]) -> dict[str, str]:
    """Text -> id of every document with an id that any reading of a trace carries (the trace-wide
    id pass; see the module docstring)."""
    out: dict[str, str] = {}
    for r in readings:
        for doc in r.documents or ():
            if doc.id:
                out.setdefault(doc.content, doc.id)
        for value in (r.input_json,):
            for doc in documents_in(value) or ():
                if doc.id:
                    out.setdefault(doc.content, doc.id)
    return out
