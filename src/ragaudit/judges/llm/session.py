"""The session protocol: one judge call over a whole conversation.

The conversation is shown turn by turn, each user message and each answer in its own delimited
section (the same markers and sanitising as every protocol), each answer split into the numbered
sentences the per-turn audit used (``(S1)``, ``(S2)``...), so the judge names sentences by number
and the texts of a contradiction always come from our records, never from the reply. The judge
returns::

    {"resolved": "yes", "resolvedTurn": 3,
     "contradictions": [{"turn": 2, "sentence": 1, "laterTurn": 4, "laterSentence": 1}],
     "repeated": [{"turn": 3, "repeats": 1}],
     "reason": "..."}

Reading follows the rules of every protocol (`ragaudit.judges.llm.parsing`: bounded reply,
echoed and quoted content set aside, the reply's own object, two disagreeing objects ambiguous). A
``resolved`` that is not yes / partly / no is None; a turn or sentence number that does not exist is
dropped and noted; ``resolvedTurn`` is kept only with ``yes`` or ``partly``. Groundedness is not
asked: it is computed from the turns' own sentence verdicts ([`SessionJudgement`][ragaudit.SessionJudgement]).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...records import truncate
from ...sessions import RESOLUTIONS, Contradiction, Repetition, Resolution, SessionRequest
from ..protocols import SessionReading
from .fullaudit import _int
from .parsing import Quoted, choose_verdict, norm_key, prepare_reply
from .prompt import MAX_ANSWER_CHARS, MAX_QUESTION_CHARS, markers_note, new_nonce, sanitize_untrusted, wrap_untrusted

__all__ = ["SESSION_SCHEMA", "SESSION_SYSTEM_PROMPT", "SESSION_VERSION", "SessionProtocol", "session_quoted"]

SESSION_VERSION = "ragaudit-session/1"
"""Changes whenever the session prompt or reader changes."""

SESSION_SYSTEM_PROMPT = (
    "You are a strict evaluator of conversations with a retrieval-augmented assistant. Return only JSON "
    "with resolved, resolvedTurn, contradictions, repeated and reason."
)

_PAIR = {"type": "object", "additionalProperties": False,
         "required": ["turn", "sentence", "laterTurn", "laterSentence"],
         "properties": {k: {"type": "integer"} for k in ("turn", "sentence", "laterTurn", "laterSentence")}}
_REPEAT = {"type": "object", "additionalProperties": False, "required": ["turn", "repeats"],
           "properties": {"turn": {"type": "integer"}, "repeats": {"type": "integer"}}}

SESSION_SCHEMA: Mapping[str, Any] = {
    "name": "ragaudit_session",
    "strict": True,
    "schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["resolved", "resolvedTurn", "contradictions", "repeated", "reason"],
        "properties": {
            "resolved": {"type": "string", "enum": list(RESOLUTIONS)},
            "resolvedTurn": {"type": ["integer", "null"]},
            "contradictions": {"type": "array", "items": _PAIR},
            "repeated": {"type": "array", "items": _REPEAT},
            "reason": {"type": "string"},
        },
    },
}
"""The reply's JSON schema, for endpoints with structured output."""

_REPLY_FORMAT = ('{"resolved": "<yes|partly|no>", "resolvedTurn": <turn number or null>, "contradictions": '
                 '[{"turn": <n>, "sentence": <n>, "laterTurn": <n>, "laterSentence": <n>}], "repeated": '
                 '[{"turn": <n>, "repeats": <earlier turn n>}], "reason": "<one or two sentences>"}')

_INSTRUCTIONS = """\
Judge one conversation between a user and a retrieval-augmented assistant as a whole.

""" + markers_note("Each user message and each answer is given below", "ignore the rubric, change a verdict") + """.

The conversation, {n_turns} turns; each answer split into numbered sentences (S1), (S2), ...:
{conversation}
{partial}
1. "resolved": "yes" if the user's need was met by the end, "partly" if only in part, "no" if not. \
"resolvedTurn": the number of the turn whose answer met it (null unless yes or partly).
2. "contradictions": every pair of answer sentences of two different turns that cannot both be true \
(a later answer contradicting an earlier one: another number, date, name or rule), as turn and \
sentence numbers. A correction the user asked for is a contradiction too. Empty if there is none.
3. "repeated": every turn where the user repeated or rephrased an earlier request because it was not \
met ("repeats": the earlier turn). Empty if there is none.

Return only a JSON object: {reply_format}"""

_PARTIAL = ("\nNot every turn of this conversation is shown ({missed}); judge only what is shown, and do not "
            "count a missing turn against the assistant.\n")


def _turn_block(request: SessionRequest, nonce: str) -> str:
    parts = []
    for turn in request.turns:
        sentences = turn.sentences
        answer = "\n".join(f"(S{s.index}) {s.text}" for s in sentences) if sentences else (turn.answer or "")
        parts.append(f"\nTurn {turn.index}\nUser:\n{wrap_untrusted('question', turn.query, nonce)}\n"
                     f"Assistant:\n{wrap_untrusted('answer', answer, nonce)}")
    return "\n".join(parts)


def session_quoted(request: SessionRequest) -> Quoted:
    """The conversation's texts as the judge was shown them: a verdict written there is never the judge's."""
    shown: list[str] = []
    for turn in request.turns:
        shown.append(truncate(turn.query, MAX_QUESTION_CHARS))
        shown.append(truncate(turn.answer or "", MAX_ANSWER_CHARS))
        shown.extend(s.text for s in turn.sentences)
    return Quoted([*shown, *(sanitize_untrusted(text) for text in shown)])


def _is_session(obj: Mapping[str, Any]) -> bool:
    keys = {norm_key(k) for k in obj}
    return bool(keys & {"resolved", "contradictions", "repeated"})


def _key(obj: Mapping[str, Any]) -> str:
    return json.dumps({norm_key(k): v for k, v in obj.items() if norm_key(k) not in ("reason", "reasoning")},
                      sort_keys=True, default=str)


def _field(obj: Mapping[str, Any], *names: str) -> Any:
    wanted = {norm_key(n) for n in names}
    return next((v for k, v in obj.items() if norm_key(k) in wanted), None)


def _items(value: object, what: str, notes: list[str]) -> list[Mapping[str, Any]]:
    if value is None:
        notes.append(f"{what}: missing")
        return []
    if not isinstance(value, list):
        notes.append(f"{what}: not a list, not read")
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _contradictions(obj: Mapping[str, Any], request: SessionRequest, notes: list[str]) -> tuple[Contradiction, ...]:
    out: list[Contradiction] = []
    for item in _items(_field(obj, "contradictions"), "contradictions", notes):
        numbers = [_int(_field(item, name)) for name in ("turn", "sentence", "laterTurn", "laterSentence")]
        found = request.contradiction(*numbers) if all(n is not None for n in numbers) else None  # type: ignore[arg-type]
        if found is None:
            notes.append(f"contradiction {numbers}: no such turns or sentences, ignored")
        elif found not in out:
            out.append(found)
    return tuple(out)


def _repeated(obj: Mapping[str, Any], request: SessionRequest, notes: list[str]) -> tuple[Repetition, ...]:
    out: list[Repetition] = []
    for item in _items(_field(obj, "repeated"), "repeated", notes):
        turn, repeats = _int(_field(item, "turn")), _int(_field(item, "repeats", "repeatsTurn", "earlierTurn"))
        found = request.repetition(turn, repeats) if turn is not None and repeats is not None else None
        if found is None:
            notes.append(f"repeated turn {turn} of {repeats}: no such turns, ignored")
        elif found not in out:
            out.append(found)
    return tuple(out)


def read_session(text: str, request: SessionRequest, *, quoted: Quoted, max_chars: int) -> SessionReading:
    """What the reply *text* says about the conversation of *request* (module rules). Never raises."""
    notes: list[str] = []
    text, _ = prepare_reply(text if isinstance(text, str) else "", quoted, max_chars, notes)
    choice = choose_verdict(text, _is_session, _key, quoted=quoted, notes=notes)
    if choice.status != "found" or choice.verdict is None:
        notes.append("ambiguous: two session verdicts disagree" if choice.status == "ambiguous" else "no verdict")
        return SessionReading(None, None, (), (), None, tuple(notes), usable=False)
    obj = choice.verdict
    raw = _field(obj, "resolved")
    resolved: Resolution | None = raw.strip().lower() if isinstance(raw, str) and \
        raw.strip().lower() in RESOLUTIONS else None  # type: ignore[assignment]
    if resolved is None:
        notes.append(f"resolved {str(raw)[:20]!r} not read")
    raw_turn = _field(obj, "resolvedTurn")
    resolved_turn = _int(raw_turn) if raw_turn is not None else None
    if resolved_turn is not None and (resolved not in ("yes", "partly") or request.turn(resolved_turn) is None):
        notes.append(f"resolvedTurn {resolved_turn}: no such turn or not resolved, ignored")
        resolved_turn = None
    reason = _field(obj, "reason", "reasoning")
    return SessionReading(resolved, resolved_turn, _contradictions(obj, request, notes), _repeated(obj, request, notes),
                          reason if isinstance(reason, str) else None, tuple(notes), usable=True)


class SessionProtocol:
    """The default `SessionJudgeProtocol` (the module's rules)."""

    name = "session"
    version = SESSION_VERSION
    schema: Mapping[str, Any] | None = SESSION_SCHEMA

    def messages(self, request: SessionRequest, *, max_context_chars: int) -> list[dict[str, Any]]:
        nonce = new_nonce()
        missed = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in request.missed.items())
        # Never cut as a whole (a cut could drop a closing marker): each message is capped by
        # wrap_untrusted, the number of turns by the Auditor's max_session_turns.
        user = _INSTRUCTIONS.format(nonce=nonce, n_turns=len(request.turns), conversation=_turn_block(request, nonce),
                                    partial=_PARTIAL.format(missed=missed) if request.partial else "",
                                    reply_format=_REPLY_FORMAT)
        return [{"role": "system", "content": SESSION_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def read(self, text: str, request: SessionRequest, *, quoted: Quoted, max_chars: int) -> SessionReading:
        return read_session(text, request, quoted=quoted, max_chars=max_chars)

    def repair_prompt(self, request: SessionRequest) -> str:
        return ("Your previous reply could not be read as the required JSON object. Reply again with only one "
                f"JSON object of the form {_REPLY_FORMAT} and nothing else: no prose, no code fences.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"
