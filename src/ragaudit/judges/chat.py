"""ChatRagJudge: the three scores from one chat-completions call to any OpenAI-compatible endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import JudgeError
from ..records import Judgement, JudgeRequest
from .base import BaseRagJudge
from .llm.endpoint import EndpointJudge, Flow, Tally, choice_text, completion_choices
from .llm.parsing import parse_judgement
from .llm.prompt import PROTOCOL_VERSION, REPAIR_PROMPT, build_messages, build_repair_messages

if TYPE_CHECKING:
    import openai

    from .llm.endpoint import AnyClient

__all__ = ["ChatRagJudge"]


@dataclass(slots=True)
class _Run(Tally):
    finish_reason: str | None = None
    response_format: bool = True


@dataclass(frozen=True, slots=True)
class _Reading:
    """What a judge read from one reply (see :meth:`ChatRagJudge._read`).

    ``scores`` by standard score name (a missing name is None); ``details`` go into the judgement's
    details; ``notes`` say what was repaired, clamped or missing; ``usable`` False asks for the one
    repair request.
    """

    scores: Mapping[str, float | None]
    reason: str | None
    details: Mapping[str, Any]
    notes: tuple[str, ...]
    usable: bool


class ChatRagJudge(EndpointJudge, BaseRagJudge):
    """A RAG judge backed by any OpenAI-compatible chat-completions endpoint.

    One call per answer returns all three scores, with the fixed protocol of
    :mod:`ragaudit.judges.llm.prompt`: the system prompt, temperature *temperature* (0 by default),
    ``response_format={"type": "json_object"}``, the question, answer and context inside
    delimiters they cannot close, and a rubric with anchors. The reply is read by
    :func:`~ragaudit.judges.llm.parsing.parse_judgement`.

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

    Judges with their own prompt and reply format subclass it and override the hooks
    :meth:`_messages`, :meth:`_read` and :meth:`_repair_prompt` (and, for the judgement they
    return, :meth:`_judgement` and :meth:`_failed`); the call, the repair, usage and errors stay
    this class's.

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

    protocol: ClassVar[str] = PROTOCOL_VERSION
    """The prompt version, in every judgement's ``details["protocol"]``."""
    _name_prefix: ClassVar[str] = "chat"
    _unusable: ClassVar[str] = "unparseable"  # how error messages call a reply with nothing usable
    _nothing_read: ClassVar[str] = "no scores"  # the notes of such a reply when there are none

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
        self._connect(model, base_url=base_url, api_key=api_key, client=client, timeout=timeout,
                      max_retries=max_retries, temperature=temperature, max_context_chars=max_context_chars,
                      raise_on_error=raise_on_error, name=name, extra_body=extra_body)
        self.extra_body = self._endpoint.extra_body

    # -- public API -------------------------------------------------------------------------------

    def judge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the sync client (blocking)."""
        return self._endpoint.run_sync(self._flow(request))

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Judge *request* with the async client (never blocks the event loop)."""
        return await self._endpoint.run_async(self._flow(request))

    def config_key(self) -> str:
        """Model, endpoint, temperature, context limit, extra body and protocol version, as JSON."""
        return self._config_json("chat", PROTOCOL_VERSION, temperature=self.temperature,
                                 max_context_chars=self.max_context_chars, extra_body=self.extra_body)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _sync_client(self) -> openai.OpenAI | None:  # read by tests that tune the client in place
        return self._endpoint._sync_client

    # -- hooks for judges with their own prompt and reply -----------------------------------------

    def _messages(self, request: JudgeRequest) -> list[dict[str, Any]]:
        """The chat messages asking for the judgement of *request*."""
        return build_messages(request, max_context_chars=self.max_context_chars)

    def _read(self, text: str, request: JudgeRequest) -> _Reading:
        """What the reply *text* says; an unusable reading gets one repair request."""
        parsed = parse_judgement(text)
        return _Reading(parsed.scores(), parsed.reason, {"scale": parsed.scale}, parsed.notes, parsed.has_scores)

    def _repair_prompt(self, request: JudgeRequest) -> str:
        """What the repair request asks, after the prompt and the unusable reply."""
        return REPAIR_PROMPT

    def _judgement(self, run: _Run, reading: _Reading, *, repaired: bool) -> Judgement:
        """The judgement of a usable *reading*."""
        return Judgement(
            faithfulness=reading.scores.get("faithfulness"),
            context_relevance=reading.scores.get("context_relevance"),
            answer_relevance=reading.scores.get("answer_relevance"),
            reason=reading.reason,
            raw_output=run.outputs[-1] if run.outputs else None,
            judge=self.name,
            latency_s=run.latency(),
            usage=run.usage.as_dict(),
            details=self._details(run, reading, repaired),
        )

    def _failed(
        self, run: _Run, error: str, cause: Exception | None = None, reading: _Reading | None = None
    ) -> Judgement:
        """A failed judgement (or JudgeError with ``raise_on_error``); *reading*: what was read, if anything."""
        if self.raise_on_error:
            raise JudgeError(f"{self.name}: {error}") from cause
        details = self._details(run, reading, repaired=len(run.outputs) > 1)
        status = getattr(cause, "status_code", None)
        if isinstance(status, int):
            details["status_code"] = status
        return Judgement.failed(
            self.name,
            error,
            raw_output=run.outputs[-1] if run.outputs else None,
            latency_s=run.latency(),
            usage=run.usage.as_dict(),
            details=details,
        )

    # -- the judging flow, shared by judge() and ajudge() -----------------------------------------

    def _flow(self, request: JudgeRequest) -> Flow[Judgement]:
        run = _Run()
        messages = self._messages(request)
        outcome = yield from self._ask(messages, run)
        if isinstance(outcome, Exception):
            return self._failed(run, self._endpoint.describe(outcome), outcome)
        text = self._take_text(outcome, run)
        if text is None:
            return self._failed(run, "JudgeError: the judge returned no choices")
        reading = self._read(text, request)
        if reading.usable:
            return self._judgement(run, reading, repaired=False)
        outcome = yield from self._ask(build_repair_messages(messages, text, self._repair_prompt(request)), run)
        if isinstance(outcome, Exception):
            failure = self._endpoint.describe(outcome)
            return self._failed(run, f"{self._unusable} judge output; the repair request failed: {failure}",
                                outcome, reading)
        text = self._take_text(outcome, run)
        repaired = self._read(text, request) if text is not None else reading
        if not repaired.usable:
            notes = "; ".join(repaired.notes) or self._nothing_read
            return self._failed(run, f"JudgeError: {self._unusable} judge output after one repair ({notes})",
                                reading=repaired)
        return self._judgement(run, repaired, repaired=True)

    def _ask(self, messages: list[dict[str, Any]], run: _Run) -> Flow[Any]:
        [result] = yield [self._endpoint.params(messages, temperature=self.temperature)]
        run.usage.record(result)
        run.response_format = result.response_format
        return result.outcome

    @staticmethod
    def _take_text(completion: Any, run: _Run) -> str | None:
        run.response_model = getattr(completion, "model", None)
        choices = completion_choices(completion)
        if not choices:
            return None
        run.finish_reason = getattr(choices[0], "finish_reason", None)
        text = choice_text(choices[0])
        run.outputs.append(text)
        return text

    def _details(self, run: _Run, reading: _Reading | None, repaired: bool) -> dict[str, Any]:
        details: dict[str, Any] = {
            "model": self.model,
            "response_model": run.response_model,
            "protocol": self.protocol,
            "response_format": run.response_format,
            "finish_reason": run.finish_reason,
            "repaired": repaired,
        }
        if reading is not None:
            details["parse_notes"] = list(reading.notes)
            details.update(reading.details)
        if len(run.outputs) > 1:
            details["initial_output"] = run.outputs[0]
        return details
