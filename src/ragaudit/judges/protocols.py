"""Judge protocols: what a chat judge asks and how it reads the reply, as declared objects.

A protocol is a **name** (``"three-score"``), a wire **version** (``"ragaudit-judge/3"``: in every
judgement's identity and in cache keys, so a changed prompt is never mistaken for the old one), the
``json_schema`` asked for (None: JSON mode), a **messages** builder, a **reader** and the **repair**
prompt, plus a typical reply for cost estimates. [`ChatRagJudge`][ragaudit.ChatRagJudge] runs any of them and
owns everything else (the call, structured-output fallback, the one repair request, usage, errors)::

    ChatRagJudge(protocol="full-audit")              # by name, see protocol_named()
    ChatRagJudge(protocol=RubricProtocol(criteria))  # a protocol with settings of its own

The protocols of the design: ``"three-score"`` (`ThreeScoreProtocol`, the seed: three scores and
a reason), ``"full-audit"`` (`FullAuditProtocol`, the default:
also a verdict per answer sentence and a grade per document), ``"g-eval"``
(`GEvalProtocol`: evaluation steps and 1-5 scores; the
[`GEvalJudge`][ragaudit.GEvalJudge] adds token probabilities and sampling on top) and rubric
(`RubricProtocol`, user criteria: made with its criteria, or by
[`RubricJudge`][ragaudit.RubricJudge]). A protocol of your own derives from `BaseJudgeProtocol`.

A **session protocol** (`SessionJudgeProtocol`) asks about a whole conversation instead of one
answer: its messages are built from a [`SessionRequest`][ragaudit.SessionRequest] and its reader gives a
`SessionReading` (resolved, contradictions, repeated turns). ``ChatRagJudge(session_protocol=...)``
runs it through the same endpoint, structured-output fallback and one repair request; the default is
`SessionProtocol`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..records import DocumentGrade, JudgeRequest, SentenceVerdict
from ..sessions import Contradiction, Repetition, Resolution, SessionRequest
from .llm.parsing import Quoted, parse_judgement
from .llm.prompt import PROTOCOL_VERSION, REPAIR_PROMPT, VERDICT_SCHEMA, build_messages

__all__ = [
    "PROTOCOL_NAMES",
    "BaseJudgeProtocol",
    "JudgeProtocol",
    "Reading",
    "SessionJudgeProtocol",
    "SessionReading",
    "ThreeScoreProtocol",
    "protocol_named",
]


@dataclass(frozen=True, slots=True)
class Reading:
    """What a protocol read from one reply.

    ``scores`` by standard score name (a missing name is None); ``details`` go into the judgement's
    details; ``notes`` say what was repaired, set aside or missing; ``usable`` False asks for the one
    repair request; ``retry`` True asks for it too, but the reading is kept if the repair gives nothing
    usable.
    """

    scores: Mapping[str, float | None]
    reason: str | None
    details: Mapping[str, Any]
    notes: tuple[str, ...]
    usable: bool
    retry: bool = False
    sentences: tuple[SentenceVerdict, ...] = ()
    document_grades: tuple[DocumentGrade, ...] = ()


@runtime_checkable
class JudgeProtocol(Protocol):
    """What a chat judge asks and how it reads the answer (see the module docstring)."""

    name: str
    """The protocol's name, as ``ChatRagJudge(protocol=...)`` takes it."""
    version: str
    """The wire version (a judge's ``protocol_version``); changes whenever the prompt or reader does."""
    schema: Mapping[str, Any] | None
    """The ``json_schema`` object (``name``, ``schema``, ``strict``) asked for; None for JSON mode."""
    unusable: str
    """How an error message calls a reply with nothing usable (``"unparseable"``)."""
    nothing_read: str
    """The notes of such a reply when there are none (``"no scores"``)."""

    def messages(self, request: JudgeRequest, *, max_context_chars: int) -> list[dict[str, Any]]:
        """The chat messages asking for the judgement of *request* (context cut at *max_context_chars*)."""
        ...

    def read(self, text: str, request: JudgeRequest, *, quoted: Quoted, max_chars: int) -> Reading:
        """What the reply *text* says (at most *max_chars* read; *quoted*: the texts shown). Never raises."""
        ...

    def repair_prompt(self, request: JudgeRequest) -> str:
        """What the one repair request asks, after the prompt and the unusable reply."""
        ...

    def reply_shape(self, request: JudgeRequest) -> Mapping[str, Any]:
        """A typical reply without its reason, for cost estimates."""
        ...


class BaseJudgeProtocol:
    """Defaults for a `JudgeProtocol`: JSON mode, a repair prompt that shows `reply_format`."""

    name: str = ""
    version: str = ""
    schema: Mapping[str, Any] | None = None
    unusable: str = "unreadable"
    nothing_read: str = "nothing readable"

    def messages(self, request: JudgeRequest, *, max_context_chars: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def read(self, text: str, request: JudgeRequest, *, quoted: Quoted, max_chars: int) -> Reading:
        raise NotImplementedError

    def reply_format(self) -> str:
        """The JSON the prompt asks for, as shown to the judge."""
        raise NotImplementedError

    def reply_shape(self, request: JudgeRequest) -> Mapping[str, Any]:
        raise NotImplementedError

    def repair_prompt(self, request: JudgeRequest) -> str:
        return (
            "Your previous reply could not be read as the required JSON object. Reply again with only one "
            f"JSON object of the form {self.reply_format()} and nothing else: no prose, no code fences."
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"


_THREE_SCORE_SHAPE = {"faithfulnessScore": 0.75, "contextRelevanceScore": 0.75, "answerRelevanceScore": 0.75}


class ThreeScoreProtocol(BaseJudgeProtocol):
    """The seed protocol: the three scores and a reason, in one call (`ragaudit.judges.llm.prompt`);
    the reply read by `parse_judgement`."""

    name = "three-score"
    version = PROTOCOL_VERSION
    schema = VERDICT_SCHEMA
    unusable = "unparseable"
    nothing_read = "no scores"

    def messages(self, request: JudgeRequest, *, max_context_chars: int) -> list[dict[str, Any]]:
        return build_messages(request, max_context_chars=max_context_chars)

    def read(self, text: str, request: JudgeRequest, *, quoted: Quoted, max_chars: int) -> Reading:
        parsed = parse_judgement(text, quoted=quoted, max_chars=max_chars)
        details: dict[str, Any] = {"scale": parsed.scale}
        if parsed.ambiguous:
            details["ambiguous"] = True
        if parsed.rejected:
            details["rejected_scores"] = list(parsed.rejected)
        usable = parsed.has_scores and not parsed.ambiguous
        return Reading(parsed.scores(), parsed.reason, details, parsed.notes, usable, retry=bool(parsed.rejected))

    def repair_prompt(self, request: JudgeRequest) -> str:
        return REPAIR_PROMPT

    def reply_shape(self, request: JudgeRequest) -> Mapping[str, Any]:
        return _THREE_SCORE_SHAPE


@dataclass(frozen=True, slots=True)
class SessionReading:
    """What a session protocol read from one reply: None or empty where the reply gave nothing;
    ``notes`` say what was set aside; ``usable`` False asks for the one repair request."""

    resolved: Resolution | None
    resolved_turn: int | None
    contradictions: tuple[Contradiction, ...]
    repeated: tuple[Repetition, ...]
    reason: str | None
    notes: tuple[str, ...]
    usable: bool


@runtime_checkable
class SessionJudgeProtocol(Protocol):
    """What a chat judge asks about a whole conversation and how it reads the reply."""

    name: str
    """The protocol's name."""
    version: str
    """The wire version, in the session verdict's judge identity; changes with the prompt or reader."""
    schema: Mapping[str, Any] | None
    """The ``json_schema`` object asked for; None for JSON mode."""

    def messages(self, request: SessionRequest, *, max_context_chars: int) -> list[dict[str, Any]]:
        """The chat messages asking for the verdict on the conversation of *request*."""
        ...

    def read(self, text: str, request: SessionRequest, *, quoted: Quoted, max_chars: int) -> SessionReading:
        """What the reply *text* says about *request* (turn and sentence numbers checked against it;
        sentence texts taken from it, never from the reply). Never raises."""
        ...

    def repair_prompt(self, request: SessionRequest) -> str:
        """What the one repair request asks, after the prompt and the unusable reply."""
        ...


# name -> (module, class) of the protocols that need no settings; imported on first use
_BY_NAME = {
    "three-score": (__name__, "ThreeScoreProtocol"),
    "full-audit": ("ragaudit.judges.llm.fullaudit", "FullAuditProtocol"),
    "g-eval": ("ragaudit.judges.geval_protocol", "GEvalProtocol"),
}
_NEED_SETTINGS = {
    "rubric": "the rubric protocol needs its criteria: RubricJudge(criteria=[...]) or "
              "ChatRagJudge(protocol=RubricProtocol(criteria=[...]))",
}

PROTOCOL_NAMES: tuple[str, ...] = tuple(_BY_NAME)
"""The protocols `protocol_named` makes (a rubric needs its criteria, see `RubricProtocol`)."""


def protocol_named(name: str) -> JudgeProtocol:
    """The protocol called *name* (one of `PROTOCOL_NAMES`); ConfigurationError for another."""
    if name in _NEED_SETTINGS:
        raise ConfigurationError(_NEED_SETTINGS[name])
    where = _BY_NAME.get(name) if isinstance(name, str) else None
    if where is None:
        raise ConfigurationError(f"protocol must be one of {PROTOCOL_NAMES} or a JudgeProtocol, got {name!r}")
    protocol: JudgeProtocol = getattr(importlib.import_module(where[0]), where[1])()
    return protocol
