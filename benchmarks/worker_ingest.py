"""`ragaudit worker` ingest against Phoenix's OTLP ingest, on the same payloads, in the same run.

    python benchmarks/worker_ingest.py            # 1,000 traces x 9 spans per round, 3 rounds each, interleaved
    python benchmarks/worker_ingest.py --quick    # 100 traces, 1 round (smoke run)

Method. The payloads are LangChain RAG turns as OpenInference's LangChain instrumentation writes them
(9 spans: the chain, its parallel map and sub-sequence, the retriever with two documents and its
``output.value``, the formatting step, the passthrough, the prompt, the LLM call with its messages, the
parser), made with the real OTel SDK and encoded as the SDK's OTLP/HTTP exporter sends them: protobuf
requests of 512 spans. One client posts the same request bodies, one after the other over one
keep-alive connection, to

* ``ragaudit worker`` (a process of its own, ``--quiet 0``, ``--sample-rate 0``: every turn is read,
  assembled and handed to the Auditor, which samples it out, so the judge is excluded), until its
  ``/stats`` says every trace was assembled;
* Phoenix (``phoenix serve``, a process of its own, the version ``make test`` installs), until its
  GraphQL API counts every span in the round's project.

Spans per second = spans / (first request sent -> all ingested). Both servers are single processes,
so this is per process; each one's CPU seconds (``/proc/<pid>/stat``) are recorded too, since the
machine is shared. Rounds alternate worker / Phoenix.

Readiness delay: a worker with the default ``quiet_s`` (2 s) and LexicalJudge is sent one trace per
request; its ``stats()`` report root arrival -> turn assembled and handed to the judge (p50, max).
Memory per in-flight trace: traces ingested into a worker whose traces never become ready
(tracemalloc difference / traces, in this process).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._bench import machine_info, print_machine, write_result

SPANS_PER_TRACE = 9
BATCH = 512


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "unknown"


def make_payloads(traces: int, project: str) -> list[bytes]:
    """*traces* OpenInference LangChain turns as OTLP protobuf request bodies of 512 spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-app",
                                                        "openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    t = provider.get_tracer("openinference.instrumentation.langchain")
    for n in range(traces):
        q = f"What is the return window for order {n}?"
        docs = [(f"policy-{n}-a", f"Order {n}: returns are accepted within 30 days of delivery."),
                (f"policy-{n}-b", f"Order {n}: refunds reach the card within 5 business days.")]
        context = "\n\n".join(text for _, text in docs)
        answer = f"Order {n} can be returned within 30 days."
        chain = {"openinference.span.kind": "CHAIN"}
        root = {**chain, "input.value": q, "output.value": answer}
        with t.start_as_current_span("RunnableSequence", attributes=root):
            with t.start_as_current_span("RunnableParallel<context,question>", attributes={**chain, "input.value": q}):
                with t.start_as_current_span("RunnableSequence", attributes={**chain, "input.value": q}):
                    with t.start_as_current_span("VectorStoreRetriever", attributes={
                            "openinference.span.kind": "RETRIEVER", "input.value": q,
                            "output.value": json.dumps({"documents": [{"id": i, "page_content": c, "metadata": {}}
                                                                      for i, c in docs]}),
                            **{f"retrieval.documents.{i}.document.{k}": v for i, (d, c) in enumerate(docs)
                               for k, v in (("id", d), ("content", c))}}):
                        pass
                    with t.start_as_current_span("format_docs", attributes={**chain, "output.value": context}):
                        pass
                with t.start_as_current_span("RunnablePassthrough", attributes={**chain, "input.value": q}):
                    pass
            prompt = f"Context:\n{context}\n\nQuestion: {q}"
            with t.start_as_current_span("ChatPromptTemplate", attributes={
                    "openinference.span.kind": "PROMPT", "llm.prompt_template.template":
                    "Context:\n{context}\n\nQuestion: {question}"}):
                pass
            with t.start_as_current_span("ChatOpenAI", attributes={
                    "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                    "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": prompt,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": answer, "llm.token_count.prompt": 40,
                    "llm.token_count.completion": 9}):
                pass
            with t.start_as_current_span("StrOutputParser", attributes={**chain, "output.value": answer}):
                pass
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return [bytes(encode_spans(spans[i:i + BATCH]).SerializeToString()) for i in range(0, len(spans), BATCH)]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post_all(base: str, bodies: list[bytes]) -> None:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    for body in bodies:
        while True:
            conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status not in (429, 503):
                raise RuntimeError(f"{base} answered {response.status}")
            time.sleep(0.05)
    conn.close()


def _wait(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("ingest did not finish")
        time.sleep(0.01)


def _json(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def start_worker(sink: str) -> tuple[subprocess.Popen[bytes], str]:
    from tests.support.phoenix import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent / "src")
    proc = subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port), "--otlp-endpoint",
                             sink, "--quiet", "0", "--sample-rate", "0", "--max-spans", "10000000"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return bool(_json(url + "/healthz"))
        except OSError:
            return False

    _wait(up, 120)
    return proc, url


def worker_round(url: str, pid: int, bodies: list[bytes], traces: int) -> dict[str, float]:
    before = _json(url + "/stats")["traces_assembled"]
    cpu0, t0 = _cpu_s(pid), time.perf_counter()
    _post_all(url, bodies)
    _wait(lambda: _json(url + "/stats")["traces_assembled"] - before >= traces, 600)
    return {"seconds": time.perf_counter() - t0, "cpu_s": _cpu_s(pid) - cpu0}


_COUNT = "{ projects { edges { node { name recordCount } } } }"


def phoenix_count(base: str, project: str) -> int:
    data = _json(base + "/graphql", {"query": _COUNT})
    edges = (data.get("data") or {}).get("projects", {}).get("edges") or []
    return next((int(e["node"]["recordCount"]) for e in edges if e["node"]["name"] == project), 0)


def phoenix_round(base: str, pid: int, bodies: list[bytes], spans: int, project: str) -> dict[str, float]:
    cpu0, t0 = _cpu_s(pid), time.perf_counter()
    _post_all(base, bodies)
    _wait(lambda: phoenix_count(base, project) >= spans, 900)
    return {"seconds": time.perf_counter() - t0, "cpu_s": _cpu_s(pid) - cpu0}


def readiness_delay(traces: int) -> dict[str, Any]:
    """Root arrival -> assembled, with the default quiet_s, one trace per request."""
    from tests.support.otlp_receiver import OTLPReceiver

    from ragaudit import LexicalJudge
    from ragaudit.integrations.otlp import Worker

    bodies = make_payloads(traces, "delay")
    per_trace = []
    # Re-split so that each request carries one whole trace (9 spans), as a sender's batch of one turn.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = list(request.resource_spans[0].scope_spans[0].spans)
        for i in range(0, len(spans), SPANS_PER_TRACE):
            one = ExportTraceServiceRequest()
            one.resource_spans.add().CopyFrom(request.resource_spans[0])
            del one.resource_spans[0].scope_spans[0].spans[:]
            one.resource_spans[0].scope_spans[0].spans.extend(spans[i:i + SPANS_PER_TRACE])
            per_trace.append(one.SerializeToString())
    with OTLPReceiver() as rx, Worker(LexicalJudge(), port=0, otlp_endpoint=rx.endpoint) as worker:
        for body in per_trace:
            _post_all(worker.url, [body])
            time.sleep(0.02)
        _wait(lambda: worker.stats()["turns_judged"] >= traces, 120)
        stats = worker.stats()
    return {"traces": traces, "quiet_s": 2.0, "tick_s": 0.1, "ready_delay_p50_s": stats["ready_delay_p50_s"],
            "ready_delay_max_s": stats["ready_delay_max_s"]}


def memory_per_trace(traces: int) -> dict[str, Any]:
    from ragaudit import LexicalJudge
    from ragaudit.integrations.otlp import Worker

    bodies = make_payloads(traces, "memory")
    os.environ.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached: nothing is judged
    worker = Worker(LexicalJudge(), port=0, quiet_s=3600, max_wait_s=3600, max_traces=traces + 1)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for body in bodies:
        worker.ingest(body)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert worker.stats()["traces_in_flight"] == traces
    return {"traces": traces, "spans_per_trace": SPANS_PER_TRACE, "bytes_per_trace": grown / traces,
            "payload_bytes_per_trace": sum(len(b) for b in bodies) / traces}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--traces", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-phoenix", action="store_true", help="the worker alone (no Phoenix installed)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    traces = args.traces or (100 if args.quick else 1000)
    rounds = args.rounds or (1 if args.quick else 3)
    info = machine_info(["aiohttp", "arize-phoenix"])
    print_machine(info)
    uptime_start = _uptime()
    print(f"uptime at start: {uptime_start}")

    from tests.support.otlp_receiver import OTLPReceiver
    from tests.support.phoenix import start_phoenix

    results: dict[str, list[dict[str, float]]] = {"worker": [], "phoenix": []}
    spans = traces * SPANS_PER_TRACE
    with OTLPReceiver() as sink, tempfile.TemporaryDirectory() as tmp:
        worker, url = start_worker(sink.endpoint)
        phoenix = None if args.no_phoenix else start_phoenix(Path(tmp))
        try:
            for r in range(rounds):
                project = f"bench-{uuid.uuid4().hex[:8]}"
                bodies = make_payloads(traces, project)  # the same bodies for both servers
                results["worker"].append(worker_round(url, worker.pid, bodies, traces))
                print(f"round {r + 1}: worker  {spans / results['worker'][-1]['seconds']:,.0f} spans/s")
                if phoenix is not None:
                    results["phoenix"].append(phoenix_round(phoenix.base_url, phoenix.process.pid, bodies, spans,
                                                            project))
                    print(f"round {r + 1}: phoenix {spans / results['phoenix'][-1]['seconds']:,.0f} spans/s")
        finally:
            worker.terminate()
            worker.wait(60)
            if phoenix is not None:
                phoenix.stop()

    def summary(rows: list[dict[str, float]]) -> dict[str, Any] | None:
        if not rows:
            return None
        rates = sorted(spans / row["seconds"] for row in rows)
        cpu = sorted(spans / row["cpu_s"] for row in rows if row["cpu_s"] > 0)
        return {"rounds": rows, "spans_per_s_median": rates[len(rates) // 2],
                "spans_per_cpu_s_median": cpu[len(cpu) // 2] if cpu else None}

    worker_sum, phoenix_sum = summary(results["worker"]), summary(results["phoenix"])
    ratio = (worker_sum["spans_per_s_median"] / phoenix_sum["spans_per_s_median"]
             if worker_sum and phoenix_sum else None)
    delay = readiness_delay(20 if args.quick else 200)
    memory = memory_per_trace(200 if args.quick else 2000)
    uptime_end = _uptime()
    print(f"worker / phoenix spans/s: {ratio}")
    print(f"readiness delay: {delay}")
    print(f"memory per in-flight trace: {memory['bytes_per_trace']:,.0f} bytes")
    print(f"uptime at end: {uptime_end}")
    write_result("worker_ingest", {
        "machine": info, "uptime": {"start": uptime_start, "end": uptime_end},
        "config": {"traces_per_round": traces, "spans_per_trace": SPANS_PER_TRACE, "rounds": rounds,
                   "batch_spans": BATCH},
        "worker": worker_sum, "phoenix": phoenix_sum, "ratio_spans_per_s": ratio,
        "readiness_delay": delay, "memory": memory,
    }, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
