"""The knowledge base of the worker's test apps: the 20 topics of ``tests.support.topics`` and a
deterministic hashing embedding (no model, no download), with no ragaudit import."""

from __future__ import annotations

import math
import re
import zlib

from langchain_core.embeddings import Embeddings

from tests.support.topics import QUESTIONS, answer_for, topic_documents

__all__ = ["DOCUMENTS", "QUESTIONS", "HashEmbeddings", "answer_for", "embed"]

DOCUMENTS = topic_documents()
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(["a", "an", "the", "of", "to", "and", "or", "in", "on", "for", "is", "are", "what", "about",
                   "how", "do", "does", "tell", "me", "my", "i"])


def embed(text: str, dim: int = 512) -> list[float]:
    # tests.conftest.hash_embedding, repeated: importing tests.conftest would import ragaudit into the app.
    """Hashed lower-case words (stopwords dropped), L2-normed: texts sharing words are near."""
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        if word not in _STOP:
            vec[zlib.crc32(word.encode()) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class HashEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return embed(text)
