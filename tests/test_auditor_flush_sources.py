"""Auditor.force_flush() and shutdown() reach every turn that ended before the call (issue 44 item 4).

Whichever source made the turn -- a ``RagAuditCallbackHandler`` passed in ``config``, LangChain's
process-wide ``instrument()``, LlamaIndex's ``instrument()`` -- its closer registers with the Auditor
(``Auditor.add_upstream``, the ``ragaudit.auditor.Upstream`` protocol) and the Auditor's own flush
hands those turns down first, as a TracerProvider flushes its span processors. Was: after five runs,
``auditor.force_flush(30)`` returned True with 0 of 5 judged, and ``auditor.shutdown(10)`` returned
True while the 5 turns reached the shut-down Auditor at exit and were counted ``dropped``.

Real chains and query engines (Chroma, the frameworks' classes), the real ``ChatRagJudge`` against
the loopback chat-completions server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragaudit import Auditor, ChatRagJudge, ConfigurationError, RagTurn, RetrievedDoc
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing.files import read_audit_log
from tests.support.langchain_support import KB, rag_chain
from tests.support.llm_server import LLMServer
from tests.support.topics import QUESTIONS

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5


@pytest.fixture(scope="module")
def kb() -> KB:
    return KB()


@pytest.fixture
def auditor(srv: LLMServer, audit_log_path: Path) -> Iterator[Auditor]:
    judge = ChatRagJudge(base_url=srv.base_url, api_key="sk-test", model="judge-1", max_retries=0)
    a = Auditor(judge, audit_log=audit_log_path, handle_signals=False)
    yield a
    a.shutdown(10)


def judged_questions(log: Path) -> list[str]:
    return sorted(str(line["query"]) for line in read_audit_log(log) if line["judge_status"] == "judged")


def test_auditor_force_flush_covers_the_handlers_turns(auditor: Auditor, kb: KB, audit_log_path: Path) -> None:
    # The user scenario of issue 44: was True with 0 of 5 judged (the turns still in the closer).
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(kb.retriever)
    asked = QUESTIONS[:RUNS]
    for q in asked:
        chain.invoke(q, config={"callbacks": [handler]})
    assert auditor.force_flush(30) is True
    stats = auditor.stats()
    assert stats["judged"] == RUNS and stats["pending"] == 0 and stats["closing"] == 0, stats
    assert judged_questions(audit_log_path) == sorted(asked)


def test_auditor_shutdown_judges_the_handlers_turns_and_drops_none(auditor: Auditor, kb: KB,
                                                                   audit_log_path: Path) -> None:
    # Was: True, then the 5 turns reached the shut-down Auditor (at exit) and were counted dropped.
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(kb.retriever)
    for q in QUESTIONS[:RUNS]:
        chain.invoke(q, config={"callbacks": [handler]})
    assert auditor.shutdown(10) is True
    stats = auditor.stats()
    assert stats["judged"] == RUNS and stats["dropped"] == 0 and stats["close_dropped"] == 0, stats
    assert len(judged_questions(audit_log_path)) == RUNS
    # The closer stopped with its Auditor: nothing is left for the exit hook to drop.
    assert closer_for(auditor).closed and len(closer_for(auditor)) == 0


def test_auditor_force_flush_covers_langchain_instrument(auditor: Auditor, kb: KB, audit_log_path: Path) -> None:
    # With instrument() the app holds no handler to flush: the Auditor's flush is the only one it has.
    from ragaudit.integrations import langchain

    langchain.instrument(auditor=auditor)
    try:
        chain = rag_chain(kb.retriever)
        for q in QUESTIONS[:RUNS]:
            chain.invoke(q)
    finally:
        langchain.uninstrument()
    assert auditor.force_flush(30) is True
    assert auditor.stats()["judged"] == RUNS
    assert judged_questions(audit_log_path) == sorted(QUESTIONS[:RUNS])


def test_auditor_force_flush_covers_llamaindex_instrument(auditor: Auditor, audit_log_path: Path) -> None:
    from ragaudit.integrations import llamaindex
    from tests.support.llamaindex_support import ContextEchoLLM, build_index

    engine = build_index().as_query_engine(llm=ContextEchoLLM(), similarity_top_k=2)
    with llamaindex.instrumented(auditor=auditor):
        for q in QUESTIONS[:RUNS]:
            engine.query(q)
    assert auditor.force_flush(30) is True
    assert auditor.stats()["judged"] == RUNS
    assert judged_questions(audit_log_path) == sorted(QUESTIONS[:RUNS])


def test_a_flush_that_cannot_judge_the_ended_turns_says_false(srv: LLMServer, kb: KB, tmp_path: Path) -> None:
    # True only when the turns are judged and exported: with the judge hanging, the handed-down
    # turns are still pending at the deadline.
    from tests.support.llm_server import Fault

    srv.rule = lambda body: Fault.hang(30)
    judge = ChatRagJudge(base_url=srv.base_url, api_key="sk-test", model="judge-1", max_retries=0, timeout_s=60)
    a = Auditor(judge, audit_log=tmp_path / "audit.jsonl", handle_signals=False)
    handler = RagAuditCallbackHandler(auditor=a)
    rag_chain(kb.retriever).invoke(QUESTIONS[0], config={"callbacks": [handler]})
    assert a.force_flush(1.0) is False
    assert a.stats()["pending"] == 1 and a.stats()["closing"] == 0
    a.shutdown(0.5)


class _Queued:
    """An upstream stage of the app's own: turns it holds go down only when the Auditor asks."""

    def __init__(self, auditor: Auditor, turns: list[RagTurn]) -> None:
        self.auditor, self.turns = auditor, turns
        self.stopped = False

    def hand_down(self, timeout_s: float | None) -> bool:
        while self.turns:
            self.auditor.submit(self.turns.pop(0))
        return True

    def stop(self, timeout_s: float) -> bool:
        self.stopped = True
        return self.hand_down(timeout_s)

    def stats(self) -> dict[str, int]:
        return {"closing": len(self.turns)}


def test_any_upstream_stage_is_driven_first_by_flush_and_shutdown(auditor: Auditor, audit_log_path: Path) -> None:
    from ragaudit.auditor import Upstream

    docs = (RetrievedDoc(id="d1", content="Returns are accepted within 30 days.", rank=1),)
    turns = [RagTurn(turn_id=f"t{i}", query=f"question {i}", answer="Within 30 days.", documents=docs)
             for i in range(4)]
    stage = _Queued(auditor, turns[:2])
    assert isinstance(stage, Upstream)
    auditor.add_upstream(stage)
    assert auditor.force_flush(30) and auditor.stats()["judged"] == 2
    stage.turns.extend(turns[2:])
    assert auditor.shutdown(10) and stage.stopped and auditor.stats()["judged"] == 4
    with pytest.raises(ConfigurationError, match="upstream"):
        auditor.add_upstream(object())  # type: ignore[arg-type]


def test_end_session_without_sessions_names_the_setting(auditor: Auditor) -> None:
    # Was: silently nothing.
    with pytest.raises(ConfigurationError, match=r"sessions=True"):
        auditor.end_session("chat-1")


SCRIPT = textwrap.dedent("""
    import sys
    from ragaudit import Auditor, ChatRagJudge
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.support.langchain_support import KB, rag_chain
    from tests.support.llm_server import LLMServer
    from tests.support.topics import QUESTIONS
    srv = LLMServer().start()
    a = Auditor(ChatRagJudge(base_url=srv.base_url, api_key="sk-test", model="judge-1", max_retries=0),
                audit_log=sys.argv[1])
    kb = KB()
    handler = RagAuditCallbackHandler(auditor=a)
    chain = rag_chain(kb.retriever)
    for q in QUESTIONS[:5]:
        chain.invoke(q, config={"callbacks": [handler]})
    print("flush", a.force_flush(30), a.stats()["judged"], flush=True)
    print("shutdown", a.shutdown(10), flush=True)
""")


@pytest.mark.slow
def test_the_ordinary_script_loses_nothing_at_exit(tmp_path: Path) -> None:
    # The script of issue 44 as a process of its own (the exit hook runs for real).
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=100)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["flush True 5", "shutdown True"], proc.stdout
    assert "dropped" not in proc.stderr and "not recorded" not in proc.stderr, proc.stderr
    assert len(judged_questions(log)) == 5
