"""A loopback chat-completions server for tests and benchmarks.

:class:`LLMServer` is a real HTTP server on ``127.0.0.1`` (stdlib :class:`~http.server.ThreadingHTTPServer`
in a daemon thread, free port) that speaks ``POST /v1/chat/completions`` well enough for the real
``openai`` SDK, including the Azure path ``/openai/deployments/{name}/chat/completions``::

    with LLMServer() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test")
        srv.enqueue("first reply", Reply(content="second", delay=0.1))
        srv.fail_next(Fault.server_error(), times=2)
        ...
        assert "question" in srv.requests[-1].prompt_text

How the reply to a request is chosen, first match wins:

1. the request's ``response_format`` is one the server does not take -> HTTP 400 naming it, as real
   servers answer: ``reject_response_format`` takes none, ``response_formats`` lists the kinds taken
   (``json_schema`` and ``json_object`` by default); a ``json_schema`` that is not a valid
   structured-output schema (no ``name``, no ``schema``; with ``strict``: a root that is not an
   object, an object without ``additionalProperties: false`` or without every property required)
   -> HTTP 400 ``Invalid schema for response_format``;
2. a queued fault (:meth:`LLMServer.fail_next`);
3. the rule (``rule(request_json)``), unless it returns None;
4. the reply queue (:meth:`LLMServer.enqueue`), FIFO;
5. the default reply.

With ``enforce_schema=True`` the server honours a ``json_schema`` like constrained decoding does: a
scripted content that does not validate against the schema (JSON types, ``required``,
``additionalProperties``, ``enum``, ``minimum``/``maximum``) is replaced by the smallest instance
of the schema, and the scripted text is kept in :attr:`LLMServer.schema_violations`.

A request with ``"stream": true`` gets the same reply as server-sent chunks (content token by
token, tool calls, usage when ``stream_options.include_usage`` is set). A :class:`Reply` with
``tool_calls`` makes the assistant call tools (:class:`ToolCall`).

A rule, the queue and the default may give a ``str`` (the content), a :class:`Reply`, a :class:`Fault`,
or a list of ``str``/:class:`Reply` (one per choice when the request has ``n > 1``).

``usage`` counts whitespace-separated words of every message (prompt) and of every choice's content
(completion): rough but deterministic. When the request asks for ``logprobs``, every choice carries
``logprobs.content`` with ``top_logprobs`` (as many as asked): scripted per reply with :class:`Token`,
or generated (words, single digits and punctuation as tokens, logprob 0, fillers at -100).
``LLMServer(logprobs=False)`` plays a server without logprobs support (it ignores the request for
them) and ``LLMServer(honour_n=False)`` one without ``n`` (it returns one choice whatever ``n`` asks).

Delays and hangs are sleeps on an event that :meth:`LLMServer.stop` sets, so no handler thread
outlives the server by more than a moment, and a few hundred concurrent slow requests cost threads,
not CPU.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "DEFAULT_CONTENT",
    "Fault",
    "LLMServer",
    "RecordedRequest",
    "Reply",
    "Rule",
    "Scripted",
    "Token",
    "ToolCall",
    "is_session_request",
    "judgement_json",
    "session_json",
]


def judgement_json(
    faithfulness: Any = 0.9,
    context_relevance: Any = 0.8,
    answer_relevance: Any = 0.7,
    reason: str = "scripted judgement",
    **extra: Any,
) -> str:
    """The JSON text a well-behaved RAG judge returns (values are written as given, any JSON type)."""
    return json.dumps(
        {
            "faithfulnessScore": faithfulness,
            "contextRelevanceScore": context_relevance,
            "answerRelevanceScore": answer_relevance,
            "reason": reason,
            **extra,
        }
    )


def session_json(
    resolved: Any = "yes",
    resolved_turn: Any = None,
    contradictions: Sequence[tuple[int, int, int, int]] = (),
    repeated: Sequence[tuple[int, int]] = (),
    reason: str = "scripted session verdict",
    **extra: Any,
) -> str:
    """The JSON text a well-behaved session judge returns (ragaudit's session protocol):
    *contradictions* as ``(turn, sentence, later_turn, later_sentence)``, *repeated* as ``(turn, repeats)``."""
    return json.dumps({
        "resolved": resolved, "resolvedTurn": resolved_turn,
        "contradictions": [{"turn": a, "sentence": i, "laterTurn": b, "laterSentence": j}
                           for a, i, b, j in contradictions],
        "repeated": [{"turn": t, "repeats": r} for t, r in repeated],
        "reason": reason, **extra,
    })


def is_session_request(body: Mapping[str, Any]) -> bool:
    """True for a request of ragaudit's session protocol (a whole conversation judged), by its schema
    name or its system prompt; a rule answers it with :func:`session_json`."""
    fmt = body.get("response_format") or {}
    if isinstance(fmt, Mapping) and (fmt.get("json_schema") or {}).get("name") == "ragaudit_session":
        return True
    messages = body.get("messages") or []
    first = messages[0].get("content") if messages and isinstance(messages[0], Mapping) else None
    return isinstance(first, str) and "evaluator of conversations" in first


DEFAULT_CONTENT = judgement_json(reason="loopback default reply")
"""What the server answers when no rule, queue or fault applies."""


@dataclass(frozen=True)
class Token:
    """One completion token with its logprob and, optionally, its alternatives.

    ``top_logprobs`` lists ``(token, logprob)`` pairs, most likely first; when empty the token itself
    is the only alternative. The server cuts the list to the ``top_logprobs`` the request asked for.
    """

    token: str
    logprob: float = 0.0
    top_logprobs: Sequence[tuple[str, float]] = ()


@dataclass(frozen=True)
class ToolCall:
    """A tool call the scripted assistant makes: the function *name*, its *arguments* (a mapping,
    sent as JSON text, or the text itself) and the call's *id* (``call_<n>`` of the request when empty)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class Reply:
    """A scripted reply.

    ``content`` is the assistant text; with ``tokens`` and no ``content`` the content is the tokens
    joined. ``choices`` gives one entry per choice for ``n > 1`` (cycled when shorter than ``n``);
    without it every choice repeats this reply. ``delay`` (seconds) replaces the server's delay for
    this request. ``usage`` replaces the counted usage; ``model`` replaces the echoed model name.
    ``tool_calls`` makes the assistant call tools (content None unless given, ``finish_reason``
    ``"tool_calls"`` unless given otherwise).
    """

    content: str | None = None
    tokens: Sequence[Token] | None = None
    choices: Sequence[str | Reply] | None = None
    delay: float | None = None
    finish_reason: str = "stop"
    usage: Mapping[str, int] | None = None
    model: str | None = None
    tool_calls: Sequence[ToolCall] = ()

    def text(self) -> str:
        """The content this reply sends."""
        if self.content is not None:
            return self.content
        if self.tokens is not None:
            return "".join(t.token for t in self.tokens)
        return ""


FaultKind = Literal["status", "hang", "malformed", "empty_choices", "drop", "trickle", "trickle_headers"]


@dataclass(frozen=True)
class Fault:
    """A failure the server produces on demand. Build one with the class methods.

    ``status``: an HTTP error with an OpenAI-style error body (``retry_after`` sets the Retry-After
    header, in seconds, fractions allowed); ``hang``: no reply for ``seconds`` then the connection is
    closed; ``malformed``: HTTP 200 with a truncated JSON body; ``empty_choices``: HTTP 200 with
    ``choices: []``; ``drop``: the connection is closed without any response; ``trickle``: HTTP 200
    with a valid completion whose body is sent one byte every ``seconds`` (each read gets a byte, so a
    per-read timeout never fires); ``trickle_headers``: the same with the status line and headers (a
    few kilobytes of them) sent one byte every ``seconds``, the body only after them.
    """

    kind: FaultKind
    status: int = 500
    message: str = "The server had an error while processing your request."
    error_type: str = "server_error"
    param: str | None = None
    retry_after: float | None = None
    seconds: float = 10.0

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """An HTTP 5xx (the SDK retries these)."""
        return cls("status", status=status)

    @classmethod
    def rate_limit(cls, retry_after: float | None = 0.05) -> Fault:
        """HTTP 429 with ``Retry-After`` (seconds; None sends no header)."""
        return cls(
            "status",
            status=429,
            message="Rate limit reached for requests.",
            error_type="requests",
            retry_after=retry_after,
        )

    @classmethod
    def bad_request(cls, message: str, param: str | None = None, status: int = 400) -> Fault:
        """An HTTP 4xx ``invalid_request_error`` (not retried by the SDK)."""
        return cls("status", status=status, message=message, error_type="invalid_request_error", param=param)

    @classmethod
    def reject_response_format(cls) -> Fault:
        """HTTP 400 refusing ``response_format``, as servers without JSON mode answer."""
        return cls.bad_request(
            "Invalid parameter: 'response_format' of type 'json_object' is not supported with this model.",
            param="response_format",
        )

    @classmethod
    def hang(cls, seconds: float = 10.0) -> Fault:
        """Send nothing for *seconds* (past the client's timeout), then close the connection."""
        return cls("hang", seconds=seconds)

    @classmethod
    def trickle(cls, seconds: float = 0.1) -> Fault:
        """A valid completion, its body sent one byte every *seconds* (a per-read timeout never fires)."""
        return cls("trickle", seconds=seconds)

    @classmethod
    def trickle_headers(cls, seconds: float = 0.1) -> Fault:
        """A valid completion whose status line and headers (~2 KB) are sent one byte every *seconds*."""
        return cls("trickle_headers", seconds=seconds)

    @classmethod
    def malformed(cls) -> Fault:
        """HTTP 200 whose JSON body is cut off."""
        return cls("malformed")

    @classmethod
    def empty_choices(cls) -> Fault:
        """HTTP 200 with a valid completion that has no choices."""
        return cls("empty_choices")

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without sending a response."""
        return cls("drop")


Scripted = str | Reply | Fault | Sequence[str | Reply]
"""What a rule, the queue or the default can give for one request."""

Rule = Callable[[Mapping[str, Any]], Scripted | None]
"""Called with the parsed request JSON; returning None falls through to the queue and default."""


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received. ``body`` is the parsed JSON (None when it did not parse)."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any
    raw: bytes = field(repr=False)
    received_at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages`` (empty when absent)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("messages"), list):
            return [m for m in self.body["messages"] if isinstance(m, dict)]
        return []

    @property
    def prompt_text(self) -> str:
        """Every message's text, joined by blank lines (for assertions on prompts)."""
        return "\n\n".join(_message_text(m) for m in self.messages)


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


_TOKEN_RE = re.compile(r"\s*(?:[^\W\d_]+|\d|\S)|\s+")
_FILLER_LOGPROB = -100.0
_MALFORMED_BODY = b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"index": 0, "mess'


def _auto_tokens(text: str) -> list[Token]:
    return [Token(piece) for piece in _TOKEN_RE.findall(text)]


def _token_json(token: Token, top_k: int) -> dict[str, Any]:
    alternatives = list(token.top_logprobs) or [(token.token, token.logprob)]
    fillers = (
        (f"<alt{i}>", _FILLER_LOGPROB) for i in range(max(0, top_k - len(alternatives)))
    )
    top = [*alternatives[:top_k], *fillers]
    return {
        "token": token.token,
        "logprob": token.logprob,
        "bytes": list(token.token.encode("utf-8")),
        "top_logprobs": [
            {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8"))} for tok, lp in top
        ],
    }


def _words(text: str) -> int:
    return len(text.split())


def _as_reply(item: str | Reply) -> Reply:
    return item if isinstance(item, Reply) else Reply(content=str(item))


class LLMServer:
    """A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (see the module docstring).

    Args:
        rule: called with each request's JSON; its answer is used unless it is None.
        replies: replies queued from the start (FIFO).
        default: the reply when nothing else applies.
        delay: seconds to wait before every reply (a :class:`Reply` may set its own).
        reject_response_format: answer 400 to every request that sets ``response_format``.
        logprobs: False to ignore requests for logprobs (every choice has ``logprobs: null``).
        honour_n: False to return one choice whatever ``n`` the request asks for.
        response_formats: the ``response_format`` kinds the server takes (others: HTTP 400).
        enforce_schema: replies to a ``json_schema`` request always validate against its schema.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Every attribute above may be
    changed while the server runs. The request log, :attr:`requests`, is thread-safe.
    """

    def __init__(
        self,
        rule: Rule | None = None,
        *,
        replies: Sequence[Scripted] = (),
        default: Scripted = DEFAULT_CONTENT,
        delay: float = 0.0,
        reject_response_format: bool = False,
        logprobs: bool = True,
        honour_n: bool = True,
        response_formats: Sequence[str] = ("json_schema", "json_object"),
        enforce_schema: bool = False,
    ) -> None:
        self.rule = rule
        self.default: Scripted = default
        self.delay = delay
        self.reject_response_format = reject_response_format
        self.logprobs = logprobs
        self.honour_n = honour_n
        self.response_formats = tuple(response_formats)
        self.enforce_schema = enforce_schema
        self.schema_violations: list[str] = []
        self.trickled: list[tuple[int, int]] = []
        """Per trickled reply, when it ended: (bytes sent, bytes to send: the body, or for
        ``trickle_headers`` the status line and headers)."""
        self._initial = (rule, default, delay, reject_response_format, logprobs, honour_n, self.response_formats,
                         enforce_schema)
        self._lock = threading.Lock()
        self._replies: deque[Scripted] = deque(replies)
        self._faults: deque[Fault] = deque()
        self._requests: list[RecordedRequest] = []
        self._counter = 0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> LLMServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread. Returns self."""
        if self._httpd is not None:
            raise RuntimeError("LLMServer already started")
        self._stopping.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="llm-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed or hanging handlers, close the socket. Safe to call twice."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (the server must be started)."""
        if self._httpd is None:
            raise RuntimeError("LLMServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (what Azure clients take as ``azure_endpoint``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (what OpenAI clients take as ``base_url``)."""
        return f"{self.root_url}/v1"

    # scripting -------------------------------------------------------------------------------

    def enqueue(self, *replies: Scripted) -> None:
        """Queue replies; each request takes the next one (after faults and the rule)."""
        with self._lock:
            self._replies.extend(replies)

    def fail_next(self, fault: Fault, times: int = 1) -> None:
        """Make the next *times* requests fail with *fault* (before any rule or queued reply)."""
        with self._lock:
            self._faults.extend([fault] * times)

    def reset(self) -> None:
        """Forget queued replies, faults and the request log; restore the constructor's settings."""
        with self._lock:
            self._replies.clear()
            self._faults.clear()
            self._requests.clear()
            (self.rule, self.default, self.delay, self.reject_response_format, self.logprobs,
             self.honour_n, self.response_formats, self.enforce_schema) = self._initial
            self.schema_violations.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests arrived so far."""
        with self._lock:
            return len(self._requests)

    # serving (called from handler threads) ---------------------------------------------------

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            self._counter += 1
            return self._counter

    def _choose(self, body: Mapping[str, Any]) -> Scripted:
        if "response_format" in body:
            refusal = self._refuse_format(body["response_format"])
            if refusal is not None:
                return refusal
        with self._lock:
            if self._faults:
                return self._faults.popleft()
        rule = self.rule
        if rule is not None:
            chosen = rule(body)
            if chosen is not None:
                return chosen
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return self.default

    def _refuse_format(self, fmt: Any) -> Fault | None:
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        if self.reject_response_format or kind not in self.response_formats:
            return Fault.bad_request(
                f"Invalid parameter: 'response_format' of type {kind!r} is not supported with this model.",
                param="response_format",
            )
        if kind == "json_schema":
            problem = _json_schema_problem(fmt.get("json_schema"))
            if problem is not None:
                return Fault.bad_request(f"Invalid schema for response_format: {problem}", param="response_format")
        return None

    def _conform(self, body: Mapping[str, Any], text: str) -> str:
        """*text*, or the smallest instance of the request's schema when it does not validate."""
        fmt = body.get("response_format")
        if not self.enforce_schema or not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            return text
        schema = fmt["json_schema"]["schema"]
        try:
            valid = _validates(json.loads(text), schema)
        except ValueError:
            valid = False
        if valid:
            return text
        with self._lock:
            self.schema_violations.append(text)
        return json.dumps(_smallest(schema))

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _completion(
        self, body: Mapping[str, Any], scripted: str | Reply | Sequence[str | Reply], seq: int
    ) -> tuple[dict[str, Any], float]:
        reply = _as_reply(scripted) if isinstance(scripted, (str, Reply)) else Reply(choices=list(scripted))
        n = body.get("n") or 1
        n = n if isinstance(n, int) and n > 0 and self.honour_n else 1
        per_choice = [_as_reply(c) for c in reply.choices] if reply.choices else [reply]
        want_logprobs = self.logprobs and bool(body.get("logprobs"))
        top_k = body.get("top_logprobs") or 0
        top_k = top_k if isinstance(top_k, int) and top_k > 0 else 1 if want_logprobs else 0
        choices = []
        completion_tokens = 0
        for index in range(n):
            choice_reply = per_choice[index % len(per_choice)]
            text = self._conform(body, choice_reply.text())
            completion_tokens += _words(text)
            logprobs = None
            if want_logprobs:
                tokens = choice_reply.tokens if choice_reply.tokens is not None else _auto_tokens(text)
                logprobs = {"content": [_token_json(t, top_k) for t in tokens], "refusal": None}
            message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
            finish_reason = choice_reply.finish_reason
            if choice_reply.tool_calls:
                message["content"] = text or None
                message["tool_calls"] = [
                    {"id": call.id or f"call_{seq}_{i}", "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments_text()}}
                    for i, call in enumerate(choice_reply.tool_calls)
                ]
                finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
            choices.append(
                {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}
            )
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        prompt_tokens = sum(_words(_message_text(m)) for m in messages if isinstance(m, dict))
        usage: dict[str, int] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if reply.usage is not None:
            usage.update(reply.usage)
        payload = {
            "id": f"chatcmpl-loopback-{seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or str(body.get("model") or "loopback"),
            "choices": choices,
            "usage": usage,
            "system_fingerprint": "fp_loopback",
        }
        delay = reply.delay if reply.delay is not None else self.delay
        return payload, delay


_SCHEMA_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _json_schema_problem(spec: Any) -> str | None:
    """Why *spec* (a request's ``response_format.json_schema``) is refused, as OpenAI does; None if valid."""
    if not isinstance(spec, Mapping):
        return "'json_schema' must be an object"
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME_RE.fullmatch(name):
        return "'name' must be 1-64 letters, digits, '_' or '-'"
    schema = spec.get("schema")
    if not isinstance(schema, Mapping):
        return "'schema' must be an object"
    if spec.get("strict"):
        if schema.get("type") != "object":
            return "the root of a strict schema must be an object"
        return _strict_problem(schema, "root")
    return None


def _strict_problem(schema: Mapping[str, Any], where: str) -> str | None:
    if schema.get("type") == "object":
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return f"In context={where}, 'additionalProperties' is required to be supplied and to be false"
        if sorted(schema.get("required") or []) != sorted(properties):
            return f"In context={where}, 'required' must list every key in 'properties'"
        for key, inner in properties.items():
            if isinstance(inner, Mapping):
                problem = _strict_problem(inner, f"{where}.{key}")
                if problem is not None:
                    return problem
    if schema.get("type") == "array" and isinstance(schema.get("items"), Mapping):
        return _strict_problem(schema["items"], f"{where}[]")
    return None


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "number": (int, float), "integer": (int,),
    "boolean": (bool,), "null": (type(None),),
}


def _validates(value: Any, schema: Mapping[str, Any]) -> bool:
    """*value* against the subset of JSON Schema structured outputs use."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if kinds and not any(_is_type(value, k) for k in kinds):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    low, high = schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
    if number and (value != value or not low <= value <= high):
        return False
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        if any(key not in value for key in schema.get("required") or []):
            return False
        if schema.get("additionalProperties") is False and any(key not in properties for key in value):
            return False
        return all(_validates(value[key], inner) for key, inner in properties.items() if key in value)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return all(_validates(item, schema["items"]) for item in value)
    return True


def _is_type(value: Any, kind: str) -> bool:
    if kind in ("number", "integer") and isinstance(value, bool):
        return False
    return isinstance(value, _JSON_TYPES.get(kind, (object,)))


def _smallest(schema: Mapping[str, Any]) -> Any:
    """The smallest instance of *schema*: what constrained decoding leaves a model that wanted otherwise."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties") or {}
        return {key: _smallest(properties[key]) for key in schema.get("required") or [] if key in properties}
    if kind in ("number", "integer"):
        return schema.get("minimum", 0)
    return {"array": [], "string": "", "boolean": False}.get(str(kind))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # benchmarks open dozens of connections at once; the default backlog is 5
    owner: LLMServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    # One segment per response, sent at once: headers and body written separately hit Nagle plus
    # delayed ACK and cost ~40 ms per request on a kept-alive connection.
    disable_nagle_algorithm = True
    wbufsize = 1 << 16
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send_json(404, {"error": {"message": f"no route for GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        split = urlsplit(self.path)
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        seq = owner._record(
            RecordedRequest(
                method="POST",
                path=split.path,
                query=parse_qs(split.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                raw=raw,
                received_at=time.time(),
            )
        )
        if not split.path.rstrip("/").endswith("/chat/completions"):
            # the whole request target, query included, as real servers often echo it
            self._send_error(404, f"no route for POST {self.path}", "not_found")
            return
        if not isinstance(body, dict):
            self._send_error(400, "request body is not a JSON object", "invalid_request_error")
            return
        try:
            scripted = owner._choose(body)
        except Exception as exc:  # a broken test rule must show up at the client, not kill the thread
            self._send_error(500, f"rule raised {type(exc).__name__}: {exc}", "server_error")
            return
        if isinstance(scripted, Fault):
            self._fault(scripted, seq)
            return
        payload, delay = owner._completion(body, scripted, seq)
        owner._sleep(delay)
        if body.get("stream"):
            options = body.get("stream_options")
            self._send_stream(payload, isinstance(options, dict) and bool(options.get("include_usage")))
        else:
            self._send_json(200, payload)

    def _send_stream(self, payload: Mapping[str, Any], include_usage: bool) -> None:
        """*payload* as server-sent ``chat.completion.chunk`` events: per choice a role chunk, the
        content a token per chunk, each tool call (id and name, then its arguments), the finish
        reason; then the usage when asked for; then ``[DONE]``. One write per chunk, so a client
        reads a real stream."""
        head = {k: payload[k] for k in ("id", "created", "model", "system_fingerprint")}
        head["object"] = "chat.completion.chunk"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + json.dumps({**head, "choices": choices, **extra}).encode("utf-8") + b"\n\n"

        events: list[bytes] = []
        for choice in payload["choices"]:
            index, message = choice["index"], choice["message"]
            events.append(chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                                  "logprobs": None, "finish_reason": None}]))
            for piece in _TOKEN_RE.findall(message.get("content") or ""):
                events.append(chunk([{"index": index, "delta": {"content": piece}, "logprobs": None,
                                      "finish_reason": None}]))
            for i, call in enumerate(message.get("tool_calls") or ()):
                function = call["function"]
                events.append(chunk([{"index": index, "delta": {"tool_calls": [
                    {"index": i, "id": call["id"], "type": "function",
                     "function": {"name": function["name"], "arguments": ""}}]},
                    "logprobs": None, "finish_reason": None}]))
                events.append(chunk([{"index": index, "delta": {"tool_calls": [
                    {"index": i, "function": {"arguments": function["arguments"]}}]},
                    "logprobs": None, "finish_reason": None}]))
            events.append(chunk([{"index": index, "delta": {}, "logprobs": None,
                                  "finish_reason": choice["finish_reason"]}]))
        if include_usage:
            events.append(chunk([], usage=payload["usage"]))
        events.append(b"data: [DONE]\n\n")
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    def _fault(self, fault: Fault, seq: int) -> None:
        owner = self.server.owner
        owner._sleep(owner.delay)
        if fault.kind == "status":
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            self._send_error(
                fault.status, fault.message, fault.error_type, param=fault.param, headers=headers
            )
        elif fault.kind == "malformed":
            self._send_bytes(200, _MALFORMED_BODY)
        elif fault.kind == "trickle":
            self._trickle(fault.seconds, seq)
        elif fault.kind == "trickle_headers":
            self._trickle_headers(fault.seconds, seq)
        elif fault.kind == "empty_choices":
            self._send_json(
                200,
                {
                    "id": f"chatcmpl-loopback-{seq}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "loopback",
                    "choices": [],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            )
        else:  # hang or drop: no response at all
            if fault.kind == "hang":
                owner._sleep(fault.seconds)
            self._close_without_response()

    def _trickle(self, seconds: float, seq: int) -> None:
        owner = self.server.owner
        payload, _ = owner._completion({}, judgement_json(), seq)
        data = json.dumps(payload).encode("utf-8")
        sent = 0
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            for i in range(len(data)):
                if owner._stopping.wait(seconds):
                    break
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                sent += 1
        except OSError:  # the client gave up
            pass
        with owner._lock:
            owner.trickled.append((sent, len(data)))
        self.close_connection = True

    def _trickle_headers(self, seconds: float, seq: int) -> None:
        owner = self.server.owner
        payload, _ = owner._completion({}, judgement_json(), seq)
        data = json.dumps(payload).encode("utf-8")
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: {'x' * 2048}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode("ascii")
        sent = 0
        try:  # on the socket itself: a byte the buffered wfile kept after the client left would fail again
            for i in range(len(head)):
                if owner._stopping.wait(seconds):
                    break
                self.connection.sendall(head[i : i + 1])
                sent += 1
            else:
                self.connection.sendall(data)
        except OSError:  # the client gave up
            pass
        with owner._lock:
            owner.trickled.append((sent, len(head)))
        self.close_connection = True

    def _close_without_response(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_error(
        self,
        status: int,
        message: str,
        error_type: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        error = {"message": message, "type": error_type, "param": param, "code": None}
        self._send_json(status, {"error": error}, headers)

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(payload).encode("utf-8"), headers)

    def _send_bytes(self, status: int, data: bytes, headers: Mapping[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client gave up (timeout) before we answered
            self.close_connection = True
