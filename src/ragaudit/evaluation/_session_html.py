"""The HTML report's session view: each judged session as the conversation, turn by turn.

Every turn shows the user's message, the answer with its sentences marked by the turn's own verdicts,
and the turn's three scores; a sentence the session judge found contradicted by another turn is marked
and names the other turn and sentence; the session's header gives resolved (and the turn), the
computed groundedness, contradictions, repeated turns, and whether it was seen only in part. Input: the
audit log's ``"kind": "session"`` lines
([`ragaudit.tracing.AuditLog.session_line`][ragaudit.tracing.AuditLog.session_line]). Every text is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

__all__ = ["SESSION_CSS", "sessions_html"]

SESSION_CSS = """
article.session { border: 1px solid var(--line); border-radius: 8px; margin: 0 0 16px; padding: 10px 14px; }
article.session h3 { font-size: 15px; margin: 0 0 6px; }
.turn { border-left: 3px solid var(--line); margin: 8px 0; padding: 2px 10px; }
.turn .user { font-weight: 600; } .turn.repeated { border-left-color: var(--unknown); }
.x-contradiction { background: #ffcecb; outline: 1px solid #a40e26; border-radius: 3px; }
.xnote { color: #a40e26; font-size: 12px; }
"""

_LABELS = (("faithfulness", "faithfulness"), ("context_relevance", "context relevance"),
           ("answer_relevance", "answer relevance"))


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _num(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def _marks(session: Mapping[str, Any]) -> dict[tuple[int, int], list[str]]:
    """(turn, sentence) -> notes naming the other side of each contradiction."""
    marks: dict[tuple[int, int], list[str]] = {}
    for pair in session.get("contradictions") or ():
        if not isinstance(pair, Mapping):
            continue
        a, i, b, j = (pair.get(k) for k in ("first_turn", "first_sentence", "second_turn", "second_sentence"))
        marks.setdefault((a, i), []).append(f"contradicted by turn {b}, S{j}")  # type: ignore[arg-type]
        marks.setdefault((b, j), []).append(f"contradicts turn {a}, S{i}")  # type: ignore[arg-type]
    return marks


def _turn_html(turn: Mapping[str, Any], marks: Mapping[tuple[int, int], list[str]], repeated: set[Any]) -> str:
    index = turn.get("index")
    parts = []
    for sentence in turn.get("sentences") or ():
        verdict = sentence.get("verdict")
        cls = f"v-{verdict}" if isinstance(verdict, str) else "v-missing"
        notes = marks.get((index, sentence.get("index")), [])  # type: ignore[arg-type]
        if notes:
            cls += " x-contradiction"
        text = sentence.get("text")
        parts.append(f'<span class="sent {cls}" title="{_e("; ".join(notes) or verdict or "no verdict")}">'
                     f'{_e(text if text is not None else "(not captured)")}</span><sup class="sn">'
                     f'S{_e(sentence.get("index"))}</sup>' + "".join(f' <span class="xnote">{_e(n)}</span>'
                                                                     for n in notes))
    answer = " ".join(parts) if parts else _e(turn.get("answer") or "(none)")
    scores = turn.get("scores") or {}
    score_text = " · ".join(f"{label} <b>{_num(scores.get(name))}</b>" for name, label in _LABELS)
    query = turn.get("query")
    cls = "turn repeated" if index in repeated else "turn"
    note = " <span class=\"xnote\">(the user repeated an earlier request)</span>" if index in repeated else ""
    return (f'<div class="{cls}"><div class="user">Turn {_e(index)}: '
            f'{_e(query if query is not None else "(not captured)")}{note}</div>'
            f'<p>{answer}</p><div class="scores">{score_text} · {_e(turn.get("status"))}</div></div>')


def _session_html(session: Mapping[str, Any]) -> str:
    resolved = session.get("resolved")
    turn = session.get("resolved_turn")
    head = [f"resolved <b>{_e(resolved or '–')}</b>" + (f" at turn {_e(turn)}" if turn else ""),
            f"groundedness <b>{_num(session.get('groundedness'))}</b>",
            f"contradictions <b>{len(session.get('contradictions') or ())}</b>",
            f"repeated turns <b>{len(session.get('repeated') or ())}</b>",
            f"{_e(session.get('turns'))} turns, ended: {_e(session.get('ended'))}"]
    if session.get("partial"):
        missed = ", ".join(f"{_e(n)} {_e(k)}" for k, n in (session.get("missed") or {}).items())
        head.append(f'<span class="err">partial: {missed}</span>')
    if session.get("error"):
        head.append(f'<span class="err">{_e(session.get("error"))}</span>')
    repeated = {r.get("turn") for r in session.get("repeated") or () if isinstance(r, Mapping)}
    marks = _marks(session)
    turns = "".join(_turn_html(t, marks, repeated) for t in session.get("turns") or () if isinstance(t, Mapping))
    reason = session.get("reason")
    return (f'<article class="session"><h3>Session {_e(session.get("session_id"))}</h3>'
            f'<div class="scores">{" · ".join(head)}</div>'
            + (f"<p>{_e(reason)}</p>" if reason else "") + turns + "</article>")


def sessions_html(sessions: Sequence[Mapping[str, Any]]) -> str:
    """The session view: a heading, a legend and one article per session."""
    if not sessions:
        return ""
    return ('<h2>Sessions</h2><p class="legend">Each conversation judged as a whole; answer sentences marked by '
            'the turn\'s own verdict, <span class="sent x-contradiction">contradictions</span> between turns '
            "marked on both sentences. Groundedness is computed from the turns' sentence verdicts.</p>"
            '<section id="sessions">' + "".join(_session_html(s) for s in sessions) + "</section>")
