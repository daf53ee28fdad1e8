"""A LlamaIndex RAG app as users write it, with no ragaudit code: a sender for the worker's tests.

The LlamaIndex starter form (docs.llamaindex.ai, "Starter Tutorial (Using OpenAI)" and "Chroma
Vector Store"): nodes in a ``VectorStoreIndex`` over ``ChromaVectorStore`` (Chroma's embedded
client), ``index.as_query_engine(similarity_top_k=2)``, the real ``llama_index.llms.openai.OpenAI``
against the loopback chat-completions server. Tracing per ``openinference-instrumentation-llama-index``'s
README: ``LlamaIndexInstrumentor().instrument(tracer_provider=...)`` with an OTLP/HTTP exporter
(endpoint from ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).

Prints one JSON line per question: {question, answer, ids (retrieved, in order)}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

from tests.worker.apps.kb import DOCUMENTS, embed
from tests.worker.apps.tracing import tracer_provider


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", default="li-rag-app")
    parser.add_argument("questions", nargs="+")
    args = parser.parse_args(argv)

    provider = tracer_provider(args.service)
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)

    import chromadb
    from llama_index.core import Settings, StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.llms.openai import OpenAI
    from llama_index.vector_stores.chroma import ChromaVectorStore

    class HashEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return embed(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return embed(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return embed(text)

    Settings.embed_model = HashEmbedding()
    Settings.llm = OpenAI(model="gpt-4o-mini", api_base=os.environ["OPENAI_BASE_URL"], api_key="test")
    collection = chromadb.EphemeralClient().create_collection(f"kb-{uuid.uuid4().hex[:8]}")
    storage = StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection))
    nodes = [TextNode(id_=doc_id, text=text, metadata=meta) for doc_id, text, meta in DOCUMENTS]
    index = VectorStoreIndex(nodes, storage_context=storage)
    engine = index.as_query_engine(similarity_top_k=2)
    retriever = index.as_retriever(similarity_top_k=2)
    for question in args.questions:
        ids = [n.node.node_id for n in retriever.retrieve(question)]
        answer = str(engine.query(question))
        print(json.dumps({"question": question, "answer": answer, "ids": ids}), flush=True)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
