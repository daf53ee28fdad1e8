from __future__ import annotations

import asyncio
import threading

import pytest

from ragaudit import BaseRagJudge, FakeJudge, Judgement, JudgeRequest, RagJudge

REQ = JudgeRequest(query="q", answer="a", context="c")


class SyncOnly(BaseRagJudge):
    name = "sync-only"

    def judge(self, request: JudgeRequest) -> Judgement:
        return Judgement(faithfulness=1.0, judge=self.name, details={"thread": threading.current_thread().name})


class AsyncOnly(BaseRagJudge):
    name = "async-only"

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        await asyncio.sleep(0)
        return Judgement(answer_relevance=0.25, judge=self.name)


def test_sync_judge_gets_async_in_a_worker_thread() -> None:
    j = SyncOnly()
    assert isinstance(j, RagJudge)
    result = asyncio.run(j.ajudge(REQ))
    assert result.faithfulness == 1.0
    assert result.details["thread"] != threading.main_thread().name


def test_async_judge_gets_sync_even_inside_a_running_loop() -> None:
    j = AsyncOnly()
    assert j.judge(REQ).answer_relevance == 0.25

    async def inside() -> float | None:
        return j.judge(REQ).answer_relevance  # sync call from async code must not deadlock

    assert asyncio.run(inside()) == 0.25


def test_judge_implementing_neither_is_rejected_at_definition() -> None:
    with pytest.raises(TypeError, match="judge\\(\\) or ajudge\\(\\)"):
        class Nothing(BaseRagJudge):
            pass


class TestFakeJudge:
    def test_mapping_result(self) -> None:
        j = FakeJudge(lambda r: {"faithfulness": 0.5, "reason": f"saw {r.query}"})
        out = j.judge(REQ)
        assert out.faithfulness == 0.5 and out.context_relevance is None and out.reason == "saw q"
        assert out.judge == "fake" and j.calls == 1

    def test_async_fn_and_judgement_result(self) -> None:
        async def fn(r: JudgeRequest) -> Judgement:
            return Judgement(context_relevance=1.0, judge="mine")

        j = FakeJudge(fn)
        assert j.judge(REQ).context_relevance == 1.0
        assert asyncio.run(j.ajudge(REQ)).judge == "mine"

    def test_exception_becomes_error_judgement(self) -> None:
        def boom(r: JudgeRequest) -> Judgement:
            raise ValueError("nope")

        out = FakeJudge(boom).judge(REQ)
        assert out.error == "ValueError: nope" and out.faithfulness is None

    def test_bad_results_reported(self) -> None:
        assert "unknown keys" in (FakeJudge(lambda r: {"faith": 1}).judge(REQ).error or "")
        assert "faithfulness" in (FakeJudge(lambda r: {"faithfulness": 3}).judge(REQ).error or "")

    def test_not_callable(self) -> None:
        with pytest.raises(ValueError, match="callable"):
            FakeJudge(3)  # type: ignore[arg-type]
