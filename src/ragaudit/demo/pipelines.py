"""The demo's RAG pipelines over Chroma's embedded client: an LCEL chain and a LlamaIndex query engine.

Both load the five knowledge-base documents (ids ``kb-<section>``) with the offline embedding,
retrieve ``k=2`` documents and hand them to the generator numbered ``[1] (source: ..., section:
...)``. The generator is the offline extractive stand-in unless a real model is passed (see
`real_model_configured` and `ragaudit.demo.generator`). Needs ``chromadb`` and
``langchain-chroma`` or ``llama-index-vector-stores-chroma``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .embedding import chroma_embedding_function, langchain_embeddings, llamaindex_embedding
from .generator import (
    GENERATOR_SYSTEM_PROMPT,
    LLAMAINDEX_PROMPT,
    USER_PROMPT_TEMPLATE,
    format_passage,
    langchain_standin,
    llamaindex_standin,
)
from .kb import DOCUMENTS

if TYPE_CHECKING:
    from langchain_core.documents import Document
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable
    from llama_index.core.llms import LLM
    from llama_index.core.query_engine import BaseQueryEngine

__all__ = [
    "DEFAULT_K",
    "build_langchain_chain",
    "build_llamaindex_engine",
    "chroma_client",
    "format_documents",
    "real_model_configured",
]

DEFAULT_K = 2
"""Documents retrieved per question."""


def real_model_configured(offline: bool = False) -> bool:
    """True when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set and *offline* is not asked for."""
    return not offline and bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def chroma_client() -> Any:
    """Chroma's in-memory client (``chromadb.EphemeralClient``): nothing is written to disk."""
    try:
        import chromadb
    except ImportError as exc:
        raise ConfigurationError("the demo needs chromadb: pip install 'ragaudit[chroma]'") from exc
    return chromadb.EphemeralClient()


def _collection_name(name: str | None) -> str:
    return name or f"ragaudit-demo-{uuid.uuid4().hex[:12]}"


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigurationError(f"k must be an int >= 1, got {k!r}")


def format_documents(documents: Sequence[Document]) -> str:
    """LangChain documents as the numbered context the generator reads."""
    return "\n\n".join(format_passage(i, d.page_content, d.metadata) for i, d in enumerate(documents, 1))


def build_langchain_chain(
    llm: BaseChatModel | None = None,
    *,
    k: int = DEFAULT_K,
    client: Any = None,
    collection_name: str | None = None,
) -> Runnable[str, str]:
    """The demo as an LCEL chain: ``question -> retriever (k) -> prompt -> llm -> str``.

    *llm* defaults to the offline extractive stand-in; *client* to a new
    `chroma_client`; *collection_name* to a fresh unique name (so chains built in one
    process never share a collection).
    """
    _check_k(k)
    try:
        from langchain_chroma import Chroma
        from langchain_core.output_parsers import StrOutputParser
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    except ImportError as exc:
        raise ConfigurationError(
            f"the LangChain demo needs langchain-core and langchain-chroma ({exc.name} is missing): "
            "pip install 'ragaudit[langchain,chroma]'"
        ) from exc
    store = Chroma(
        collection_name=_collection_name(collection_name),
        embedding_function=langchain_embeddings(),
        client=client if client is not None else chroma_client(),
        collection_configuration={"hnsw": {"space": "cosine"}},
    )
    store.add_texts(
        [d.text for d in DOCUMENTS], metadatas=[d.metadata for d in DOCUMENTS], ids=[d.id for d in DOCUMENTS]
    )
    retriever = _scored_retriever(store, k)
    prompt = ChatPromptTemplate.from_messages(
        [("system", GENERATOR_SYSTEM_PROMPT), ("human", USER_PROMPT_TEMPLATE)]
    )
    chain: Runnable[str, str] = (
        {"context": retriever | RunnableLambda(format_documents), "question": RunnablePassthrough()}
        | prompt
        | (llm if llm is not None else langchain_standin())
        | StrOutputParser()
    )
    return chain


def _scored_retriever(store: Any, k: int) -> Any:
    """A retriever over *store* that keeps Chroma's relevance score in each document's metadata.

    LangChain's ``VectorStoreRetriever`` drops the scores; putting them in ``metadata["score"]``
    is how they reach the retrieval span (``retrieval.documents.N.document.score``).
    """
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    class ScoredChromaRetriever(BaseRetriever):
        """Top-*k* documents of the demo store, each with its relevance score in the metadata."""

        store: Any
        k: int

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            found = self.store.similarity_search_with_relevance_scores(query, k=self.k)
            return [Document(page_content=doc.page_content, id=doc.id, metadata={**doc.metadata, "score": score})
                    for doc, score in found]

    return ScoredChromaRetriever(store=store, k=k)


def build_llamaindex_engine(
    llm: LLM | None = None,
    *,
    k: int = DEFAULT_K,
    client: Any = None,
    collection_name: str | None = None,
) -> BaseQueryEngine:
    """The demo as a LlamaIndex query engine: a ``VectorStoreIndex`` over ``ChromaVectorStore``.

    Node ids are the knowledge-base ids (``kb-<section>``). *llm* defaults to the offline
    extractive stand-in; the global ``Settings`` are not touched.
    """
    _check_k(k)
    try:
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.core.schema import TextNode
        from llama_index.vector_stores.chroma import ChromaVectorStore
    except ImportError as exc:
        raise ConfigurationError(
            f"the LlamaIndex demo needs llama-index-core and llama-index-vector-stores-chroma ({exc.name} "
            "is missing): pip install 'ragaudit[llamaindex,chroma]'"
        ) from exc
    chroma = client if client is not None else chroma_client()
    collection = chroma.create_collection(
        _collection_name(collection_name), embedding_function=chroma_embedding_function()
    )
    nodes = [
        TextNode(
            id_=d.id, text=d.text, metadata=d.metadata,
            excluded_embed_metadata_keys=list(d.metadata), excluded_llm_metadata_keys=["id"],
            metadata_template="{key}: {value}", metadata_separator=", ",
        )
        for d in DOCUMENTS
    ]
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=ChromaVectorStore(chroma_collection=collection)),
        embed_model=llamaindex_embedding(),
    )
    return index.as_query_engine(
        llm=llm if llm is not None else llamaindex_standin(),
        similarity_top_k=k,
        text_qa_template=_llamaindex_qa_template(),
        node_postprocessors=[_numbering_postprocessor()],
    )


def _llamaindex_qa_template() -> Any:
    """The generator prompt for LlamaIndex: system and user messages for a chat model (as the LangChain
    chain sends them), one text for a completion model such as the stand-in. LlamaIndex's own
    ``SelectorPromptTemplate`` picks one per LLM, as its default QA prompt does."""
    from llama_index.core import ChatPromptTemplate, PromptTemplate, SelectorPromptTemplate
    from llama_index.core.prompts.utils import is_chat_model

    chat = ChatPromptTemplate.from_messages([
        ("system", GENERATOR_SYSTEM_PROMPT),
        ("user", USER_PROMPT_TEMPLATE.format(context="{context_str}", question="{query_str}")),
    ])
    return SelectorPromptTemplate(default_template=PromptTemplate(LLAMAINDEX_PROMPT),
                                  conditionals=[(is_chat_model, chat)])


def _numbering_postprocessor() -> Any:
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle

    class NumberedContext(BaseNodePostprocessor):
        """Heads each node's LLM text with ``[n] (source: ..., section: ...)``; ids and text unchanged."""

        @classmethod
        def class_name(cls) -> str:
            return "RagauditNumberedContext"

        def _postprocess_nodes(
            self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
        ) -> list[NodeWithScore]:
            out = []
            for n, item in enumerate(nodes, 1):
                template = f"[{n}] ({{metadata_str}})\n{{content}}"
                out.append(NodeWithScore(node=item.node.model_copy(update={"text_template": template}),
                                         score=item.score))
            return out

    return NumberedContext()
