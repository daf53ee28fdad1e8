"""A session judge for the loopback server that reads the conversation it is shown.

:func:`session_reply` answers a request of ragaudit's session protocol from the prompt itself (not
from anything the test knows): it reads the turns and their numbered answer sentences, and reports

- a **contradiction** for two sentences of different turns that say the same thing but for a number
  ("Refunds take 14 days." / "Refunds take 30 days."),
- a **repeated** turn for a user message whose words (case and punctuation aside) are an earlier one's,
- **resolved** ``"no"`` when the last answer is :data:`NO_ANSWER`-like (``I don't know``), else ``"yes"``
  at the last turn with an answer.

So a test passes only if the prompt numbers the turns and sentences as the records do.
"""

from __future__ import annotations

import re
from typing import Any

from ragaudit import BaseExporter, ExportResult, SessionRecord
from tests.support.llm_server import session_json

__all__ = ["Clock", "Kept", "audit_reply", "judge_rule", "parse_conversation", "session_reply"]

_TURN_RE = re.compile(
    r"Turn (\d+)\nUser:\n<<<ragaudit:question:(\w+)>>>\n(.*?)\n<<<end:question:\2>>>\n"
    r"Assistant:\n<<<ragaudit:answer:\2>>>\n(.*?)\n<<<end:answer:\2>>>", re.DOTALL)
_SENTENCE_RE = re.compile(r"^\(S(\d+)\) (.*)$", re.MULTILINE)


def parse_conversation(prompt: str) -> list[tuple[int, str, dict[int, str]]]:
    """``(turn, user text, {sentence number: text})`` of every turn shown in a session prompt."""
    return [(int(n), user, {int(i): text for i, text in _SENTENCE_RE.findall(answer)})
            for n, _, user, answer in _TURN_RE.findall(prompt)]


def _shape(text: str) -> tuple[str, str]:
    words = re.sub(r"[^\w\s]", "", text.lower())
    return re.sub(r"\d+", "#", words), "".join(re.findall(r"\d+", words))


def session_reply(body: dict[str, Any]) -> str:
    """The session verdict for the conversation in *body* (see the module docstring)."""
    prompt = "\n".join(str(m.get("content")) for m in body["messages"] if m.get("role") == "user")
    turns = parse_conversation(prompt)
    contradictions = []
    for a, _, first in turns:
        for b, _, second in turns:
            if a >= b:
                continue
            for i, one in first.items():
                for j, two in second.items():
                    (s1, n1), (s2, n2) = _shape(one), _shape(two)
                    if s1 == s2 and n1 and n1 != n2:
                        contradictions.append((a, i, b, j))
    seen: dict[str, int] = {}
    repeated = []
    for n, user, _ in turns:
        key = " ".join(re.sub(r"[^\w\s]", "", user.lower()).split())
        if key in seen:
            repeated.append((n, seen[key]))
        seen.setdefault(key, n)
    answered = [n for n, _, sentences in turns if not any("don't know" in s.lower() for s in sentences.values())]
    last = turns[-1][0] if turns else None
    resolved = "yes" if answered and answered[-1] == last else "no"
    return session_json(resolved, last if resolved == "yes" else None, contradictions, repeated)


_SECTION_RE = r"<<<ragaudit:{label}:(\w+)>>>\n(.*?)\n<<<end:{label}:\1>>>"


def audit_reply(body: dict[str, Any]) -> str:
    """A full-audit verdict that reads the prompt: a sentence is supported (by document 1) when its
    text, full stop aside, is in the context shown, else unsupported; every document graded 3."""
    import json

    prompt = "\n".join(str(m.get("content")) for m in body["messages"] if m.get("role") == "user")
    answer = re.search(_SECTION_RE.format(label="answer"), prompt, re.DOTALL)
    context = re.search(_SECTION_RE.format(label="context"), prompt, re.DOTALL)
    shown = context.group(2) if context else ""
    sentences = _SENTENCE_RE.findall(answer.group(2)) if answer else []
    verdicts = [{"n": int(i), "verdict": "supported" if text.rstrip(".") in shown else "unsupported",
                 "docs": [1] if text.rstrip(".") in shown else []} for i, text in sentences]
    supported = sum(v["verdict"] == "supported" for v in verdicts)
    return json.dumps({"faithfulnessScore": supported / len(verdicts) if verdicts else 1.0,
                       "contextRelevanceScore": 1.0, "answerRelevanceScore": 1.0, "reason": "read from the prompt",
                       "sentences": verdicts, "documents": [{"n": n, "grade": 3} for n in
                                                            range(1, shown.count("id=") + 1)]})


def judge_rule(body: dict[str, Any]) -> str:
    """The loopback server's rule for a judge endpoint: sessions by :func:`session_reply`, turns by
    :func:`audit_reply`."""
    from tests.support.llm_server import is_session_request

    return session_reply(body) if is_session_request(body) else audit_reply(body)


class Kept(BaseExporter):
    """An exporter of the test's own that keeps the session records the export stage hands it."""

    def __init__(self) -> None:
        self.sessions: list[SessionRecord] = []

    def export(self, records: Any) -> ExportResult:
        return ExportResult.SUCCESS

    def export_sessions(self, records: Any) -> ExportResult:
        self.sessions.extend(records)
        return ExportResult.SUCCESS


class Clock:
    """An injected monotonic clock the test moves by hand (``clock.now += 300``): nothing sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
