"""The CPU share cap at hand-off (issue 50, ``Limits.max_cpu_share``), in a real process.

A host loop that keeps the process saturated (a tight loop of a real LCEL chain through the handler) and a judge
that spins the CPU on ragaudit's own threads: past the cap, turns are shed at hand-off, counted ``dropped`` and
``shed_cpu``, and every turn is accounted. No timing is asserted: the loop runs until the cap has shed turns (or a
bound on the number of turns is reached, which fails the test).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from ragaudit import Auditor, BaseRagJudge, Judgement, JudgeRequest, Limits
from ragaudit.auditor._governor import NOT_SENT
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import read_audit_log
from tests.reliability._support import memory_store, rag_chain

MAX_TURNS = 20_000
SPIN_S = 0.004  # CPU per judgement, spent on ragaudit's judge threads


class Spinning(BaseRagJudge):
    """A sync judge that burns CPU (under the host's GIL) on ragaudit's judge threads."""

    name = "spinning"

    def judge(self, request: JudgeRequest) -> Judgement:
        start = time.thread_time()
        while time.thread_time() - start < SPIN_S:
            pass
        return Judgement(faithfulness=1.0, judge=self.name)


@pytest.mark.timeout(300)
def test_a_saturated_host_keeps_its_cpu_and_every_turn_is_accounted(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "audit.jsonl"
    auditor = Auditor(Spinning(), limits=Limits(max_cpu_share=0.1), audit_log=log, handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}))
    turns = 0
    try:
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            while turns < MAX_TURNS:
                chain.invoke(f"How do returns work? ({turns})", config={"callbacks": [handler]})
                turns += 1
                if turns % 50 == 0 and auditor.stats()["shed_cpu"] >= 10:
                    break
        assert handler.force_flush(60)
    finally:
        ok = auditor.shutdown(60)
    stats = auditor.stats()
    assert ok, stats
    assert stats["shed_cpu"] >= 10, stats
    assert stats["dropped"] >= stats["shed_cpu"] + stats["shed_backlog"], stats
    assert stats["pending"] == stats["closing"] == stats["close_dropped"] == 0, stats
    assert stats["submitted"] == turns, (turns, stats)
    assert stats["submitted"] == (stats["judged"] + stats["failed"] + stats["dropped"] + stats["sampled_out"]
                                  + stats["to_worker"] + sum(stats[reason] for reason in NOT_SENT)), stats
    assert stats["judged"] == len(read_audit_log(log)) > 0
    said = [r.getMessage() for r in caplog.records if "shed_cpu" in r.getMessage()]
    assert said and "Limits(max_cpu_share=" in said[0] and 'mode="worker"' in said[0]


@pytest.mark.timeout(300)
def test_without_the_cap_nothing_is_shed_for_cpu(tmp_path: Path) -> None:
    auditor = Auditor(Spinning(), limits=Limits(max_cpu_share=None), audit_log=None, handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}))
    try:
        for i in range(300):
            chain.invoke(f"How do returns work? ({i})", config={"callbacks": [handler]})
        assert handler.force_flush(60)
    finally:
        auditor.shutdown(60)
    stats = auditor.stats()
    assert stats["shed_cpu"] == 0 and auditor._admission.cpu is None, stats
    assert stats["judged"] + stats["shed_backlog"] == 300, stats
