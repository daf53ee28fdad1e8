"""The shape of what the demo records: span attributes and events, audit lines, exporter payloads.

Runs the offline demo pipelines (LangChain and LlamaIndex) through one Auditor that also has a
Phoenix and a Langfuse exporter (pointed at a loopback recorder), and reduces everything recorded to
its keys and values with ids, times and latencies left out. ``tests/test_demo_shape.py`` compares
this with the shape recorded before the exporter refactoring (``tests/data/demo_shape.json``);
``python -m tests.support.demo_shape OUT.json`` writes a new one.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["demo_shape"]

# Keys whose values differ run to run: ids, times, latencies, the judge span's own timing.
_VOLATILE = re.compile(
    r"(^|[._])(ts|id|ids|trace_id|span_id|parent_span_id|turn_id|observationId|traceId|latency_s|"
    r"start_time_ns|end_time_ns|timestamp_ns|span_ids)$|latency|\.id$|document_ids|^id$")


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if _VOLATILE.search(str(k)) else _clean(v)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str) and value.startswith(("{", "[")):
        try:
            return {"<json>": _clean(json.loads(value))}
        except ValueError:
            return value
    return value


def _key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=str)


def demo_shape() -> dict[str, Any]:
    """Run both demo pipelines and return their recorded shape (sorted, volatile values masked)."""
    from ragaudit.auditor import Auditor
    from ragaudit.demo import run as demo
    from ragaudit.judges.lexical import LexicalJudge
    from ragaudit.tracing import LangfuseExporter, PhoenixExporter, read_audit_log, read_spans
    from tests.support.http_recorder import HttpRecorder

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, HttpRecorder() as backend:
        for framework in ("langchain", "llamaindex"):
            traces, audit_log = Path(tmp, f"{framework}-spans.jsonl"), Path(tmp, f"{framework}-audit.jsonl")
            provider = demo._tracer_provider(traces, None)
            exporters = [PhoenixExporter(backend.url, max_retries=0),
                         LangfuseExporter(backend.url, public_key="pk-demo", secret_key="sk-demo", max_retries=0)]
            auditor = Auditor(LexicalJudge(), audit_log=audit_log, tracer_provider=provider, exporters=exporters)
            result = demo.DemoResult(framework, "stand-in", "lexical")
            runner = demo._run_langchain if framework == "langchain" else demo._run_llamaindex
            try:
                runner(demo.QUESTIONS, auditor, provider, False, result)
                auditor.force_flush(timeout_s=60)
            finally:
                auditor.shutdown(timeout_s=60)
                provider.force_flush()
                provider.shutdown()
            spans = [_clean({"name": s["name"], "kind": s["kind"], "status": s["status"],
                             "attributes": s["attributes"],
                             "events": [{"name": e["name"], "attributes": e["attributes"]} for e in s["events"]],
                             "links": [link["attributes"] for link in s["links"]]})
                     for s in read_spans(traces)]
            out[f"{framework}.spans"] = sorted(spans, key=_key)
            out[f"{framework}.audit"] = sorted((_clean(line) for line in read_audit_log(audit_log)), key=_key)
            # Phoenix batches several annotations into one request, differently run to run: one item each.
            sent = [_clean({"path": r["path"], "body": item})
                    for r in backend.requests
                    for item in (r["body"]["data"] if isinstance(r["body"], dict) and "data" in r["body"]
                                 else [r["body"]])]
            backend.requests.clear()
            out[f"{framework}.exporters"] = sorted(sent, key=_key)
    return out


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(demo_shape(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
