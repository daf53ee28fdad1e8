"""A scripted judge for ``ragaudit worker --judge tests.worker.scripted_judge:judge``: faithfulness
0.9 for every question, 0.2 once the question says the model was changed (the alert tests' drop);
one unsupported sentence in each low answer."""

from __future__ import annotations

from ragaudit import FakeJudge, Judgement, JudgeRequest, SentenceVerdict

DROP_MARKER = "after the model change"


def _score(request: JudgeRequest) -> Judgement:
    low = DROP_MARKER in request.query
    verdict = "unsupported" if low else "supported"
    return Judgement(faithfulness=0.2 if low else 0.9, context_relevance=0.8, answer_relevance=0.8, judge="scripted",
                     sentences=(SentenceVerdict(1, request.answer, verdict, () if low else (1,),
                                                () if low else (request.documents[0].id,)),))


judge = FakeJudge(_score, name="scripted")
