"""Admission at hand-off (issue 50): sampling decided before any closing work, overload shed with a count.

A sampled-out turn costs a counter, not an assembly: with ``sample_rate=0.0`` a tight loop of 21,000 turns
through a real LCEL chain and the handler builds nothing (no close job, no span), drops nothing at the
closer's bound (it used to drop ~10,000 there, ``close_dropped``) and counts every turn ``sampled_out``.

Under sustained overload (turns arrive faster than a slow judge finishes them) the backlog stays bounded
(``stats()["backlog_bound"]``, the judge's measured pace over half of ``exit_timeout_s``), every shed turn
is counted (``dropped``: offered - judged - in flight), and shutdown records everything that was kept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit import Auditor, CostControl, FakeJudge, JudgeRequest, LexicalJudge, Limits
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import read_audit_log
from tests.reliability._support import memory_store, rag_chain

TIGHT_LOOP = 21_000


async def instant(request: JudgeRequest) -> dict[str, Any]:
    return {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0}


@pytest.mark.timeout(300)
def test_sample_rate_zero_assembles_nothing_and_drops_nothing_at_the_closer(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    auditor = Auditor(LexicalJudge(), sample_rate=0.0, audit_log=tmp_path / "audit.jsonl", handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    chain = RunnableLambda(lambda q: f"answer to {q}")
    try:
        for i in range(TIGHT_LOOP):
            chain.invoke(f"q{i}", config={"callbacks": [handler]})
        assert handler.force_flush(60)
        stats = auditor.stats()
        assert stats["sampled_out"] == stats["submitted"] == TIGHT_LOOP, stats
        assert stats["close_dropped"] == stats["dropped"] == stats["judged"] == 0, stats
        assert not any(stats[f"unjudged_{r}"] for r in ("no_model", "no_evidence", "failed")), stats
        assert closer_for(auditor).worker.stats()["accepted"] == 0  # no close job: nothing assembled
        assert exporter.get_finished_spans() == ()  # and nothing traced
        assert handler.stats()["closed_turns"] == TIGHT_LOOP
    finally:
        auditor.shutdown(10)


def test_sampled_in_turns_are_closed_and_judged_as_before(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    # Every sampled-in turn judged: the CPU share cap off (a tight loop saturates the process; tested apart in
    # test_cpu_share.py).
    auditor = Auditor(FakeJudge(instant), sample_rate=0.5, limits=Limits(max_cpu_share=None), audit_log=log,
                      handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}))
    try:
        for i in range(60):
            chain.invoke(f"How do returns work? ({i})", config={"callbacks": [handler]})
        assert handler.force_flush(30)
        stats = auditor.stats()
        assert stats["submitted"] == 60 and 0 < stats["sampled_out"] < 60, stats
        assert stats["judged"] == 60 - stats["sampled_out"] == len(read_audit_log(log)), stats
        assert stats["close_dropped"] == stats["dropped"] == 0
    finally:
        auditor.shutdown(10)


def test_sampling_stays_at_submission_when_the_sampled_out_turn_is_kept_for_feedback(tmp_path: Path) -> None:
    auditor = Auditor(FakeJudge(instant), sample_rate=0.0, cost=CostControl(retain_s=60), audit_log=None,
                      handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}))
    try:
        chain.invoke("How do returns work?", config={"callbacks": [handler]})
        assert handler.force_flush(30)
        assert closer_for(auditor).worker.stats()["accepted"] == 1  # built: a thumbs-down may judge it
        assert auditor.stats()["sampled_out"] == 1
    finally:
        auditor.shutdown(10)


OVERLOAD_TURNS = 1_500
JUDGE_S = 0.05
CONCURRENCY = 2
EXIT_TIMEOUT_S = 8.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sustained_overload_sheds_with_a_count_and_exits_with_everything_kept_recorded(tmp_path: Path) -> None:
    async def slow(request: JudgeRequest) -> dict[str, Any]:
        await asyncio.sleep(JUDGE_S)  # 2 at once: 40 judgements a second at most
        return {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 1.0}

    log = tmp_path / "audit.jsonl"
    # The backlog's bound on its own: the CPU share cap off (tested apart in test_cpu_share.py).
    auditor = Auditor(FakeJudge(slow), limits=Limits(max_concurrency=CONCURRENCY, exit_timeout_s=EXIT_TIMEOUT_S,
                                                     max_cpu_share=None),
                      audit_log=log, handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}))
    backlog: list[int] = []
    try:
        for i in range(OVERLOAD_TURNS):
            chain.invoke(f"How do returns work? ({i})", config={"callbacks": [handler]})
            if i % 10 == 0:
                stats = auditor.stats()
                backlog.append(stats["pending"] + stats["closing"])
        during = auditor.stats()
        # Bounded: the default max_queue (10,000) would have let every turn pile up (over 1,000 here); the
        # measured pace (at most 40/s, over half of exit_timeout_s: 160) holds the backlog to that.
        assert during["backlog_bound"] < OVERLOAD_TURNS / 5, during
        assert max(backlog) < OVERLOAD_TURNS / 5, (max(backlog), during)
        # Every shed turn counted: offered = judged + in flight (pending, closing) + shed.
        assert during["dropped"] > 0 and during["close_dropped"] == 0, during
        assert during["submitted"] + during["closing"] >= OVERLOAD_TURNS - 64
        assert handler.stats()["closed_turns"] == OVERLOAD_TURNS
    finally:
        ok = auditor.shutdown()  # within exit_timeout_s: what was kept is judged before the deadline
    stats = auditor.stats()
    assert ok, stats
    assert stats["pending"] == stats["closing"] == 0
    assert stats["submitted"] == OVERLOAD_TURNS, stats
    assert stats["dropped"] == OVERLOAD_TURNS - stats["judged"] - stats["failed"], stats
    assert stats["judged"] == len(read_audit_log(log))
