"""A LangChain RAG app as users write it, with no ragaudit code: a sender for the worker's tests.

The chain is LangChain's LCEL retrieval chain (python.langchain.com, "Build a Retrieval Augmented
Generation (RAG) App", the `retriever | format_docs` / `prompt | llm | StrOutputParser()` form) over
Chroma's embedded client, with the real ``ChatOpenAI`` against the loopback chat-completions server
(``OPENAI_BASE_URL``). Tracing is what the instrumentation's own README shows
(:mod:`tests.worker.apps.tracing`: an OTel SDK ``TracerProvider`` with a
``BatchSpanProcessor(OTLPSpanExporter())``, OTLP/HTTP protobuf), and either OpenInference's ``LangChainInstrumentor``
or OpenLLMetry's (``--instrumentation openllmetry``).

Usage: ``python -m tests.worker.apps.langchain_rag --instrumentation openinference Q1 Q2 ...``;
prints one JSON line per question: {question, answer, ids (retrieved, in order), trace_id}.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from tests.worker.apps.kb import DOCUMENTS, HashEmbeddings
from tests.worker.apps.tracing import tracer_provider


def _instrument(kind: str, provider: object) -> None:
    if kind == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    elif kind == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
    else:
        raise SystemExit(f"unknown instrumentation {kind!r}")


def make_chain() -> tuple[Any, Any]:
    """The Chroma store and the LCEL RAG chain over it (the docs' form, see the module docstring)."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_openai import ChatOpenAI

    store = Chroma(collection_name=f"kb-{uuid.uuid4().hex[:8]}", embedding_function=HashEmbeddings(),
                   client=chromadb.EphemeralClient())
    store.add_texts([t for _, t, _ in DOCUMENTS], metadatas=[m for _, _, m in DOCUMENTS],
                    ids=[i for i, _, _ in DOCUMENTS])
    retriever = store.as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])
    llm = ChatOpenAI(model="gpt-4o-mini", temperature=0)

    def format_docs(docs: list) -> str:  # type: ignore[type-arg]
        return "\n\n".join(d.page_content for d in docs)

    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    return store, chain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instrumentation", default="openinference")
    parser.add_argument("--service", default="lc-rag-app")
    parser.add_argument("questions", nargs="+")
    args = parser.parse_args(argv)

    provider = tracer_provider(args.service)
    _instrument(args.instrumentation, provider)
    store, chain = make_chain()
    for question in args.questions:
        ids = [str(d.id) for d in store.similarity_search(question, k=2)]
        answer = chain.invoke(question)
        print(json.dumps({"question": question, "answer": answer, "ids": ids}), flush=True)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
