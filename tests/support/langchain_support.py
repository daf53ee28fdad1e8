"""Real LangChain parts for tests: hashing embeddings, a context-echo chat model, a Chroma-backed
knowledge base over :mod:`tests.support.topics` and the RAG chain over it.

Nothing here downloads a model or talks to a network: the embedding is
:func:`tests.conftest.hash_embedding` and the model answers with the first sentence of the context
in its prompt (so every answer is tied to the documents it was given).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import chromadb
from langchain_chroma import Chroma
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from tests.conftest import hash_embedding
from tests.support.topics import QUESTIONS, answer_for, topic_documents

__all__ = ["KB", "PROMPT", "ContextEchoModel", "HashEmbeddings", "format_docs", "rag_chain"]


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings; a query containing FAIL_RETRIEVER makes the search fail."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [hash_embedding(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if "FAIL_RETRIEVER" in text:
            raise RuntimeError("vector index unavailable")
        return hash_embedding(text)


class ContextEchoModel(BaseChatModel):
    """A stand-in chat model: answers with the first sentence of the context in its prompt.

    Deterministic and tied to the documents it was given; streams word by word; reports token
    usage; raises for a prompt containing FAIL_MODEL.
    """

    model_name: str = "context-echo-1"

    @property
    def _llm_type(self) -> str:
        return "context-echo"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _answer(self, messages: list[BaseMessage]) -> tuple[str, int]:
        prompt = str(messages[-1].content)
        if "FAIL_MODEL" in prompt:
            raise RuntimeError("model overloaded")
        context = prompt.split("Context:\n", 1)[-1].split("\n\nQuestion:", 1)[0]
        return answer_for(context), len(prompt.split())

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        answer, prompt_words = self._answer(messages)
        usage = {"input_tokens": prompt_words, "output_tokens": len(answer.split()),
                 "total_tokens": prompt_words + len(answer.split())}
        message = AIMessage(content=answer, usage_metadata=usage)  # type: ignore[arg-type]
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        answer, _ = self._answer(messages)
        for i, word in enumerate(answer.split(" ")):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


class KB:
    """The topic documents in a fresh in-process Chroma collection, with a k=2 retriever and, per
    question, the ids it retrieves (``expected``) and the answer the chain gives (``answers``)."""

    def __init__(self) -> None:
        client = chromadb.EphemeralClient()
        self.store = Chroma(collection_name=f"lc-{uuid.uuid4().hex[:8]}", embedding_function=HashEmbeddings(),
                            client=client)
        docs = topic_documents()
        self.store.add_texts([t for _, t, _ in docs], metadatas=[m for _, _, m in docs],
                             ids=[i for i, _, _ in docs])
        self.retriever = self.store.as_retriever(search_kwargs={"k": 2})
        self.expected: dict[str, list[str]] = {}
        self.answers: dict[str, str] = {}
        for q in QUESTIONS:
            found = self.store.similarity_search(q, k=2)
            self.expected[q] = [str(d.id) for d in found]
            self.answers[q] = answer_for(found[0].page_content)


PROMPT = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])
format_docs = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))


def rag_chain(retriever: Runnable[Any, Any]) -> Runnable[Any, str]:
    """retriever -> context, question -> :data:`PROMPT` -> :class:`ContextEchoModel` -> string."""
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | ContextEchoModel() | StrOutputParser())
