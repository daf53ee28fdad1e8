"""Your own LangChain + Chroma chain, audited by ragaudit with one callback. Offline by default:
the demo's stand-ins answer (extractive, labelled so) and LexicalJudge scores; set OPENAI_API_KEY
(or OPENAI_BASE_URL) for a real model and an LLM judge."""
import os

import chromadb
from langchain_chroma import Chroma
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from ragaudit import tracing
from ragaudit.demo.embedding import langchain_embeddings  # use your real embeddings here
from ragaudit.demo.generator import langchain_openai, langchain_standin
from ragaudit.integrations.langchain import RagAuditCallbackHandler

texts = ["Any customer gets a full refund within 30 days of purchase, if the item is unused.",
         "Size exchanges on clothing are free within 45 days of purchase.",
         "Opened software and digital downloads cannot be refunded."]
store = Chroma.from_texts(texts, langchain_embeddings(), metadatas=[{"source": "policy.md"}] * 3,
                          client=chromadb.EphemeralClient(), collection_name="policy-langchain")
real = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
llm = langchain_openai() if real else langchain_standin()
prompt = ChatPromptTemplate.from_messages([("system", "Answer only from the numbered context, cite [n]."),
                                           ("human", "Context:\n{context}\n\nQuestion: {question}")])
retrieve = store.as_retriever(search_kwargs={"k": 2})
number = lambda docs: "\n\n".join(f"[{i}]\n{d.page_content}" for i, d in enumerate(docs, 1))  # noqa: E731
chain = {"context": retrieve | number, "question": lambda q: q} | prompt | llm | StrOutputParser()

tracing.configure(file="ragaudit-traces.jsonl")  # or OTEL_EXPORTER_OTLP_ENDPOINT for Jaeger/Phoenix/Langfuse
handler = RagAuditCallbackHandler()  # <- the one line: every answer judged, traced and audit-logged
for question in ("Are size exchanges on clothing free?", "Do you refund international orders?"):
    print(question, "->", chain.invoke(question, config={"callbacks": [handler]}))
handler.force_flush()  # wait for the background judge (a normal exit waits too)
for line in tracing.read_audit_log("ragaudit-audit.jsonl")[-2:]:
    print(f"{line['query']}  faithfulness={line['faithfulness']} context={line['context_relevance']} "
          f"answer={line['answer_relevance']}\n  {line['reason']}")
