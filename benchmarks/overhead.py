"""Hot-path overhead: what each tracer adds to one RAG pipeline call, ragaudit against its peers.

    python benchmarks/overhead.py            # full run (~3 min on 2 cores)
    python benchmarks/overhead.py --quick    # smoke run (a few seconds per configuration)
    python benchmarks/overhead.py --framework langchain --configs noop-handler ragaudit \
        --before /path/to/other/checkout      # each ragaudit configuration also as "<config>@before"

With ``--before ROOT`` every selected ragaudit configuration also runs in a process of its own with the
``src/ragaudit`` of the checkout at ROOT (labelled ``<config>@before``), interleaved with this one's in
the same rounds: a before/after comparison under the same load.

Two pipelines, each run N times per configuration. ragaudit runs in its *default* configuration
(what README's setup gives a user: the audit log written, judging in the background, spans through
``tracing.configure()``'s ``BatchSpanProcessor`` and OTLP/HTTP exporter, here to a loopback sink),
the same with ``LexicalJudge``, and *lean* (spans to the peers' in-memory exporter, no audit log);
``--configs ragaudit-default-unpaced`` adds the default with the background's host-first pacing
off; ``--configs ragaudit ragaudit-metrics`` adds the lean configuration with a metrics SDK (issue
48: what the score metrics cost a team that configured one, against the lean one's no-op provider).
A block is 400 calls (0.5-1 s of back-to-back calls): long enough that ragaudit's background
work has to run during the block, next to the host's calls, rather than in the untimed flush after
it (with blocks of 50, most of it did).

* LangChain: an LCEL RAG chain -- an in-memory retriever returning four fixed Documents, a
  ``ChatPromptTemplate``, ``FakeListChatModel`` (answer with a ``[1]`` marker), ``StrOutputParser``.
  Configurations: no callbacks (twice, in two processes: the noise floor); an empty callback
  handler (what LangChain's callback dispatch itself costs any handler); ragaudit's
  ``RagAuditCallbackHandler`` with spans to an in-memory exporter and the judge asynchronous
  (``Auditor`` with a ``FakeJudge``, ``audit_log=None``); the same with tracing not configured (no
  SDK tracer provider anywhere); OpenInference's ``LangChainInstrumentor``; OpenLLMetry's
  ``LangchainInstrumentor``; Langfuse's ``CallbackHandler`` (its client exports over OTLP/HTTP to a
  loopback sink in the parent process, so nothing leaves the machine).
* LlamaIndex: a ``VectorStoreIndex`` query engine over six documents, ``MockLLM`` (echoes its
  prompt) and a deterministic hashing embedding. Configurations: none (twice); an empty span and
  event handler (the dispatcher's own cost of having one); ragaudit's
  ``instrument()`` (with and without tracing); OpenInference's ``LlamaIndexInstrumentor``.

Method. Every configuration runs in a process of its own: an instrumentor patches the framework for
the whole process, so sharing one would make every configuration pay for it (cross-talk). The
parent drives the processes round-robin, one block of B invocations at a time, rotating the order
each round, so drift (CPU frequency, other load) hits all equally; only one process runs a block at
a time. The span pipeline is the same for every OTel-based configuration: an SDK ``TracerProvider``
with a ``BatchSpanProcessor`` and an ``InMemorySpanExporter`` (Langfuse brings its own batch
processor and OTLP exporter). After each block a worker flushes its background work (judge queue,
span processor, Langfuse client) *outside* the timed region: the per-invocation time is the latency
the host's thread sees, including any contention from the tracer's background threads during the
block; ``cpu_us`` is the process CPU time (all threads, the flush included) per invocation.
On a shared machine other processes' load shows in the wall-clock times; the host thread's own CPU
time per invocation (``host_cpu``: ``time.thread_time_ns`` around the call) does not, so its
overhead is reported as a cross-check. It leaves out time spent waiting for the GIL while a
background thread runs, which the wall-clock figure includes.

Overhead = median (p90, p99) of a configuration minus that of the no-callbacks process; the
95 % interval comes from resampling rounds. ``bg cpu ovh`` is the process CPU per call spent off the
calling thread's timed calls (background threads and the flush), beyond the bare framework's; the
default configurations also report their judging latency (end of the call to the judgement's
delivery). The difference between the two no-callbacks processes
is the noise floor. Targets: the default configuration's median and p90 overhead at most 25 % of
the lightest peer's (issue 32); the lean one's median under 300 us per invocation.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import (
    machine_info,
    percentile,
    print_machine,
    summary_ns,
    write_result,
)

QUESTION = "How long is the return window for electronics?"
ANSWER = ("Electronics can be returned within 30 days of delivery [1]. Opened software cannot be returned "
          "unless it is faulty.")
DOC_TEXTS = [
    ("returns.md", "Electronics can be returned within 30 days of delivery. The item must be in its original "
     "packaging with all accessories. Refunds go to the original payment method within five business days "
     "of the item reaching our warehouse. Opened software cannot be returned unless it is faulty."),
    ("shipping.md", "Standard shipping takes three to five business days. Express shipping takes one to two "
     "business days and costs 9.99. Orders placed before 2 pm ship the same day. We do not ship to PO boxes "
     "for items heavier than 20 kg."),
    ("warranty.md", "All electronics carry a two-year manufacturer warranty. The warranty covers defects in "
     "materials and workmanship, not accidental damage. Claims need the original receipt and the serial "
     "number; repairs take about ten business days."),
    ("giftcards.md", "Gift cards never expire and can be used online and in stores. They cannot be exchanged "
     "for cash. A lost gift card can be replaced once if you have the purchase receipt and the card number."),
    ("pricematch.md", "We match the price of any major retailer for identical items in stock. The match must "
     "be requested within 14 days of purchase. Marketplace sellers and clearance prices are excluded."),
    ("loyalty.md", "Loyalty members earn one point per euro spent and get free express shipping on orders "
     "above 50 euros. Points expire after 24 months without a purchase."),
]

FRAMEWORKS = ("langchain", "llamaindex")
CONFIGS: dict[str, tuple[str, ...]] = {
    "langchain": ("baseline", "baseline-2", "noop-handler", "ragaudit-default", "ragaudit-default-lexical",
                  "ragaudit", "ragaudit-notrace", "openinference", "openllmetry", "langfuse"),
    "llamaindex": ("baseline", "baseline-2", "noop-handler", "ragaudit-default", "ragaudit-default-lexical",
                   "ragaudit", "ragaudit-notrace", "openinference", "openllmetry"),
}
# ragaudit's configurations: (judge, audit log, spans). "default" is what README's setup gives a user:
# the audit log written, judging in the background, spans through tracing.configure()'s
# BatchSpanProcessor and OTLP/HTTP exporter (to the loopback sink); "lean" is the in-memory exporter
# of the peers and no audit log.
RAGAUDIT = {
    "ragaudit-default": ("instant", True, "configure"),
    "ragaudit-default-lexical": ("lexical", True, "configure"),
    "ragaudit-default-unpaced": ("instant", True, "configure"),  # only with --configs
    "ragaudit-worker-mode": ("worker", False, "configure"),  # Auditor(mode="worker"): only with --configs
    "ragaudit": ("instant", False, "memory"),
    "ragaudit-notrace": ("instant", False, None),
    "ragaudit-metrics": ("instant", False, "memory"),  # the lean one + a metrics SDK: only with --configs
}
# The configurations recording score metrics through a real SDK MeterProvider (the others record them
# through the global provider, the OTel API's no-op), and the one each is compared with, round by round.
METERED = {"ragaudit-metrics": "ragaudit"}
# How often the metric reader exports: the SDK's default is 60 s; 5 s exports 12 times as often, so the
# export's share of the cost is an upper bound of a default setup's.
METRICS_INTERVAL_MS = 5000
PEERS = {"openinference", "openllmetry", "langfuse"}
LABELS = {
    "baseline": "no callbacks",
    "baseline-2": "no callbacks (2nd process: noise floor)",
    "noop-handler": "an empty handler (the framework's own dispatch cost)",
    "ragaudit-default": "ragaudit default (audit log, configure(), instant judge)",
    "ragaudit-default-lexical": "ragaudit default, LexicalJudge",
    "ragaudit-default-unpaced": "ragaudit default, background not paced",
    "ragaudit-worker-mode": "ragaudit, judging in ragaudit worker (mode='worker', configure())",
    "ragaudit": "ragaudit lean (in-memory spans, no audit log)",
    "ragaudit-notrace": "ragaudit, tracing not configured",
    "ragaudit-metrics": "ragaudit lean + score metrics (SDK MeterProvider, OTLP)",
    "openinference": "OpenInference instrumentor",
    "openllmetry": "OpenLLMetry instrumentor",
    "langfuse": "Langfuse CallbackHandler (OTLP to loopback)",
}
REQUIRES = {  # the module a configuration needs; a configuration whose module is missing is skipped
    ("langchain", "openinference"): "openinference.instrumentation.langchain",
    ("langchain", "openllmetry"): "opentelemetry.instrumentation.langchain",
    ("langchain", "langfuse"): "langfuse.langchain",
    ("llamaindex", "openinference"): "openinference.instrumentation.llama_index",
    ("llamaindex", "openllmetry"): "opentelemetry.instrumentation.llamaindex",
}
TARGET_RATIO = 0.25
TARGET_US = 300.0
BEFORE = "@before"  # suffix of a configuration run with --before ROOT's ragaudit


# --- the pipelines ------------------------------------------------------------------------------------


def _memory_provider() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def _metrics_provider(endpoint: str) -> Any:
    """A metrics SDK as a team that configured one has it: a ``MeterProvider`` whose
    ``PeriodicExportingMetricReader`` exports OTLP/HTTP (protobuf) every METRICS_INTERVAL_MS, here to the
    loopback sink."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint),
                                           export_interval_millis=METRICS_INTERVAL_MS)
    return MeterProvider(metric_readers=[reader], shutdown_on_exit=False)


def _fake_judge() -> Any:
    from ragaudit import FakeJudge

    return FakeJudge(lambda request: {"faithfulness": 1.0, "context_relevance": 0.9, "answer_relevance": 0.8,
                                      "reason": "benchmark"})


def _ragaudit_auditor(config: str, bench: Bench, sink: str | None, framework: str) -> tuple[Any, Any]:
    """The Auditor of one of ragaudit's configurations (see RAGAUDIT) and its tracer provider."""
    import tempfile

    from ragaudit import Auditor, LexicalJudge

    judge_kind, audit_log, spans = RAGAUDIT[config]
    paced = not config.endswith("-unpaced")
    provider = None
    if spans == "memory":
        provider, bench.exporter = _memory_provider()
    elif spans == "configure":
        from ragaudit import tracing

        provider = tracing.configure(endpoint=sink)  # README's line: BatchSpanProcessor + OTLP/HTTP
    log_path = Path(tempfile.mkdtemp(prefix="ragaudit-bench-")) / "ragaudit-audit.jsonl" if audit_log else None
    if judge_kind == "worker":  # the app records and exports its turns; ragaudit worker judges them
        bench.auditor = Auditor(mode="worker", audit_log=None, tracer_provider=provider)
        return bench.auditor, provider
    judge = LexicalJudge() if judge_kind == "lexical" else _fake_judge()
    latencies = bench.judging_latency_ns

    def on_judgement(turn: Any, judgement: Any) -> None:
        # Judging latency: from the end of the host's call to the judgement's delivery.
        latencies.append(time.time_ns() - (turn.ended_at or time.time_ns()))

    if config in METERED:  # the points go to the sink under a path of their own, counted by the parent
        bench.meter_provider = _metrics_provider(f"{sink}{_metrics_path(framework, config)}")
    auditor = Auditor(judge, audit_log=log_path, tracer_provider=provider, on_judgement=on_judgement,
                      meter_provider=bench.meter_provider)
    if not paced:
        from ragaudit.integrations import closer_for

        for worker in (closer_for(auditor).worker, auditor._judging, auditor._export.worker, auditor._blocking):
            if worker is not None:
                worker._paced = False  # the host-first pacing off: what it is there to fix, measured
    bench.auditor = auditor
    if log_path is not None:
        bench.extra["audit_log"] = str(log_path)
    return auditor, provider


@dataclass
class Bench:
    """One configuration in a worker: ``invoke()`` is timed; the rest is bookkeeping."""

    invoke: Callable[[], Any]
    flush: Callable[[], None] = lambda: None
    exporter: Any = None
    auditor: Any = None
    meter_provider: Any = None
    spans: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    judging_latency_ns: list[int] = field(default_factory=list)

    def after_block(self) -> None:
        self.flush()
        if self.exporter is not None:
            self.spans += len(self.exporter.get_finished_spans())
            self.exporter.clear()

    def checks(self) -> dict[str, Any]:
        out: dict[str, Any] = {"spans_exported": self.spans, **self.extra}
        if "ragaudit" in sys.modules:  # which checkout's ragaudit this process ran (see --before)
            out["ragaudit_module"] = sys.modules["ragaudit"].__file__
        if self.auditor is not None:
            out["auditor"] = self.auditor.stats()
        if self.judging_latency_ns:
            out["judging_latency_ms"] = {f"p{q}": percentile(self.judging_latency_ns, q) / 1e6 for q in (50, 90, 99)}
        log = self.extra.get("audit_log")
        if log is not None:
            self.auditor.force_flush(30)
            with open(log, encoding="utf-8") as f:
                out["audit_lines"] = sum(1 for _ in f)
        if self.meter_provider is not None:  # the last export holds every point (cumulative)
            self.auditor.force_flush(30)
            out["metrics_flushed"] = self.meter_provider.force_flush(30_000)
        return out


def _langchain_chain() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    documents = [Document(page_content=text, metadata={"source": source}, id=f"doc-{i}")
                 for i, (source, text) in enumerate(DOC_TEXTS[:4])]

    class FixedRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *,
                                    run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            return documents

    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer from the numbered context only and cite it like [1]."),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ])
    number = RunnableLambda(lambda docs: "\n\n".join(f"[{i}] {d.page_content}" for i, d in enumerate(docs, 1)))
    model = FakeListChatModel(responses=[ANSWER])
    return {"context": FixedRetriever() | number, "question": RunnablePassthrough()} | prompt | model \
        | StrOutputParser()


def _langchain_bench(config: str, sink: str | None) -> Bench:
    chain = _langchain_chain()
    invoke_config: dict[str, Any] = {}
    bench = Bench(invoke=lambda: chain.invoke(QUESTION, config=invoke_config))
    if config == "noop-handler":
        from langchain_core.callbacks import BaseCallbackHandler

        invoke_config["callbacks"] = [BaseCallbackHandler()]
    elif config in RAGAUDIT:
        from ragaudit.integrations.langchain import RagAuditCallbackHandler

        auditor, provider = _ragaudit_auditor(config, bench, sink, "langchain")
        handler = RagAuditCallbackHandler(auditor=auditor)
        invoke_config["callbacks"] = [handler]

        def flush() -> None:
            handler.force_flush(30)
            if provider is not None:
                provider.force_flush()

        bench.flush = flush
    elif config == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        provider, bench.exporter = _memory_provider()
        LangChainInstrumentor().instrument(tracer_provider=provider)
        bench.flush = provider.force_flush
    elif config == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        provider, bench.exporter = _memory_provider()
        LangchainInstrumentor().instrument(tracer_provider=provider)
        bench.flush = provider.force_flush
    elif config == "langfuse":
        from langfuse import Langfuse
        from langfuse.langchain import CallbackHandler
        from opentelemetry.sdk.trace import TracerProvider

        client = Langfuse(public_key="pk-lf-bench", secret_key="sk-lf-bench", host=sink,
                          tracer_provider=TracerProvider(shutdown_on_exit=False))
        invoke_config["callbacks"] = [CallbackHandler(public_key="pk-lf-bench")]
        bench.flush = client.flush
    return bench


def _llamaindex_bench(config: str, sink: str | None) -> Bench:
    import zlib

    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import MockLLM

    def embed(text: str, dim: int = 64) -> list[float]:
        vec = [0.0] * dim
        for word in text.lower().split():
            vec[zlib.crc32(word.strip(".,?!").encode()) % dim] += 1.0
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    class HashEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embed(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed(text)

    bench = Bench(invoke=lambda: None)
    if config == "noop-handler":
        from llama_index.core.instrumentation import get_dispatcher
        from llama_index.core.instrumentation.event_handlers import BaseEventHandler
        from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

        class NoopSpans(BaseSpanHandler[Any]):
            def new_span(self, *args: Any, **kwargs: Any) -> None:
                return None

            def prepare_to_exit_span(self, *args: Any, **kwargs: Any) -> None:
                return None

            def prepare_to_drop_span(self, *args: Any, **kwargs: Any) -> None:
                return None

        class NoopEvents(BaseEventHandler):
            def handle(self, event: Any, **kwargs: Any) -> None:
                return None

        dispatcher = get_dispatcher()
        dispatcher.add_span_handler(NoopSpans())
        dispatcher.add_event_handler(NoopEvents())
    elif config in RAGAUDIT:
        from ragaudit.integrations import llamaindex

        auditor, provider = _ragaudit_auditor(config, bench, sink, "llamaindex")
        installed = llamaindex.instrument(auditor=auditor)

        def flush() -> None:
            installed.force_flush(30)
            if provider is not None:
                provider.force_flush()

        bench.flush = flush
    elif config == "openinference":
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        provider, bench.exporter = _memory_provider()
        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
        bench.flush = provider.force_flush
    elif config == "openllmetry":
        from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor as OpenLLMetryInstrumentor

        provider, bench.exporter = _memory_provider()
        OpenLLMetryInstrumentor().instrument(tracer_provider=provider)
        bench.flush = provider.force_flush
    documents = [Document(text=text, metadata={"source": source}, doc_id=f"doc-{i}")
                 for i, (source, text) in enumerate(DOC_TEXTS)]
    index = VectorStoreIndex.from_documents(documents, embed_model=HashEmbedding())
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3)
    bench.invoke = lambda: engine.query(QUESTION)
    return bench


# --- the worker process -------------------------------------------------------------------------------


def worker(framework: str, config: str, sink: str | None, warmup: int, before: str | None = None) -> None:
    """Build one configuration, warm it up, then run blocks on the parent's command."""
    if config.endswith(BEFORE):  # the other checkout's ragaudit (not imported yet: imports are lazy)
        if before is None:
            raise SystemExit(f"{config} needs --before ROOT")
        config = config[: -len(BEFORE)]
        sys.path.insert(0, str(Path(before).resolve() / "src"))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    bench = (_langchain_bench if framework == "langchain" else _llamaindex_bench)(config, sink)
    answer = bench.invoke()
    for _ in range(warmup - 1):
        bench.invoke()
    bench.after_block()
    bench.spans = 0
    bench.judging_latency_ns.clear()
    bench.extra["sample_answer"] = str(answer)[:120]
    out.write(json.dumps({"ready": True}) + "\n")
    perf, thread_cpu = time.perf_counter_ns, time.thread_time_ns
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "run":
            count = int(command[1])
            gc.collect()
            times = [0] * count
            host = [0] * count
            cpu0 = time.process_time_ns()
            for i in range(count):
                t0, c0 = perf(), thread_cpu()
                bench.invoke()
                host[i], times[i] = thread_cpu() - c0, perf() - t0
            bench.after_block()
            out.write(json.dumps({"ns": times, "host_cpu_ns": host,
                                  "cpu_ns": time.process_time_ns() - cpu0}) + "\n")
        elif command[0] == "stop":
            out.write(json.dumps({"checks": bench.checks()}) + "\n")
            break


# --- the parent ---------------------------------------------------------------------------------------


def _available(framework: str, config: str) -> str | None:
    """None when the configuration can run here, else why not."""
    module = REQUIRES.get((framework, config))
    if module is None:
        return None
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module} is not installed (pip install ragaudit[bench])"


class Worker:
    def __init__(self, framework: str, config: str, sink: str | None, warmup: int,
                 before: str | None = None) -> None:
        self.config = config
        args = [sys.executable, __file__, "--worker", framework, config, "--warmup", str(warmup)]
        if sink:
            args += ["--sink", sink]
        if config.endswith(BEFORE) and before:
            args += ["--before", before]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        # The peers' own telemetry stays off; nothing may leave the machine.
        env.update({"TRACELOOP_TELEMETRY": "false", "LANGFUSE_TRACING_ENVIRONMENT": "benchmark",
                    "ANONYMIZED_TELEMETRY": "false", "DO_NOT_TRACK": "1"})
        env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=str(Path(__file__).resolve().parent.parent))
        self.times: list[int] = []
        self.host_cpu: list[int] = []
        self.cpu_ns = 0
        self.host_cpu_total = 0
        self.rounds: list[list[int]] = []
        self.host_rounds: list[list[int]] = []
        self.cpu_rounds: list[int] = []

    def _send(self, command: str) -> dict[str, Any]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        if command:
            stdin.write(command + "\n")
            stdin.flush()
        return self._read(stdout)

    def _read(self, stdout: IO[str]) -> dict[str, Any]:
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.config} exited (code {self.proc.wait()}); see stderr above")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ready(self) -> None:
        self._send("")

    def run(self, count: int) -> None:
        reply = self._send(f"run {count}")
        self.times.extend(reply["ns"])
        self.rounds.append(reply["ns"])
        self.host_cpu.extend(reply["host_cpu_ns"])
        self.host_rounds.append(reply["host_cpu_ns"])
        self.cpu_ns += reply["cpu_ns"]
        self.cpu_rounds.append(reply["cpu_ns"])
        self.host_cpu_total += sum(reply["host_cpu_ns"])

    def stop(self) -> dict[str, Any]:
        checks: dict[str, Any] = self._send("stop")["checks"]
        self.proc.wait(30)
        return checks


def _median(values: list[int]) -> float:
    return percentile(values, 50) / 1000.0


def _overhead(worker: Worker, base: Worker, q: float, rng: random.Random, resamples: int,
              host_cpu: bool = False) -> dict[str, float]:
    """Overhead at percentile *q* in us, and a 95 % interval from resampling whole rounds."""
    mine_all, theirs_all = (worker.host_cpu, base.host_cpu) if host_cpu else (worker.times, base.times)
    mine_rounds, theirs_rounds = (worker.host_rounds, base.host_rounds) if host_cpu else (worker.rounds, base.rounds)
    point = (percentile(mine_all, q) - percentile(theirs_all, q)) / 1000.0
    n = len(mine_rounds)
    estimates = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        mine = [t for i in picks for t in mine_rounds[i]]
        theirs = [t for i in picks for t in theirs_rounds[i]]
        estimates.append((percentile(mine, q) - percentile(theirs, q)) / 1000.0)
    return {"us": point, "ci95_low": percentile(estimates, 2.5), "ci95_high": percentile(estimates, 97.5)}


def _cpu_difference(worker: Worker, ref: Worker, rng: random.Random, resamples: int) -> dict[str, float]:
    """Process CPU per call (all threads, flushes included) of *worker* minus *ref*'s, in us, with a 95 %
    interval from resampling whole rounds (the same rounds of both: they ran next to each other)."""
    def per_call(w: Worker, picks: list[int]) -> float:
        return sum(w.cpu_rounds[i] for i in picks) / sum(len(w.rounds[i]) for i in picks) / 1000.0

    n = len(worker.cpu_rounds)
    everything = list(range(n))
    estimates = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        estimates.append(per_call(worker, picks) - per_call(ref, picks))
    return {"us": per_call(worker, everything) - per_call(ref, everything),
            "ci95_low": percentile(estimates, 2.5), "ci95_high": percentile(estimates, 97.5)}


def _versus(worker: Worker, ref: Worker, rng: random.Random, resamples: int) -> dict[str, Any]:
    """*worker* against *ref* (METERED): what the one thing that differs costs, each with its interval."""
    out: dict[str, Any] = {"reference": ref.config}
    for key, q, host in (("median", 50, False), ("p90", 90, False), ("host_cpu_median", 50, True)):
        out[key] = _overhead(worker, ref, q, rng, resamples, host_cpu=host)
    out["cpu_per_call"] = _cpu_difference(worker, ref, rng, resamples)
    # "Nothing measurable": every interval includes 0.
    out["measurable"] = [k for k in ("median", "p90", "host_cpu_median", "cpu_per_call")
                         if out[k]["ci95_low"] > 0 or out[k]["ci95_high"] < 0]
    return out


def _metrics_path(framework: str, config: str) -> str:
    return f"/v1/metrics/{framework}/{config}"


def _metric_points(requests: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """What the sink received at *path*: the exports, and from the last (cumulative) one the points per
    metric and the turns counted (``ragaudit.turns``' sum)."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    bodies = [r["body"] for r in requests if r["path"] == path and isinstance(r["body"], bytes)]
    if not bodies:
        return {"exports": 0}
    last = ExportMetricsServiceRequest.FromString(bodies[-1])
    points: dict[str, int] = {}
    turns = 0
    for resource in last.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                data = getattr(metric, metric.WhichOneof("data"))
                points[metric.name] = len(data.data_points)
                if metric.name == "ragaudit.turns":
                    turns = sum(p.as_int for p in data.data_points)
    return {"exports": len(bodies), "points_per_metric": points, "turns_counted": turns}


def _background_cpu_us(worker: Worker) -> float:
    """Process CPU per call not spent on the calling thread inside the timed calls, in us."""
    return (worker.cpu_ns - worker.host_cpu_total) / len(worker.times) / 1000.0


def _ratio_target(results: dict[str, Any], config: str, key: str) -> dict[str, Any] | None:
    """*config*'s overhead at *key* (``overhead_median``, ``overhead_p90``) against the lightest peer's there."""
    peers = {c: e for c, e in results.items() if c in PEERS}
    ours = results.get(config)
    if ours is None or not peers:
        return None
    lightest = min(peers, key=lambda c: peers[c][key]["us"])
    ours_us, light_us = ours[key]["us"], peers[lightest][key]["us"]
    return {"ragaudit_us": ours_us, "lightest_peer": lightest, "lightest_peer_us": light_us,
            "ratio": ours_us / light_us if light_us > 0 else None,
            "met": light_us > 0 and ours_us <= TARGET_RATIO * light_us}


def _verdict(results: dict[str, Any]) -> dict[str, Any]:
    verdict: dict[str, Any] = {"target_ratio": TARGET_RATIO, "target_us": TARGET_US}
    # The targets of issue 32: the default configuration's median and p90 against the lightest peer's.
    for config in ("ragaudit-default", "ragaudit-default-lexical", "ragaudit"):
        targets = {q: _ratio_target(results, config, f"overhead_{q}") for q in ("median", "p90", "p99")}
        if targets["median"] is not None:
            verdict.setdefault("ratios", {})[config] = targets
    ours = results.get("ragaudit")
    if ours is None:
        return verdict
    ours_us = ours["overhead_median"]["us"]
    verdict["ragaudit_overhead_us"] = ours_us
    verdict["under_target_us"] = ours_us < TARGET_US
    median = verdict.get("ratios", {}).get("ragaudit", {}).get("median")
    if median is not None:
        lightest = median["lightest_peer"]
        verdict.update({"lightest_peer": lightest, "lightest_peer_overhead_us": median["lightest_peer_us"],
                        "ratio_to_lightest_peer": median["ratio"], "met_ratio": median["met"]})
        ours_cpu = ours["overhead_host_cpu_median"]["us"]
        light_cpu = results[lightest]["overhead_host_cpu_median"]["us"]
        verdict.update({"ragaudit_host_cpu_overhead_us": ours_cpu, "lightest_peer_host_cpu_overhead_us": light_cpu,
                        "ratio_to_lightest_peer_host_cpu": ours_cpu / light_cpu if light_cpu > 0 else None})
        for entry in results.values():
            entry["ratio_to_ragaudit"] = (entry["overhead_median"]["us"] / ours_us
                                          if "overhead_median" in entry and ours_us > 0 else None)
    if "baseline-2" in results:
        verdict["noise_floor_us"] = results["baseline-2"]["overhead_median"]["us"]
    return verdict


def run_framework(framework: str, args: argparse.Namespace, sink: Any) -> dict[str, Any]:
    known = [*CONFIGS[framework], *(c for c in RAGAUDIT if c not in CONFIGS[framework])]
    configs = [c for c in known if (c in args.configs if args.configs else c in CONFIGS[framework])
               or c == "baseline"]
    skipped = {c: why for c in configs if (why := _available(framework, c)) is not None}
    configs = [c for c in configs if c not in skipped]
    for config, why in skipped.items():
        print(f"  skipped {framework}/{config}: {why}")
    if args.before:
        configs += [c + BEFORE for c in configs if c in RAGAUDIT]
    workers = [Worker(framework, c, sink.url, args.warmup, args.before) for c in configs]
    try:
        for w in workers:
            w.ready()
        rounds = max(1, -(-args.n // args.block))
        started = time.monotonic()
        for r in range(rounds):
            shift = r % len(workers)
            for w in workers[shift:] + workers[:shift]:
                w.run(args.block)
            if not args.quiet and (r + 1) % max(1, rounds // 10) == 0:
                print(f"  {framework}: round {r + 1}/{rounds} ({time.monotonic() - started:.0f} s)", flush=True)
        checks = {w.config: w.stop() for w in workers}
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
    by_name = {w.config: w for w in workers}
    base = by_name["baseline"]
    rng = random.Random(0)
    results: dict[str, Any] = {}
    for w in workers:
        label = LABELS[w.config.removesuffix(BEFORE)] + (f" @ {args.before}" if w.config.endswith(BEFORE) else "")
        entry: dict[str, Any] = {"label": label, **summary_ns(w.times),
                                 "host_cpu_median_us": percentile(w.host_cpu, 50) / 1000.0,
                                 "cpu_us": w.cpu_ns / len(w.times) / 1000.0,
                                 "background_cpu_us": _background_cpu_us(w), "checks": checks[w.config]}
        if w is not base:
            entry["overhead_median"] = _overhead(w, base, 50, rng, args.resamples)
            entry["overhead_p90"] = _overhead(w, base, 90, rng, args.resamples)
            entry["overhead_p99"] = _overhead(w, base, 99, rng, args.resamples)
            entry["overhead_host_cpu_median"] = _overhead(w, base, 50, rng, args.resamples, host_cpu=True)
            entry["overhead_cpu_us"] = entry["cpu_us"] - base.cpu_ns / len(base.times) / 1000.0
            # CPU off the calling thread (every other thread and the untimed flushes), per call,
            # beyond what the framework itself does there (LangChain's executor thread).
            entry["overhead_background_cpu_us"] = entry["background_cpu_us"] - _background_cpu_us(base)
        ref = by_name.get(METERED.get(w.config, ""))
        if ref is not None:
            entry["versus"] = _versus(w, ref, rng, args.resamples)
        if w.config in METERED:
            entry["checks"]["metrics_sink"] = _metric_points(sink.requests, _metrics_path(framework, w.config))
        results[w.config] = entry
    verdict = _verdict(results)
    return {"configs": results, "skipped": skipped, "verdict": verdict,
            "rounds": rounds, "block": args.block, "n_per_config": rounds * args.block}


def print_table(framework: str, result: dict[str, Any]) -> None:
    print(f"\n{framework}: {result['n_per_config']} invocations per configuration "
          f"({result['rounds']} rounds of {result['block']})")
    header = f"  {'configuration':<54} {'median':>9} {'p90':>9} {'overhead':>9} {'95% CI':>17} " \
             f"{'p90 ovh':>9} {'p99 ovh':>9} {'host cpu ovh':>12} {'bg cpu ovh':>10} {'cpu':>9} {'x ours':>7}"
    print(header)
    for entry in result["configs"].values():
        ovh = entry.get("overhead_median")
        cells = [f"{entry['median_us']:9.0f}", f"{entry['p90_us']:9.0f}"]
        if ovh is None:
            cells += [f"{'-':>9}", f"{'':>17}", f"{'-':>9}", f"{'-':>9}", f"{'-':>12}", f"{'-':>10}"]
        else:
            cells += [f"{ovh['us']:9.0f}", f"[{ovh['ci95_low']:6.0f}, {ovh['ci95_high']:6.0f}]",
                      f"{entry['overhead_p90']['us']:9.0f}", f"{entry['overhead_p99']['us']:9.0f}",
                      f"{entry['overhead_host_cpu_median']['us']:12.0f}",
                      f"{entry['overhead_background_cpu_us']:10.0f}"]
        cells.append(f"{entry['cpu_us']:9.0f}")
        ratio = entry.get("ratio_to_ragaudit")
        cells.append(f"{ratio:7.1f}" if ratio is not None else f"{'':>7}")
        print(f"  {entry['label']:<54} " + " ".join(cells))
    v = result["verdict"]
    if "ragaudit_overhead_us" in v:
        line = f"  ragaudit overhead {v['ragaudit_overhead_us']:.0f} us (target < {TARGET_US:.0f} us: " \
               f"{'met' if v['under_target_us'] else 'MISSED'})"
        if v.get("lightest_peer"):
            ratio = v["ratio_to_lightest_peer"]
            # A peer's measured overhead can be <= 0 on a loaded machine (within the noise floor): then
            # there is no ratio to give, and the run says so instead of failing to format None.
            ratio_text = f"{ratio:.2f}" if ratio is not None else "n/a (peer overhead <= 0, within noise)"
            line += f"; lightest peer {v['lightest_peer']} {v['lightest_peer_overhead_us']:.0f} us, ratio " \
                    f"{ratio_text} (target <= {TARGET_RATIO}: {'met' if v['met_ratio'] else 'MISSED'})"
        print(line)
    for config, targets in v.get("ratios", {}).items():
        parts = []
        for q, t in targets.items():
            ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}x"
            mark = "" if q == "p99" else f" ({'met' if t['met'] else 'MISSED'})"
            parts.append(f"{q} {t['ragaudit_us']:.0f} us = {ratio} {t['lightest_peer']}{mark}")
        print(f"  {config} vs the lightest peer (target <= {TARGET_RATIO}x): " + "; ".join(parts))
    if "noise_floor_us" in v:
        print(f"  noise floor (2nd no-callbacks process): {v['noise_floor_us']:+.0f} us")
    for entry in result["configs"].values():
        vs = entry.get("versus")
        if vs is not None:
            cells = [f"{k} {vs[k]['us']:+.1f} [{vs[k]['ci95_low']:+.1f}, {vs[k]['ci95_high']:+.1f}]"
                     for k in ("median", "p90", "host_cpu_median", "cpu_per_call")]
            print(f"  {entry['label']} minus {vs['reference']}, us: " + "; ".join(cells)
                  + f" (intervals excluding 0: {', '.join(vs['measurable']) or 'none'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: few invocations")
    parser.add_argument("-n", type=int, default=None, help="invocations per configuration (default 3200)")
    parser.add_argument("--block", type=int, default=None, help="invocations per block (default 400)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up invocations per worker (default 200)")
    parser.add_argument("--framework", choices=[*FRAMEWORKS, "both"], default="both")
    parser.add_argument("--configs", nargs="*", help="only these configurations (plus the baseline)")
    parser.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default 500)")
    parser.add_argument("--out", help="result file (default benchmarks/results/overhead[.quick].json)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--before", metavar="ROOT", help="also run each ragaudit configuration with the "
                        "ragaudit of the checkout at ROOT (as <config>@before), interleaved")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--sink", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[1], args.sink, args.warmup or 1, args.before)
        return 0
    args.n = args.n or (60 if args.quick else 3200)
    args.block = args.block or (10 if args.quick else 400)
    args.warmup = args.warmup or (10 if args.quick else 200)
    args.resamples = args.resamples or (50 if args.quick else 500)
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    frameworks = FRAMEWORKS if args.framework == "both" else (args.framework,)
    from tests.support.http_recorder import HttpRecorder

    results: dict[str, Any] = {}
    with HttpRecorder() as sink:
        for framework in frameworks:
            results[framework] = run_framework(framework, args, sink)
            print_table(framework, results[framework])
        langfuse_requests = sum(1 for r in sink.requests if not r["path"].startswith("/v1/metrics/"))
    if "langchain" in results and "langfuse" in results["langchain"]["configs"]:
        results["langchain"]["configs"]["langfuse"]["checks"]["sink_requests"] = langfuse_requests
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    write_result("overhead", {"machine": info, "load_average": {"before": load_before, "after": load_after},
                              "method": {
        "processes": "one per configuration, driven round-robin in blocks, order rotated each round",
        "span_pipeline": "SDK TracerProvider + BatchSpanProcessor + InMemorySpanExporter for every OTel-based "
                         "configuration (Langfuse: its own batch processor + OTLP/HTTP to a loopback sink)",
        "timed": "chain.invoke / query_engine.query on the host thread; flushes between blocks are not timed",
        "judge": "Auditor(FakeJudge, audit_log=None), background mode",
    }, "results": results}, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
