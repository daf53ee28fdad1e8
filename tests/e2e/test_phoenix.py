"""End to end against a real Phoenix server: OTLP/HTTP export from the LangChain demo chain, read back
through Phoenix's REST API, and the judgement posted as Phoenix span and document annotations."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragaudit import Auditor, Judgement, LexicalJudge, RagTurn
from ragaudit.demo.kb import QRELS, QUESTIONS
from ragaudit.demo.pipelines import build_langchain_chain
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import PhoenixExporter
from tests.support.phoenix import PhoenixServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return dict(span.get("attributes") or {})


def _span_id(span: dict[str, Any]) -> str:
    return str(span["context"]["span_id"])


@pytest.fixture()
def traced_run(phoenix: PhoenixServer) -> dict[str, Any]:
    project = f"ragaudit-e2e-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": "ragaudit-e2e",
                                                        "openinference.project.name": project}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=phoenix.otlp_http_endpoint)))
    judged: list[tuple[RagTurn, Judgement]] = []
    sink = PhoenixExporter(phoenix.base_url)
    auditor = Auditor(LexicalJudge(), tracer_provider=provider, audit_log=None, exporters=[sink],
                      on_judgement=lambda t, j: judged.append((t, j)))
    handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=provider)
    chain = build_langchain_chain()
    questions = [q for q in QUESTIONS if q.id in ("q1", "q5")]
    for q in questions:
        chain.invoke(q.text, config={"callbacks": [handler],
                                     "metadata": {"ragaudit_relevant_ids": sorted(QRELS.get(q.id, {}))}})
    assert closer_for(auditor).force_flush(30)
    assert provider.force_flush(30_000)
    assert sink.force_flush(30)
    stats = auditor.stats()
    auditor.shutdown()
    provider.shutdown()
    return {"project": project, "judged": judged, "stats": stats, "sink": sink, "n": len(questions)}


def test_traces_and_judgements_read_back_from_phoenix(phoenix: PhoenixServer, traced_run: dict[str, Any]) -> None:
    n = traced_run["n"]
    spans = phoenix.wait_for_spans(
        traced_run["project"],
        lambda s: min(sum(x["name"] == name for x in s) for name in ("ragaudit.judge", "ragaudit.turn")) >= n,
    )
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"].split(" ")[0], []).append(span)
    assert len(by_name["ragaudit.turn"]) == n
    assert len(by_name["retrieval"]) == n and len(by_name["chat"]) == n and len(by_name["ragaudit.judge"]) == n

    turns = {_span_id(s): s for s in by_name["ragaudit.turn"]}
    for turn, judgement in traced_run["judged"]:
        turn_span = turns[str(turn.span_id)]
        assert turn_span["span_kind"] == "CHAIN"  # Phoenix lifts openinference.span.kind
        assert _attrs(turn_span)["input.value"] == turn.query
        retrieval = next(s for s in by_name["retrieval"] if s["parent_id"] == turn.span_id)
        attrs = _attrs(retrieval)
        assert retrieval["span_kind"] == "RETRIEVER"
        ids = [attrs[f"retrieval.documents.{i}.document.id"] for i in range(len(turn.documents))]
        assert ids == [d.id for d in turn.documents]
        assert attrs["retrieval.documents.0.document.content"] == turn.documents[0].content
        assert isinstance(attrs["retrieval.documents.0.document.score"], float)
        chat = next(s for s in by_name["chat"] if s["parent_id"] == turn.span_id)
        assert chat["span_kind"] == "LLM"
        judge = next(s for s in by_name["ragaudit.judge"] if s["parent_id"] == turn.span_id)
        jattrs = _attrs(judge)
        assert judge["span_kind"] == "EVALUATOR"
        for name in ("faithfulness", "context_relevance", "answer_relevance"):
            assert jattrs[f"ragaudit.judge.{name}"] == pytest.approx(getattr(judgement, name))
        assert judge["context"]["trace_id"] == turn_span["context"]["trace_id"]
        events = [e for e in judge.get("events", []) if e["name"] == "gen_ai.evaluation.result"]
        assert len(events) == 3


def test_annotations_visible_through_phoenix_api(phoenix: PhoenixServer, traced_run: dict[str, Any]) -> None:
    project = traced_run["project"]
    stats = traced_run["sink"].stats()
    assert stats["failed"] == 0 and stats["dropped"] == 0
    # three span annotations per turn, plus one document annotation per retrieved document (the
    # turns carry ground truth) and one graded_relevance annotation per graded document (the
    # lexical judge grades every one); Phoenix accepted every one of them (2xx)
    expected = sum(3 + len(turn.documents) + sum(g.grade is not None for g in judgement.document_grades)
                   for turn, judgement in traced_run["judged"])
    assert stats["sent"] == expected
    for turn, judgement in traced_run["judged"]:
        data = phoenix.get_json(f"/v1/projects/{project}/span_annotations?span_ids={turn.span_id}")["data"]
        got = {a["name"]: a for a in data}
        assert set(got) >= {"faithfulness", "context_relevance", "answer_relevance"}
        f = got["faithfulness"]
        assert f["annotator_kind"] == "LLM"
        assert f["result"]["score"] == pytest.approx(judgement.faithfulness)
        assert f["result"]["explanation"] == judgement.reason
