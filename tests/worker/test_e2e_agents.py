"""End to end (issue 45): the LangChain 1.x agents of ``tests/worker/apps/langchain_agents.py`` (structured
responses by tool calling and by the provider, a ``return_direct`` tool, a ``@wrap_tool_call`` middleware
that cuts tool results, a follow-up answered from memory), exported through OpenInference's
``LangChainInstrumentor`` to a ``ragaudit`` worker, give the same records as ragaudit's own callback handler
on the same app in this process: the same question, answer, evidence ids, evidence text (whole or the part
that reached the model, ``truncated``), one judge call per user message.

The app runs as a process of its own (it imports no ragaudit code); its model is the loopback server here,
played by :func:`tests.worker.apps.langchain_agents.agent_reply`. The handler's records are checked against
the final model calls in ``tests/test_app_matrix_agents.py``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from ragaudit import Auditor, ChatRagJudge, RagTurn
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer
from tests.worker.apps.langchain_agents import STYLES, agent_reply, make_store
from tests.worker.conftest import rag_rule, run_app, wait_for
from tests.worker.file_exporter import Records

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]


def app_rule(body: Mapping[str, Any]) -> Any:
    """The agents' model: :func:`agent_reply`, and the RAG chain's answer inside a ``return_direct`` tool."""
    reply = agent_reply(body)
    return reply if reply is not None else rag_rule(dict(body))


def shown(turn: RagTurn) -> tuple[str, str | None, list[tuple[str, str, bool]]]:
    """What the judge saw of a turn: question, answer, evidence (id, text, truncated)."""
    return turn.query, turn.answer, [(d.id, d.content, d.truncated) for d in turn.documents]


@pytest.fixture(scope="module")
def app_llm() -> Iterator[LLMServer]:
    with LLMServer(rule=app_rule) as srv:
        yield srv


def _in_process(style: str, app_llm: LLMServer) -> list[RagTurn]:
    """The style run here under ragaudit's callback handler: the turns its judge got."""
    from langchain_openai import ChatOpenAI

    from ragaudit import LexicalJudge
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    turns: list[RagTurn] = []
    auditor = Auditor(LexicalJudge(), audit_log=None, on_judgement=lambda turn, _: turns.append(turn))
    try:
        handler = RagAuditCallbackHandler(auditor=auditor)
        llm = ChatOpenAI(model="gpt-4o-mini", base_url=app_llm.base_url, api_key="sk-test", max_retries=0, timeout=10)
        app = STYLES[style](llm, make_store())
        for question in app.questions:
            app.ask(question, {"callbacks": [handler]})
        assert handler.force_flush(20) and auditor.force_flush(20)
    finally:
        auditor.shutdown()
    return turns


@pytest.mark.parametrize("style", list(STYLES))
def test_agent_through_the_worker_gives_the_handlers_records(style: str, app_llm: LLMServer, collector: Any,
                                                            make_worker: Any) -> None:
    expected = {turn.query: shown(turn) for turn in _in_process(style, app_llm)}
    with LLMServer() as judge_srv:
        records = Records()
        worker = make_worker(judge=open_judge(ChatRagJudge, judge_srv, protocol="three-score"), exporters=[records])
        env = {"OPENAI_BASE_URL": app_llm.base_url, "OPENAI_API_KEY": "test",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": worker.url + "/v1/traces"}
        printed = run_app("tests.worker.apps.langchain_agents", [style], env)
        try:
            wait_for(lambda: len(records.records) >= len(printed), timeout=60, what=f"{len(printed)} records")
        except TimeoutError:  # say where the turns went
            raise AssertionError(f"{len(records.records)} of {len(printed)} records: {worker.stats()}") from None
        assert worker.auditor.force_flush(20)
        got = {r.turn.query: shown(r.turn) for r in records.records}
        # (judged in the background: the records may come in any order)
        assert sorted(p["question"] for p in printed) == sorted(expected) == sorted(got)
        assert got == expected
        assert [got[p["question"]][1] for p in printed] == [p["answer"] for p in printed]  # what the user read
        assert judge_srv.request_count == len(printed)  # one judge call per user message
        assert len({r.turn.trace_id for r in records.records}) == len(printed)  # a trace per user message
        assert worker.stats()["turns_judged"] == len(printed)
