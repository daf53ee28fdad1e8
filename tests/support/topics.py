"""The 20-topic knowledge base the LangChain and LlamaIndex integration tests share.

Each topic word has two documents (``<word>-rule`` and ``<word>-desk``) and one question, and the
word occurs only in its own topic's documents: every question retrieves its own two documents, so a
turn that got another question's documents is seen at once. The stand-in models answer with the
first sentence of their context (:func:`answer_for`), so every answer is tied to its documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["QUESTIONS", "WORDS", "answer_for", "check_own_documents", "topic_documents"]

WORDS = [
    "warranty", "shipping", "returns", "giftcards", "loyalty", "pricematch", "hours", "repairs",
    "students", "rentals", "tradeins", "installation", "recycling", "layaway", "subscriptions",
    "giftwrap", "bulkorders", "lockers", "privacy", "accessibility",
]
QUESTIONS = [f"What about {w}?" for w in WORDS]


def topic_documents() -> list[tuple[str, str, dict[str, Any]]]:
    """``(id, text, metadata)`` of every document, two per topic word, metadata ``source`` and ``section``."""
    out = []
    for i, w in enumerate(WORDS):
        out.append((f"{w}-rule", f"{w.capitalize()} policy: {w} requests are answered within {i + 2} days. "
                    f"Every {w} case gets a ticket.", {"source": f"{w}.md", "section": "rule"}))
        out.append((f"{w}-desk", f"For {w} questions, call extension {100 + i} or visit the {w} desk.",
                    {"source": f"{w}.md", "section": "desk"}))
    return out


def answer_for(text: str) -> str:
    """What the stand-in models answer when *text* is the first document of their context."""
    return text.split(". ", 1)[0].rstrip(".") + "."


def check_own_documents(expected: Mapping[str, Sequence[str]]) -> None:
    """Assert that every question retrieved a document set of its own, led by one of its topic's
    documents (*expected*: question -> retrieved ids), or a swapped pairing could go unseen."""
    assert len({tuple(sorted(v)) for v in expected.values()}) == len(QUESTIONS)
    assert all(ids[0].split("-")[0] in q for q, ids in expected.items())
