"""instrument() / uninstrument() while chains run: every audited run is one turn, never more.

A real LCEL chain over the Chroma retriever runs on several threads while another thread toggles
the process-wide handler, alternating the same arguments (the same handler comes back) and other
arguments (a new handler replaces it). The figures are printed (``-s``) for RELIABILITY.md.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from ragaudit import Auditor, FakeJudge, JudgeRequest
from ragaudit.integrations.langchain import RagAuditCallbackHandler, instrument, uninstrument
from ragaudit.tracing import conventions as c
from tests.reliability.conftest import Traced
from tests.support.langchain_support import KB, rag_chain
from tests.support.topics import QUESTIONS
from tests.support.turns import children

pytestmark = pytest.mark.timeout(180)

RUNS_PER_THREAD = 150
THREADS = 6


def scores(request: JudgeRequest) -> dict[str, object]:
    return {"faithfulness": 1.0, "reason": "ok"}


def test_instrument_twice_returns_the_same_handler_and_installs_it_once(traced: Traced) -> None:
    from langchain_core.callbacks.manager import CallbackManager

    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    try:
        first = instrument(auditor=auditor)
        assert instrument(auditor=auditor) is first
        assert uninstrument() is first
        assert instrument(auditor=auditor) is first  # toggled back: still the one handler
        manager = CallbackManager.configure()
        assert [h for h in manager.handlers if isinstance(h, RagAuditCallbackHandler)] == [first]
        other = instrument(auditor=auditor, max_runs=500)  # other arguments: replaces it
        assert other is not first
        manager = CallbackManager.configure()
        assert [h for h in manager.handlers if isinstance(h, RagAuditCallbackHandler)] == [other]
    finally:
        uninstrument()
        auditor.shutdown()


def test_toggling_instrument_while_chains_run_gives_one_turn_per_audited_run(traced: Traced) -> None:
    kb = KB()
    chain = rag_chain(kb.retriever)
    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    handlers: list[RagAuditCallbackHandler] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def toggle() -> None:
        i = 0
        while not done.is_set():
            kwargs: dict[str, Any] = {"auditor": auditor} if i % 4 < 2 else {"auditor": auditor, "max_runs": 5000}
            handler = instrument(**kwargs)
            if all(handler is not h for h in handlers):
                handlers.append(handler)
            done.wait(0.001)
            uninstrument()
            done.wait(0.001)
            i += 1

    def work(t: int) -> None:
        try:
            for i in range(RUNS_PER_THREAD):
                q = QUESTIONS[(t * RUNS_PER_THREAD + i) % len(QUESTIONS)]
                assert chain.invoke(q) == kb.answers[q]
        except BaseException as exc:
            errors.append(exc)

    toggler = threading.Thread(target=toggle)
    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    try:
        toggler.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join(150)
    finally:
        done.set()
        toggler.join(30)
        uninstrument()
    assert not errors
    for handler in handlers:
        assert handler.flush(60)
    assert auditor.flush(60)

    runs = RUNS_PER_THREAD * THREADS
    spans = traced.spans()
    turns = [s for s in spans if s.name == c.SPAN_TURN]
    judgements = [s for s in spans if s.name == c.SPAN_JUDGE]
    closed = sum(h.stats()["closed_turns"] for h in handlers)
    print(f"\nruns={runs} turns={len(turns)} judgements={len(judgements)} handlers={len(handlers)}")
    assert 0 < len(turns) <= runs
    assert len(turns) == closed and all(h.stats()["open_turns"] == 0 for h in handlers)
    assert len(judgements) <= len(turns)
    assert auditor.stats()["judged"] == len(judgements)
    # Every turn is a whole run: its question and answer, one retrieval and one model call under it.
    asked: Counter[str] = Counter()
    for turn in turns:
        q = str(turn.attributes[c.INPUT_VALUE])
        assert turn.attributes[c.OUTPUT_VALUE] == kb.answers[q]
        asked[q] += 1
        kids = sorted(s.name for s in children(spans, turn) if s.name != c.SPAN_JUDGE)
        assert kids == ["chat context-echo-1", "retrieval Chroma"]
    assert sum(asked.values()) == len(turns)
    # A run outside any turn leaves no stray retrieval or model span of its own.
    turn_ids = {t.context.span_id for t in turns}
    for s in spans:
        if s.name != c.SPAN_TURN:
            assert s.parent is not None and s.parent.span_id in turn_ids
    auditor.shutdown()
