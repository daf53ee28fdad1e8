"""ChatRagJudge: the three scores from one chat-completions call to any OpenAI-compatible endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigurationError, JudgeError
from ..records import JudgeIdentity, Judgement, JudgeRequest, truncate
from ..sessions import SessionRequest, SessionVerdict
from .base import BaseRagJudge
from .cost import CostEstimate, chat_call_estimate, typical_reply_chars
from .llm.endpoint import EndpointJudge, Flow, Tally, choice_text, completion_choices, endpoint_host, retry_after_s
from .llm.fullaudit import FULL_AUDIT
from .llm.parsing import DEFAULT_MAX_REPLY_CHARS, Quoted
from .llm.prompt import MAX_ANSWER_CHARS, MAX_QUESTION_CHARS, build_repair_messages, sanitize_untrusted, template_hash
from .llm.session import SessionProtocol, session_quoted
from .protocols import JudgeProtocol, Reading, SessionJudgeProtocol, SessionReading, protocol_named

if TYPE_CHECKING:
    import openai

    from .llm.endpoint import AnyClient

__all__ = ["DEFAULT_PROTOCOL", "ChatRagJudge"]


@dataclass(slots=True)
class _Run(Tally):
    finish_reason: str | None = None
    response_format: str | None = None
    response_ids: list[str | None] = field(default_factory=list)
    prompt_hash: str | None = None
    notes: list[str] = field(default_factory=list)


_PROTOCOL_SCHEMA: Any = object()  # _ask's default: the per-turn protocol's schema (None means JSON mode)

DEFAULT_PROTOCOL = FULL_AUDIT
"""The name of the protocol ``ChatRagJudge`` uses unless told (see BENCHMARKS.md "Full audit cost")."""


class ChatRagJudge(EndpointJudge, BaseRagJudge):
    """A RAG judge backed by any OpenAI-compatible chat-completions endpoint.

    One call per answer returns the judgement, with the judge protocol [`protocol`][ragaudit.ChatRagJudge.protocol] (a
    declared object, `ragaudit.judges.protocols`: its messages, schema and reader): the full audit by
    default, the three-score seed protocol, G-Eval's steps or a rubric. Temperature *temperature* (0
    by default), structured output (``response_format`` ``json_schema`` with the protocol's schema,
    else ``json_object``, else none: the first kind the server takes, remembered), the question,
    answer and context inside delimiters they cannot close. The reply is read by the protocol (at
    most *max_reply_chars* of it): the reply's own verdict object, never one quoted from the judged
    content, scores never clamped.

    Endpoints: OpenAI by default; ``base_url`` for vLLM, Ollama, LM Studio and other compatible
    servers (no key needed there); or a ready ``client``: an ``openai.OpenAI``, ``AsyncOpenAI``,
    ``AzureOpenAI`` or ``AsyncAzureOpenAI`` (for Azure, *model* is the deployment name). Both
    [`judge`][ragaudit.ChatRagJudge.judge] (sync client) and [`ajudge`][ragaudit.ChatRagJudge.ajudge] (async client)
    call the endpoint natively. When only one kind of client is given, the other is made on first use with the same base
    URL, credentials, headers, timeout and retries. A given client keeps its own timeout and retries
    (*timeout_s* and *max_retries* configure only clients this judge creates), and it is not closed
    by `close`.

    Failures never raise by default: a transport error (timeout, connection refused, HTTP 5xx,
    429 after the SDK's own retries), an empty reply or a reply with no readable scores even after
    one repair request, or two verdicts that disagree, gives a [`Judgement`][ragaudit.Judgement] with
    ``error`` set (exception type and message, never the API key) and no scores. A verdict whose
    scale is in doubt (a value above 1 on no stated or certain scale) has no scores and is asked for
    again once, like a reply with none. With ``raise_on_error=True`` failures raise
    [`JudgeError`][ragaudit.JudgeError] instead (chained to the cause). A server that rejects a
    ``response_format`` with HTTP 400 is asked again with the next weaker one.

    Every judgement carries ``usage`` (``calls``; ``prompt_tokens`` and ``completion_tokens`` when the
    server reported them, None when it reported garbage), ``latency_s``, the reply the scores were
    read from as ``raw_output`` (cut at *max_reply_chars*), its ``identity`` (model, endpoint host,
    protocol version, prompt template hash, response id) and, in ``details``, the model the server
    answered with, the protocol version, parse notes, the scale the scores were read on, and whether
    a repair was needed.

    A judge with its own prompt and reply format is a protocol
    (`BaseJudgeProtocol`), passed as *protocol*; the call, the
    repair, usage and errors stay this class's.

    Args:
        model: model (or Azure deployment) name.
        base_url: endpoint, e.g. ``http://localhost:11434/v1``; default ``OPENAI_BASE_URL`` or OpenAI.
        api_key: default ``OPENAI_API_KEY``; not needed when a base URL is set.
        client: a ready OpenAI client (instead of *base_url* and *api_key*).
        timeout_s: the deadline of each HTTP request, connect, write, headers and the whole body
            included, however slowly they arrive (the SDK's own timeout is per socket read); a
            client passed in keeps its own timeouts.
        max_retries: SDK retries of 408/409/429/5xx and connection errors.
        temperature: sampling temperature, 0 to 2.
        max_context_chars: the context is cut to this many characters, with a visible marker.
        raise_on_error: raise [`JudgeError`][ragaudit.JudgeError] instead of returning a failed judgement.
        name: the judge's name in records; default ``"chat:<model>"``.
        extra_body: extra JSON fields for the request body (e.g. vLLM's ``guided_json``).
        protocol: a protocol name, ``"three-score"`` (the seed protocol: three scores and a reason),
            ``"full-audit"`` (the same one call also returns a verdict per answer sentence and a 0-3
            grade per document, see `ragaudit.judges.llm.fullaudit`) or ``"g-eval"`` (evaluation
            steps, 1-5 scores), or a `JudgeProtocol` object (a
            `RubricProtocol`); default `DEFAULT_PROTOCOL`.
        max_reply_chars: at most this much of a reply is read and kept (``details["reply_cut_chars"]``
            says how much was not).
        session_protocol: how [`judge_session`][ragaudit.ChatRagJudge.judge_session] asks about a whole conversation (a
            `SessionJudgeProtocol`); default
            `SessionProtocol`.
    """

    protocol: JudgeProtocol
    """The judge protocol: what is asked and how the reply is read (`ragaudit.judges.protocols`)."""
    _name_prefix: ClassVar[str] = "chat"

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AnyClient | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_context_chars: int = 24_000,
        raise_on_error: bool = False,
        name: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS,
        protocol: str | JudgeProtocol | None = None,
        session_protocol: SessionJudgeProtocol | None = None,
    ) -> None:
        if isinstance(max_reply_chars, bool) or not isinstance(max_reply_chars, int) or max_reply_chars < 1:
            raise ConfigurationError(f"max_reply_chars must be an int >= 1, got {max_reply_chars!r}")
        self.max_reply_chars = max_reply_chars
        protocol = DEFAULT_PROTOCOL if protocol is None else protocol
        self.protocol = protocol if isinstance(protocol, JudgeProtocol) else protocol_named(protocol)
        if session_protocol is not None and not isinstance(session_protocol, SessionJudgeProtocol):
            raise ConfigurationError("session_protocol must be a SessionJudgeProtocol (name, version, schema, "
                                     f"messages, read, repair_prompt), got {type(session_protocol).__name__}")
        self.session_protocol: SessionJudgeProtocol = session_protocol or SessionProtocol()
        self._connect(model, base_url=base_url, api_key=api_key, client=client, timeout_s=timeout_s,
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

    def judge_session(self, request: SessionRequest) -> SessionVerdict:
        """The verdict on a whole conversation (one call, [`session_protocol`][ragaudit.ChatRagJudge.session_protocol]),
        sync client."""
        return self._endpoint.run_sync(self._session_flow(request))

    async def ajudge_session(self, request: SessionRequest) -> SessionVerdict:
        """The verdict on a whole conversation (one call, [`session_protocol`][ragaudit.ChatRagJudge.session_protocol]),
        async client."""
        return await self._endpoint.run_async(self._session_flow(request))

    @property
    def protocol_version(self) -> str:
        """The protocol's wire version (``"ragaudit-full-audit/1"``), in every judgement's identity."""
        return self.protocol.version

    def config_key(self) -> str:
        """Model, endpoint, temperature, context limit, extra body and protocol version, as JSON."""
        return self._config_json("chat", self.protocol_version, temperature=self.temperature,
                                 max_context_chars=self.max_context_chars, extra_body=self.extra_body)

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float, exact: bool = True
    ) -> CostEstimate:
        """One call: this judge's exact prompt for *request* and a typical reply (see ``judges.cost``)."""
        reply = typical_reply_chars(self.protocol.reply_shape(request))
        return chat_call_estimate(self._messages(request), reply, chars_per_token)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _sync_client(self) -> openai.OpenAI | None:  # read by tests that tune the client in place
        return self._endpoint._sync_client

    # -- the protocol's parts, for this judge's settings --------------------------------------------

    def _messages(self, request: JudgeRequest) -> list[dict[str, Any]]:
        """The chat messages asking for the judgement of *request*."""
        return self.protocol.messages(request, max_context_chars=self.max_context_chars)

    def _read(self, text: str, request: JudgeRequest) -> Reading:
        """What the reply *text* says; an unusable reading gets one repair request."""
        return self.protocol.read(text, request, quoted=self._quoted(request), max_chars=self.max_reply_chars)

    def _quoted(self, request: JudgeRequest) -> Quoted:
        """The untrusted texts as the judge was shown them: a verdict written there is never the judge's."""
        shown = [
            truncate(request.query, MAX_QUESTION_CHARS),
            truncate(request.answer, MAX_ANSWER_CHARS),
            truncate(request.context, self.max_context_chars),
        ]
        if request.reference is not None:
            shown.append(truncate(request.reference, self.max_context_chars))
        if request.standalone_query is not None:
            shown.append(truncate(request.standalone_query, MAX_QUESTION_CHARS))
        shown.extend(text for _, text in request.history)
        return Quoted([*shown, *(sanitize_untrusted(text) for text in shown)])


    def _judgement(self, run: _Run, reading: Reading, *, repaired: bool, source: int = -1) -> Judgement:
        """The judgement of a usable *reading* of reply number *source* (the last by default)."""
        return Judgement(
            faithfulness=reading.scores.get("faithfulness"),
            context_relevance=reading.scores.get("context_relevance"),
            answer_relevance=reading.scores.get("answer_relevance"),
            reason=reading.reason,
            raw_output=self._kept(run.outputs[source]) if run.outputs else None,
            judge=self.name,
            latency_s=run.latency(),
            usage=run.usage.as_dict(),
            details=self._details(run, reading, repaired),
            identity=self._identity(run, source),
            sentences=reading.sentences,
            document_grades=reading.document_grades,
        )

    def _identity(self, run: _Run, source: int = -1,
                  protocol: JudgeProtocol | SessionJudgeProtocol | None = None) -> JudgeIdentity:
        """Which judge made this judgement: model, endpoint host, protocol, prompt hash, response id."""
        return JudgeIdentity(
            model=self.model,
            endpoint=endpoint_host(self.base_url),
            protocol=(protocol or self.protocol).name,
            protocol_version=(protocol or self.protocol).version,
            prompt_hash=run.prompt_hash,
            response_id=run.response_ids[source] if run.response_ids else None,
            response_model=run.response_model,
        )

    def _kept(self, text: str) -> str:
        """*text* as a judgement keeps it: cut at ``max_reply_chars`` with a visible marker."""
        return truncate(text, self.max_reply_chars)

    def _failed(
        self, run: _Run, error: str, cause: Exception | None = None, reading: Reading | None = None
    ) -> Judgement:
        """A failed judgement (or JudgeError with ``raise_on_error``); *reading*: what was read, if anything."""
        if self.raise_on_error:
            raise JudgeError(f"{self.name}: {error}") from cause
        details = self._details(run, reading, repaired=len(run.outputs) > 1)
        status = getattr(cause, "status_code", None)
        if isinstance(status, int):
            details["status_code"] = status
            retry_after = retry_after_s(cause)
            if retry_after is not None:  # the Auditor's rate control holds calls back this long
                details["retry_after_s"] = retry_after
        return Judgement.failed(
            self.name,
            error,
            raw_output=self._kept(run.outputs[-1]) if run.outputs else None,
            latency_s=run.latency(),
            usage=run.usage.as_dict(),
            details=details,
            identity=self._identity(run),
        )

    # -- the judging flow, shared by judge() and ajudge() -----------------------------------------

    def _flow(self, request: JudgeRequest) -> Flow[Judgement]:
        run = _Run()
        messages = self._messages(request)
        run.prompt_hash = template_hash(messages, self.protocol.schema)
        outcome = yield from self._ask(messages, run)
        if isinstance(outcome, Exception):
            return self._failed(run, self._endpoint.describe(outcome), outcome)
        text = self._take_text(outcome, run)
        if text is None:
            return self._failed(run, "JudgeError: the judge returned no choices")
        reading = self._read(text[: self.max_reply_chars], request)
        if reading.usable and not reading.retry:
            return self._judgement(run, reading, repaired=False)
        # One repair request: for no readable verdict, two that disagree, or a score on no certain scale.
        outcome = yield from self._ask(build_repair_messages(messages, text, self.protocol.repair_prompt(request)), run)
        if isinstance(outcome, Exception):
            failure = self._endpoint.describe(outcome)
            if reading.usable:  # the scores the judge did give on the 0-1 scale stand
                run.notes.append(f"the repair request failed: {failure}")
                return self._judgement(run, reading, repaired=False, source=0)
            return self._failed(run, f"{self.protocol.unusable} judge output; the repair request failed: {failure}",
                                outcome, reading)
        text = self._take_text(outcome, run)
        repaired = self._read(text[: self.max_reply_chars], request) if text is not None else None
        if repaired is not None and repaired.usable:
            return self._judgement(run, repaired, repaired=True)
        if reading.usable:
            run.notes.append("the repair reply had no usable verdict; the first reply's scores kept")
            return self._judgement(run, reading, repaired=False, source=0)
        final = repaired if repaired is not None else reading
        notes = "; ".join(final.notes) or self.protocol.nothing_read
        return self._failed(run, f"JudgeError: {self.protocol.unusable} judge output after one repair ({notes})",
                            reading=final)

    def _session_flow(self, request: SessionRequest) -> Flow[SessionVerdict]:
        """One call (and at most one repair request) for the verdict on *request*'s conversation."""
        protocol, run = self.session_protocol, _Run()
        messages = protocol.messages(request, max_context_chars=self.max_context_chars)
        run.prompt_hash = template_hash(messages, protocol.schema)
        asked, reading = messages, None
        for attempt in ("first", "repair"):
            outcome = yield from self._ask(asked, run, protocol.schema)
            if isinstance(outcome, Exception):
                return self._session_verdict(run, reading, protocol, self._endpoint.describe(outcome), outcome)
            text = self._take_text(outcome, run)
            if text is None:
                return self._session_verdict(run, reading, protocol, "JudgeError: the judge returned no choices")
            reading = protocol.read(text[: self.max_reply_chars], request, quoted=session_quoted(request),
                                    max_chars=self.max_reply_chars)
            if reading.usable:
                return self._session_verdict(run, reading, protocol, repaired=attempt == "repair")
            asked = build_repair_messages(messages, text, protocol.repair_prompt(request))
        notes = "; ".join(reading.notes if reading else ()) or "nothing readable"
        return self._session_verdict(run, reading, protocol, f"JudgeError: unreadable session verdict after one "
                                     f"repair ({notes})")

    def _session_verdict(self, run: _Run, reading: SessionReading | None, protocol: SessionJudgeProtocol,
                         error: str | None = None, cause: Exception | None = None,
                         repaired: bool = False) -> SessionVerdict:
        if error is not None and self.raise_on_error:
            raise JudgeError(f"{self.name}: {error}") from cause
        details: dict[str, Any] = {"model": self.model, "response_model": run.response_model,
                                   "protocol": protocol.version, "response_format": run.response_format,
                                   "repaired": repaired, "notes": list(reading.notes) if reading else []}
        status = getattr(cause, "status_code", None)
        if isinstance(status, int):
            details["status_code"] = status
        given = reading if reading is not None and reading.usable and error is None else None
        return SessionVerdict(
            resolved=given.resolved if given else None, resolved_turn=given.resolved_turn if given else None,
            contradictions=given.contradictions if given else (), repeated=given.repeated if given else (),
            reason=given.reason if given else None, judge=self.name,
            raw_output=self._kept(run.outputs[-1]) if run.outputs else None, latency_s=run.latency(),
            usage=run.usage.as_dict(), error=error, details=details,
            identity=self._identity(run, protocol=protocol))

    def _ask(self, messages: list[dict[str, Any]], run: _Run, schema: Any = _PROTOCOL_SCHEMA) -> Flow[Any]:
        schema = self.protocol.schema if schema is _PROTOCOL_SCHEMA else schema
        params = self._endpoint.params(messages, schema=schema, temperature=self.temperature)
        [result] = yield [params]
        run.usage.record(result)
        run.response_format = result.response_format
        return result.outcome

    @staticmethod
    def _take_text(completion: Any, run: _Run) -> str | None:
        model = getattr(completion, "model", None)
        run.response_model = model if isinstance(model, str) else None
        choices = completion_choices(completion)
        if not choices:
            return None
        run.finish_reason = getattr(choices[0], "finish_reason", None)
        text = choice_text(choices[0])
        response_id = getattr(completion, "id", None)
        run.outputs.append(text)
        run.response_ids.append(response_id if isinstance(response_id, str) else None)
        return text

    def _details(self, run: _Run, reading: Reading | None, repaired: bool) -> dict[str, Any]:
        details: dict[str, Any] = {
            "model": self.model,
            "response_model": run.response_model,
            "protocol": self.protocol.name,
            "protocol_version": self.protocol_version,
            "response_format": run.response_format,
            "finish_reason": run.finish_reason,
            "repaired": repaired,
        }
        if reading is not None:
            details["parse_notes"] = [*reading.notes, *run.notes]
            details.update(reading.details)
        elif run.notes:
            details["parse_notes"] = list(run.notes)
        cut = [len(text) - self.max_reply_chars for text in run.outputs if len(text) > self.max_reply_chars]
        if cut:
            details["reply_cut_chars"] = max(cut)
        if len(run.outputs) > 1:
            details["initial_output"] = self._kept(run.outputs[0])
        return details
