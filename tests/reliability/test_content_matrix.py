"""The content policy, end to end: where each text may go, and that no credential goes anywhere.

A canary string per source of text (question, answer, document, metadata key and value, the judge's
reason, its raw reply, its error body, the host's exception, a sink's error body) is followed through
every path out of the process (span attributes incl. status, span events, the audit log, the Phoenix
and Langfuse payloads, ragaudit's log records at DEBUG), with content capture on, off, off but keeping
the judge's reason, and with a ``redact`` hook. Then six ways a credential reaches ragaudit, each echoed
back by the party it was sent to.

Real parts: a LangChain LCEL chain (a ``BaseRetriever``, ``FakeListChatModel``), the real ``openai`` SDK
against the loopback chat-completions server, the real OTel SDK (memory and JSONL exporters), the
Phoenix and Langfuse sinks against loopback HTTP recorders.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.retrievers import BaseRetriever

from ragaudit import Auditor, ChatRagJudge, ContentPolicy
from ragaudit.content import SECRET_MARKER
from ragaudit.integrations import closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import LangfuseExporter, PhoenixExporter
from tests.reliability._support import rag_chain
from tests.reliability.conftest import Traced
from tests.support.http_recorder import HttpRecorder
from tests.support.llm_server import Fault, LLMServer, judgement_json

pytestmark = pytest.mark.timeout(90)

# --- canaries ------------------------------------------------------------------------------------------

QUESTION, ANSWER, DOCUMENT = "CNRY-QUESTION", "CNRY-ANSWER", "CNRY-DOCUMENT"
META_KEY, META_VALUE = "CNRY-METAKEY", "CNRY-METAVALUE"
REASON, RAW, JUDGE_ERROR = "CNRY-REASON", "CNRY-RAWREPLY", "CNRY-JUDGEERROR"
HOST_ERROR, SINK_ERROR = "CNRY-HOSTEXC", "CNRY-SINKERROR"
SOURCES = {"question": QUESTION, "answer": ANSWER, "document": DOCUMENT, "metadata key": META_KEY,
           "metadata value": META_VALUE, "judge reason": REASON, "judge raw reply": RAW,
           "judge error body": JUDGE_ERROR, "host exception": HOST_ERROR, "sink error body": SINK_ERROR}
PATHS = ("span attributes", "span events", "audit log", "Phoenix payload", "Langfuse payload", "log records")
MARK = "[R]"


def redact(text: str) -> str:
    return re.sub(r"CNRY-[A-Z]+", MARK, text)


A, E, L, P, F, G = PATHS  # attributes, events, audit log, Phoenix, Langfuse, logs
CAPTURED: dict[str, set[str]] = {
    # capture on: where each text goes (the span status description counts as an attribute)
    "question": {A, L},             # turn and retrieval input, the model's prompt; the audit line
    "answer": {A, E, L},            # and the full audit's sentence events on the judge span
    "document": {A, L},             # retrieval span document content; the model's prompt
    "metadata key": {A, L},         # run metadata on the turn span, document metadata in both
    "metadata value": {A, L},
    "judge reason": {A, E, L, P, F},  # judge span, gen_ai.evaluation.result explanations, sinks
    "judge raw reply": {L},         # the unusable first reply, kept in the audit line's details
    "judge error body": {A, E, L},  # judge span error + status, exception and evaluation events
    "host exception": {A, E},       # turn span status and exception event (no judgement is made)
    "sink error body": {G},         # the sink's warning
}
EXPECTED: dict[str, dict[str, set[str]]] = {
    "capture on": CAPTURED,
    "capture off": {source: set() for source in SOURCES},
    "capture off, judge reason kept": {source: ({A, E, L, P, F} if source == "judge reason" else set())
                                       for source in SOURCES},
    "capture on, redact": {source: set() for source in SOURCES},
}
SETTINGS: dict[str, dict[str, Any]] = {  # made when a test runs: a policy with capture off marks the process
    "capture on": {"capture_content": True},
    "capture off": {"capture_content": False},
    "capture off, judge reason kept": {"capture_content": False, "capture_reason": True},
    "capture on, redact": {"capture_content": True, "redact": redact},
}


class CanaryRetriever(BaseRetriever):
    """One document carrying the document and metadata canaries; raises the host canary on demand."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if "host-error" in query:
            raise RuntimeError(f"{HOST_ERROR} the index is unavailable")
        return [Document(page_content=f"{DOCUMENT} Refunds take 14 days.", id="doc-1",
                         metadata={"source": "kb/refunds.md", META_KEY: META_VALUE})]


def judge_rule(body: dict[str, Any]) -> Any:
    """A 400 echoing our canary for one question; for the others first an unusable reply (the raw
    canary), then, asked to repair it, a verdict with the reason canary."""
    text = json.dumps(body.get("messages"))
    if "judge-error" in text:
        return Fault.bad_request(f"{JUDGE_ERROR}: this request was rejected")
    if RAW in text:
        return judgement_json(0.9, 0.8, 0.7, reason=f"{REASON} the answer is grounded")
    return f"{RAW} I cannot answer in JSON"


def texts(traced: Traced, audit: Path, phoenix: HttpRecorder, langfuse: HttpRecorder,
          caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """Everything each path out carried, as one text per path."""
    spans = traced.spans()
    attributes = [json.dumps(dict(s.attributes or {}), default=str) + str(s.status.description) for s in spans]
    events = [json.dumps([dict(e.attributes or {}) for e in s.events], default=str) for s in spans]
    ours = [r for r in caplog.records if r.name.split(".")[0] == "ragaudit"]
    return {
        A: "\n".join(attributes),
        E: "\n".join(events),
        L: audit.read_text(encoding="utf-8") if audit.exists() else "",
        P: json.dumps([r["body"] for r in phoenix.requests], default=str),
        F: json.dumps([r["body"] for r in langfuse.requests], default=str),
        G: "\n".join(r.getMessage() + "\n" + (r.exc_text or "") + (r.stack_info or "") for r in ours),
    }


def sink_error(request: dict[str, Any]) -> bytes:
    return json.dumps({"message": f"{SINK_ERROR}: unauthorized"}).encode()


def run_three_turns(settings: dict[str, Any], server: LLMServer, traced: Traced, tmp_path: Path,
                    caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    with HttpRecorder() as phoenix, HttpRecorder() as langfuse:
        for backend in (phoenix, langfuse):
            backend.status, backend.error_body = 401, sink_error
        judge = ChatRagJudge(client=openai.OpenAI(base_url=server.base_url, api_key="sk-matrix-0000", max_retries=0))
        audit = tmp_path / "audit.jsonl"
        auditor = Auditor(judge, audit_log=audit, tracer_provider=traced.provider, **settings, exporters=[
            PhoenixExporter(phoenix.url, api_key="phx-matrix-key", max_retries=0),
            LangfuseExporter(langfuse.url, public_key="pk-lf-matrix", secret_key="sk-lf-matrix", max_retries=0)])
        handler = RagAuditCallbackHandler(auditor=auditor)
        chain = rag_chain(CanaryRetriever(), FakeListChatModel(responses=[f"{ANSWER} Refunds take 14 days."]))
        config: Any = {"callbacks": [handler], "metadata": {META_KEY: META_VALUE}}
        with caplog.at_level(logging.DEBUG):
            chain.invoke(f"{QUESTION} how long do refunds take?", config=config)
            chain.invoke(f"{QUESTION} judge-error: may I get a refund?", config=config)
            with pytest.raises(RuntimeError, match=HOST_ERROR):  # the host's own exception, unchanged
                chain.invoke(f"{QUESTION} host-error", config=config)
            # False: the sinks' deliveries failed (401), as scripted; everything else was recorded
            assert not closer_for(auditor).force_flush(30)
            auditor.shutdown(10)
            stats = auditor.stats()
        # Every turn recorded and counted: two judged turns (one failed), three turn spans.
        assert (stats["submitted"], stats["judged"], stats["failed"], stats["pending"]) == (2, 1, 1, 0), stats
        assert stats["export_errors"] > 0
        assert len(traced.spans("ragaudit.turn")) == 3 and len(traced.spans("ragaudit.judge")) == 2
        assert phoenix.requests and langfuse.requests  # the sinks sent, and got the 401 with our canary
        return texts(traced, audit, phoenix, langfuse, caplog)


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_each_text_goes_exactly_where_the_policy_allows(
        mode: str, traced: Traced, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with LLMServer(rule=judge_rule) as server:
        recorded = run_three_turns({"content": ContentPolicy(**SETTINGS[mode])}, server, traced, tmp_path, caplog)
    found = {source: {path for path in PATHS if canary in recorded[path]} for source, canary in SOURCES.items()}
    assert found == EXPECTED[mode]
    # Off means off in the span file too; redacted texts are still there, as the marker.
    if mode != "capture on":
        assert not re.search(r"CNRY-(?!REASON)", traced.path.read_text(encoding="utf-8"))
    if mode == "capture on, redact":
        assert {path for path in PATHS if MARK in recorded[path]} == set(PATHS)
    if mode.startswith("capture off"):
        # ids, scores and sizes stay; an error keeps its type and status
        audit = [json.loads(line) for line in recorded[L].splitlines()]
        failed = next(line for line in audit if line["judge_status"] == "failed")
        assert failed["error"] == "BadRequestError (HTTP 400): details withheld (content capture is off)"
        assert failed["query_chars"] > 0 and failed["documents"][0]["id"] == "doc-1"


# --- credentials ---------------------------------------------------------------------------------------

GATEWAY_KEY = "gw-key-HEADER-5c1f0e9a7b"
PHOENIX_KEY = "phx-key-SINK-8d2e4a61c3"
LANGFUSE_SECRET = "sk-lf-SINK-93b7c2d4e5"
PROXY_KEY = "sk-proxy-ECHO-2f6a9e0b1d"
QUERY_KEY = "qk-URL-7e3d1c5b9a"
ENV_TOKEN = "envtok-ENV-4b8f2a6c0d"
OTLP_KEY = "otlpkey-OTLP-1a9c3e7b5f"


def echo_authorization(request: dict[str, Any]) -> bytes:
    """A backend's 401 that quotes the Authorization it got (and, for Basic auth, what it decodes to)."""
    auth = request["headers"].get("authorization", "")
    decoded = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ""
    return json.dumps({"error": f"invalid credentials: {auth} ({decoded})"}).encode()


CREDENTIALS: dict[str, str] = {
    "x-api-key default header echoed in a 401": GATEWAY_KEY,
    "Phoenix / Langfuse key echoed in a sink's 401 body": PHOENIX_KEY + " " + LANGFUSE_SECRET,
    "proxy echoing Authorization in a 200 reply (reason)": PROXY_KEY,
    "key in base_url's query string (errors, repr)": QUERY_KEY,
    "environment variable that looks like a token": ENV_TOKEN,
    "OTEL_EXPORTER_OTLP_HEADERS value": OTLP_KEY,
}


@pytest.mark.parametrize("way", list(CREDENTIALS))
def test_no_credential_is_ever_recorded(way: str, traced: Traced, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secrets = CREDENTIALS[way].split()
    monkeypatch.setenv("ACME_GATEWAY_TOKEN", ENV_TOKEN)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-otlp-api-key={OTLP_KEY},x-team=matrix")

    def rule(body: dict[str, Any]) -> Any:
        if way.startswith("x-api-key"):
            return Fault.bad_request(f"invalid x-api-key {GATEWAY_KEY}", status=401)
        if way.startswith("proxy"):
            return judgement_json(reason=f"upstream saw Authorization: Bearer {PROXY_KEY}")
        if way.startswith("environment"):
            return Fault.bad_request(f"gateway token {ENV_TOKEN} has expired", status=401)
        if way.startswith("OTEL"):
            return judgement_json(reason=f"collector header x-otlp-api-key={OTLP_KEY}")
        return None

    with LLMServer(rule=rule) as server, HttpRecorder() as phoenix, HttpRecorder() as langfuse:
        if way.startswith("Phoenix"):
            for backend in (phoenix, langfuse):
                backend.status, backend.error_body = 401, echo_authorization
        if way.startswith("key in base_url"):
            judge = ChatRagJudge(base_url=f"{server.base_url}?api_key={QUERY_KEY}", api_key="sk-any", max_retries=0)
        else:
            client = openai.OpenAI(base_url=server.base_url, max_retries=0,
                                   api_key=PROXY_KEY if way.startswith("proxy") else "sk-matrix-1111",
                                   default_headers={"x-api-key": GATEWAY_KEY})
            judge = ChatRagJudge(client=client)
        sinks = [PhoenixExporter(phoenix.url, api_key=PHOENIX_KEY, max_retries=0),
                 LangfuseExporter(langfuse.url, public_key="pk-lf-credentials", secret_key=LANGFUSE_SECRET,
                                  max_retries=0)]
        audit = tmp_path / "audit.jsonl"
        auditor = Auditor(judge, audit_log=audit, tracer_provider=traced.provider, exporters=sinks,
                          content=ContentPolicy(capture_content=True))
        handler = RagAuditCallbackHandler(auditor=auditor)
        chain = rag_chain(CanaryRetriever(), FakeListChatModel(responses=["Refunds take 14 days."]))
        with caplog.at_level(logging.DEBUG):
            chain.invoke("How long do refunds take?", config={"callbacks": [handler]})
            # the sinks' deliveries fail (401) when they are the ones echoing the key
            assert closer_for(auditor).force_flush(30) is not way.startswith("Phoenix")
            auditor.shutdown(10)
            assert auditor.stats()["pending"] == 0
        recorded = texts(traced, audit, phoenix, langfuse, caplog)
        reprs = [repr(x) for x in (judge, auditor, auditor.content_policy, auditor.recorder, *sinks)]
        recorded["repr"] = "\n".join([*reprs, judge.base_url, judge.config_key()])
        recorded["span file"] = traced.path.read_text(encoding="utf-8")
    # The credential really came back to us, scrubbed: somewhere a *** stands where it was.
    assert any(SECRET_MARKER in text for text in recorded.values())
    for secret in secrets:
        assert not {path for path, text in recorded.items() if secret in text}, secret
        assert not {path for path, text in recorded.items() if secret[-10:] in text}, secret


# --- a redact hook that raises -------------------------------------------------------------------------


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_redact_raising_anything_withholds_the_text_and_loses_no_turn(
        exc_type: type[BaseException], traced: Traced, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def failing_redact(text: str) -> str:
        if QUESTION in text:
            raise exc_type(f"cannot redact {text}")  # quotes its input, as such errors do
        return text

    with LLMServer(rule=judge_rule) as server:
        judge = ChatRagJudge(client=openai.OpenAI(base_url=server.base_url, api_key="sk-redact-0", max_retries=0))
        audit = tmp_path / "audit.jsonl"
        auditor = Auditor(judge, audit_log=audit, tracer_provider=traced.provider,
                          content=ContentPolicy(redact=failing_redact))
        handler = RagAuditCallbackHandler(auditor=auditor)
        chain = rag_chain(CanaryRetriever(), FakeListChatModel(responses=["Refunds take 14 days."]))
        with caplog.at_level(logging.DEBUG):
            assert chain.invoke(f"{QUESTION} refunds?", config={"callbacks": [handler]}) == "Refunds take 14 days."
            assert closer_for(auditor).force_flush(30)
            assert auditor.shutdown(10)
    stats = auditor.stats()
    assert (stats["submitted"], stats["judged"], stats["failed"], stats["dropped"]) == (1, 1, 0, 0)
    [line] = [json.loads(x) for x in audit.read_text(encoding="utf-8").splitlines()]
    assert line["query"] == "[ragaudit: redact() failed, text withheld]" and line["faithfulness"] == 0.9
    assert len(traced.spans("ragaudit.turn")) == 1 and len(traced.spans("ragaudit.judge")) == 1
    # ragaudit's own records (the openai SDK logs its requests, prompt included, at DEBUG)
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records if r.name == "ragaudit")
    assert exc_type.__name__ in logged and QUESTION not in logged
    assert QUESTION not in traced.path.read_text(encoding="utf-8")


def test_a_key_a_proxy_echoes_into_the_reason_never_reaches_an_evaluation_report(tmp_path: Path) -> None:
    from ragaudit.evaluation import evaluate_pipeline

    with LLMServer(rule=lambda body: judgement_json(reason=f"upstream saw Authorization: Bearer {PROXY_KEY}")) as srv:
        judge = ChatRagJudge(client=openai.OpenAI(base_url=srv.base_url, api_key=PROXY_KEY, max_retries=0))
        chain = rag_chain(CanaryRetriever(), FakeListChatModel(responses=["Refunds take 14 days."]))
        report = evaluate_pipeline([{"id": "q1", "question": "How long do refunds take?"}], chain, judge=judge,
                                   progress=False, auditor_kwargs={"audit_log": tmp_path / "eval-audit.jsonl"})
    assert report.rows[0].reason is not None and PROXY_KEY in report.rows[0].reason  # the echo really came back
    for text in (report.to_json(), report.to_markdown(), report.to_html(),
                 (tmp_path / "eval-audit.jsonl").read_text(encoding="utf-8")):
        assert PROXY_KEY not in text and PROXY_KEY[-10:] not in text
    assert f"Bearer {SECRET_MARKER}" in report.to_json()
