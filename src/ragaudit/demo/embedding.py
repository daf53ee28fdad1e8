"""An offline, deterministic text embedding for the demo and for tests: no model, no download.

Each text becomes a hashed bag of its stemmed content words plus the character trigrams of those
words, folded into ``dim`` dimensions (signed feature hashing) and L2-normalised. Texts that share
words land close together; paraphrases with no word in common do not — it is a stand-in for a
real embedding model, good enough to retrieve from a small knowledge base.

Adapters for the frameworks are built on first use, so importing this module needs none of them:
`chroma_embedding_function` (a ``chromadb`` ``EmbeddingFunction``),
`langchain_embeddings` (a ``langchain_core`` ``Embeddings``) and
`llamaindex_embedding` (a ``llama_index`` ``BaseEmbedding``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .._text import STOPWORDS, stem, tokens
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = [
    "CHROMA_NAME",
    "DEFAULT_DIM",
    "HashingEmbedder",
    "chroma_embedding_function",
    "langchain_embeddings",
    "llamaindex_embedding",
]

DEFAULT_DIM = 256
"""Dimensions of the demo embedding."""

CHROMA_NAME = "ragaudit_hashing"
"""The name the Chroma adapter registers under (stored in a collection's configuration)."""

_WORD_WEIGHT = 1.0
_NGRAM_WEIGHT = 0.5  # all trigrams of one word together weigh half the word itself


def _features(text: str) -> dict[str, float]:
    words = [t for t in tokens(text) if t not in STOPWORDS] or tokens(text)
    counts: dict[str, int] = {}
    for word in words:
        key = stem(word)
        counts[key] = counts.get(key, 0) + 1
    features: dict[str, float] = {}
    for key, count in counts.items():
        weight = 1.0 + math.log(count)
        features["w:" + key] = features.get("w:" + key, 0.0) + _WORD_WEIGHT * weight
        padded = f"#{key}#"
        grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
        share = _NGRAM_WEIGHT * weight / len(grams)
        for gram in grams:
            features["g:" + gram] = features.get("g:" + gram, 0.0) + share
    return features


class HashingEmbedder:
    """Deterministic hashed bag-of-words embedding; the same text gives the same vector in every process.

    >>> vec = HashingEmbedder().embed("Are size exchanges on clothing free?")
    >>> len(vec)
    256
    """

    __slots__ = ("dim",)

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise ConfigurationError(f"embedding dim must be an int >= 8, got {dim!r}")
        self.dim = dim

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"

    def embed(self, text: str) -> list[float]:
        """The unit-length vector of *text*; a text with no words maps to a fixed unit vector."""
        if not isinstance(text, str):
            raise ConfigurationError(f"can only embed text, got {type(text).__name__}")
        return list(_embed(text, self.dim))

    def embed_many(self, texts: Iterable[str]) -> list[list[float]]:
        """`embed` for each of *texts*, in order."""
        return [self.embed(text) for text in texts]


@lru_cache(maxsize=4096)
def _embed(text: str, dim: int) -> tuple[float, ...]:
    vector = [0.0] * dim
    for feature, weight in _features(text).items():
        digest = zlib.crc32(feature.encode("utf-8"))
        sign = 1.0 if digest & 0x80000000 else -1.0
        vector[digest % dim] += sign * weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        vector[0] = 1.0
        return tuple(vector)
    return tuple(v / norm for v in vector)


@lru_cache(maxsize=1)
def _chroma_class() -> type:
    from chromadb.api.types import Documents, EmbeddingFunction
    from chromadb.api.types import Embeddings as ChromaEmbeddings
    from chromadb.utils.embedding_functions import register_embedding_function

    class HashingEmbeddingFunction(EmbeddingFunction[Documents]):
        """Chroma embedding function over `HashingEmbedder` (cosine space by default)."""

        def __init__(self, dim: int = DEFAULT_DIM) -> None:
            self._embedder = HashingEmbedder(dim)

        def __call__(self, input: Documents) -> ChromaEmbeddings:
            import numpy as np

            return [np.asarray(v, dtype=np.float32) for v in self._embedder.embed_many(input)]

        @staticmethod
        def name() -> str:
            return CHROMA_NAME

        def default_space(self) -> Any:
            return "cosine"

        def get_config(self) -> dict[str, Any]:
            return {"dim": self._embedder.dim}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> HashingEmbeddingFunction:
            return HashingEmbeddingFunction(int(config.get("dim", DEFAULT_DIM)))

        @staticmethod
        def validate_config(config: dict[str, Any]) -> None:
            dim = config.get("dim", DEFAULT_DIM)
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
                raise ValueError(f"{CHROMA_NAME}: dim must be an int >= 8, got {dim!r}")

    register_embedding_function(HashingEmbeddingFunction)
    return HashingEmbeddingFunction


@lru_cache(maxsize=1)
def _langchain_class() -> type:
    from langchain_core.embeddings import Embeddings

    class HashingEmbeddings(Embeddings):
        """LangChain ``Embeddings`` over `HashingEmbedder`."""

        def __init__(self, dim: int = DEFAULT_DIM) -> None:
            self._embedder = HashingEmbedder(dim)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return self._embedder.embed_many(texts)

        def embed_query(self, text: str) -> list[float]:
            return self._embedder.embed(text)

    return HashingEmbeddings


@lru_cache(maxsize=1)
def _llamaindex_class() -> type:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from pydantic import Field

    class HashingEmbedding(BaseEmbedding):
        """LlamaIndex ``BaseEmbedding`` over `HashingEmbedder`."""

        dim: int = Field(default=DEFAULT_DIM, description="embedding dimensions")

        @classmethod
        def class_name(cls) -> str:
            return "RagauditHashingEmbedding"

        def _vector(self, text: str) -> list[float]:
            return HashingEmbedder(self.dim).embed(text)

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._vector(text)

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [self._vector(t) for t in texts]

    return HashingEmbedding


def chroma_embedding_function(dim: int = DEFAULT_DIM) -> Any:
    """A ``chromadb`` embedding function (registered as ``ragaudit_hashing``, cosine space).

    Needs ``chromadb``.
    """
    return _chroma_class()(dim)


def langchain_embeddings(dim: int = DEFAULT_DIM) -> Embeddings:
    """A LangChain ``Embeddings`` (e.g. for ``langchain_chroma.Chroma``). Needs ``langchain-core``."""
    embeddings: Embeddings = _langchain_class()(dim)
    return embeddings


def llamaindex_embedding(dim: int = DEFAULT_DIM) -> BaseEmbedding:
    """A LlamaIndex ``BaseEmbedding`` (e.g. ``Settings.embed_model``). Needs ``llama-index-core``."""
    HashingEmbedder(dim)  # validate before pydantic does, for a ragaudit error
    embedding: BaseEmbedding = _llamaindex_class()(dim=dim, model_name=CHROMA_NAME)
    return embedding

