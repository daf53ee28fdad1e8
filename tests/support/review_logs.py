"""Audit logs for the review-queue tests, written by the real Auditor with a scripted full-audit judge.

The judge is a `BaseRagJudge` (the declared extension point) whose verdicts are set per question: the
sentence verdicts, supporting documents and scores a full-audit judge would give. The Auditor derives
the citation checks itself (``turn_audit``), as it does for any judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ragaudit import Auditor, Citation, Judgement, JudgeRequest, RagTurn, RetrievedDoc
from ragaudit.judges.base import BaseRagJudge
from ragaudit.records import SentenceVerdict

__all__ = ["ScriptedAuditJudge", "Verdict", "write_review_log"]

# (faithfulness, context_relevance, answer_relevance, [(verdict, supporting ranks) per sentence])
Verdict = tuple[float | None, float | None, float | None, Sequence[tuple[str, tuple[int, ...]]]]

DOCS = (("policy", "Returns are accepted within 30 days of delivery."),
        ("shipping", "Standard shipping takes 3 to 5 business days."))


class ScriptedAuditJudge(BaseRagJudge):
    """A full-audit judge whose verdicts are set per question."""

    def __init__(self, verdicts: Mapping[str, Verdict], name: str = "scripted-audit") -> None:
        self.verdicts = dict(verdicts)
        self.name = name

    def judge(self, request: JudgeRequest) -> Judgement:
        faith, context, answer, sentences = self.verdicts[request.query]
        texts = [s.strip() + "." for s in (request.answer or "").split(".") if s.strip()]
        ids = [d.id for d in request.documents]
        return Judgement(
            faithfulness=faith, context_relevance=context, answer_relevance=answer, judge=self.name,
            reason=f"scripted verdict for {request.query}",
            sentences=tuple(SentenceVerdict(index=i, text=texts[i - 1] if i <= len(texts) else "", verdict=v,  # type: ignore[arg-type]
                                            supporting_ranks=ranks, supporting_doc_ids=tuple(ids[r - 1] for r in ranks))
                            for i, (v, ranks) in enumerate(sentences, start=1)))


def turn(turn_id: str, query: str, answer: str, trace_id: str | None = None, cites: int | None = None) -> RagTurn:
    docs = tuple(RetrievedDoc(id=f"{turn_id}-{name}", content=text, rank=rank, source=f"{name}.md")
                 for rank, (name, text) in enumerate(DOCS, start=1))
    citations = ((Citation(doc_id=docs[cites - 1].id, rank=cites, marker=f"[{cites}]", method="marker"),)
                 if cites else ())
    return RagTurn(turn_id=turn_id, query=query, answer=answer, documents=docs, citations=citations,
                   trace_id=trace_id)


def write_review_log(path: Path, turns: Sequence[RagTurn], verdicts: Mapping[str, Verdict],
                     judge_name: str = "scripted-audit", times: Sequence[str] | None = None) -> Path:
    """Judge *turns* with the scripted judge into the audit log *path* (through a real inline Auditor);
    *times*, when given, are written as each line's ``ts`` (the Auditor stamps the current time)."""
    with Auditor(ScriptedAuditJudge(verdicts, judge_name), mode="inline", audit_log=path) as auditor:
        for t in turns:
            auditor.submit(t)
    if times is not None:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert len(lines) == len(times)
        path.write_text("".join(json.dumps({**line, "ts": ts}) + "\n" for line, ts in zip(lines, times)))
    return path


def ok_verdict(score: float) -> Verdict:
    return (score, score, score, [("supported", (1,))])


def good_turns(n: int, start: float = 0.55) -> tuple[list[RagTurn], dict[str, Verdict]]:
    """*n* turns nothing flags, with scores spread from *start* to 1."""
    turns, verdicts = [], {}
    for i in range(n):
        q = f"ok question {i}"
        turns.append(turn(f"ok-{i:02d}", q, "Returns are accepted within 30 days.", trace_id=f"{i:032x}"))
        verdicts[q] = ok_verdict(round(start + (1 - start) * i / max(n - 1, 1), 3))
    return turns, verdicts
