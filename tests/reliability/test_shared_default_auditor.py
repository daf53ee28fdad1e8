"""One default Auditor for every handler and ``instrument()``, whatever redact / capture / provider
they pass, and each turn still recorded exactly as its own handler asked.

Handlers with different settings share the process default Auditor (one closing thread, one judging
loop, one audit log). Their turns carry the handler's span recorder, so the judge span goes to the
handler's tracer provider and the judge span, the audit-log line and the log lines follow the
handler's content policy, never the (looser) default one. Checked with real text (a card number and
a canary word in the documents, hence in the answers, the judge's prompts and the judge's reason),
a real ``redact`` hook, the real OTel SDK (in-memory and JSONL exporters), the real audit-log file,
real LangChain (Chroma) and LlamaIndex (Chroma) pipelines and the real ``ChatRagJudge`` (the default
judge) against the loopback chat-completions server.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragaudit import Auditor, FakeJudge
from ragaudit.integrations import _common, closer_for
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from ragaudit.tracing import LangfuseExporter, PhoenixExporter
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.reliability._support import chroma_store, rag_chain
from tests.reliability.conftest import Traced
from tests.support.http_recorder import HttpRecorder
from tests.support.llm_server import LLMServer, judgement_json

pytestmark = pytest.mark.timeout(120)

CARD = "PII-4111-1111-1111-1111"
# The card's digits in any form (a redaction that kept part of it), but not inside the random hex of
# a trace, span or judgement id, which "4111" alone can match by chance.
_DIGITS = "4111-1111"
CARD_RE = re.compile(r"PII-[0-9-]+")
CANARY = "ZEBRAQUARTZ"  # a word only the capture-off handler's documents and questions hold
PLAIN = "Gift cards are never refunded."


def redact(text: str) -> str:
    return CARD_RE.sub("[REDACTED]", text)


def echoing_judge(body: dict[str, Any]) -> str:
    """The judge quotes what it was shown of the turn (the prompt's lines on cards and orders: the
    question, the answer and the documents) in its reason."""
    shown = "\n".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "user")
    quoted = [line for line in shown.splitlines() if re.search(r"card|order", line, re.I)]
    return judgement_json(0.9, 0.8, 0.7, reason="Checked: " + " | ".join(quoted))


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer(rule=echoing_judge) as srv:
        yield srv


@pytest.fixture
def default_env(server: LLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh process default Auditor for this test: the default judge (ChatRagJudge from the
    environment, on the loopback server), the default audit log in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-test-key")
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.setattr(_common, "_default", [])
    yield tmp_path / "ragaudit-audit.jsonl"
    for auditor in _common._default:
        auditor.shutdown(10)


def traced_set(tmp_path: Path, *names: str) -> Iterator[dict[str, Traced]]:
    made = {name: Traced(tmp_path / f"spans-{name}.jsonl") for name in names}
    yield made
    for t in made.values():
        t.provider.shutdown()


@pytest.fixture
def providers(tmp_path: Path) -> Iterator[dict[str, Traced]]:
    yield from traced_set(tmp_path, "plain", "redact", "off")


def spans_text(t: Traced) -> str:
    return "\n".join([*(s.to_json() for s in t.spans()), t.path.read_text(encoding="utf-8")])


def logs_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() + (repr(r.exc_info[1]) if r.exc_info else "") for r in caplog.records)


def line_of(lines: list[dict[str, Any]], t: Traced) -> dict[str, Any]:
    """The audit-log line of the one turn traced through *t*."""
    (turn,) = t.spans(c.SPAN_TURN)
    trace_id = format(turn.context.trace_id, "032x")
    (line,) = [x for x in lines if x["trace_id"] == trace_id]
    return line


def check_policies(lines: list[dict[str, Any]], providers: dict[str, Traced], caplog: pytest.LogCaptureFixture,
                   questions: dict[str, str]) -> None:
    """Each handler's turn, its judge span and its audit-log line as that handler asked."""
    assert len(lines) == 3 and all(x["judge_status"] == "judged" for x in lines)
    for name, t in providers.items():
        # The judge span of each turn went to its handler's provider, under the turn span.
        (turn,) = t.spans(c.SPAN_TURN)
        (judge,) = t.spans(c.SPAN_JUDGE)
        assert judge.parent is not None and judge.parent.span_id == turn.context.span_id, name
    plain, redacted, off = (line_of(lines, providers[n]) for n in ("plain", "redact", "off"))
    plain_spans, redact_spans, off_spans = (spans_text(providers[n]) for n in ("plain", "redact", "off"))

    # The control: text does flow (capture on, no hook), so the checks below can fail.
    assert plain["query"] == questions["plain"] and PLAIN in plain["answer"] and PLAIN in plain["reason"]
    assert PLAIN in plain_spans
    (judge,) = providers["plain"].spans(c.SPAN_JUDGE)
    assert PLAIN in str(judge.attributes[c.ATTR_JUDGE_REASON])

    # redact=: the card number is nowhere, its redacted form everywhere the text went.
    line_text = json.dumps(redacted)
    assert CARD not in line_text and _DIGITS not in line_text
    assert "[REDACTED]" in redacted["query"] and "[REDACTED]" in redacted["answer"]
    assert "[REDACTED]" in redacted["reason"] and "[REDACTED]" in redacted["documents"][0]["content"]
    assert CARD not in redact_spans and _DIGITS not in redact_spans
    (judge,) = providers["redact"].spans(c.SPAN_JUDGE)
    assert "[REDACTED]" in str(judge.attributes[c.ATTR_JUDGE_REASON])

    # capture_content=False: no text of that turn anywhere, only sizes and ids.
    assert off["query"] is None and off["answer"] is None and off["reason"] is None
    assert off["query_chars"] == len(questions["off"]) and off["documents"][0]["content"] is None
    assert CANARY not in json.dumps(off) and CANARY not in off_spans
    (judge,) = providers["off"].spans(c.SPAN_JUDGE)
    assert c.ATTR_JUDGE_REASON not in (judge.attributes or {})
    assert judge.attributes[c.judge_score_key("faithfulness")] == 0.9  # judged all the same

    # Neither the withheld text nor the card number is in any other turn's records or in a log line.
    for text in (plain_spans, json.dumps(plain), logs_text(caplog)):
        assert CARD not in text and CANARY not in text


# --- LangChain ---------------------------------------------------------------------------------------


def test_langchain_handlers_share_the_default_auditor_and_keep_their_own_policy(
        default_env: Path, providers: dict[str, Traced], server: LLMServer,
        caplog: pytest.LogCaptureFixture) -> None:
    handlers = {
        "plain": RagAuditCallbackHandler(tracer_provider=providers["plain"].provider),
        "redact": RagAuditCallbackHandler(tracer_provider=providers["redact"].provider, redact=redact),
        "off": RagAuditCallbackHandler(tracer_provider=providers["off"].provider, capture_content=False),
    }
    (auditor,) = _common._default
    assert all(h.auditor is auditor for h in handlers.values())  # one Auditor, not one per setting
    docs = {
        "plain": [("gift", PLAIN, {"source": "gifts.md"})],
        "redact": [("card", f"Card {CARD} was refunded within 14 days.", {"source": "cards.md"})],
        "off": [("zebra", f"The {CANARY} order ships in two days.", {"source": "orders.md"})],
    }
    questions = {"plain": "Are gift cards refunded?", "redact": f"Was card {CARD} refunded?",
                 "off": f"When does the {CANARY} order ship?"}
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        for name, handler in handlers.items():
            chain = rag_chain(chroma_store(docs[name]).as_retriever(search_kwargs={"k": 1}))
            chain.invoke(questions[name], config={"callbacks": [handler]})
        assert closer_for(auditor).force_flush(30)
    assert len(server.requests) == 3  # every turn judged by the one default judge
    check_policies(read_audit_log(default_env), providers, caplog, questions)


# --- LlamaIndex --------------------------------------------------------------------------------------


@pytest.fixture
def li_settings() -> Iterator[None]:
    from tests.support.llamaindex_support import offline_settings

    with offline_settings():
        yield


def test_llamaindex_instrument_shares_the_default_auditor_and_keeps_each_policy(
        default_env: Path, providers: dict[str, Traced], server: LLMServer, li_settings: None,
        caplog: pytest.LogCaptureFixture) -> None:
    from llama_index.core.schema import TextNode

    from ragaudit.integrations import llamaindex
    from tests.support.llamaindex_support import build_index

    texts = {"plain": PLAIN, "redact": f"Card {CARD} was refunded within 14 days.",
             "off": f"The {CANARY} order ships in two days."}
    questions = {"plain": "Are gift cards refunded?", "redact": f"Was card {CARD} refunded?",
                 "off": f"When does the {CANARY} order ship?"}
    settings: dict[str, dict[str, Any]] = {"plain": {}, "redact": {"redact": redact},
                                           "off": {"capture_content": False}}
    auditors = []
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        for name in ("plain", "redact", "off"):
            index = build_index([TextNode(id_=name, text=texts[name], metadata={"source": f"{name}.md"},
                                          excluded_llm_metadata_keys=["source"])])
            installed = llamaindex.instrument(tracer_provider=providers[name].provider, **settings[name])
            try:
                auditors.append(installed.auditor)
                index.as_query_engine(similarity_top_k=1).query(questions[name])
                assert installed.force_flush(30)
            finally:
                llamaindex.uninstrument()
    (auditor,) = _common._default
    assert all(a is auditor for a in auditors)  # each instrument() used the one default Auditor
    assert len(server.requests) == 3
    check_policies(read_audit_log(default_env), providers, caplog, questions)


# --- an explicit auditor: the handler's stricter policy reaches its audit log, spans and sinks -----------


@pytest.mark.parametrize("setting", ["redact", "capture_off"])
def test_handler_policy_stricter_than_its_auditor_reaches_audit_log_spans_and_exporters(
        setting: str, traced: Traced, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "audit.jsonl"
    shown = {"n": 0}

    def judge(request: Any) -> dict[str, Any]:
        shown["n"] += 1
        return {"faithfulness": 1.0, "reason": f"Quoted: {request.answer}"}

    with HttpRecorder() as backend:
        auditor = Auditor(FakeJudge(judge), audit_log=log, tracer_provider=traced.provider,
                          exporters=[LangfuseExporter(backend.url, public_key="pk", secret_key="sk-lf"),
                                 PhoenixExporter(backend.url)])
        kwargs: dict[str, Any] = {"redact": redact} if setting == "redact" else {"capture_content": False}
        handler = RagAuditCallbackHandler(auditor=auditor, **kwargs)  # no longer refused: it reaches everything
        plain_handler = RagAuditCallbackHandler(auditor=auditor)
        assert handler.auditor is auditor and plain_handler.recorder is auditor.recorder
        store = chroma_store([("card", f"Card {CARD} and the {CANARY} order were refunded.", {"source": "c.md"})])
        chain = rag_chain(store.as_retriever(search_kwargs={"k": 1}))
        with caplog.at_level(logging.DEBUG, logger="ragaudit"):
            chain.invoke(f"Was card {CARD} refunded?", config={"callbacks": [handler]})
            chain.invoke("Was the other card refunded?", config={"callbacks": [plain_handler]})
            assert closer_for(auditor).force_flush(30)
            auditor.shutdown(10)
        sinks = json.dumps([r["body"] for r in backend.requests])
    assert shown["n"] == 2
    lines = read_audit_log(log)
    (strict,) = [x for x in lines if (x["query"] or "").startswith("Was card") or x["query"] is None]
    (loose,) = [x for x in lines if x is not strict]
    # The control: the auditor's own policy (capture on, no hook) records the other handler's text.
    assert CARD in loose["answer"] and CARD in loose["reason"]
    strict_trace = strict["trace_id"]
    strict_spans = "\n".join(s.to_json() for s in traced.spans() if format(s.context.trace_id, "032x") == strict_trace)
    assert c.SPAN_JUDGE in strict_spans
    items = [item for r in backend.requests for item in (r["body"].get("data") or [r["body"]])]
    strict_sinks = json.dumps([item for item in items
                               if any(key in json.dumps(item) for key in (strict_trace, strict["span_id"],
                                                                          strict["turn_id"]))])
    assert strict_sinks != "[]"  # the sinks got this turn's scores
    for where, text in {"audit": json.dumps(strict), "spans": strict_spans, "sinks": strict_sinks}.items():
        assert CARD not in text and _DIGITS not in text, where
        if setting == "capture_off":
            assert CANARY not in text, where
    if setting == "redact":
        assert "[REDACTED]" in strict["reason"] and "[REDACTED]" in strict_sinks and CANARY in strict["answer"]
    else:
        assert strict["query"] is None and strict["reason"] is None
    assert CARD in sinks  # the looser turn's reason did go out, through the same sinks
    assert CARD not in logs_text(caplog)


def test_flush_of_the_shared_auditor_exports_each_handlers_provider(default_env: Path, server: LLMServer) -> None:
    # Judge spans go to each handler's provider, so the one Auditor's flush() must flush those too: with a
    # batch processor that would hold spans for a minute, nothing is exported unless flush() reaches it.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporters = [InMemorySpanExporter() for _ in range(2)]
    providers = [TracerProvider(shutdown_on_exit=False) for _ in exporters]
    for provider, exporter in zip(providers, exporters):
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    try:
        handlers = [RagAuditCallbackHandler(tracer_provider=providers[0], redact=redact),
                    RagAuditCallbackHandler(tracer_provider=providers[1], capture_content=False)]
        chain = rag_chain(chroma_store([("gift", PLAIN, {"source": "gifts.md"})]).as_retriever(search_kwargs={"k": 1}))
        for handler in handlers:
            chain.invoke("Are gift cards refunded?", config={"callbacks": [handler]})
        assert handlers[0].auditor is handlers[1].auditor
        assert handlers[0].force_flush(30)  # one flush: the shared auditor flushes both providers
        for exporter in exporters:
            assert {c.SPAN_TURN, c.SPAN_JUDGE} <= {s.name for s in exporter.get_finished_spans()}
    finally:
        for provider in providers:
            provider.shutdown()
