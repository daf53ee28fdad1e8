"""Shared parts of the reliability tests: a small knowledge base, a stand-in chat model, the chain.

Everything here is a real LangChain component (an ``InMemoryVectorStore`` or Chroma with the
deterministic hash embedding of ``tests/conftest.py``, a ``BaseChatModel``, LCEL composition); only
the model's "intelligence" is a stand-in: it answers with the first sentence of its context, so the
answer is known in advance and tied to the documents.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field

from ragaudit import Auditor, Judgement, RagTurn
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from tests.conftest import hash_embedding

__all__ = [
    "DOCS",
    "FAIL_MID_STREAM",
    "FAIL_MODEL",
    "FAIL_RETRIEVER",
    "QUESTIONS",
    "Collected",
    "EchoModel",
    "FixedRetriever",
    "HashEmbeddings",
    "answer_for",
    "chroma_store",
    "handler_for",
    "memory_store",
    "rag_chain",
    "wait_until",
]

FAIL_RETRIEVER = "FAIL_RETRIEVER"
FAIL_MODEL = "FAIL_MODEL"
FAIL_MID_STREAM = "FAIL_MID_STREAM"

DOCS: list[tuple[str, str, dict[str, Any]]] = [
    ("returns-rule", "Returns are accepted within 30 days of delivery. A receipt is required.",
     {"source": "returns.md"}),
    ("returns-desk", "For returns questions, call extension 104 or visit the returns desk.",
     {"source": "returns.md"}),
    ("shipping-rule", "Shipping takes 3 to 5 business days. Express shipping takes one day.",
     {"source": "shipping.md"}),
    ("shipping-desk", "For shipping questions, call extension 105 or visit the shipping desk.",
     {"source": "shipping.md"}),
    ("warranty-rule", "The warranty covers defects for two years. Damage by misuse is excluded.",
     {"source": "warranty.md"}),
    ("warranty-desk", "For warranty questions, call extension 106 or visit the warranty desk.",
     {"source": "warranty.md"}),
]
QUESTIONS = {"returns": "How do returns work?", "shipping": "How long does shipping take?",
             "warranty": "What does the warranty cover?"}


_SENTENCE_END = re.compile(r"(?<=\.)\s+")


def answer_for(doc_text: str) -> str:
    """What :class:`EchoModel` answers when *doc_text* is the first document of its context."""
    return _SENTENCE_END.split(doc_text.strip(), maxsplit=1)[0].rstrip(".") + "."


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings; a query containing FAIL_RETRIEVER makes the search fail."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [hash_embedding(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if FAIL_RETRIEVER in text:
            raise RuntimeError("vector index unavailable")
        return hash_embedding(text)


class EchoModel(BaseChatModel):
    """Answers with the first sentence of the context in its prompt.

    A prompt containing FAIL_MODEL raises before answering; one containing FAIL_MID_STREAM
    streams two chunks and then raises.
    """

    model_name: str = "echo-1"

    @property
    def _llm_type(self) -> str:
        return "echo"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _answer(self, messages: list[BaseMessage]) -> str:
        prompt = str(messages[-1].content)
        if FAIL_MODEL in prompt:
            raise RuntimeError("model overloaded")
        context = prompt.split("Context:\n", 1)[-1].split("\n\nQuestion:", 1)[0]
        return answer_for(context) if context.strip() else "I do not know."

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self._answer(messages)))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        fail = FAIL_MID_STREAM in str(messages[-1].content)
        words = self._answer(messages).split(" ")
        for i, word in enumerate(words):
            if fail and i == 2:
                raise RuntimeError("stream broke after two chunks")
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


class FixedRetriever(BaseRetriever):
    """Returns the same documents for every query (they may be malformed on purpose); raises
    for a query containing FAIL_RETRIEVER."""

    documents: list[Any] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if FAIL_RETRIEVER in query:
            raise RuntimeError("retriever backend down")
        return list(self.documents)


def memory_store(docs: Sequence[tuple[str, str, dict[str, Any]]] = DOCS) -> InMemoryVectorStore:
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_texts([t for _, t, _ in docs], metadatas=[m for _, _, m in docs], ids=[i for i, _, _ in docs])
    return store


def chroma_store(docs: Sequence[tuple[str, str, dict[str, Any]]] = DOCS) -> Any:
    import chromadb
    from langchain_chroma import Chroma

    store = Chroma(collection_name=f"rel-{uuid.uuid4().hex[:8]}", embedding_function=HashEmbeddings(),
                   client=chromadb.EphemeralClient())
    store.add_texts([t for _, t, _ in docs], metadatas=[m for _, _, m in docs], ids=[i for i, _, _ in docs])
    return store


PROMPT = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])


def _format_docs(docs: Sequence[Any]) -> str:
    return "\n\n".join(str(getattr(d, "page_content", d)) for d in docs)


def rag_chain(retriever: Runnable[Any, Any], model: BaseChatModel | None = None) -> Runnable[Any, str]:
    """The usual LCEL RAG chain: retrieve, stuff the context into a prompt, answer, parse to text."""
    return ({"context": retriever | RunnableLambda(_format_docs), "question": RunnablePassthrough()}
            | PROMPT | (model or EchoModel()) | StrOutputParser())


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll *predicate* until it holds or *timeout* seconds pass (for background work with no event
    to wait on); returns its last value. Never used to assert on time, only to wait for a state."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(0.01)
    return True


class Collected:
    """An ``on_judgement`` callback that keeps every (turn, judgement) and lets a test wait for n."""

    def __init__(self) -> None:
        self.items: list[tuple[RagTurn, Judgement]] = []
        self._cond = threading.Condition()

    def __call__(self, turn: RagTurn, judgement: Judgement) -> None:
        with self._cond:
            self.items.append((turn, judgement))
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self.items)

    @property
    def judgements(self) -> list[Judgement]:
        with self._cond:
            return [j for _, j in self.items]


def handler_for(judge: Any, log: Path, provider: Any = None, *,
                on_judgement: Callable[[RagTurn, Judgement], None] | None = None,
                **auditor_kwargs: Any) -> tuple[RagAuditCallbackHandler, Auditor]:
    """A handler submitting to a fresh Auditor of *judge* writing *log* (and spans to *provider*)."""
    auditor = Auditor(judge, audit_log=log, tracer_provider=provider, on_judgement=on_judgement,
                      **auditor_kwargs)
    return RagAuditCallbackHandler(auditor=auditor), auditor
