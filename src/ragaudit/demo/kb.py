"""The demo's knowledge base: a fictional shop's return policy in five documents, and eight questions.

The set is small on purpose: with five documents it is easy to see when an answer goes beyond what
was retrieved. The questions mix direct ones, ones that need two sections, hallucination bait and
two the knowledge base does not cover at all (international orders, items bought on sale).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "DATASET_RESOURCE",
    "DOCUMENTS",
    "QRELS",
    "QUESTIONS",
    "SOURCE",
    "DemoQuestion",
    "KBDocument",
    "dataset_path",
    "dataset_rows",
]

SOURCE = "return_policy.pdf"
"""The ``source`` of every demo document."""


@dataclass(frozen=True, slots=True)
class KBDocument:
    """One document of the knowledge base. ``id`` is ``"kb-" + section``."""

    section: str
    text: str
    source: str = SOURCE

    @property
    def id(self) -> str:
        return f"kb-{self.section}"

    @property
    def metadata(self) -> dict[str, str]:
        """Metadata as stored in the vector store: ``source``, ``section`` and ``id``."""
        return {"source": self.source, "section": self.section, "id": self.id}


QuestionKind = Literal["direct", "two sections", "hallucination bait", "not covered", "tricky"]


@dataclass(frozen=True, slots=True)
class DemoQuestion:
    """One evaluation question with what makes it hard and a reference answer."""

    id: str
    text: str
    kind: QuestionKind
    reference_answer: str


DOCUMENTS: tuple[KBDocument, ...] = (
    KBDocument(
        "refund_eligibility",
        "Any customer can get a full refund within 30 days of purchase. This 30-day refund window "
        "applies to ordinary purchases; electronics have a shorter window of their own. To qualify, "
        "the item must be unused and in its original packaging. The money goes back to the original "
        "payment method within 5–7 business days.",
    ),
    KBDocument(
        "exchanges",
        "Items can be exchanged within 45 days of purchase for an item of equal or lower value. Size "
        "exchanges on clothing are free of charge. If the new item is worth more, the customer pays "
        "the difference in price.",
    ),
    KBDocument(
        "electronics",
        "Electronics such as laptops, phones and tablets have a 15-day return window, because they "
        "lose value fast. Opened software and digital downloads cannot be refunded. A defective "
        "laptop, phone or other electronic item can still be returned within 90 days of purchase "
        "with proof of the defect from an authorised service centre.",
    ),
    KBDocument(
        "shipping",
        "The company pays the return shipping for defective items. For any other return the customer "
        "pays the shipping. Loyalty programme members get free return shipping labels, whatever the "
        "reason for the return.",
    ),
    KBDocument(
        "gifts",
        "Gifts returned with a gift receipt are refunded as store credit only. Without a gift "
        "receipt, the return is valued at the lowest sale price of the last 90 days. Gift cards and "
        "prepaid cards can be neither refunded nor exchanged.",
    ),
)
"""The five documents, in the order they are loaded into the vector store."""

QUESTIONS: tuple[DemoQuestion, ...] = (
    DemoQuestion("q1", "What is the refund window for ordinary purchases?", "direct",
                 "30 days from purchase, for an unused item in its original packaging."),
    DemoQuestion("q2", "Are size exchanges on clothing free?", "direct",
                 "Yes, size exchanges on clothing cost nothing."),
    DemoQuestion("q3", "My laptop turned out to be defective; I bought it 60 days ago. What can I do?",
                 "two sections",
                 "The 15-day electronics window and the 30-day refund window have passed, but a "
                 "defective item can be returned within 90 days with proof of the defect from an "
                 "authorised service centre."),
    DemoQuestion("q4", "Can I get a refund for a digital download I bought yesterday?", "hallucination bait",
                 "No: digital downloads cannot be refunded, even within the return window."),
    DemoQuestion("q5", "What happens if I return a gift without the gift receipt?", "hallucination bait",
                 "The return is valued at the lowest sale price of the last 90 days."),
    DemoQuestion("q6", "Do you refund international orders?", "not covered",
                 "The return policy does not say anything about international orders."),
    DemoQuestion("q7", "Can I return something I bought on sale at a discount?", "not covered",
                 "The return policy does not cover items bought on sale."),
    DemoQuestion("q8", "As a loyalty member, is return shipping free for electronics too?", "tricky",
                 "Yes: loyalty members get free return labels whatever the reason, but the 15-day "
                 "electronics return window still applies."),
)
"""The eight evaluation questions, ids ``q1`` .. ``q8``."""

QRELS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    "q1": MappingProxyType({"kb-refund_eligibility": 1}),
    "q2": MappingProxyType({"kb-exchanges": 1}),
    "q3": MappingProxyType({"kb-electronics": 1, "kb-refund_eligibility": 1}),
    "q4": MappingProxyType({"kb-electronics": 1}),
    "q5": MappingProxyType({"kb-gifts": 1}),
    "q6": MappingProxyType({}),
    "q7": MappingProxyType({}),
    "q8": MappingProxyType({"kb-shipping": 1, "kb-electronics": 1}),
})
"""Relevance ground truth ``{question_id: {doc_id: 1}}``; q6 and q7 have no relevant document."""

DATASET_RESOURCE = "data/demo_dataset.jsonl"
"""The demo as a ``ragaudit eval`` dataset, inside this package (``question``, ``relevant_ids``,
``reference_answer`` per row)."""


def dataset_path() -> Any:
    """The packaged demo dataset (a `importlib.resources` traversable; ``str()`` it for a path)."""
    return resources.files(__package__ or "ragaudit.demo").joinpath(DATASET_RESOURCE)


def dataset_rows() -> list[dict[str, Any]]:
    """The rows of the packaged demo dataset, as dicts."""
    text = dataset_path().read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
