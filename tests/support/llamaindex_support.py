"""Real LlamaIndex parts for tests: a hashing embedding, a context-echo LLM and a Chroma-backed index.

Nothing here downloads a model or talks to a network: the embedding is
:func:`tests.conftest.hash_embedding` and the LLM answers with the first sentence of the context
in its prompt (so every answer is tied to the nodes it was given).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import chromadb
from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.vector_stores.chroma import ChromaVectorStore

from tests.conftest import hash_embedding
from tests.support.topics import answer_for, topic_documents

__all__ = ["ContextEchoLLM", "HashEmbedding", "ReverseReranker", "build_index", "make_nodes", "offline_settings"]

_CONTEXT_START = "---------------------\n"
_FOLLOW_UP = "<Follow Up Message>\n"


def make_nodes() -> list[TextNode]:
    """The topic documents of :mod:`tests.support.topics` as nodes. Metadata stays out of the LLM
    prompt and the embedding, so the context is the node texts alone."""
    return [TextNode(id_=node_id, text=text, metadata=metadata, excluded_llm_metadata_keys=list(metadata),
                     excluded_embed_metadata_keys=list(metadata))
            for node_id, text, metadata in topic_documents()]


class HashEmbedding(BaseEmbedding):
    """A deterministic bag-of-words embedding (:func:`tests.conftest.hash_embedding`)."""

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        if "FAIL_RETRIEVER" in query:
            raise RuntimeError("vector index unavailable")
        return hash_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return hash_embedding(text)


class ContextEchoLLM(CustomLLM):
    """A stand-in LLM: answers with the first sentence of the context in its prompt.

    A condense-question prompt is answered with the follow-up message itself. Streams word by
    word; reports token counts like the OpenAI integration (``additional_kwargs``). A prompt with
    ``FAIL_MODEL`` raises; with ``FAIL_MODEL_STREAM`` the stream raises after two words. With
    ``is_chat_model=True`` engines call ``chat``, which ``CustomLLM`` implements over ``complete``.
    """

    chat_model: bool = False
    _calls: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "ContextEchoLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="context-echo-1", is_chat_model=self.chat_model)

    def answer(self, prompt: str) -> str:
        self._calls += 1
        if "FAIL_MODEL" in prompt and "FAIL_MODEL_STREAM" not in prompt:
            raise RuntimeError("model overloaded")
        if _FOLLOW_UP in prompt:
            return prompt.split(_FOLLOW_UP, 1)[1].split("\n", 1)[0].strip()
        context = prompt.split(_CONTEXT_START, 1)[-1].split("\n" + _CONTEXT_START, 1)[0]
        return answer_for(context.strip().split("\n\n", 1)[0])  # nodes are joined by blank lines

    @property
    def calls(self) -> int:
        return self._calls

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text = self.answer(prompt)
        return CompletionResponse(text=text, additional_kwargs={
            "prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        words = self.answer(prompt).split(" ")

        def gen() -> CompletionResponseGen:
            text = ""
            for i, word in enumerate(words):
                if i == 2 and "FAIL_MODEL_STREAM" in prompt:
                    raise RuntimeError("stream interrupted")
                delta = word if i == 0 else " " + word
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()


class ReverseReranker(BaseNodePostprocessor):
    """A node post-processor that reverses the retrieved order (a reranker that disagrees)."""

    @classmethod
    def class_name(cls) -> str:
        return "ReverseReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return [NodeWithScore(node=n.node, score=n.score) for n in reversed(nodes)]


@contextmanager
def offline_settings(llm: bool = True) -> Iterator[None]:
    """LlamaIndex ``Settings`` with the context-echo LLM and the hashing embedding (nothing may fall
    back to OpenAI) while the block runs; the previous settings afterwards. With ``llm=False`` there
    is no default LLM at all: every app in the block must name its own."""
    saved = Settings._llm, Settings._embed_model, Settings._callback_manager
    Settings.llm = ContextEchoLLM() if llm else None
    Settings.embed_model = HashEmbedding()
    try:
        yield
    finally:
        Settings._llm, Settings._embed_model, Settings._callback_manager = saved


def build_index(nodes: Sequence[TextNode] | None = None) -> VectorStoreIndex:
    """A :class:`VectorStoreIndex` over a fresh collection of an in-process Chroma."""
    client = chromadb.EphemeralClient()
    collection = client.create_collection(f"li-{uuid.uuid4().hex[:12]}")
    storage = StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection))
    return VectorStoreIndex(list(nodes if nodes is not None else make_nodes()), storage_context=storage,
                            embed_model=HashEmbedding())
