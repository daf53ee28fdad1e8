"""tracing.configure(): OTLP over HTTP and gRPC to loopback receivers, console, file, OTEL_* variables,
Langfuse, an application's own provider, and clear errors.

The global tracer provider can be set once per process, so everything that sets it runs in a child
process; the receivers run here and decode what the real exporters send.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from ragaudit.errors import ConfigurationError
from ragaudit.tracing import configure, read_spans
from tests.support.otlp_receiver import OTLPGrpcReceiver, OTLPReceiver

SRC = Path(__file__).resolve().parents[1] / "src"

RECORD = """
from ragaudit.records import Generation, Judgement, RagTurn, Retrieval, RetrievedDoc
from ragaudit.tracing import SpanRecorder

docs = (RetrievedDoc(id="kb-1", content="Returns are accepted within 30 days.", score=0.9, rank=1,
                     source="return_policy.pdf"),)
recorder = SpanRecorder()
turn = recorder.record_turn(
    RagTurn(turn_id="t-1", query="What is the return window?", answer="30 days [1].", documents=docs,
            retrievals=(Retrieval("chroma", docs, "What is the return window?"),),
            generations=(Generation(model="gpt-test", input_tokens=50, output_tokens=6),)),
    judge_status="queued",
    retrieval_metrics={"ndcg@10": 1.0},
)
recorder.record_judgement(turn, Judgement(faithfulness=0.75, context_relevance=None, answer_relevance=1.0,
                                          reason="Supported by [1].", judge="lexical"))
assert provider.force_flush(10_000)
"""

SPAN_NAMES = {"ragaudit.turn", "retrieval chroma", "chat gpt-test", "ragaudit.judge"}


def run(
    body: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGFUSE_"))}
    clean["PYTHONPATH"] = str(SRC)
    clean.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def check_trace(spans: list[dict[str, Any]]) -> None:
    named = {s["name"]: s for s in spans}
    assert set(named) == SPAN_NAMES
    root, judge = named["ragaudit.turn"], named["ragaudit.judge"]
    assert root["parent_span_id"] is None
    for name in SPAN_NAMES - {"ragaudit.turn"}:
        assert named[name]["trace_id"] == root["trace_id"]
        assert named[name]["parent_span_id"] == root["span_id"]
    assert judge["attributes"]["ragaudit.judge.faithfulness"] == 0.75
    assert judge["attributes"]["ragaudit.judge.answer_relevance"] == 1.0
    assert "ragaudit.judge.context_relevance" not in judge["attributes"]
    assert judge["attributes"]["openinference.span.kind"] == "EVALUATOR"
    events = [e["attributes"] for e in judge["events"] if e["name"] == "gen_ai.evaluation.result"]
    assert [(e["gen_ai.evaluation.name"], e.get("gen_ai.evaluation.score.value")) for e in events] == [
        ("faithfulness", 0.75),
        ("context_relevance", None),
        ("answer_relevance", 1.0),
    ]
    assert events[1]["gen_ai.evaluation.score.label"] == "missing"
    # a child of the turn, linked to it once as child_of (OpenInference; Jaeger keeps CHILD_OF)
    assert [link["attributes"].get("opentracing.ref_type") for link in judge["links"]] == ["child_of"]
    retrieval = named["retrieval chroma"]["attributes"]
    assert retrieval["retrieval.documents.0.document.id"] == "kb-1"
    assert retrieval["retrieval.documents.0.document.score"] == 0.9
    assert root["attributes"]["ragaudit.retrieval.ndcg@10"] == 1.0
    assert root["attributes"]["ragaudit.document.ids"] == ["kb-1"]


@pytest.mark.timeout(60)
def test_otlp_http_to_a_real_receiver() -> None:
    with OTLPReceiver() as rx:
        run(
            "from ragaudit.tracing import configure\n"
            f"provider = configure(endpoint={rx.endpoint!r}, service_name='shop-bot')\n" + RECORD
        )
        spans = rx.wait_for_spans(4, timeout=10)
        check_trace(spans)
        assert {s["resource"]["service.name"] for s in spans} == {"shop-bot"}
        assert {r["path"] for r in rx.requests} == {"/v1/traces"}
        assert all(r["content_type"] == "application/x-protobuf" for r in rx.requests)


@pytest.mark.timeout(60)
def test_otel_environment_variables_are_honoured() -> None:
    with OTLPReceiver() as rx:
        run(
            "from ragaudit.tracing import configure\nprovider = configure()\n" + RECORD,
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": rx.endpoint,
                "OTEL_SERVICE_NAME": "from-env",
                "OTEL_EXPORTER_OTLP_HEADERS": "x-team=search,authorization=Bearer%20abc",
            },
        )
        spans = rx.wait_for_spans(4, timeout=10)
        check_trace(spans)
        assert {s["resource"]["service.name"] for s in spans} == {"from-env"}
        assert rx.requests[0]["headers"]["x-team"] == "search"
        assert rx.requests[0]["headers"]["authorization"] == "Bearer abc"


@pytest.mark.timeout(60)
def test_traces_endpoint_variable_is_used_as_is() -> None:
    with OTLPReceiver() as rx:
        run(
            "from ragaudit.tracing import configure\nprovider = configure()\n" + RECORD,
            env={
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint + "/collector/v1/traces",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # the specific variable wins
            },
        )
        check_trace(rx.wait_for_spans(4, timeout=10))
        assert {r["path"] for r in rx.requests} == {"/collector/v1/traces"}
        assert {s["resource"]["service.name"] for s in rx.spans} == {"ragaudit"}


@pytest.mark.timeout(60)
def test_otlp_grpc_to_a_real_receiver() -> None:
    with OTLPGrpcReceiver() as gx:
        run(
            f"from ragaudit.tracing import configure\nprovider = configure(endpoint={gx.endpoint!r})\n"
            + RECORD,
            env={"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        )
        check_trace(gx.wait_for_spans(4, timeout=10))
        assert gx.requests[0]["path"] == "grpc"


@pytest.mark.timeout(60)
def test_file_and_console_and_no_duplicate_exporters(tmp_path: Path) -> None:
    path = tmp_path / "out" / "spans.jsonl"
    result = run(
        f"""
from ragaudit.tracing import configure
provider = configure(file={str(path)!r}, console=True)
again = configure(file={str(path)!r}, console=True)
assert again is provider
"""
        + RECORD
    )
    spans = read_spans(path)
    check_trace(spans)  # exactly one copy of each span: the second configure() added nothing
    assert result.stdout.count('"name": "ragaudit.judge"') == 1


@pytest.mark.timeout(60)
def test_an_application_provider_is_left_in_place(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    result = run(
        f"""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.resources import Resource
from ragaudit.tracing import configure

memory = InMemorySpanExporter()
app_provider = TracerProvider(resource=Resource.create({{"service.name": "host-app"}}))
app_provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(app_provider)
provider = configure(file={str(path)!r}, service_name="ignored")
assert provider is app_provider
assert trace.get_tracer_provider() is app_provider
{RECORD}
print(sorted(s.name for s in memory.get_finished_spans()))
"""
    )
    assert result.stdout.strip() == str(sorted(SPAN_NAMES))
    spans = read_spans(path)
    check_trace(spans)
    assert {s["resource"]["service.name"] for s in spans} == {"host-app"}


@pytest.mark.timeout(60)
def test_langfuse_endpoint_and_basic_auth() -> None:
    with OTLPReceiver() as rx:
        run(
            "from ragaudit.tracing import configure\nprovider = configure(langfuse=True)\n" + RECORD,
            env={
                "LANGFUSE_HOST": rx.endpoint,
                "LANGFUSE_PUBLIC_KEY": "pk-lf-test",
                "LANGFUSE_SECRET_KEY": "sk-lf-test",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",  # not used in Langfuse mode
            },
        )
        spans = rx.wait_for_spans(4, timeout=10)
        check_trace(spans)
        request = rx.requests[0]
        assert request["path"] == "/api/public/otel/v1/traces"
        expected = base64.b64encode(b"pk-lf-test:sk-lf-test").decode()
        assert request["headers"]["authorization"] == f"Basic {expected}"
        assert request["headers"]["x-langfuse-ingestion-version"] == "4"
        types = {s["name"]: s["attributes"]["langfuse.observation.type"] for s in spans}
        assert types == {
            "ragaudit.turn": "span",
            "retrieval chroma": "retriever",
            "chat gpt-test": "generation",
            "ragaudit.judge": "evaluator",
        }
        root = next(s for s in spans if s["name"] == "ragaudit.turn")
        assert root["attributes"]["langfuse.trace.name"] == "ragaudit.turn"
        assert root["attributes"]["langfuse.trace.input"] == "What is the return window?"


@pytest.mark.timeout(60)
def test_a_failing_collector_does_not_break_the_process() -> None:
    with OTLPReceiver() as rx:
        rx.fail_with(500)
        run(
            f"""
from ragaudit.tracing import configure
provider = configure(endpoint={rx.endpoint!r})
{RECORD.replace("assert provider.force_flush(10_000)", "provider.force_flush(10_000)")}
print("done")
""",
            env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1"},
        )
        assert rx.requests and all(r["status"] == 500 for r in rx.requests)
        assert rx.spans == []  # refused, so not kept


@pytest.mark.timeout(60)
def test_a_hanging_collector_does_not_hang_the_process() -> None:
    with OTLPReceiver() as rx:
        rx.hang(30)
        result = run(
            f"""
from ragaudit.tracing import configure
provider = configure(endpoint={rx.endpoint!r})
{RECORD.replace("assert provider.force_flush(10_000)", "")}
print("recorded")
""",
            env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1"},
            timeout=45,
        )
        assert result.stdout.strip() == "recorded"


def test_bad_arguments_raise_before_touching_the_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OTEL_", "LANGFUSE_")):
            monkeypatch.delenv(name)
    before = trace.get_tracer_provider()
    with pytest.raises(ConfigurationError, match="http/json"):
        configure(endpoint="http://127.0.0.1:9", protocol="http/json")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ConfigurationError, match="carrier-pigeon"):
        configure(endpoint="http://127.0.0.1:9")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    with pytest.raises(ConfigurationError, match="LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY"):
        configure(langfuse=True)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk")
    with pytest.raises(ConfigurationError, match="HTTP only"):
        configure(langfuse=True, protocol="grpc")
    with pytest.raises(ConfigurationError, match="bad header"):
        configure(endpoint="http://127.0.0.1:9", headers="no-equals-sign")
    with pytest.raises(ConfigurationError, match="endpoint"):
        configure(endpoint="")
    assert trace.get_tracer_provider() is before


@pytest.mark.parametrize(
    "blocked",
    ["opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http.trace_exporter"],
)
def test_a_missing_extra_names_the_pip_extra(blocked: str) -> None:
    result = run(
        f"""
import sys
sys.modules[{blocked!r}] = None  # as if the package were not installed
from ragaudit.errors import ConfigurationError
from ragaudit.tracing import configure
try:
    configure(endpoint="http://127.0.0.1:9")
except ConfigurationError as exc:
    print(exc)
"""
    )
    assert "pip install 'ragaudit[otlp]'" in result.stdout


def test_importing_tracing_loads_no_sdk() -> None:
    result = run(
        """
import json, sys
import ragaudit
import ragaudit.tracing
from ragaudit.tracing import AuditLog, SpanRecorder, read_audit_log, read_spans, conventions
heavy = ("opentelemetry.sdk", "opentelemetry.exporter")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))
"""
    )
    assert json.loads(result.stdout) == []


# The child of the test below: two tracer providers in one process, one of them failing.
TWO_PROVIDERS = """
import threading
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ragaudit import Auditor, FakeJudge, RagTurn, RetrievedDoc
from ragaudit.tracing import configure
from ragaudit.tracing.setup import spans_not_exported

failing = configure(endpoint=ENDPOINT)
own, delivered = TracerProvider(), InMemorySpanExporter()
own.add_span_processor(SimpleSpanProcessor(delivered))
judge = FakeJudge(lambda r: {"faithfulness": 1.0})
mine = Auditor(judge, audit_log=None, tracer_provider=own)
follower = Auditor(judge, audit_log=None)
docs = (RetrievedDoc(id="d1", content="Returns within 30 days.", rank=1),)
stop = threading.Event()

def fail_continuously():
    tracer = trace.get_tracer("elsewhere")
    while not stop.is_set():
        with tracer.start_as_current_span("refused"):
            pass
        failing.force_flush(5_000)

other = threading.Thread(target=fail_continuously)
other.start()
answers = []
for i in range(150):
    mine.submit(RagTurn(turn_id=f"m{i}", query="How long?", answer="30 days.", documents=docs))
    answers.append(mine.force_flush(10))
stop.set()
other.join()
follower.submit(RagTurn(turn_id="f0", query="How long?", answer="30 days.", documents=docs))
print("mine", sum(answers), "of", len(answers))
print("follower", follower.force_flush(10))
print("failed elsewhere", spans_not_exported(failing) > 0, "failed here", spans_not_exported(own))
print("delivered", len(delivered.get_finished_spans()) > 0)
mine.shutdown(); follower.shutdown()
"""


@pytest.mark.timeout(120)
def test_an_auditor_flush_answers_for_its_own_provider_not_for_another_failing_one() -> None:
    # Two destinations in one process: configure() sends the global provider's spans to a collector
    # that refuses everything, while an Auditor records to the host's own provider, which delivers.
    # That Auditor's flushes are true: the failures belong to the other provider, whose own flushes
    # (by the Auditor that follows the global provider) are false. With one process-wide failure
    # count, the first answer depended on when the other provider's exports happened to fail (146 or
    # 147 of 150 true in three runs).
    with OTLPReceiver() as rx:
        rx.fail_with(500)
        child = TWO_PROVIDERS.replace("ENDPOINT", repr(rx.endpoint))
        lines = run(child, env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1"}, timeout=110).stdout.strip().splitlines()
    assert "mine 150 of 150" in lines
    assert "follower False" in lines
    assert "failed elsewhere True failed here 0" in lines
    assert "delivered True" in lines
