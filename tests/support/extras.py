"""What each extra of ragaudit is for, run in a virtualenv holding only ``ragaudit[EXTRA]`` (issue 44).

``python -m tests.support.extras EXTRA`` from the repository root (the ``extra`` nox sessions). Each check
uses the extra the way its docs say: a missing or incompatible dependency fails it. Judges are offline
(``LexicalJudge``) or the loopback chat-completions server; nothing leaves the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.support.llm_server import LLMServer, judgement_json


def _turn() -> object:
    from ragaudit import RagTurn, RetrievedDoc

    return RagTurn(turn_id="t1", query="How long do I have to return an item?",
                   answer="Within 30 days of delivery [returns].",
                   documents=(RetrievedDoc(id="returns", content="Items can be returned within 30 days."),))


def _judged_by_chat_judge() -> dict[str, float]:
    """The core install: ChatRagJudge on the real openai SDK judges a turn (loopback server); its stats()."""
    from ragaudit import Auditor, ChatRagJudge

    with LLMServer(lambda body: judgement_json(0.9, 0.8, 0.85, reason="ok")) as srv:
        auditor = Auditor(ChatRagJudge("gpt-4o-mini", base_url=srv.base_url, api_key="dummy"), audit_log=None)
        auditor.submit(_turn())  # type: ignore[arg-type]
        assert auditor.force_flush(30) and auditor.shutdown(10)
    stats = auditor.stats()
    assert stats["judged"] == 1, stats
    return stats


def langchain() -> None:
    from langchain_core.runnables import RunnableLambda

    from ragaudit import Auditor, LexicalJudge
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    auditor = Auditor(LexicalJudge(), audit_log=None)
    handler = RagAuditCallbackHandler(auditor=auditor)
    RunnableLambda(lambda q: f"answer to {q}").invoke("q", config={"callbacks": [handler]})
    assert auditor.shutdown(10)
    _judged_by_chat_judge()


def llamaindex() -> None:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.llms import MockLLM

    from ragaudit import Auditor, LexicalJudge
    from ragaudit.demo.embedding import llamaindex_embedding
    from ragaudit.integrations import closer_for
    from ragaudit.integrations import llamaindex as ra_llamaindex

    auditor = Auditor(LexicalJudge(), audit_log=None)
    Settings.llm, Settings.embed_model = MockLLM(max_tokens=8), llamaindex_embedding()
    engine = VectorStoreIndex.from_documents([Document(text="Items can be returned within 30 days.")]).as_query_engine()
    ra_llamaindex.instrument(auditor=auditor)
    try:
        engine.query("How long do I have to return an item?")
        assert closer_for(auditor).force_flush(30) and auditor.force_flush(30)
    finally:
        ra_llamaindex.uninstrument()
        auditor.shutdown(10)
    assert auditor.stats()["judged"] == 1, auditor.stats()


def chroma() -> None:
    import chromadb
    from langchain_chroma import Chroma
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from ragaudit.demo.embedding import langchain_embeddings

    client = chromadb.EphemeralClient()
    store = Chroma(client=client, collection_name="extra", embedding_function=langchain_embeddings())
    store.add_texts(["Items can be returned within 30 days."], ids=["returns"])
    assert store.similarity_search("returns", k=1)[0].id == "returns"
    ChromaVectorStore(chroma_collection=client.get_or_create_collection("extra2"))


def otlp() -> None:
    from ragaudit import tracing

    _judged_by_chat_judge()  # before configure(): its provider exports to a port nobody listens on
    with tempfile.TemporaryDirectory() as tmp:
        tracing.configure(endpoint="http://127.0.0.1:9", file=str(Path(tmp) / "spans.jsonl"))


def langfuse() -> None:
    from ragaudit.tracing import LangfuseExporter

    LangfuseExporter(host="http://127.0.0.1:9", public_key="pk", secret_key="sk").shutdown(1)


def phoenix() -> None:
    from ragaudit.tracing import PhoenixExporter

    PhoenixExporter(endpoint="http://127.0.0.1:9").shutdown(1)


def _cli(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "ragaudit", *argv], check=True, stdout=subprocess.DEVNULL)


def worker() -> None:
    from ragaudit.integrations.otlp import Worker

    _cli("worker", "--help")
    started = Worker(port=0, otlp_endpoint="http://127.0.0.1:9").start()
    try:
        assert started.port > 0
    finally:
        started.stop()


def worker_grpc() -> None:
    from ragaudit.integrations.otlp import Worker

    started = Worker(port=0, grpc_port=0, otlp_endpoint="http://127.0.0.1:9").start()
    try:
        assert started.grpc_port
    finally:
        started.stop()


def redis() -> None:
    import limits.storage  # noqa: F401
    import redis as redis_client  # noqa: F401


def prices() -> None:
    # genai-prices knows gpt-4o-mini: the judge's dollars are counted from the reply's usage.
    assert _judged_by_chat_judge()["judge_usd"] > 0


def demo() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "OTEL_"))}
        subprocess.run([sys.executable, "-m", "ragaudit", "demo", "--offline"], cwd=tmp, env=env, check=True,
                       stdout=subprocess.DEVNULL)


CHECKS: dict[str, Callable[[], None]] = {
    "langchain": langchain, "llamaindex": llamaindex, "chroma": chroma, "otlp": otlp, "langfuse": langfuse,
    "phoenix": phoenix, "worker": worker, "worker-grpc": worker_grpc, "redis": redis, "prices": prices,
    "demo": demo,
}

if __name__ == "__main__":
    CHECKS[sys.argv[1]]()
    print(f"ragaudit[{sys.argv[1]}]: ok")
