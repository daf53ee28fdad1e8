"""Send the demo's eight audited answers to a trace backend: Jaeger, Phoenix or Langfuse.

    python examples/send_traces.py jaeger      # OTLP/HTTP to http://localhost:4318 (or $OTEL_EXPORTER_OTLP_ENDPOINT)
    python examples/send_traces.py phoenix     # OTLP/HTTP to Phoenix + judge scores as Phoenix annotations
    python examples/send_traces.py langfuse    # OTLP to Langfuse's /api/public/otel + scores (LANGFUSE_* keys)

Offline by default (the demo's extractive stand-in and LexicalJudge); with OPENAI_API_KEY or
OPENAI_BASE_URL set, a real model answers and ChatRagJudge judges.
"""
import os
import sys

from ragaudit import Auditor, tracing
from ragaudit.demo.kb import QRELS, QUESTIONS
from ragaudit.demo.pipelines import build_langchain_chain
from ragaudit.integrations.langchain import RagAuditCallbackHandler

backend = sys.argv[1] if len(sys.argv) > 1 else "jaeger"
os.environ.setdefault("OTEL_SERVICE_NAME", "ragaudit-demo")
exporters: list = []
if backend == "jaeger":
    provider = tracing.configure(endpoint=os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"))
elif backend == "phoenix":
    phoenix = os.environ.get("PHOENIX_COLLECTOR_ENDPOINT", "http://localhost:6006")
    provider = tracing.configure(endpoint=phoenix)
    exporters.append(tracing.PhoenixExporter(phoenix))
elif backend == "langfuse":
    provider = tracing.configure(langfuse=True)  # LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY
    exporters.append(tracing.LangfuseExporter())
else:
    sys.exit(f"unknown backend {backend!r}: jaeger, phoenix or langfuse")

auditor = Auditor(exporters=exporters, audit_log="ragaudit-audit.jsonl")
handler = RagAuditCallbackHandler(auditor=auditor)
chain = build_langchain_chain()
for q in QUESTIONS:
    answer = chain.invoke(q.text, config={"callbacks": [handler],
                                          "metadata": {"ragaudit_relevant_ids": sorted(QRELS.get(q.id, {}))}})
    print(f"{q.id}: {answer[:100]}")
auditor.force_flush(60)
provider.force_flush()
print("stats:", auditor.stats())
