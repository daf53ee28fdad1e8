"""The app of issue 50, served by real gunicorn / uvicorn processes in tests/reliability/test_servers.py.

A FastAPI app whose ``/ask`` runs an LCEL RAG chain (an in-memory vector store, the real
``ChatOpenAI`` against the loopback model server) with ``await chain.ainvoke(q, config={"callbacks":
[handler]})``; an Auditor made at import (so with ``--preload`` in the gunicorn master) judging with the
real ``ChatRagJudge`` against the loopback judge. ``/ask-sync`` is a ``def`` endpoint (the chain in
FastAPI's thread pool); :data:`wsgi` is the same ``/ask`` as a plain WSGI callable for gunicorn's sync
and gthread workers. Settings come from the environment the test sets:

- ``SERVE_MODEL_URL``, ``SERVE_JUDGE_URL``: the loopback servers' base URLs.
- ``SERVE_AUDIT_LOG``: the audit log every worker appends to (``O_APPEND``: whole lines).
"""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_openai import ChatOpenAI

from ragaudit import Auditor, ChatRagJudge, Limits
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from tests.reliability._support import memory_store, rag_chain

auditor = Auditor(ChatRagJudge(base_url=os.environ["SERVE_JUDGE_URL"], api_key="sk-test", model="judge-1",
                               max_retries=0),
                  audit_log=os.environ["SERVE_AUDIT_LOG"], limits=Limits(exit_timeout_s=20.0))
handler = RagAuditCallbackHandler(auditor=auditor)
chain = rag_chain(memory_store().as_retriever(search_kwargs={"k": 2}),
                  ChatOpenAI(model="app-model", base_url=os.environ["SERVE_MODEL_URL"], api_key="sk-test",
                             max_retries=0, timeout=10))


def _asgi_app() -> Any:
    from fastapi import FastAPI

    api = FastAPI()

    @api.get("/ask")
    async def ask(q: str) -> dict[str, Any]:
        answer = await chain.ainvoke(q, config={"callbacks": [handler]})
        return {"question": q, "answer": answer, "pid": os.getpid()}

    @api.get("/ask-sync")
    def ask_sync(q: str) -> dict[str, Any]:  # FastAPI runs it in its thread pool, off the main thread
        answer = chain.invoke(q, config={"callbacks": [handler]})
        return {"question": q, "answer": answer, "pid": os.getpid()}

    return api


app = _asgi_app()


def wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """The same /ask for gunicorn's sync and gthread workers (``chain.invoke`` on the request thread)."""
    from urllib.parse import parse_qs

    q = parse_qs(environ.get("QUERY_STRING", "")).get("q", [""])[0]
    answer = chain.invoke(q, config={"callbacks": [handler]})
    body = json.dumps({"question": q, "answer": answer, "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
