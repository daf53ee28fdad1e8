"""Your own LlamaIndex + Chroma query engine, audited by ragaudit with one call. Offline by default:
the demo's stand-ins answer (extractive, labelled so) and LexicalJudge scores; set OPENAI_API_KEY
(or OPENAI_BASE_URL) for a real model and an LLM judge."""
import os

import chromadb
from llama_index.core import Document, PromptTemplate, StorageContext, VectorStoreIndex
from llama_index.vector_stores.chroma import ChromaVectorStore

from ragaudit import tracing
from ragaudit.demo.embedding import llamaindex_embedding  # use your real embedding model here
from ragaudit.demo.generator import llamaindex_openai, llamaindex_standin
from ragaudit.integrations import llamaindex

tracing.configure(file="ragaudit-traces.jsonl")  # or OTEL_EXPORTER_OTLP_ENDPOINT for Jaeger/Phoenix/Langfuse
audit = llamaindex.instrument()  # <- the one line: every query judged, traced and audit-logged

texts = ["Any customer gets a full refund within 30 days of purchase, if the item is unused.",
         "Size exchanges on clothing are free within 45 days of purchase.",
         "Opened software and digital downloads cannot be refunded."]
collection = chromadb.EphemeralClient().create_collection("policy-llamaindex")
index = VectorStoreIndex.from_documents(
    [Document(text=t, metadata={"source": "policy.md"}) for t in texts], embed_model=llamaindex_embedding(),
    storage_context=StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection)))
real = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
prompt = PromptTemplate("Answer only from the context.\n\nContext:\n{context_str}\n\nQuestion: {query_str}")
engine = index.as_query_engine(llm=llamaindex_openai() if real else llamaindex_standin(), similarity_top_k=2,
                               text_qa_template=prompt)

for question in ("Are size exchanges on clothing free?", "Do you refund international orders?"):
    print(question, "->", engine.query(question))
audit.force_flush()  # wait for the background judge (a normal exit waits too)
for line in tracing.read_audit_log("ragaudit-audit.jsonl")[-2:]:
    print(f"{line['query']}  faithfulness={line['faithfulness']} context={line['context_relevance']} "
          f"answer={line['answer_relevance']}\n  {line['reason']}")
