"""The review queue: the audited answers worth a human look, selected from audit logs.

```python
from ragaudit.evaluation.review import select, write_csv
items = select(["ragaudit-audit.jsonl"], low=0.5, sample=20, seed=7,
               trace_url="http://jaeger:16686/trace/{trace_id}")
write_csv(items, "review.csv")          # a spreadsheet opens it; fill the label_* columns
```

A turn is selected for each reason that holds (an item lists all of them, strongest first):

* ``flagged_sentence``: the judge found an answer sentence ``unsupported`` or ``contradicted``;
* ``failed_citation``: a citation in the answer does not hold (the cited document does not support it);
* ``low_score``: a judge score below its threshold (*low*, or one per score);
* ``thumbs_down``: the app's user gave negative feedback (a feedback file or mapping, read with the
  Auditor's own rule, [`Auditor.feedback`][ragaudit.Auditor.feedback]);
* ``disagreement``: the judge contradicts itself or another judge: faithfulness high while a sentence
  is unsupported, faithfulness low while every sentence is supported, or two judgements of the same
  turn (two logs, or the turn judged again) whose scores differ by *disagree* or more;
* ``sample``: a seeded sample of the other judged turns, stratified by score band, so the labels also
  cover the answers nothing flagged (a judge fitted only to flagged answers learns nothing of the rest).

The audit logs are read by [`read_audit_entries`][ragaudit.evaluation.audit_log.read_audit_entries], the
reader of ``ragaudit report``; bad lines are named the same way.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Union

from .._jsonl import read_jsonl
from ..auditor._feedback import is_negative
from ..errors import ConfigurationError
from ..records import SCORE_NAMES
from .audit_log import read_audit_entries, row_from_audit
from .report import RowResult

__all__ = ["BANDS", "REASONS", "ReviewItem", "read_feedback", "select"]

PathLike = Union[str, "os.PathLike[str]"]

REASONS = ("flagged_sentence", "failed_citation", "thumbs_down", "disagreement", "low_score", "sample")
"""Why an item was selected, strongest first (an item's ``reasons`` keep this order)."""

BANDS = ("no score", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1")
"""The strata of the sample: the band of a turn's lowest judge score."""

_FEEDBACK_VALUE_KEYS = ("value", "feedback", "score", "thumbs")
_FEEDBACK_ID_KEYS = ("turn_id", "id")


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """One answer for a human to look at: the turn, its evidence, the verdicts and why it was selected.

    ``evidence`` holds ``{id, rank, source, content}`` per document that reached the model (``content``
    None when the log was written with content capture off); ``sentences`` the judge's verdict per answer
    sentence, ``citation_checks`` whether each citation holds; ``detail`` says the reasons in words;
    ``trace_url`` is the link to the trace (None without a template or a trace id); ``stratum`` the score
    band of a sampled item.
    """

    id: str
    reasons: tuple[str, ...]
    detail: str
    question: str | None
    answer: str | None
    evidence: tuple[Mapping[str, Any], ...] = ()
    sentences: tuple[Mapping[str, Any], ...] = ()
    citation_checks: tuple[Mapping[str, Any], ...] = ()
    scores: Mapping[str, float | None] = field(default_factory=dict)
    judge: str | None = None
    judge_reason: str | None = None
    trace_id: str | None = None
    trace_url: str | None = None
    timestamp: str | None = None
    stratum: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConfigurationError(f"ReviewItem.id must be a non-empty string, got {self.id!r}")
        unknown = [r for r in self.reasons if r not in REASONS]
        if not self.reasons or unknown:
            raise ConfigurationError(f"ReviewItem.reasons must be one or more of {REASONS}, got {self.reasons!r}")
        for name in ("evidence", "sentences", "citation_checks"):
            object.__setattr__(self, name, tuple(MappingProxyType(dict(x)) for x in getattr(self, name)))
        object.__setattr__(self, "reasons", tuple(self.reasons))
        object.__setattr__(self, "scores", MappingProxyType(dict(self.scores)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the JSONL destination writes one per line)."""
        return {
            "id": self.id, "reasons": list(self.reasons), "detail": self.detail, "question": self.question,
            "answer": self.answer, "evidence": [dict(d) for d in self.evidence],
            "sentences": [dict(s) for s in self.sentences],
            "citation_checks": [dict(c) for c in self.citation_checks], "scores": dict(self.scores),
            "judge": self.judge, "judge_reason": self.judge_reason, "trace_id": self.trace_id,
            "trace_url": self.trace_url, "timestamp": self.timestamp, "stratum": self.stratum,
        }


def read_feedback(path: PathLike) -> dict[str, Any]:
    """``{turn_id: value}`` from a JSONL feedback file: one object per line with ``turn_id`` (or ``id``) and
    ``value`` (or ``feedback``, ``score``, ``thumbs``), as the app passed it to ``Auditor.feedback``. A later
    line for the same turn replaces an earlier one."""
    out: dict[str, Any] = {}
    for number, row in read_jsonl(path, "feedback"):
        where = f"feedback {os.fspath(path)!r} line {number}"
        turn_id = next((row[k] for k in _FEEDBACK_ID_KEYS if isinstance(row.get(k), str) and row[k]), None)
        if turn_id is None:
            raise ConfigurationError(f"{where}: no turn id; expected one of {', '.join(_FEEDBACK_ID_KEYS)}")
        key = next((k for k in _FEEDBACK_VALUE_KEYS if k in row), None)
        if key is None:
            raise ConfigurationError(f"{where}: no feedback value; expected one of {', '.join(_FEEDBACK_VALUE_KEYS)}")
        out[turn_id] = row[key]
    return out


def _thresholds(low: float | Mapping[str, float]) -> dict[str, float]:
    given = dict(low) if isinstance(low, Mapping) else dict.fromkeys(SCORE_NAMES, low)
    for name, value in given.items():
        if name not in SCORE_NAMES:
            raise ConfigurationError(f"low: unknown score {name!r}; use {', '.join(SCORE_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigurationError(f"low[{name!r}] must be a number in [0, 1], got {value!r}")
    return {name: float(value) for name, value in given.items()}


def _check_number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _band(row: RowResult) -> str:
    low = row.min_score()
    if low is None:
        return BANDS[0]
    return BANDS[1 + min(int(low * 4), 3)]


def _disagreements(row: RowResult, others: Sequence[RowResult], high: float, low: float,
                   disagree: float) -> list[str]:
    """What the judge says against itself or against another judgement of the same turn."""
    said: list[str] = []
    faith = row.faithfulness
    if faith is not None and faith >= high and row.problem_sentences:
        said.append(f"faithfulness {faith:.2f} yet {len(row.problem_sentences)} sentence(s) unsupported or "
                    "contradicted")
    verdicts = [s.get("verdict") for s in row.sentences]
    if faith is not None and faith < low and verdicts and all(v == "supported" for v in verdicts):
        said.append(f"faithfulness {faith:.2f} yet every sentence supported")
    for other in others:
        for name in SCORE_NAMES:
            a, b = getattr(row, name), getattr(other, name)
            if a is not None and b is not None and abs(a - b) >= disagree:
                said.append(f"{name} {b:.2f} and {a:.2f} from two judgements")
    return said


def _reasons(row: RowResult, others: Sequence[RowResult], feedback: object, has_feedback: bool,
             lows: Mapping[str, float], disagree: float) -> tuple[list[str], list[str]]:
    """(reasons, the words for each) of one turn; empty when nothing flags it."""
    reasons: list[str] = []
    words: list[str] = []
    if row.problem_sentences:
        reasons.append("flagged_sentence")
        words.append("; ".join(f"S{s.get('index')} {s.get('verdict')}" for s in row.problem_sentences))
    if row.failing_citations:
        reasons.append("failed_citation")
        words.append("; ".join(f"S{c.get('sentence')} cites [{c.get('rank')}] {c.get('doc_id')}, which does not "
                               "support it" for c in row.failing_citations))
    if has_feedback and is_negative(feedback):
        reasons.append("thumbs_down")
        words.append(f"user feedback {feedback!r}")
    said = _disagreements(row, others, high=max(lows.get("faithfulness", 0.5), 0.7),
                          low=lows.get("faithfulness", 0.5), disagree=disagree)
    if said:
        reasons.append("disagreement")
        words.extend(said)
    low_scores = [f"{n} {v:.2f} < {lows[n]:g}" for n, v in row.scores().items()
                  if v is not None and n in lows and v < lows[n]]
    if low_scores:
        reasons.append("low_score")
        words.append(", ".join(low_scores))
    return reasons, words


def _item(row: RowResult, entry: Mapping[str, Any], reasons: Sequence[str], words: Sequence[str],
          trace_url: str | None, stratum: str | None = None) -> ReviewItem:
    evidence = [{"id": d.get("id"), "rank": d.get("rank"), "source": d.get("source"), "content": d.get("content")}
                for d in entry.get("documents") or () if isinstance(d, Mapping)]
    link = None
    if trace_url and row.trace_id:
        link = trace_url.replace("{trace_id}", row.trace_id).replace("{turn_id}", row.id)
    return ReviewItem(id=row.id, reasons=tuple(reasons), detail="; ".join(words), question=row.question,
                      answer=row.answer, evidence=tuple(evidence), sentences=row.sentences,
                      citation_checks=row.citation_checks, scores=row.scores(),
                      judge=entry.get("judge") if isinstance(entry.get("judge"), str) else None,
                      judge_reason=row.reason, trace_id=row.trace_id, trace_url=link, timestamp=row.timestamp,
                      stratum=stratum)


def _stratified(rest: Sequence[tuple[RowResult, Mapping[str, Any]]], n: int,
                rng: random.Random) -> list[tuple[str, RowResult, Mapping[str, Any]]]:
    """*n* of *rest*, spread over the score bands in proportion to their size (each non-empty band gets
    one first while *n* allows), drawn with *rng*."""
    strata: dict[str, list[tuple[RowResult, Mapping[str, Any]]]] = {}
    for row, entry in sorted(rest, key=lambda pair: pair[0].id):
        strata.setdefault(_band(row), []).append((row, entry))
    n = min(n, len(rest))
    quota = dict.fromkeys(strata, 0)
    for band in sorted(strata, key=lambda b: -len(strata[b]))[:n]:
        quota[band] = 1
    left = n - sum(quota.values())
    if left > 0:  # the remainder by largest share of what is still unsampled
        room = {b: len(strata[b]) - quota[b] for b in strata}
        total_room = sum(room.values())
        exact = {b: left * room[b] / total_room for b in strata}
        for b in strata:
            quota[b] += math.floor(exact[b])
        for b in sorted(strata, key=lambda b: -(exact[b] - math.floor(exact[b])))[: n - sum(quota.values())]:
            quota[b] += 1
    picked: list[tuple[str, RowResult, Mapping[str, Any]]] = []
    for band in BANDS:
        if band in strata and quota[band]:
            picked.extend((band, row, entry) for row, entry in rng.sample(strata[band], quota[band]))
    return picked


def _read_turns(audit_logs: Iterable[PathLike]) -> dict[str, list[tuple[RowResult, dict[str, Any]]]]:
    """Every judgement of every turn in *audit_logs*, by turn id, in the order read (the last one is the
    turn's current judgement)."""
    turns: dict[str, list[tuple[RowResult, dict[str, Any]]]] = {}
    for path in audit_logs:
        entries, _ = read_audit_entries(path)
        for number, entry in entries:
            row = row_from_audit(entry, number - 1)
            turns.setdefault(row.id, []).append((row, entry))
    return turns


def select(
    audit_logs: PathLike | Iterable[PathLike],
    *,
    low: float | Mapping[str, float] = 0.5,
    feedback: Mapping[str, Any] | PathLike | None = None,
    disagree: float = 0.5,
    sample: int = 0,
    seed: int = 0,
    trace_url: str | None = None,
    limit: int | None = None,
) -> list[ReviewItem]:
    """The answers of *audit_logs* worth a human look, the flagged ones first (most reasons, then lowest
    score), then a stratified sample of *sample* of the rest.

    Args:
        audit_logs: one audit log or several (two judges' logs of the same turns: their disagreements).
        low: the score below which a turn is selected (``low_score``): one for all three, or per score
            (``{"faithfulness": 0.7}``: only faithfulness is checked).
        feedback: the users' feedback, ``{turn_id: value}`` or a JSONL file (see `read_feedback`).
        disagree: how far two judgements of the same turn must be apart to count as a disagreement.
        sample: how many of the turns nothing flagged to add, stratified by score band; *seed* makes the
            draw repeatable.
        trace_url: a link template: ``{trace_id}`` (and ``{turn_id}``) are filled in, e.g.
            ``http://jaeger:16686/trace/{trace_id}``.
        limit: at most this many flagged items (the sample comes on top).

    Raises [`ConfigurationError`][ragaudit.ConfigurationError] for a bad option and
    [`RagAuditError`][ragaudit.RagAuditError] for a bad audit-log line.
    """
    lows = _thresholds(low)
    disagree = _check_number("disagree", disagree, 0.0, 1.0)
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise ConfigurationError(f"sample must be an int >= 0, got {sample!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigurationError(f"limit must be an int >= 0 or None, got {limit!r}")
    if trace_url is not None and "{trace_id}" not in trace_url:
        raise ConfigurationError(f"trace_url must contain {{trace_id}}, got {trace_url!r}")
    paths = [audit_logs] if isinstance(audit_logs, (str, os.PathLike)) else list(audit_logs)
    if not paths:
        raise ConfigurationError("select() needs at least one audit log")
    votes = (read_feedback(feedback) if isinstance(feedback, (str, os.PathLike))
             else dict(feedback or {}))
    flagged: list[tuple[tuple[int, float], ReviewItem]] = []
    rest: list[tuple[RowResult, Mapping[str, Any]]] = []
    for turn_id, judgements in _read_turns(paths).items():
        row, entry = judgements[-1]
        reasons, words = _reasons(row, [r for r, _ in judgements[:-1]], votes.get(turn_id), turn_id in votes,
                                  lows, disagree)
        if reasons:
            low_score = row.min_score()
            flagged.append(((-len(reasons), 2.0 if low_score is None else low_score),
                            _item(row, entry, reasons, words, trace_url)))
        elif row.judge_error is None:  # a failed judgement is not a sample of the judge's view
            rest.append((row, entry))
    flagged.sort(key=lambda pair: pair[0])
    items = [item for _, item in flagged][:limit]
    for band, sampled, sampled_entry in _stratified(rest, sample, random.Random(seed)):
        items.append(_item(sampled, sampled_entry, ["sample"], [f"sampled from score band {band}"], trace_url,
                           stratum=band))
    return items
