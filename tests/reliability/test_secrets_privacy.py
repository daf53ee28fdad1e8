"""Secrets and privacy: what ragaudit records never holds an API key; with content capture off it
holds no question, answer or document text; a user's ``redact`` hook reaches every recorded text.

"Recorded" means everything that leaves the process or stays after it: spans (in memory, in the
JSONL span file, over OTLP to a real receiver), the audit log, sink requests (Langfuse/Phoenix
wire bodies), evaluation reports (JSON, Markdown, HTML) and log lines (DEBUG and up, every logger).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.documents import Document

from ragaudit import Auditor, ChatRagJudge, ContentPolicy, FakeJudge
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import LangfuseExporter, PhoenixExporter
from ragaudit.tracing.files import read_audit_log
from tests.reliability._support import FixedRetriever, rag_chain
from tests.reliability.conftest import Traced
from tests.support.http_recorder import HttpRecorder
from tests.support.llm_server import Fault, LLMServer, judgement_json

pytestmark = pytest.mark.timeout(60)

ENV_KEY = "sk-ragaudit-ENVKEY-0123456789abcdefghijklmnop"
CLIENT_KEY = "sk-ragaudit-CLIENTKEY-9876543210zyxwvutsrqpon"


def span_text(traced: Traced) -> str:
    """Every span's name, attributes, events, links and status, as one text (memory and file)."""
    parts = []
    for span in traced.spans():
        parts.append(span.to_json())
    parts.append(traced.path.read_text(encoding="utf-8") if traced.path.exists() else "")
    return "\n".join(parts)


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    out = []
    for record in caplog.records:
        out.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            out.append(repr(record.exc_info[1]))
            out.append(logging.Formatter().formatException(record.exc_info))
    return "\n".join(out)


# --- API keys ----------------------------------------------------------------------------------------


def key_echoing_rule(key: str) -> Any:
    """By the question's number (so a retry gets the same answer): OK, then errors that echo the key
    in full: 401, 500 (retried by the SDK), 400."""

    def rule(body: dict[str, Any]) -> Any:
        text = json.dumps(body.get("messages"))
        kind = next((i for i in range(4) if f"({i})" in text), 0) % 4
        if kind == 0:
            return judgement_json(0.9, 0.8, 0.7)
        if kind == 1:
            return Fault.bad_request(f"Incorrect API key provided: {key}. You can find your API key at ...",
                                     status=401)
        if kind == 2:
            return Fault("status", status=500, message=f"upstream rejected Authorization: Bearer {key}")
        return Fault.bad_request(f"Bad request from key {key}: messages[1] too long")

    return rule


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as srv:
        yield srv


@pytest.mark.parametrize("source", ["env", "sync_client", "async_client"])
def test_api_key_never_recorded(source: str, server: LLMServer, traced: Traced, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    key = ENV_KEY if source == "env" else CLIENT_KEY
    server.rule = key_echoing_rule(key)
    if source == "env":
        monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        judge: Any = None  # the Auditor picks the default judge: ChatRagJudge from the environment
    elif source == "sync_client":
        judge = ChatRagJudge(client=openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0))
    else:
        judge = ChatRagJudge(client=openai.AsyncOpenAI(base_url=server.base_url, api_key=CLIENT_KEY,
                                                       max_retries=0))
    log = tmp_path / "audit.jsonl"
    auditor = Auditor(judge, audit_log=log, tracer_provider=traced.provider)
    if source == "env":
        assert isinstance(auditor.judge, ChatRagJudge) and auditor.judge.base_url == server.base_url
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(FixedRetriever(documents=[Document(page_content="Refunds take 14 days.", id="r")]))
    with caplog.at_level(logging.DEBUG):
        for i in range(4):
            chain.invoke(f"How long do refunds take? ({i})", config={"callbacks": [handler]})
        assert closer_for(auditor).force_flush(30)
        judgements = read_audit_log(log)
        auditor.shutdown(10)
    # The server really got the key, and really echoed it back in errors.
    assert any(r.headers.get("authorization") == f"Bearer {key}" for r in server.requests)
    assert sorted(x["judge_status"] for x in judgements) == ["failed", "failed", "failed", "judged"]
    assert any("401" in (x["error"] or "") for x in judgements)
    recorded = "\n".join([span_text(traced), log.read_text(encoding="utf-8"), log_text(caplog),
                          repr(auditor.judge), str(auditor.judge.config_key())])
    assert key not in recorded
    assert key[-12:] not in recorded  # not even partly


def test_api_key_never_in_evaluation_reports(server: LLMServer, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from ragaudit.evaluation import evaluate_pipeline

    server.rule = key_echoing_rule(CLIENT_KEY)
    judge = ChatRagJudge(client=openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY, max_retries=0))
    chain = rag_chain(FixedRetriever(documents=[Document(page_content="Refunds take 14 days.", id="r")]))
    dataset = [{"id": f"q{i}", "question": f"How long do refunds take? ({i})", "relevant_ids": ["r"]}
               for i in range(8)]
    with caplog.at_level(logging.DEBUG):
        report = evaluate_pipeline(dataset, chain, judge=judge, progress=False,
                          auditor_kwargs={"audit_log": tmp_path / "eval-audit.jsonl"})
    texts = [report.to_json(), report.to_markdown(), report.to_html(), log_text(caplog),
             (tmp_path / "eval-audit.jsonl").read_text(encoding="utf-8")]
    # The key-echoing failures are in the report (their messages, scrubbed).
    assert any("401" in (row.judge_error or "") for row in report.rows)
    for text in texts:
        assert CLIENT_KEY not in text
        assert CLIENT_KEY[-12:] not in text


# --- content capture off -------------------------------------------------------------------------------

CANARIES = {
    "question": "QUESTIONCANARY",
    "answer": "ANSWERCANARY",
    "document": "DOCUMENTCANARY",
    "metadata": "METADATACANARY",
    "reason": "REASONCANARY",
    "run_metadata": "RUNMETACANARY",
}


def canary_chain() -> Any:
    document = Document(page_content=f"Refunds take 14 days. The {CANARIES['document']} rule applies.",
                        id="refunds", metadata={"source": "refunds.md", "note": CANARIES["metadata"],
                                                "nested": {"deep": [CANARIES["metadata"]]}})
    return rag_chain(FixedRetriever(documents=[document])) | (lambda a: f"{a} Also {CANARIES['answer']}.")


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_capture_off_records_no_text(how: str, server: LLMServer, traced: Traced, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from tests.support.otlp_receiver import OTLPReceiver

    server.default = judgement_json(0.9, 0.8, 0.7, reason=f"The {CANARIES['reason']} is supported.")
    capture: bool | None = False
    if how == "environment":
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "NO_CONTENT")
        capture = None
    judge = ChatRagJudge(base_url=server.base_url, api_key="test", timeout_s=5, max_retries=0)
    log = tmp_path / "audit.jsonl"
    with OTLPReceiver() as receiver, HttpRecorder() as backend:
        traced.provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.traces_url)))
        sink = LangfuseExporter(backend.url, public_key="pk", secret_key="sk-lf")
        auditor = Auditor(judge, audit_log=log, tracer_provider=traced.provider,
                          content=ContentPolicy(capture_content=capture),
                          exporters=[sink])
        handler = RagAuditCallbackHandler(auditor=auditor, tracer_provider=traced.provider, capture_content=capture)
        with caplog.at_level(logging.DEBUG, logger="ragaudit"):
            answer = canary_chain().invoke(f"Refunds {CANARIES['question']}?",
                                           config={"callbacks": [handler],
                                                   "metadata": {"tenant": CANARIES["run_metadata"]}})
            assert closer_for(auditor).force_flush(30)
            auditor.shutdown(10)
        exported = json.dumps(receiver.wait_for_spans(4, timeout=10), default=str)
        sink_bodies = json.dumps([r["body"] for r in backend.requests])
    judge.close()
    assert CANARIES["answer"] in answer and server.request_count == 1
    (line,) = read_audit_log(log)
    assert line["faithfulness"] == 0.9  # judged; only the text is withheld
    assert line["query"] is None and line["answer"] is None and line["reason"] is None
    assert line["query_chars"] == len(f"Refunds {CANARIES['question']}?") and line["answer_chars"] == len(answer)
    assert line["documents"][0]["id"] == "refunds" and line["documents"][0]["content"] is None
    assert line["documents"][0]["content_chars"] > 0
    recorded = {"spans": span_text(traced), "otlp": exported, "audit": log.read_text(encoding="utf-8"),
                "sinks": sink_bodies, "logs": log_text(caplog)}
    assert "refunds" in recorded["spans"] and "0.9" in recorded["spans"]  # ids and scores are kept
    for where, text in recorded.items():
        for name, canary in CANARIES.items():
            assert canary not in text, f"{name} text in {where}"
        assert "Refunds take 14 days" not in text, where


# --- the redact hook ---------------------------------------------------------------------------------

SECRET = "PII-4111-1111-1111-1111"
SECRET_RE = re.compile(r"PII-[0-9-]+")


def redact(text: str) -> str:
    return SECRET_RE.sub("[REDACTED]", text)


@pytest.mark.parametrize("wiring", ["handler_judge", "shared_auditor"])
def test_redact_reaches_every_recorded_text(wiring: str, server: LLMServer, traced: Traced, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}

    def rule(body: dict[str, Any]) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            return judgement_json(0.9, 0.8, 0.7, reason=f"The answer repeats {SECRET} from the context.")
        return Fault.bad_request(f"content policy: the prompt contains {SECRET}")

    server.rule = rule
    judge = ChatRagJudge(base_url=server.base_url, api_key="test", timeout_s=5, max_retries=0)
    log = tmp_path / "audit.jsonl"
    with HttpRecorder() as backend:
        sinks = [LangfuseExporter(backend.url, public_key="pk", secret_key="sk-lf"),
                 PhoenixExporter(backend.url)]
        if wiring == "handler_judge":
            # The handler gets its judge's Auditor (audit log in the working directory, no sinks);
            # its redact travels with each of its turns.
            monkeypatch.chdir(tmp_path)
            log = tmp_path / "ragaudit-audit.jsonl"
            handler = RagAuditCallbackHandler(judge=judge, tracer_provider=traced.provider, redact=redact)
            auditor = handler.auditor
            assert handler.recorder.content_policy.redact is redact
        else:
            auditor = Auditor(judge, audit_log=log, tracer_provider=traced.provider,
                              content=ContentPolicy(redact=redact), exporters=sinks)
            handler = RagAuditCallbackHandler(auditor=auditor)
        document = Document(page_content=f"Card {SECRET} was refunded in 14 days.", id="refunds",
                            metadata={"source": f"tickets/{SECRET}.md", "holder": {"card": SECRET}})
        chain = rag_chain(FixedRetriever(documents=[document]))
        with caplog.at_level(logging.DEBUG, logger="ragaudit"):
            for question in (f"Was card {SECRET} refunded?", f"And card {SECRET} again?"):
                chain.invoke(question, config={"callbacks": [handler], "metadata": {"card": SECRET}})
            assert closer_for(auditor).force_flush(30)
            auditor.shutdown(10)
        sink_bodies = json.dumps([r["body"] for r in backend.requests])
    judge.close()
    lines = read_audit_log(log)
    assert sorted(x["judge_status"] for x in lines) == ["failed", "judged"]
    recorded = {"spans": span_text(traced), "audit": log.read_text(encoding="utf-8"), "sinks": sink_bodies,
                "logs": log_text(caplog)}
    assert "[REDACTED]" in recorded["spans"] and "[REDACTED]" in recorded["audit"]
    if wiring == "shared_auditor":
        assert "[REDACTED]" in recorded["sinks"]
    for where, text in recorded.items():
        assert SECRET not in text, where
        assert "4111-1111" not in text, where


def test_a_redact_hook_given_to_handler_and_auditor_is_applied_once(tmp_path: Path) -> None:
    # A handler's redact= with an explicit auditor is no longer refused: the handler's hook runs, then
    # the auditor's (tests/reliability/test_shared_default_auditor.py); the same hook given to both runs once.
    def mark(text: str) -> str:
        return redact(text) + "#"

    log = tmp_path / "audit.jsonl"
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0, "reason": "fine"}), audit_log=log,
                      content=ContentPolicy(redact=mark))
    handler = RagAuditCallbackHandler(auditor=auditor, redact=mark)
    chain = rag_chain(FixedRetriever(documents=[Document(page_content=f"Card {SECRET} refunds.", id="d")]))
    chain.invoke(f"Refund for {SECRET}?", config={"callbacks": [handler]})
    assert closer_for(auditor).force_flush(30)
    auditor.shutdown(10)
    (line,) = read_audit_log(log)
    assert line["query"] == "Refund for [REDACTED]?#" and line["reason"] == "fine#"


def test_a_failing_redact_withholds_the_text_and_loses_no_judgement(traced: Traced, tmp_path: Path) -> None:
    def fragile(text: str) -> str:
        if "BOOM" in text:
            raise ValueError("redactor cannot parse this")
        return redact(text)

    log = tmp_path / "audit.jsonl"
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0, "reason": "fine"}), audit_log=log,
                      tracer_provider=traced.provider, content=ContentPolicy(redact=fragile))
    handler = RagAuditCallbackHandler(auditor=auditor)
    chain = rag_chain(FixedRetriever(documents=[Document(page_content=f"BOOM {SECRET} refunds.", id="d")]))
    answer = chain.invoke(f"Refund for {SECRET}?", config={"callbacks": [handler]})
    assert closer_for(auditor).force_flush(30)
    auditor.shutdown(10)
    assert "BOOM" in answer
    (line,) = read_audit_log(log)
    assert line["judge_status"] == "judged" and line["faithfulness"] == 1.0  # the judgement is not lost
    assert line["answer"] == "[ragaudit: redact() failed, text withheld]"
    assert line["query"] == "Refund for [REDACTED]?"
    recorded = span_text(traced) + log.read_text(encoding="utf-8")
    assert "BOOM" not in recorded and SECRET not in recorded
