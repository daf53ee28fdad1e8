"""ChatRagJudge: the three scores from one chat-completions call to any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
import weakref
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, JudgeError
from ..records import Judgement, JudgeRequest
from .base import BaseRagJudge
from .parsing import ParsedScores, parse_judgement
from .protocol import PROTOCOL_VERSION, build_messages, build_repair_messages

if TYPE_CHECKING:
    import openai

    AnyClient = openai.OpenAI | openai.AsyncOpenAI

__all__ = ["ChatRagJudge"]

_LOCAL_API_KEY = "ragaudit-no-key"
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class _Call:
    messages: list[dict[str, Any]]
    response_format: bool


@dataclass(slots=True)
class _Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = False

    def add(self, usage: Any) -> None:
        if usage is None:
            return
        self.reported = True
        self.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)

    def as_dict(self) -> dict[str, int]:
        out = {"calls": self.calls}
        if self.reported:
            out["prompt_tokens"] = self.prompt_tokens
            out["completion_tokens"] = self.completion_tokens
        return out


@dataclass(slots=True)
class _Run:
    started: float = field(default_factory=time.perf_counter)
    usage: _Usage = field(default_factory=_Usage)
    outputs: list[str] = field(default_factory=list)
    response_model: str | None = None
    finish_reason: str | None = None
    response_format: bool = True


_Outcome = Any  # a ChatCompletion, or the Exception the call raised
_Flow = Generator[_Call, _Outcome, Judgement]


class ChatRagJudge(BaseRagJudge):
    """A RAG judge backed by any OpenAI-compatible chat-completions endpoint.

    One call per answer returns all three scores, with the fixed protocol of
    :mod:`ragaudit.judges.protocol`: the system prompt, temperature *temperature* (0 by default),
    ``response_format={"type": "json_object"}``, the question, answer and context inside
    delimiters they cannot close, and a rubric with anchors. The reply is read by
    :func:`~ragaudit.judges.parsing.parse_judgement`.

    Endpoints: OpenAI by default; ``base_url`` for vLLM, Ollama, LM Studio and other compatible
    servers (no key needed there); or a ready ``client``: an ``openai.OpenAI``, ``AsyncOpenAI``,
    ``AzureOpenAI`` or ``AsyncAzureOpenAI`` (for Azure, *model* is the deployment name). Both
    :meth:`judge` (sync client) and :meth:`ajudge` (async client) call the endpoint natively. When
    only one kind of client is given, the other is made on first use with the same base URL,
    credentials, headers, timeout and retries. A given client keeps its own timeout and retries
    (*timeout* and *max_retries* configure only clients this judge creates), and it is not closed
    by :meth:`close`.

    Failures never raise by default: a transport error (timeout, connection refused, HTTP 5xx,
    429 after the SDK's own retries), an empty reply or a reply with no readable scores even after
    one repair request gives a :class:`~ragaudit.Judgement` with ``error`` set (exception type and
    message, never the API key) and no scores. With ``raise_on_error=True`` they raise
    :class:`~ragaudit.JudgeError` instead (chained to the cause). A server that rejects
    ``response_format`` with HTTP 400 is asked again without it, and this judge stops sending it.

    Every judgement carries ``usage`` (``calls``; ``prompt_tokens`` and ``completion_tokens`` when the
    server reported them), ``latency_s``, the reply verbatim as ``raw_output`` and, in ``details``,
    the model the server answered with, parse notes, the scale the scores were normalised from, and
    whether a repair was needed.

    Args:
        model: model (or Azure deployment) name.
        base_url: endpoint, e.g. ``http://localhost:11434/v1``; default ``OPENAI_BASE_URL`` or OpenAI.
        api_key: default ``OPENAI_API_KEY``; not needed when a base URL is set.
        client: a ready OpenAI client (instead of *base_url* and *api_key*).
        timeout: seconds per HTTP request.
        max_retries: SDK retries of 408/409/429/5xx and connection errors.
        temperature: sampling temperature, 0 to 2.
        max_context_chars: the context is cut to this many characters, with a visible marker.
        raise_on_error: raise :class:`~ragaudit.JudgeError` instead of returning a failed judgement.
        name: the judge's name in records; default ``"chat:<model>"``.
        extra_body: extra JSON fields for the request body (e.g. vLLM's ``guided_json``).
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AnyClient | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_context_chars: int = 24_000,
        raise_on_error: bool = False,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        _validate(model, timeout, max_retries, temperature, max_context_chars, name, extra_body)
        import openai

        self._openai = openai
        self.model = model
        self.name = name if name is not None else f"chat:{model}"
        self.temperature = float(temperature)
        self.max_context_chars = max_context_chars
        self.raise_on_error = raise_on_error
        self.extra_body: Mapping[str, Any] | None = dict(extra_body) if extra_body is not None else None
        self._response_format_ok = True
        self._lock = threading.Lock()
        self._sync_client: openai.OpenAI | None = None
        self._async_client: openai.AsyncOpenAI | None = None  # given by the caller: used on every loop
        # id(loop) -> (loop, client). Not a WeakKeyDictionary: the client's connections refer to
        # their loop, so the key would never die; entries of closed loops are pruned instead.
        self._async_per_loop: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], openai.AsyncOpenAI]] = {}
        self._owns_sync = False
        if client is not None:
            if base_url is not None or api_key is not None:
                raise ConfigurationError("pass either client= or base_url=/api_key=, not both")
            if isinstance(client, openai.OpenAI):
                self._sync_client = client
            elif isinstance(client, openai.AsyncOpenAI):
                self._async_client = client
            else:
                raise ConfigurationError(
                    "client must be an openai.OpenAI, AsyncOpenAI, AzureOpenAI or AsyncAzureOpenAI, "
                    f"got {type(client).__name__}"
                )
        else:
            self._sync_client = _new_client(openai, base_url, api_key, timeout, max_retries)
            self._owns_sync = True
        given = self._sync_client or self._async_client
        self._base_url = str(given.base_url).rstrip("/") if given is not None else ""

    # -- public API -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The endpoint this judge calls."""
        return self._base_url

    def judge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the sync client (blocking)."""
        flow = self._flow(request)
        try:
            call = next(flow)
            while True:
                call = flow.send(self._call_sync(call))
        except StopIteration as stop:
            result: Judgement = stop.value
            return result

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the async client (never blocks the event loop)."""
        flow = self._flow(request)
        try:
            call = next(flow)
            while True:
                call = flow.send(await self._call_async(call))
        except StopIteration as stop:
            result: Judgement = stop.value
            return result

    def config_key(self) -> str:
        """Model, endpoint, temperature, context limit, extra body and protocol version, as JSON."""
        return json.dumps(
            {
                "judge": "chat",
                "model": self.model,
                "base_url": self.base_url,
                "temperature": self.temperature,
                "max_context_chars": self.max_context_chars,
                "extra_body": self.extra_body,
                "protocol": PROTOCOL_VERSION,
            },
            sort_keys=True,
            default=str,
        )

    def close(self) -> None:
        """Close the clients this judge created (a client passed in stays open). Safe to call twice."""
        with self._lock:
            sync_client = self._sync_client if self._owns_sync else None
            if sync_client is not None:
                self._sync_client = None
            self._async_per_loop = {}
        if sync_client is not None:
            sync_client.close()

    async def aclose(self) -> None:
        """Like :meth:`close`, and also close the async client this judge made for the running loop.

        Await it before that loop ends (an async client's connections belong to the loop that
        opened them and cannot be closed from another one).
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async_per_loop.pop(id(loop), None)
        if entry is not None:
            await entry[1].close()
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    # -- clients ----------------------------------------------------------------------------------

    def _sync(self) -> openai.OpenAI:
        with self._lock:
            if self._sync_client is None:
                if self._async_client is None:
                    raise JudgeError(f"{self.name} is closed")
                self._sync_client = _derive(self._openai, self._async_client, want_async=False)
                self._owns_sync = True
            return self._sync_client

    def _async(self) -> openai.AsyncOpenAI:
        if self._async_client is not None:
            return self._async_client
        # An async client's connections belong to the loop that opened them, so each loop gets its own.
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async_per_loop.get(id(loop))
            if entry is not None and entry[0]() is loop:
                return entry[1]
            for key, (ref, _) in list(self._async_per_loop.items()):
                old = ref()
                if old is None or old.is_closed():
                    del self._async_per_loop[key]
            if self._sync_client is None:
                raise JudgeError(f"{self.name} is closed")
            client: openai.AsyncOpenAI = _derive(self._openai, self._sync_client, want_async=True)
            self._async_per_loop[id(loop)] = (weakref.ref(loop), client)
            return client

    def _params(self, call: _Call) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": call.messages,
            "temperature": self.temperature,
        }
        if call.response_format:
            params["response_format"] = {"type": "json_object"}
        if self.extra_body is not None:
            params["extra_body"] = dict(self.extra_body)
        return params

    def _call_sync(self, call: _Call) -> _Outcome:
        try:
            return self._sync().chat.completions.create(**self._params(call))
        except Exception as exc:  # every transport failure is reported by the flow
            return exc

    async def _call_async(self, call: _Call) -> _Outcome:
        try:
            return await self._async().chat.completions.create(**self._params(call))
        except Exception as exc:  # CancelledError is a BaseException and propagates
            return exc

    # -- the judging flow, shared by judge() and ajudge() -----------------------------------------

    def _flow(self, request: JudgeRequest) -> _Flow:
        run = _Run()
        messages = build_messages(request, max_context_chars=self.max_context_chars)
        outcome = yield from self._complete(messages, run)
        if isinstance(outcome, Exception):
            return self._failed(run, _describe(outcome, self._secrets()), outcome)
        text = self._take_text(outcome, run)
        if text is None:
            return self._failed(run, "JudgeError: the judge returned no choices")
        parsed = parse_judgement(text)
        if parsed.has_scores:
            return self._judgement(run, parsed, repaired=False)
        outcome = yield from self._complete(build_repair_messages(messages, text), run)
        if isinstance(outcome, Exception):
            failure = _describe(outcome, self._secrets())
            return self._failed(run, f"unparseable judge output; the repair request failed: {failure}",
                                outcome, parsed)
        text = self._take_text(outcome, run)
        repaired = parse_judgement(text) if text is not None else parsed
        if not repaired.has_scores:
            notes = "; ".join(repaired.notes) or "no scores"
            return self._failed(run, f"JudgeError: unparseable judge output after one repair ({notes})",
                                parsed=repaired)
        return self._judgement(run, repaired, repaired=True)

    def _complete(self, messages: list[dict[str, Any]], run: _Run) -> Generator[_Call, _Outcome, _Outcome]:
        use_format = self._response_format_ok
        outcome = yield _Call(messages, use_format)
        run.usage.calls += 1
        if use_format and self._rejects_response_format(outcome):
            self._response_format_ok = use_format = False
            outcome = yield _Call(messages, use_format)
            run.usage.calls += 1
        run.response_format = use_format
        if not isinstance(outcome, Exception):
            run.usage.add(getattr(outcome, "usage", None))
        return outcome

    def _rejects_response_format(self, outcome: _Outcome) -> bool:
        if not isinstance(outcome, self._openai.APIStatusError) or outcome.status_code not in (400, 422):
            return False
        text = f"{outcome} {outcome.body}".lower()
        return "response_format" in text or "response format" in text

    @staticmethod
    def _take_text(completion: Any, run: _Run) -> str | None:
        run.response_model = getattr(completion, "model", None)
        choices = getattr(completion, "choices", None) or []
        if not choices:
            return None
        choice = choices[0]
        run.finish_reason = getattr(choice, "finish_reason", None)
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None)
        text = text if isinstance(text, str) else ""
        run.outputs.append(text)
        return text

    def _details(self, run: _Run, parsed: ParsedScores | None, repaired: bool) -> dict[str, Any]:
        details: dict[str, Any] = {
            "model": self.model,
            "response_model": run.response_model,
            "protocol": PROTOCOL_VERSION,
            "response_format": run.response_format,
            "finish_reason": run.finish_reason,
            "repaired": repaired,
        }
        if parsed is not None:
            details["parse_notes"] = list(parsed.notes)
            details["scale"] = parsed.scale
        if len(run.outputs) > 1:
            details["initial_output"] = run.outputs[0]
        return details

    def _judgement(self, run: _Run, parsed: ParsedScores, *, repaired: bool) -> Judgement:
        return Judgement(
            faithfulness=parsed.faithfulness,
            context_relevance=parsed.context_relevance,
            answer_relevance=parsed.answer_relevance,
            reason=parsed.reason,
            raw_output=run.outputs[-1] if run.outputs else None,
            judge=self.name,
            latency_s=time.perf_counter() - run.started,
            usage=run.usage.as_dict(),
            details=self._details(run, parsed, repaired),
        )

    def _failed(
        self,
        run: _Run,
        error: str,
        cause: Exception | None = None,
        parsed: ParsedScores | None = None,
    ) -> Judgement:
        if self.raise_on_error:
            raise JudgeError(f"{self.name}: {error}") from cause
        details = self._details(run, parsed, repaired=len(run.outputs) > 1)
        status = getattr(cause, "status_code", None)
        if isinstance(status, int):
            details["status_code"] = status
        return Judgement.failed(
            self.name,
            error,
            raw_output=run.outputs[-1] if run.outputs else None,
            latency_s=time.perf_counter() - run.started,
            usage=run.usage.as_dict(),
            details=details,
        )

    def _secrets(self) -> list[str]:
        keys = []
        loop_clients = [client for _, client in self._async_per_loop.values()]
        for client in (self._sync_client, self._async_client, *loop_clients):
            key = getattr(client, "api_key", None)
            if isinstance(key, str) and len(key) >= 4:
                keys.append(key)
        return keys


def _validate(
    model: str,
    timeout: float,
    max_retries: int,
    temperature: float,
    max_context_chars: int,
    name: str | None,
    extra_body: Mapping[str, Any] | None,
) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError(f"model must be a non-empty string, got {model!r}")
    if not _is_number(timeout) or not timeout > 0 or not math.isfinite(timeout):
        raise ConfigurationError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if not _is_number(temperature) or not 0.0 <= temperature <= 2.0:
        raise ConfigurationError(f"temperature must be a number from 0 to 2, got {temperature!r}")
    if isinstance(max_context_chars, bool) or not isinstance(max_context_chars, int) or max_context_chars < 1:
        raise ConfigurationError(f"max_context_chars must be an int >= 1, got {max_context_chars!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"name must be a non-empty string or None, got {name!r}")
    if extra_body is not None and not isinstance(extra_body, Mapping):
        raise ConfigurationError(f"extra_body must be a mapping or None, got {type(extra_body).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _new_client(
    sdk: Any, base_url: str | None, api_key: str | None, timeout: float, max_retries: int
) -> openai.OpenAI:
    if api_key is None and not os.environ.get("OPENAI_API_KEY"):
        if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
            raise ConfigurationError(
                "ChatRagJudge needs an API key (api_key= or OPENAI_API_KEY), a base_url for a local "
                "server, or a client"
            )
        api_key = _LOCAL_API_KEY  # local OpenAI-compatible servers ignore the key, the SDK insists on one
    try:
        client: openai.OpenAI = sdk.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
    except sdk.OpenAIError as exc:
        raise ConfigurationError(f"cannot create the OpenAI client: {exc}") from exc
    return client


def _derive(sdk: Any, source: Any, *, want_async: bool) -> Any:
    """A client of the other kind (sync <-> async) with *source*'s endpoint, credentials and settings."""
    common: dict[str, Any] = {
        "base_url": str(source.base_url),
        "timeout": source.timeout,
        "max_retries": source.max_retries,
        "organization": getattr(source, "organization", None),
        "project": getattr(source, "project", None),
        "default_headers": dict(getattr(source, "_custom_headers", None) or {}),
        "default_query": dict(getattr(source, "_custom_query", None) or {}),
    }
    if isinstance(source, (sdk.AzureOpenAI, sdk.AsyncAzureOpenAI)):
        token_provider = getattr(source, "_azure_ad_token_provider", None)
        token = getattr(source, "_azure_ad_token", None)
        if token_provider is not None:
            auth: dict[str, Any] = {"azure_ad_token_provider": token_provider}
        elif token is not None:
            auth = {"azure_ad_token": token}
        else:
            auth = {"api_key": source.api_key}
        cls = sdk.AsyncAzureOpenAI if want_async else sdk.AzureOpenAI
        return cls(api_version=getattr(source, "_api_version", None), **auth, **common)
    cls = sdk.AsyncOpenAI if want_async else sdk.OpenAI
    return cls(api_key=getattr(source, "_api_key_provider", None) or source.api_key, **common)


def _describe(exc: BaseException, secrets: list[str]) -> str:
    message = str(exc)
    for secret in secrets:
        message = message.replace(secret, "***")
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "…"
    return f"{type(exc).__name__}: {message}"
