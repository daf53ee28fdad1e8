"""A structured answer (``with_structured_output(CitedAnswer)``): its text and the sources it cites.

The answer is the text field: *answer_field* when given, else ``answer``, else the object's one
string field. The citations are the values of its ``citations`` / ``sources`` / ``source_ids`` /
``cited_ids`` / ``citation_ids`` / ``quotes`` field: integers (indices of the documents as the
prompt numbered them: from 0 when it numbered them so, else ranks), document ids, source names, or
objects holding one of those under ``source_id`` / ``doc_id`` / ``id`` / ``source``. Each becomes a
[`Citation`][ragaudit.Citation] with ``method="structured"``, checked like a marker.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from ..records import Citation, RetrievedDoc

__all__ = ["CITATION_FIELDS", "structured_answer", "structured_citations"]

CITATION_FIELDS: tuple[str, ...] = ("citations", "sources", "source_ids", "cited_ids", "citation_ids", "quotes")
"""The fields of a structured answer read as its citations, first found."""
_ITEM_KEYS = ("source_id", "doc_id", "id", "source", "index")


def structured_answer(data: Mapping[str, object], answer_field: str | None = None) -> str | None:
    """The answer text of *data* (see the module docstring), or None when it has none."""
    if answer_field is not None:
        value = data.get(answer_field)
        return value if isinstance(value, str) else None
    value = data.get("answer")
    if isinstance(value, str):
        return value
    strings = [v for v in data.values() if isinstance(v, str)]
    return strings[0] if len(strings) == 1 else None


def _values(data: Mapping[str, object]) -> list[object]:
    for key in CITATION_FIELDS:
        value = data.get(key)
        if isinstance(value, (list, tuple)):
            return list(value)
        if value is not None:
            return [value]
    return []


def _item(value: object) -> object:
    if isinstance(value, Mapping):
        return next((value[k] for k in _ITEM_KEYS if value.get(k) is not None), None)
    return value


def _by_name(documents: Sequence[RetrievedDoc]) -> dict[str, RetrievedDoc]:
    names: dict[str, RetrievedDoc] = {}
    for doc in documents:
        names.setdefault(doc.id, doc)
        if doc.source:
            names.setdefault(doc.source, doc)
            names.setdefault(os.path.basename(doc.source), doc)
    return names


def _resolve(value: object, documents: Sequence[RetrievedDoc], names: Mapping[str, RetrievedDoc],
             zero_based: bool) -> RetrievedDoc | None:
    if isinstance(value, str) and value.strip().isdigit() and value.strip() not in names:
        value = int(value.strip())
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        index = value if zero_based else value - 1
        return documents[index] if 0 <= index < len(documents) else None
    if isinstance(value, str):
        return names.get(value.strip())
    return None


def structured_citations(data: Mapping[str, object], documents: Sequence[RetrievedDoc], *,
                         zero_based: bool) -> tuple[Citation, ...]:
    """The citations of *data* among *documents* (ranked 1..n), each document once, in the order cited.

    *zero_based*: integers are 0-based indices (the prompt numbered the documents from 0); they are
    also read so when one of them is 0.
    """
    items = [_item(v) for v in _values(data)]
    ints: Iterable[object] = (v for v in items if isinstance(v, int) and not isinstance(v, bool))
    zero_based = zero_based or 0 in ints
    names = _by_name(documents)
    out: list[Citation] = []
    seen: set[str] = set()
    for value in items:
        doc = _resolve(value, documents, names, zero_based)
        if doc is not None and doc.id not in seen:
            seen.add(doc.id)
            out.append(Citation(doc_id=doc.id, rank=doc.rank, marker=str(value)[:120], method="structured"))
    return tuple(out)
