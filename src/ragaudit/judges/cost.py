"""How many judge calls and tokens a batch evaluation will take, estimated before it runs.

[`estimate_cost`][ragaudit.estimate_cost] walks the rows once and asks the judge what each one would cost, without any
network: a chat judge builds the exact prompt it would send and counts its characters; a rule
judge costs nothing; a cached judge skips rows it already holds; a tiered judge counts its
detailed judge only on the rows its sample picks. Tokens are characters / *chars_per_token* (4 is
right for English within about 20 % with OpenAI's tokenizers); repair calls for unreadable replies
are not counted, so the figures are what a well-behaved judge costs.

A judge of your own can report its cost by implementing `CostAware`; otherwise it is
assumed to make [`calls_per_judgement`][ragaudit.RagJudge.calls_per_judgement] (1 on
[`BaseRagJudge`][ragaudit.BaseRagJudge]) calls the size of the standard three-score protocol.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..records import JudgeRequest, RetrievedDoc, stable_doc_id
from .base import RagJudge

__all__ = [
    "REASON_CHARS",
    "CostAware",
    "CostEstimate",
    "chat_call_estimate",
    "estimate_cost",
    "estimate_request",
    "typical_reply_chars",
]

REASON_CHARS = 200
"""Characters assumed for the judge's free-text reason in a reply (one or two sentences)."""

_DEFAULT_ANSWER_CHARS = 600
_DEFAULT_CONTEXT_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Judge calls and tokens, estimated.

    ``rows`` is how many rows were estimated and ``cached_rows`` how many of them a
    [`CachedJudge`][ragaudit.CachedJudge] already holds (they cost nothing).
    ``assumptions`` says which sizes were assumed for rows that lacked an answer or context.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    rows: int = 0
    cached_rows: int = 0
    assumptions: tuple[str, ...] = ()

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: CostEstimate) -> CostEstimate:
        if not isinstance(other, CostEstimate):
            return NotImplemented
        return CostEstimate(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            rows=self.rows + other.rows,
            cached_rows=self.cached_rows + other.cached_rows,
            assumptions=tuple(dict.fromkeys(self.assumptions + other.assumptions)),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``total_tokens``."""
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "rows": self.rows,
            "cached_rows": self.cached_rows,
            "assumptions": list(self.assumptions),
        }


@runtime_checkable
class CostAware(Protocol):
    """A judge that can say what judging one request would cost.

    *exact* is False when the request holds placeholder text (the row had no answer or context
    yet), so a cache must not look it up.
    """

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float, exact: bool
    ) -> CostEstimate: ...


def _tokens(chars: int, chars_per_token: float) -> int:
    return math.ceil(chars / chars_per_token) if chars > 0 else 0


def chat_call_estimate(
    messages: Sequence[Mapping[str, Any]], reply_chars: int, chars_per_token: float
) -> CostEstimate:
    """One chat call sending *messages* and getting about *reply_chars* characters back."""
    prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
    return CostEstimate(
        calls=1,
        prompt_tokens=_tokens(prompt_chars, chars_per_token),
        completion_tokens=_tokens(reply_chars, chars_per_token),
    )


def typical_reply_chars(shape: Mapping[str, Any]) -> int:
    """The length of *shape* as JSON plus a reason of `REASON_CHARS` characters."""
    return len(json.dumps({**shape, "reason": "x" * REASON_CHARS}))


def _standard_call(request: JudgeRequest, chars_per_token: float) -> CostEstimate:
    """One call of the three-score protocol, the context uncut (a judge of unknown limits)."""
    from .protocols import ThreeScoreProtocol

    protocol = ThreeScoreProtocol()
    messages = protocol.messages(request, max_context_chars=len(request.context) + 1)
    return chat_call_estimate(messages, typical_reply_chars(protocol.reply_shape(request)), chars_per_token)


def _calls_per_judgement(judge: RagJudge) -> int:
    calls = judge.calls_per_judgement
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
        raise ConfigurationError(f"{type(judge).__name__}.calls_per_judgement must be an int >= 0, got {calls!r}")
    return calls


def estimate_request(
    judge: RagJudge, request: JudgeRequest, *, chars_per_token: float = 4.0, exact: bool = True
) -> CostEstimate:
    """What judging one *request* with *judge* would cost (``rows`` is left at 0).

    Judges implementing `CostAware` answer themselves (wrappers such as
    [`CachedJudge`][ragaudit.CachedJudge] call this function for the judge they wrap);
    a [`ChatRagJudge`][ragaudit.ChatRagJudge] counts its exact prompt; ``FakeJudge`` and
    ``LexicalJudge`` cost nothing; any other judge ``calls_per_judgement`` standard calls.
    """
    if isinstance(judge, CostAware):  # ChatRagJudge and the judges on it: their protocol's exact prompt
        return judge.estimate_request_cost(request, chars_per_token=chars_per_token, exact=exact)
    calls = _calls_per_judgement(judge)
    if calls == 0:
        return CostEstimate()
    one = _standard_call(request, chars_per_token)
    return CostEstimate(calls=calls, prompt_tokens=one.prompt_tokens * calls,
                        completion_tokens=one.completion_tokens * calls)


def _field(row: object, *names: str) -> object:
    for name in names:
        value = row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)
        if value is not None:
            return value
    return None


def _request_from_row(
    row: object, index: int, answer_chars: int, context_chars: int
) -> tuple[JudgeRequest, list[str]]:
    if isinstance(row, JudgeRequest):
        return row, []
    where = f"row {index + 1}"
    question = _field(row, "question", "query")
    if not isinstance(question, str):
        raise ConfigurationError(f"{where}: 'question' must be a string, got {question!r}")
    assumed: list[str] = []
    answer = _field(row, "answer")
    if answer is None:
        answer = "x" * answer_chars
        assumed.append(f"answer: {answer_chars} chars")
    elif not isinstance(answer, str):
        raise ConfigurationError(f"{where}: 'answer' must be a string, got {type(answer).__name__}")
    context = _field(row, "context")
    contexts = _field(row, "contexts")
    documents: tuple[RetrievedDoc, ...] = ()
    if context is None and contexts is not None:
        if (isinstance(contexts, str) or not isinstance(contexts, Iterable)
                or not all(isinstance(c, str) for c in contexts)):
            raise ConfigurationError(f"{where}: 'contexts' must be a list of strings")
        documents = tuple(RetrievedDoc(id=stable_doc_id(text), content=text, rank=rank)
                          for rank, text in enumerate(contexts, start=1))
        context = JudgeRequest.build_context(documents)
    if context is None:
        context = "x" * context_chars
        assumed.append(f"context: {context_chars} chars")
    elif not isinstance(context, str):
        raise ConfigurationError(f"{where}: 'context' must be a string, got {type(context).__name__}")
    reference = _field(row, "reference", "reference_answer")
    return JudgeRequest(query=question, answer=answer, context=context, documents=documents,
                        reference=reference if isinstance(reference, str) else None), assumed


def estimate_cost(
    judge: RagJudge,
    rows: Iterable[object],
    *,
    chars_per_token: float = 4.0,
    answer_chars: int = _DEFAULT_ANSWER_CHARS,
    context_chars: int = _DEFAULT_CONTEXT_CHARS,
) -> CostEstimate:
    """Estimate the judge calls and tokens that judging *rows* with *judge* will take.

    Each row is a dict with ``question`` (or ``query``), and when known ``answer``, ``contexts``
    (the retrieved texts, a list) or ``context`` (the exact judge context) and
    ``reference_answer`` (or ``reference``); an evaluation ``DatasetRow`` or a
    [`JudgeRequest`][ragaudit.JudgeRequest] works too. Before a pipeline has run, the answer and context
    are unknown: *answer_chars* and *context_chars* are assumed for them (and listed in
    ``assumptions``), and a cache cannot recognise such rows.

    Raises ConfigurationError for a row without a question or with fields of the wrong type.
    """
    if isinstance(chars_per_token, bool) or not isinstance(chars_per_token, (int, float)) \
            or not chars_per_token > 0 or not math.isfinite(chars_per_token):
        raise ConfigurationError(f"chars_per_token must be a positive number, got {chars_per_token!r}")
    for label, value in (("answer_chars", answer_chars), ("context_chars", context_chars)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"{label} must be an int >= 0, got {value!r}")
    if isinstance(rows, (str, Mapping)):
        raise ConfigurationError("rows must be a list of rows (dicts), not a single row or a string")
    total = CostEstimate()
    assumed_rows: dict[str, int] = {}
    for index, row in enumerate(rows):
        request, assumed = _request_from_row(row, index, answer_chars, context_chars)
        for item in assumed:
            assumed_rows[item] = assumed_rows.get(item, 0) + 1
        total += estimate_request(judge, request, chars_per_token=chars_per_token, exact=not assumed)
        total += CostEstimate(rows=1)
    notes = tuple(f"{item} assumed for {count} row(s)" for item, count in assumed_rows.items())
    return CostEstimate(calls=total.calls, prompt_tokens=total.prompt_tokens,
                        completion_tokens=total.completion_tokens, rows=total.rows,
                        cached_rows=total.cached_rows, assumptions=notes)

