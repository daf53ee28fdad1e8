"""The app ``serving.py`` serves with gunicorn and uvicorn workers, one arm per server start (issue 50).

A FastAPI app whose ``/ask`` runs an LCEL RAG chain (an in-memory vector store, the real ``ChatOpenAI``
against the loopback model server) with ``await chain.ainvoke(q, config={"callbacks": callbacks})``. The arm
(``SERVE_ARM``) decides the callbacks:

- ``baseline``: none;
- ``noop``: a LangChain callback handler that does nothing (what any handler costs);
- ``ragaudit``: ``RagAuditCallbackHandler`` on an Auditor made at import (so with ``--preload`` in the
  gunicorn master) judging with the real ``ChatRagJudge`` against the loopback judge, default settings
  otherwise (audit log ``SERVE_AUDIT_LOG``);
- ``openllmetry``: no handler in ``config``: OpenLLMetry's ``LangchainInstrumentor`` adds its own to every
  run, its spans exported by a ``BatchSpanProcessor`` over OTLP/HTTP to the loopback collector
  (``SERVE_OTLP_URL``).

Each worker measures its event loop's lag (a 10 ms sleep, how late it wakes) and at its exit writes one JSON
file into ``SERVE_STATS_DIR``: pid, requests served, lag samples, and for ``ragaudit`` the Auditor's
``stats()`` after its shutdown (gunicorn's ``worker_exit`` hook, ``serving.py``'s ``gunicorn.conf.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.callbacks import BaseCallbackHandler
from langchain_openai import ChatOpenAI
from tests.reliability._support import memory_store, rag_chain

ARM = os.environ.get("SERVE_ARM", "baseline")
LAG_SLEEP_S = 0.01



class NoopHandler(BaseCallbackHandler):
    """Does nothing, called inline as ragaudit's handler is (not through the default executor)."""

    run_inline = True


callbacks: list[Any] = []
auditor: Any = None
if ARM == "noop":
    callbacks = [NoopHandler()]
elif ARM == "ragaudit":
    from ragaudit import Auditor, ChatRagJudge, Limits
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    # The default configuration, unless an experiment sets the CPU share cap (SERVE_MAX_CPU_SHARE: a number, or
    # "none" for no cap) to see what the cap moves and what it does not.
    share = os.environ.get("SERVE_MAX_CPU_SHARE")
    limits = Limits() if share is None else Limits(max_cpu_share=None if share == "none" else float(share))
    auditor = Auditor(ChatRagJudge(base_url=os.environ["SERVE_JUDGE_URL"], api_key="sk-test", model="judge-1",
                                   max_retries=0), audit_log=os.environ["SERVE_AUDIT_LOG"], limits=limits)
    callbacks = [RagAuditCallbackHandler(auditor=auditor)]
elif ARM == "openllmetry":
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=os.environ["SERVE_OTLP_URL"])))
    LangchainInstrumentor().instrument(tracer_provider=provider)
elif ARM != "baseline":
    raise SystemExit(f"SERVE_ARM must be baseline, noop, ragaudit or openllmetry, got {ARM!r}")

chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}),
                  ChatOpenAI(model="app-model", base_url=os.environ["SERVE_MODEL_URL"], api_key="sk-test",
                             max_retries=0, timeout=30))
served = 0
lags: list[float] = []


async def _watch_loop() -> None:
    while True:
        start = time.perf_counter()
        await asyncio.sleep(LAG_SLEEP_S)
        lags.append(time.perf_counter() - start - LAG_SLEEP_S)


def write_stats(auditor_stats: dict[str, int] | None = None) -> None:
    """This worker's figures, one file per pid (called at its exit)."""
    out = Path(os.environ["SERVE_STATS_DIR"]) / f"worker-{os.getpid()}.json"
    doc = {"pid": os.getpid(), "arm": ARM, "served": served, "lags_ms": [round(v * 1000, 3) for v in lags]}
    if auditor_stats is not None:
        doc["auditor"] = auditor_stats
    out.write_text(json.dumps(doc))


@asynccontextmanager
async def lifespan(_: Any) -> AsyncIterator[None]:
    watcher = asyncio.get_running_loop().create_task(_watch_loop())
    yield
    watcher.cancel()
    if auditor is None:  # the ragaudit arm writes its file after the Auditor's shutdown (worker_exit)
        write_stats()


def _app() -> Any:
    from fastapi import FastAPI

    api = FastAPI(lifespan=lifespan)

    @api.get("/ask")
    async def ask(q: str) -> dict[str, Any]:
        global served
        answer = await chain.ainvoke(q, config={"callbacks": callbacks})
        served += 1
        return {"answer": answer, "pid": os.getpid()}

    return api


app = _app()
