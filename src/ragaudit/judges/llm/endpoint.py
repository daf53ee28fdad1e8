"""How every chat judge talks to an OpenAI-compatible chat-completions endpoint (private).

`Endpoint` owns the clients: one made from ``base_url``/``api_key``, or one given (``OpenAI``,
``AsyncOpenAI``, ``AzureOpenAI``, ``AsyncAzureOpenAI``), the other kind derived from it on first use,
and one async client per event loop. `Endpoint.create` and `Endpoint.acreate` send one
request and never raise for a transport failure: the `Result` holds the completion or the
exception. Structured output first: a request with a verdict schema asks for
``response_format={"type": "json_schema", ...}``; a server that rejects it (HTTP 400/422 naming
``response_format`` or ``json_schema``) is asked again with ``{"type": "json_object"}``, and one
that rejects that too, without ``response_format``. The endpoint remembers the last kind that was
not refused and starts there for every later request (`Endpoint.response_format`).

A judge writes its work once as a *flow* (`Flow`): a generator that yields a batch of request
parameters (`Endpoint.params`) and receives one `Result` per request, in order.
`Endpoint.run_sync` drives it with the sync client, `Endpoint.run_async` with the async
client (the requests of one batch concurrently). `Tally` counts what one judgement cost
(calls, tokens, latency); `Endpoint.describe` turns an exception into an error text without
the API key. `EndpointJudge` checks and keeps the settings every chat judge shares
(`ChatJudgeSettings`) and gives a judge ``base_url``, ``config_key`` JSON, ``close`` and ``aclose``.

**One deadline per request.** Clients made here send through the transport of ``_http.py``: each HTTP
request the SDK sends (every retry is a request of its own) must be answered in full -- connect,
write, headers and the whole body -- within *timeout_s*, however slowly the server trickles its
reply; past that the read fails as a timeout (``APITimeoutError``, retried by the SDK like any
timeout). A client passed in keeps its own timeouts. The HTTP library is the one the SDK is built
on (``httpx`` up to openai 2.x, ``httpx2`` from 3.0), found through the SDK's public names.

Used by ChatRagJudge (and the judges built on it), GEvalJudge and PairwiseJudge.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
import weakref
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, TypeVar
from urllib.parse import urlsplit

from ... import _fork
from ...content import register_client, register_secret, scrub, scrub_url
from ...errors import ConfigurationError, JudgeError
from ._http import http_clients

if TYPE_CHECKING:
    import openai
    from typing_extensions import Unpack

    AnyClient = openai.OpenAI | openai.AsyncOpenAI

__all__ = [
    "ChatJudgeSettings",
    "Endpoint",
    "EndpointJudge",
    "Flow",
    "Result",
    "Tally",
    "Usage",
    "choice_text",
    "completion_choices",
    "endpoint_host",
    "retry_after_s",
    "validate_settings",
]

T = TypeVar("T")

_LOCAL_API_KEY = "ragaudit-no-key"
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class Result:
    """One logical request: the completion (or the exception it raised) and the HTTP calls it took.

    ``response_format`` is the kind of ``response_format`` the request that gave *outcome* carried
    (``"json_schema"``, ``"json_object"``) or None.
    """

    outcome: Any
    calls: int
    response_format: str | None = None


Flow = Generator[list[dict[str, Any]], list[Result], T]
"""A judging flow: yields a batch of request parameters, receives their results in order, returns T."""


@dataclass(slots=True)
class Usage:
    """Calls and, when the server reported them, prompt and completion tokens.

    A count the server reported as something other than a finite non-negative integer (NaN, -1,
    a string) makes that total None: unknown, never a guess, and never an exception that would
    lose the verdict.
    """

    calls: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    reported: bool = False

    def add(self, usage: Any) -> None:
        """Add a completion's ``usage`` (None: the server reported none)."""
        if usage is None:
            return
        self.reported = True
        self.prompt_tokens = _add_count(self.prompt_tokens, getattr(usage, "prompt_tokens", 0))
        self.completion_tokens = _add_count(self.completion_tokens, getattr(usage, "completion_tokens", 0))

    def record(self, result: Result) -> None:
        """Add *result*'s calls and, when it is a completion, its usage."""
        self.calls += result.calls
        if not isinstance(result.outcome, Exception):
            self.add(getattr(result.outcome, "usage", None))

    def as_dict(self) -> dict[str, int | None]:
        """``calls``, plus ``prompt_tokens`` and ``completion_tokens`` when reported (a Judgement's usage)."""
        out: dict[str, int | None] = {"calls": self.calls}
        if self.reported:
            out["prompt_tokens"] = self.prompt_tokens
            out["completion_tokens"] = self.completion_tokens
        return out


def _add_count(total: int | None, count: Any) -> int | None:
    if count is None:  # not reported in this reply: adds nothing
        return total
    if isinstance(count, bool) or not isinstance(count, (int, float)):
        return None
    if isinstance(count, float) and (not math.isfinite(count) or not count.is_integer()):
        return None
    if count < 0 or total is None:
        return None
    return total + int(count)


@dataclass(slots=True)
class Tally:
    """What one judgement has cost and got back so far; judges extend it with their own fields."""

    started: float = field(default_factory=time.perf_counter)
    usage: Usage = field(default_factory=Usage)
    outputs: list[str] = field(default_factory=list)
    response_model: str | None = None

    def latency(self) -> float:
        """Seconds since the judgement started."""
        return time.perf_counter() - self.started


def completion_choices(outcome: Any) -> list[Any]:
    """The choices of a completion (empty when it has none)."""
    return list(getattr(outcome, "choices", None) or [])


def endpoint_host(base_url: str) -> str | None:
    """``host[:port]`` of *base_url*: no scheme, credentials, path or query (a judge's identity)."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not host:
        return None
    return f"{host}:{port}" if port is not None else host


def retry_after_s(exc: BaseException | None) -> float | None:
    """The seconds an HTTP error's ``Retry-After`` header asks for (a number of seconds), or None."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    try:
        value = float(headers.get("retry-after")) if headers is not None else None
    except (TypeError, ValueError):  # absent, or an HTTP date (rare from APIs): no hold-back
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def choice_text(choice: Any) -> str:
    """A choice's message content ("" when it has none)."""
    text = getattr(getattr(choice, "message", None), "content", None)
    return text if isinstance(text, str) else ""


def validate_settings(
    model: str,
    timeout_s: float,
    max_retries: int,
    temperature: float,
    max_context_chars: int,
    name: str | None,
    extra_body: Mapping[str, Any] | None,
) -> None:
    """Raise ConfigurationError for a setting every chat judge shares that is out of range."""
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError(f"model must be a non-empty string, got {model!r}")
    if not _is_number(timeout_s) or not timeout_s > 0 or not math.isfinite(timeout_s):
        raise ConfigurationError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
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


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Endpoint:
    """The clients of one judge and the requests it sends (see the module docstring).

    A given client keeps its own timeout and retries (*timeout_s* and *max_retries* configure only
    clients made here) and is never closed here. *name* is the judge's, for error messages.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        client: AnyClient | None,
        timeout_s: float,
        max_retries: int,
        extra_body: Mapping[str, Any] | None,
        name: str,
    ) -> None:
        import openai

        self._openai = openai
        self.model = model
        self.name = name
        self.extra_body: Mapping[str, Any] | None = dict(extra_body) if extra_body is not None else None
        self.response_format: str | None = "json_schema"  # the best kind the server has not refused
        self._lock = _fork.lock()
        self._sync_client: openai.OpenAI | None = None
        self._async_client: openai.AsyncOpenAI | None = None  # given by the caller: used on every loop
        # id(loop) -> (loop, clients). Not a WeakKeyDictionary: the clients' connections refer to
        # their loop, so the key would never die; entries of closed loops are pruned instead.
        self._async_per_loop: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], _Shards]] = {}
        self._owns_sync = False
        self.timeout_s = timeout_s
        self._http_clients = http_clients(openai, timeout_s)  # for the clients made here only
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
            self._sync_client = _new_client(openai, base_url, api_key, timeout_s, max_retries,
                                            self._http_clients[0])
            self._owns_sync = True
        given = self._sync_client or self._async_client
        # Its key, credential headers (a gateway's x-api-key) and URL parts are scrubbed from every
        # text ragaudit records, and base_url (shown in repr and config_key) never holds them.
        register_client(given)
        register_secret(getattr(given, "_azure_ad_token", None))
        self.base_url = (scrub_url(str(given.base_url).rstrip("/")) or "") if given is not None else ""

    # -- clients ----------------------------------------------------------------------------------

    def sync_client(self) -> openai.OpenAI:
        """The sync client, derived from a given async client on first use."""
        with self._lock:
            if self._sync_client is None:
                if self._async_client is None:
                    raise JudgeError(f"{self.name} is closed")
                self._sync_client = _derive(self._openai, self._async_client, want_async=False)
                self._owns_sync = True
            return self._sync_client

    def async_client(self) -> openai.AsyncOpenAI:
        """The async client for the running event loop (a given one serves every loop)."""
        if self._async_client is not None:
            return self._async_client
        # An async client's connections belong to the loop that opened them, so each loop gets its own.
        loop = asyncio.get_running_loop()
        entry = self._async_per_loop.get(id(loop))
        if entry is not None and entry[0]() is loop:
            return entry[1].next()
        with self._lock:
            for key, (ref, _) in list(self._async_per_loop.items()):
                old = ref()
                if old is None or old.is_closed():
                    del self._async_per_loop[key]
            if self._sync_client is None:
                raise JudgeError(f"{self.name} is closed")
            source, sdk = self._sync_client, self._openai
            http = self._http_clients[1] if self._owns_sync else None  # a given client keeps its own timeouts
            shards = _Shards(lambda: _derive(sdk, source, want_async=True, http_client=http))
            self._async_per_loop[id(loop)] = (weakref.ref(loop), shards)
            return shards.clients[0]

    def _shards_of_loop(self) -> _Shards | None:
        entry = self._async_per_loop.get(id(asyncio.get_running_loop()))
        return entry[1] if entry is not None else None

    def close(self) -> None:
        """Close the clients made here (a given client stays open). Safe to call twice."""
        with self._lock:
            sync_client = self._sync_client if self._owns_sync else None
            if sync_client is not None:
                self._sync_client = None
            self._async_per_loop = {}
        if sync_client is not None:
            sync_client.close()

    async def aclose(self) -> None:
        """Like `close`, and also close the async client made for the running loop."""
        await self.aclose_loop()
        self.close()

    async def aclose_loop(self) -> None:
        """Close only the async client made for the running loop (before that loop ends)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async_per_loop.pop(id(loop), None)
        if entry is not None:
            for client in entry[1].clients:
                await client.close()

    # -- requests ---------------------------------------------------------------------------------

    @property
    def response_format_ok(self) -> bool:
        """True while the server takes some ``response_format``."""
        return self.response_format is not None

    def params(
        self, messages: list[dict[str, Any]], *, schema: Mapping[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """The ``create`` arguments for *messages*: the model, *extra*, structured output while the
        server takes it, and the extra body.

        *schema* is the ``json_schema`` object (``name``, ``schema``, ``strict``) of the verdict; without
        one, JSON mode (``json_object``) is the best asked for.
        """
        params: dict[str, Any] = {"model": self.model, "messages": messages, **extra}
        kind = self.response_format
        if kind == "json_schema" and schema is None:
            kind = "json_object"
        if kind == "json_schema" and schema is not None:
            params["response_format"] = {"type": "json_schema", "json_schema": dict(schema)}
        elif kind == "json_object":
            params["response_format"] = {"type": "json_object"}
        if self.extra_body is not None:
            params["extra_body"] = dict(self.extra_body)
        return params

    def rejects(self, outcome: Any, parameter: str) -> bool:
        """True when *outcome* is an HTTP 400/422 that names *parameter* (``_`` may be a space)."""
        if not isinstance(outcome, self._openai.APIStatusError) or outcome.status_code not in (400, 422):
            return False
        text = f"{outcome} {outcome.body}".lower()
        return parameter in text or parameter.replace("_", " ") in text

    def _next_format(self, params: dict[str, Any], outcome: Any) -> dict[str, Any] | None:
        """*params* with the next weaker ``response_format`` when *outcome* refused the one they carry."""
        kind = _format_kind(params)
        if kind is None:
            return None
        if not (self.rejects(outcome, "response_format") or self.rejects(outcome, "json_schema")):
            return None
        weaker = "json_object" if kind == "json_schema" else None
        with self._lock:  # only ever step down, whatever order concurrent requests finish in
            if _FORMAT_RANK[weaker] < _FORMAT_RANK[self.response_format]:
                self.response_format = weaker
        retry = {key: value for key, value in params.items() if key != "response_format"}
        if weaker is not None:
            retry["response_format"] = {"type": weaker}
        return retry

    def _completion_type(self) -> type:
        return self._openai.types.chat.ChatCompletion  # type: ignore[no-any-return]

    def create(self, params: dict[str, Any]) -> Result:
        """Send *params* with the sync client (again without ``response_format`` if it is rejected).

        Through the client's ``post`` (the SDK's documented way to send a request body as it is),
        not ``chat.completions.create``: that walks every message through the SDK's typed-dict
        transform first (about 0.4 ms of interpreter time per request, a quarter of the judging
        loop's CPU in ``benchmarks/judge_throughput.py``), which changes nothing in a body of plain
        strings, numbers and dicts like a judge's. The reply is parsed into the same
        ``ChatCompletion``; errors, retries, auth and Azure's deployment paths are the client's own.
        """
        calls = 0
        current: dict[str, Any] | None = params
        while current is not None:
            calls += 1
            sent = current
            try:
                outcome: Any = self.sync_client().post(_PATH, body=_body(sent), cast_to=self._completion_type())
            except Exception as exc:  # every transport failure is reported by the flow
                outcome = exc
            current = self._next_format(sent, outcome)
        return Result(outcome, calls, _format_kind(sent))

    async def acreate(self, params: dict[str, Any]) -> Result:
        """Like `create`, with the async client of the running loop."""
        calls = 0
        current: dict[str, Any] | None = params
        while current is not None:
            calls += 1
            sent = current
            shards = self._shards_of_loop()
            if shards is not None:
                shards.in_flight += 1
            try:
                outcome: Any = await self.async_client().post(_PATH, body=_body(sent),
                                                              cast_to=self._completion_type())
            except Exception as exc:  # CancelledError is a BaseException and propagates
                outcome = exc
            finally:
                if shards is not None:
                    shards.in_flight -= 1
            current = self._next_format(sent, outcome)
        return Result(outcome, calls, _format_kind(sent))

    def run_sync(self, flow: Flow[T]) -> T:
        """Drive *flow* with the sync client, one request after the other."""
        try:
            batch = next(flow)
            while True:
                batch = flow.send([self.create(params) for params in batch])
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def run_async(self, flow: Flow[T]) -> T:
        """Drive *flow* with the async client; the requests of one batch run concurrently."""
        try:
            batch = next(flow)
            while True:
                if len(batch) == 1:  # the common case: awaited in this task, no task of its own
                    results = [await self.acreate(batch[0])]
                else:
                    results = list(await asyncio.gather(*(self.acreate(params) for params in batch)))
                batch = flow.send(results)
        except StopIteration as stop:
            result: T = stop.value
            return result

    def describe(self, exc: BaseException) -> str:
        """``Type: message`` of *exc*, cut to a few hundred characters, with every known secret masked
        ([`ragaudit.content.scrub`][ragaudit.content.scrub])."""
        message = scrub(str(exc))
        if len(message) > _MAX_ERROR_CHARS:
            message = message[:_MAX_ERROR_CHARS] + "…"
        return f"{type(exc).__name__}: {message}"


_FORMAT_RANK: dict[str | None, int] = {"json_schema": 2, "json_object": 1, None: 0}
_PATH = "/chat/completions"


def _body(params: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body ``chat.completions.create(**params)`` sends: *params* with ``extra_body``
    merged over them (as the SDK merges it)."""
    body = {key: value for key, value in params.items() if key != "extra_body"}
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def _format_kind(params: Mapping[str, Any]) -> str | None:
    fmt = params.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    return kind if isinstance(kind, str) else None


class EndpointSettings(TypedDict):
    """The arguments of an `Endpoint` after *model* and *name*, as an `EndpointJudge` passes them on."""

    base_url: str | None
    api_key: str | None
    client: AnyClient | None
    timeout_s: float
    max_retries: int
    extra_body: Mapping[str, Any] | None


class ChatJudgeSettings(TypedDict, total=False):
    """The keyword arguments of [`ChatRagJudge`][ragaudit.ChatRagJudge] after *model*, for judges that pass
    them on unchanged (``**settings: Unpack[ChatJudgeSettings]``); their defaults are ChatRagJudge's."""

    base_url: str | None
    api_key: str | None
    client: AnyClient | None
    timeout_s: float
    max_retries: int
    temperature: float
    max_context_chars: int
    raise_on_error: bool
    name: str | None
    extra_body: Mapping[str, Any] | None
    max_reply_chars: int


class EndpointJudge:
    """The settings every chat judge shares, ``base_url``, ``close`` and ``aclose`` for a judge whose
    requests go through an `Endpoint`."""

    _name_prefix: ClassVar[str]  # the default name is "<prefix>:<model>"

    model: str
    name: str
    timeout_s: float | None  # always set by _connect; declared as RagJudge declares it
    temperature: float
    max_context_chars: int
    raise_on_error: bool
    _endpoint: Endpoint

    def _connect(
        self,
        model: str,
        *,
        temperature: float,
        max_context_chars: int,
        raise_on_error: bool,
        name: str | None,
        **endpoint: Unpack[EndpointSettings],
    ) -> None:
        """Check the shared settings (ConfigurationError when one is out of range), keep them and
        make the `Endpoint` (*endpoint*: its arguments); *name* None means ``"<_name_prefix>:<model>"``."""
        name = name if name is not None else f"{self._name_prefix}:{model}"
        timeout_s = endpoint["timeout_s"]
        validate_settings(model, timeout_s, endpoint["max_retries"], temperature, max_context_chars, name,
                          endpoint["extra_body"])
        self.model = model
        self.name = name
        self.timeout_s = float(timeout_s)  # the deadline of each request (see _http)
        self.temperature = float(temperature)
        self.max_context_chars = max_context_chars
        self.raise_on_error = raise_on_error
        self._endpoint = Endpoint(model, name=name, **endpoint)

    def _config_json(self, judge: str, protocol: str, **settings: Any) -> str:
        """A ``config_key``: *judge*, the model, the endpoint, *settings* and the *protocol* version, as
        JSON with sorted keys (values JSON cannot hold are written as ``str``)."""
        config = {"judge": judge, "model": self.model, "base_url": self.base_url, **settings, "protocol": protocol}
        return json.dumps(config, sort_keys=True, default=str)

    @property
    def base_url(self) -> str:
        """The endpoint this judge calls."""
        return self._endpoint.base_url

    def close(self) -> None:
        """Close the clients this judge created (a client passed in stays open). Safe to call twice."""
        self._endpoint.close()

    async def aclose(self) -> None:
        """Like `close`, and also close the async client this judge made for the running loop.

        Await it before that loop ends (an async client's connections belong to the loop that
        opened them and cannot be closed from another one).
        """
        await self._endpoint.aclose()

    async def aclose_loop(self) -> None:
        """Close only the async client this judge made for the running loop; everything else stays open.

        The [`Auditor`][ragaudit.Auditor] awaits it before it stops its event loop.
        """
        await self._endpoint.aclose_loop()


# Async clients per event loop, each with its own connection pool, used in turn. httpcore's pool
# re-checks every connection (and, for each, every other one) whenever a request starts or ends:
# one client holding 32 connections for 32 concurrent judgements spent more CPU on that than on the
# judgement itself. A pool per _PER_SHARD requests in flight (at most _ASYNC_SHARDS pools, made as
# the concurrency asks for them) keeps that negligible.
_ASYNC_SHARDS = 8
_PER_SHARD = 4


class _Shards:
    """The async clients of one event loop, handed out round-robin (only that loop's thread asks)."""

    __slots__ = ("_make", "_turn", "clients", "in_flight")

    def __init__(self, make: Any) -> None:
        self._make = make
        self.clients: list[Any] = [make()]
        self.in_flight = 0
        self._turn = 0

    def next(self) -> Any:
        wanted = min(_ASYNC_SHARDS, 1 + self.in_flight // _PER_SHARD)
        if wanted > len(self.clients):
            self.clients.append(self._make())
            self._turn = len(self.clients) - 1
        else:
            self._turn = (self._turn + 1) % len(self.clients)
        return self.clients[self._turn]


def _new_client(
    sdk: Any, base_url: str | None, api_key: str | None, timeout_s: float, max_retries: int, http_client: Any,
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
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries,
            http_client=http_client(),
        )
    except sdk.OpenAIError as exc:
        raise ConfigurationError(f"cannot create the OpenAI client: {exc}") from exc
    return client


def _derive(sdk: Any, source: Any, *, want_async: bool, http_client: Any = None) -> Any:
    """A client of the other kind (sync <-> async) with *source*'s endpoint, credentials and settings
    (and, with *http_client*, the factory of its HTTP client: one deadline per request)."""
    common: dict[str, Any] = {
        "base_url": str(source.base_url),
        "timeout": source.timeout,
        "max_retries": source.max_retries,
        "organization": getattr(source, "organization", None),
        "project": getattr(source, "project", None),
        "default_headers": dict(getattr(source, "_custom_headers", None) or {}),
        "default_query": dict(getattr(source, "_custom_query", None) or {}),
    }
    if http_client is not None:
        common["http_client"] = http_client()
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
