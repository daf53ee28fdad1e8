"""An audit log written by the real Auditor, for the tests of ``ragaudit report`` and its HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragaudit import Auditor, Citation, FakeJudge, JudgeRequest, RagTurn, RetrievedDoc

__all__ = ["write_audit_log"]


def write_audit_log(path: Path) -> None:
    """Four judged turns through a real inline Auditor into *path*: good, bad, meh (one score missing)
    and none (no score at all); "good" has ground truth. Each cites its second document."""
    scores: dict[str, dict[str, Any]] = {
        "good": {"faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 0.95, "reason": "grounded"},
        "bad": {"faithfulness": 0.1, "context_relevance": 0.9, "answer_relevance": 0.6, "reason": "invented 60 days"},
        "meh": {"faithfulness": 0.7, "context_relevance": None, "answer_relevance": 0.4, "reason": "partial"},
        "none": {"reason": "judge gave nothing"},
    }

    def judge_fn(request: JudgeRequest) -> dict[str, Any]:
        return scores[request.query]

    with Auditor(FakeJudge(judge_fn, name="fake-judge"), mode="inline", audit_log=path) as auditor:
        for name in scores:
            docs = (RetrievedDoc(id=f"{name}-1", content="text one", rank=1, source="policy.pdf"),
                    RetrievedDoc(id=f"{name}-2", content="text two", rank=2, source="faq.md"))
            cites = (Citation(doc_id=f"{name}-2", rank=2, marker="[2]", method="marker"),)
            turn = RagTurn(turn_id=f"turn-{name}", query=name, answer=f"answer {name} [2]", documents=docs,
                           citations=cites, relevant_ids={f"{name}-1": 1} if name == "good" else None)
            auditor.submit(turn)
