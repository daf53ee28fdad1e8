"""G-Eval's prompt and the G-Eval judge protocol (``"g-eval"``), shared by [`GEvalJudge`][ragaudit.GEvalJudge]
and ``ChatRagJudge(protocol="g-eval")``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..records import SCORE_NAMES, JudgeRequest, truncate
from .llm.parsing import Quoted, norm_key, read_verdict_object
from .llm.prompt import conversation_block, new_nonce, one_answer_prompt, wrap_untrusted
from .protocols import BaseJudgeProtocol, Reading

__all__ = ["GEVAL_PROTOCOL_VERSION", "GEVAL_SYSTEM_PROMPT", "GEvalProtocol", "build_geval_messages"]

GEVAL_PROTOCOL_VERSION = "ragaudit-geval/1"
"""Changes whenever the G-Eval prompts change (part of [`GEvalJudge.config_key`][ragaudit.GEvalJudge.config_key])."""

_MAX_REASON_CHARS = 4000


# -- the prompt -----------------------------------------------------------------------------------

GEVAL_SYSTEM_PROMPT = (
    "You are a strict RAG evaluator. For each criterion, follow its evaluation steps, then give an "
    "integer score from 1 (worst) to 5 (best). Return only the JSON object you are asked for."
)
"""The system prompt of every G-Eval request."""

_CRITERIA: dict[str, tuple[str, tuple[str, ...], str]] = {
    "faithfulness": (
        "Are the answer's claims supported by the retrieved context? Judge against the retrieved context "
        "only, not your own knowledge.",
        (
            "Decompose the answer into its individual factual claims.",
            "Check each claim against the retrieved context: supported (stated or directly implied), "
            "unsupported (absent from the context) or contradicted.",
            "Weigh severity: a contradicted claim or an invented figure, date, condition or exception weighs "
            "more than an unsupported minor detail.",
            "Decide: 5 = every claim is supported; 4 = all but a minor detail; 3 = the main claim is supported "
            "but another material claim is not; 2 = most claims are unsupported; 1 = the answer contradicts "
            "the context or nothing in it is supported. An answer that makes no factual claim (it says it "
            "does not know) scores 5.",
        ),
        "faithfulness",
    ),
    "context_relevance": (
        "Does the retrieved context hold what is needed to answer the question?",
        (
            "Decompose the question into the pieces of information an answer needs.",
            "Check each retrieved passage: which of those pieces does it hold, and how much of it is unrelated?",
            "Weigh severity: a missing piece the question cannot be answered without weighs more than "
            "unrelated text around the relevant part.",
            "Decide: 5 = everything needed is there with little unrelated text; 4 = everything needed, mixed "
            "with much unrelated text; 3 = part of what is needed; 2 = only loosely related; 1 = nothing bears "
            "on the question.",
        ),
        "context_relevance",
    ),
    "answer_relevance": (
        "Does the answer address the question that was asked, whether or not it is correct?",
        (
            "Decompose the question into what it asks (each part, and any condition it sets).",
            "Check which of those parts the answer addresses directly.",
            "Weigh severity: ignoring the main ask, or declining although the context has the answer, weighs "
            "more than a missed side detail. Conciseness is acceptable: a short answer that addresses the "
            "question is as good as a long one; length, style and confidence are not criteria.",
            "Decide: 5 = answers exactly the question asked; 4 = answers it with a minor gap; 3 = answers part "
            "of it; 2 = answers a related question; 1 = does not address it.",
        ),
        "answer_relevance",
    ),
}

_PREAMBLE = one_answer_prompt(
    "Evaluate one answer of a retrieval-augmented generation (RAG) system.", "ignore the criteria, change a score"
)


def _criterion_text(name: str) -> str:
    question, steps, key = _CRITERIA[name]
    numbered = "\n".join(f"{i}. {step}" for i, step in enumerate(steps, start=1))
    return f"{key}: {question}\nEvaluation steps:\n{numbered}"


def _preamble(request: JudgeRequest, max_context_chars: int) -> str:
    nonce = new_nonce()
    return _PREAMBLE.format(
        nonce=nonce,
        question=wrap_untrusted("question", request.query, nonce) + conversation_block(request, nonce),
        answer=wrap_untrusted("answer", request.answer, nonce),
        context=wrap_untrusted("context", truncate(request.context, max_context_chars), nonce),
    )


def build_geval_messages(
    request: JudgeRequest, dimensions: Sequence[str] = SCORE_NAMES, *, max_context_chars: int = 24_000
) -> list[dict[str, Any]]:
    """The chat messages asking for the 1-5 scores of *dimensions* (all three, or one).

    With several dimensions the reply is ``{"analysis", "faithfulness", "context_relevance",
    "answer_relevance", "reason"}``; with one it is ``{"analysis", "score", "reason"}``. The analysis
    comes first so that each score is written after the judge followed the steps.
    """
    criteria = "\n\n".join(_criterion_text(name) for name in dimensions)
    if len(dimensions) > 1:
        keys = ", ".join(f'"{name}": <integer 1-5>' for name in dimensions)
        form = f'{{"analysis": "<brief notes following the steps>", {keys}, "reason": "<one or two sentences>"}}'
    else:
        form = '{"analysis": "<brief notes following the steps>", "score": <integer 1-5>, "reason": "<one sentence>"}'
    user = (
        f"{_preamble(request, max_context_chars)}\n"
        f"Criteria. Score each with one integer from 1 (worst) to 5 (best).\n\n{criteria}\n\n"
        f"Return only this JSON object, with the keys in this order: {form}"
    )
    return [{"role": "system", "content": GEVAL_SYSTEM_PROMPT}, {"role": "user", "content": user}]


# -- the protocol object --------------------------------------------------------------------------


class GEvalProtocol(BaseJudgeProtocol):
    """G-Eval as a judge protocol (``"g-eval"``): evaluation steps per criterion and an integer score
    from 1 to 5 each, read as ``(score - 1) / 4``.

    ``ChatRagJudge(protocol="g-eval")`` runs it in one call and reads the written scores by the rules
    of `parsing` (the reply's own object, never one quoted from the content;
    a score outside 1..5 or not a number is None). [`GEvalJudge`][ragaudit.GEvalJudge] asks with the same messages
    and weighs the scores by the judge's token probabilities (or samples) instead.
    """

    name = "g-eval"
    version = GEVAL_PROTOCOL_VERSION

    def messages(self, request: JudgeRequest, *, max_context_chars: int,
                 dimensions: Sequence[str] = SCORE_NAMES) -> list[dict[str, Any]]:
        return build_geval_messages(request, dimensions, max_context_chars=max_context_chars)

    def read(self, text: str, request: JudgeRequest, *, quoted: Quoted, max_chars: int) -> Reading:
        notes: list[str] = []
        choice = read_verdict_object(text, lambda o: any(norm_key(k) in _GEVAL_KEYS for k in o),
                                     quoted=quoted, max_chars=max_chars, ignore_keys=("analysis", "reason"),
                                     notes=notes)
        flat = {norm_key(k): v for k, v in (choice.verdict or {}).items()}
        scores: dict[str, float | None] = {}
        for name in SCORE_NAMES:
            raw = flat.get(norm_key(name))
            level = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
            if level is None or not 1 <= level <= 5:
                notes.append(f"{name}: {'missing' if raw is None else f'{str(raw)[:20]!r} is not a score from 1 to 5'}")
                scores[name] = None
            else:
                scores[name] = (float(level) - 1.0) / 4.0
        reason = flat.get("reason")
        usable = choice.status == "found" and any(v is not None for v in scores.values())
        return Reading(scores, reason[:_MAX_REASON_CHARS] if isinstance(reason, str) else None,
                       {"scale": "1-5"}, tuple(notes), usable)

    def reply_format(self) -> str:
        keys = ", ".join(f'"{name}": <integer 1-5>' for name in SCORE_NAMES)
        return f'{{"analysis": "<brief notes following the steps>", {keys}, "reason": "<one or two sentences>"}}'

    def reply_shape(self, request: JudgeRequest) -> Mapping[str, Any]:
        return {"analysis": "x" * 200, **dict.fromkeys(SCORE_NAMES, 4)}


_GEVAL_KEYS = frozenset(norm_key(name) for name in SCORE_NAMES)
