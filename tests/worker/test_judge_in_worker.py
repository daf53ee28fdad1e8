"""``Auditor(mode="worker")``: a LangChain app records its turns and sends their traces over OTLP; a real
``ragaudit worker`` judges them, with the same records and counts as judging in the app's process.

Real parts: LangChain's LCEL RAG chain as its docs write it (python.langchain.com, "Build a Retrieval
Augmented Generation (RAG) App": ``{"context": retriever | format_docs, "question":
RunnablePassthrough()} | prompt | llm | StrOutputParser()``) over Chroma's embedded client, with the real
``ChatOpenAI`` against the loopback chat-completions server; the OTel SDK's ``BatchSpanProcessor`` with
the OTLP/HTTP exporter, sending to a real :class:`~ragaudit.integrations.otlp.Worker` in this process;
the worker's ``ChatRagJudge`` (the full audit, the default) against a second loopback server, its
judge spans and evaluation log records to a real OTLP receiver. The same app and judge in-process
(``mode="background"``) give the records to compare with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_server import LLMServer, judgement_json
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.topics import QUESTIONS
from tests.worker.apps.langchain_rag import make_chain
from tests.worker.conftest import wait_for

pytestmark = pytest.mark.timeout(180)

_QUESTIONS = QUESTIONS[:3]
_COUNTS_RE = re.compile(r"one entry per sentence \((\d+)\) and per document \((\d+)\)")


def _judge_rule(body: dict[str, Any]) -> str:
    """A full-audit verdict shaped to the request: one entry per answer sentence and per document."""
    system = str((body.get("messages") or [{}])[0].get("content"))
    found = _COUNTS_RE.search(system)
    if found is None:
        return judgement_json(1.0, 0.75, 1.0, reason="supported by [1]")
    sentences, documents = int(found.group(1)), int(found.group(2))
    return judgement_json(1.0, 0.75, 1.0, reason="supported by [1]",
                          sentences=[{"n": n, "verdict": "supported", "docs": [1]} for n in range(1, sentences + 1)],
                          documents=[{"n": n, "grade": 3 if n == 1 else 1} for n in range(1, documents + 1)])


def _run(chain: Any, auditor: Any) -> list[str]:
    """The questions through *chain* with a handler on *auditor*; every turn closed and submitted."""
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    handler = RagAuditCallbackHandler(auditor=auditor)
    answers = [chain.invoke(question, config={"callbacks": [handler]}) for question in _QUESTIONS]
    assert handler.force_flush(30) and auditor.force_flush(30)
    return answers


def _lines(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {line["query"]: line for line in lines}


@pytest.fixture
def judge_llm() -> Any:
    with LLMServer(rule=_judge_rule) as srv:
        yield srv


def test_mode_worker_sends_the_turns_to_ragaudit_worker_which_judges_them_as_in_process(
        rag_llm: LLMServer, judge_llm: LLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ragaudit import Auditor, ChatRagJudge
    from ragaudit.integrations.otlp import Worker

    monkeypatch.setenv("OPENAI_BASE_URL", rag_llm.base_url)  # the app's ChatOpenAI
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    _, chain = make_chain()

    def judge() -> ChatRagJudge:
        return ChatRagJudge(model="judge-model", base_url=judge_llm.base_url, api_key="test", max_retries=0)

    # In process: the reference records.
    in_process_log = tmp_path / "in-process.jsonl"
    with Auditor(judge(), audit_log=in_process_log, tracer_provider=TracerProvider()) as auditor:
        answers = _run(chain, auditor)
        in_process_stats = auditor.stats()
    assert in_process_stats["judged"] == len(_QUESTIONS)

    with OTLPReceiver() as collector:
        worker_log = tmp_path / "worker.jsonl"
        worker = Worker(judge(), port=0, otlp_endpoint=collector.endpoint, quiet_s=0.3, max_wait_s=20.0,
                        audit_log=str(worker_log)).start()
        try:
            app_spans = InMemorySpanExporter()
            provider = TracerProvider(resource=Resource.create({"service.name": "lc-rag-app"}))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=worker.url + "/v1/traces")))
            provider.add_span_processor(SimpleSpanProcessor(app_spans))
            judge_calls_before = judge_llm.request_count
            with Auditor(mode="worker", tracer_provider=provider, audit_log=tmp_path / "app.jsonl") as app:
                assert _run(chain, app) == answers
                assert provider.force_flush(30_000)
                app_stats = app.stats()
            wait_for(lambda: worker.stats()["turns_judged"] == len(_QUESTIONS), timeout=60,
                     what="the worker's judgements")
            worker_stats = worker.stats()
            collector.wait_for_spans(len(_QUESTIONS), timeout=30, predicate=lambda s: s["name"] == "ragaudit.judge")
        finally:
            worker.stop(10)
        provider.shutdown()

        # Counts: every turn handed over with its trace, none judged in the app; the worker found
        # and judged each of them once.
        assert app_stats["submitted"] == app_stats["to_worker"] == len(_QUESTIONS)
        assert app_stats["judged"] == app_stats["pending"] == app_stats["dropped"] == 0
        assert worker_stats["turns_found"] == worker_stats["turns_judged"] == len(_QUESTIONS)
        assert worker_stats["turns_judge_failed"] == 0
        assert judge_llm.request_count - judge_calls_before == len(_QUESTIONS)  # the worker's calls only
        assert not (tmp_path / "app.jsonl").exists()  # the app recorded nothing itself

        # The judge spans are in the app's traces, under its turn spans; the app made none itself.
        spans = app_spans.get_finished_spans()
        assert not [s for s in spans if s.name == "ragaudit.judge"]
        turn_spans = {format(s.context.span_id, "016x"): format(s.context.trace_id, "032x")
                      for s in spans if s.name == "ragaudit.turn"}
        judges = collector.spans_named("ragaudit.judge")
        assert len(judges) == len(_QUESTIONS)
        assert all(turn_spans.get(j["parent_span_id"]) == j["trace_id"] for j in judges)

    # Records: the worker's audit log has one line per turn with the same keys, judgement and
    # derived values as the in-process one.
    ours, theirs = _lines(in_process_log), _lines(worker_log)
    assert sorted(ours) == sorted(theirs) == sorted(_QUESTIONS)
    for question in _QUESTIONS:
        mine, worker_line = ours[question], theirs[question]
        assert sorted(worker_line) == sorted(mine)
        for key in ("answer", "faithfulness", "context_relevance", "answer_relevance", "reason", "judge_status",
                    "sentences", "document_grades", "graded_metrics", "citation_checks", "error"):
            assert worker_line[key] == mine[key], key
        assert [d["id"] for d in worker_line["documents"]] == [d["id"] for d in mine["documents"]]
        assert sorted(worker_line["judge_identity"]) == sorted(mine["judge_identity"])
        assert worker_line["faithfulness"] == 1.0 and worker_line["sentences"]


def test_mode_worker_refuses_what_only_the_worker_can_act_on() -> None:
    from ragaudit import Auditor, Budget, CostControl, LexicalJudge
    from ragaudit.errors import ConfigurationError

    for kwargs, named in (({"judge": LexicalJudge()}, "judge"), ({"sample_rate": 0.5}, "sample_rate"),
                          ({"cost": CostControl(budget=Budget(max_calls=10))}, "cost"),
                          ({"cost": CostControl(max_rps=1.0)}, "cost"),
                          ({"on_judgement": lambda turn, judgement: None}, "on_judgement")):
        with pytest.raises(ConfigurationError, match=rf"mode='worker'.*\b{named}\b"):
            Auditor(mode="worker", audit_log=None, **kwargs)  # type: ignore[arg-type]


def test_mode_worker_counts_a_turn_without_a_trace_as_dropped() -> None:
    # No tracer provider is configured: the turn has no trace, so no worker can ever judge it.
    from ragaudit import Auditor, RagTurn, RetrievedDoc

    traced = RagTurn(turn_id="t1", query="q", answer="a [1]", documents=(RetrievedDoc(id="d", content="c"),),
                     trace_id="1" * 32, span_id="2" * 16)
    untraced = RagTurn(turn_id="t2", query="q", answer="a [1]", documents=(RetrievedDoc(id="d", content="c"),))
    with Auditor(mode="worker", audit_log=None) as auditor:
        assert auditor.submit(traced) == "to_worker"
        assert auditor.submit(untraced) == "dropped"
        stats = auditor.stats()
    assert (stats["submitted"], stats["to_worker"], stats["dropped"], stats["judged"]) == (2, 1, 1, 0)
