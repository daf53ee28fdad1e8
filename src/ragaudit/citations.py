"""Which retrieved documents an answer cites: explicit markers first, then sentence overlap."""

from __future__ import annotations

import bisect
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ._text import sentence_spans, strip_markers, term_set
from .content import log_exception
from .errors import ConfigurationError
from .records import Citation, RetrievedDoc

__all__ = ["find_citations", "sentence_citations"]

# the "ragaudit" logger itself, whose filter scrubs known secrets from every record
_log = logging.getLogger("ragaudit")

_MAX_ANSWER_CHARS = 100_000
_MAX_DOC_CHARS = 20_000
_MAX_RANGE = 100
_MIN_OVERLAP_TERMS = 3
_MARKER_CHARS = 120
_CACHED_CHARS = 4_000

_BRACKET_RE = re.compile(r"\[([^\[\]\n]{1,200})\]|【([^【】\n]{1,200})】")
_NOTE_RE = re.compile(r"\(\s*(?:sources?|src|refs?|references?|see|cf\.?|from)\s*:\s*([^()\n]{1,200})\)", re.IGNORECASE)
_INLINE_SOURCE_RE = re.compile(r"\b(?:sources?|references?)\s*:\s*([^\n()\[\]]{1,200})", re.IGNORECASE)
# "according to X", "the X section": a name (never a rank: "per 2 weeks" cites nothing).
_NAMED_RE = re.compile(
    r"\b(?:according\s+to|as\s+stated\s+in|see|per)\s+(?:the\s+)?([\w./\\-]{2,100})"
    r"|\bthe\s+[\"'“‘]?([\w./\\-]{2,100})[\"'”’]?\s+(?:section|document|file)\b",
    re.IGNORECASE,
)
# "section X", "document 2": a name or a rank.
_POINTER_RE = re.compile(r"\b(?:section|document|doc|file|source|passage)\s+[\"'“‘]?([\w./\\-]{1,100})", re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s|$)")
_PART_SPLIT_RE = re.compile(r"\s*(?:[,;&]|\band\b)\s*", re.IGNORECASE)
_RANGE_RE = re.compile(r"^(\d{1,6})\s*[-–—]\s*(\d{1,6})$")
_RANK_RE = re.compile(
    r"^(?:(?:doc(?:ument)?|source|src|ref(?:erence)?|passage|context|chunk|citation)\s*[#:_-]?\s*)?(\d{1,6})$",
    re.IGNORECASE,
)
_PREFIX_RE = re.compile(r"^(?:sources?|src|from|see|refs?)\s*:\s*", re.IGNORECASE)
# At least 4 characters, no space, a letter, and a digit or one of . _ - / \ :
_DISTINCTIVE_RE = re.compile(r"(?=[^\s]*[^\W\d_])(?=[^\s]*[._\-/\\:\d])[^\s]{4,}\Z")
_TRAILING = " \t.,;:!?\"'”’)"


def find_citations(
    answer: str | None, documents: Sequence[RetrievedDoc], *, overlap_threshold: float = 0.6
) -> tuple[Citation, ...]:
    """The retrieved documents *answer* cites, each once, sorted by rank.

    Explicit markers are read first, in text order:

    - numbers in brackets: ``[1]``, ``[1, 3]``, ``[1][2]``, ``[2-4]``, ``[doc 2]``, ``[source 3]``,
      ``【1】`` (a number is a rank, even when ids are numbers; ranks nobody has are ignored);
    - a document id in brackets, ``[doc-3]`` or ``[<exact id>]`` (an exact id wins over reading
      ``doc-3`` as rank 3);
    - a source note, ``(source: return_policy.pdf)`` or ``Sources: a.pdf, b.pdf``;
    - a source file name, a document id or a metadata ``section``/``title`` named in the text
      (``according to refund_eligibility``). Names that are plain words (a section called
      ``shipping``) count only next to such a cue, so an answer that merely uses the word does
      not cite them; names with ``.``, ``_``, ``-``, ``/`` or digits count anywhere.

    A name shared by several documents (all chunks of one PDF) cites those of them that the answer
    overlaps (a sentence of the answer draws at least *overlap_threshold* of its content words from
    them); when none does, the top-ranked one.

    Then each sentence that has no resolved marker is attributed by overlap: the document whose
    content words cover at least *overlap_threshold* of the sentence's content words (the best
    one; the higher rank on a tie). Sentences with fewer than three content words are skipped.

    ``Citation.marker`` holds the marker as written, or for an overlap the sentence cut to 120
    characters. Documents are told apart by id: a document found by a marker is not cited again by
    overlap, and two documents with one id are cited once. Items that are not
    [`RetrievedDoc`][ragaudit.RetrievedDoc] are skipped; None, an empty answer, no documents or binary
    text give ``()``. Only the first 100,000 characters of the answer are read. This function
    does not raise, except [`ConfigurationError`][ragaudit.ConfigurationError] for an
    *overlap_threshold* outside (0, 1]. The cost is linear in the answer and the documents' text.
    """
    if (
        isinstance(overlap_threshold, bool)
        or not isinstance(overlap_threshold, (int, float))
        or not 0.0 < overlap_threshold <= 1.0
    ):
        raise ConfigurationError(f"overlap_threshold must be a number in (0, 1], got {overlap_threshold!r}")
    if not isinstance(answer, str) or not answer.strip():
        return ()
    try:
        docs = [d for d in documents if isinstance(d, RetrievedDoc)]
    except TypeError:
        return ()
    if not docs:
        return ()
    try:
        return _Finder(answer[:_MAX_ANSWER_CHARS], docs, float(overlap_threshold)).run()
    except Exception as exc:  # never break the caller's turn over a citation
        _log.debug("ragaudit: find_citations failed: %s", log_exception(exc))
        return ()


def sentence_citations(answer: str | None, documents: Sequence[RetrievedDoc]) -> tuple[tuple[Citation, ...], ...]:
    """The explicit citation markers of *answer*, per sentence: one tuple per sentence of
    [`ragaudit.turn_audit.answer_sentences`][ragaudit.turn_audit.answer_sentences] (the same split), each document once
    per sentence.

    Markers are read as [`find_citations`][ragaudit.citations.find_citations] reads them (``[2]``, ``[doc-id]``, source
    notes, named sources); overlap attributions are not citations the answer made and are left out. A
    marker belongs to the sentence it stands in (``... refunded. [1]`` belongs to that sentence).
    Never raises; ``()`` when there is nothing to read.
    """
    if not isinstance(answer, str) or not answer.strip():
        return ()
    try:
        docs = [d for d in documents if isinstance(d, RetrievedDoc)]
        if not docs:
            return tuple(() for _ in sentence_spans(answer))
        return _Finder(answer[:_MAX_ANSWER_CHARS], docs, 0.6).by_sentence()
    except Exception as exc:  # never break the caller over a citation
        _log.debug("ragaudit: sentence_citations failed: %s", log_exception(exc))
        return ()


@dataclass
class _Hit:
    position: int
    marker: str
    docs: list[RetrievedDoc]
    shared: bool = False


@dataclass
class _Finder:
    answer: str
    docs: list[RetrievedDoc]
    threshold: float
    by_rank: dict[int, RetrievedDoc] = field(default_factory=dict)
    by_id: dict[str, RetrievedDoc] = field(default_factory=dict)
    by_id_folded: dict[str, RetrievedDoc] = field(default_factory=dict)
    by_name: dict[str, list[RetrievedDoc]] = field(default_factory=dict)
    distinctive: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.docs.sort(key=lambda d: d.rank)
        for doc in self.docs:
            self.by_rank.setdefault(doc.rank, doc)
            self.by_id.setdefault(doc.id, doc)
            self.by_id_folded.setdefault(doc.id.lower(), doc)
            for name in _doc_names(doc.id, doc.source, _str_meta(doc, "section"), _str_meta(doc, "title")):
                self._add_name(name, doc)
        self.distinctive = sorted(filter(_is_distinctive, self.by_name), key=len, reverse=True)

    def _add_name(self, name: str, doc: RetrievedDoc) -> None:
        bucket = self.by_name.get(name)
        if bucket is None:
            self.by_name[name] = [doc]
        elif all(d.id != doc.id for d in bucket):
            bucket.append(doc)

    def run(self) -> tuple[Citation, ...]:
        spans = sentence_spans(self.answer)
        starts = [s for s, _ in spans]
        hits = sorted(self._hits(), key=lambda h: h.position)
        support = self._support(spans)
        overlapping = {d.id for sentence in support for d in sentence}

        cited: dict[str, Citation] = {}
        marked: set[int] = set()
        for hit in hits:
            docs = hit.docs
            if len(docs) > 1 and hit.shared:
                docs = [d for d in docs if d.id in overlapping] or docs[:1]
            for doc in docs:
                cited.setdefault(doc.id, Citation(doc.id, doc.rank, _cut(hit.marker), "marker"))
            marked.add(max(0, bisect.bisect_right(starts, hit.position) - 1))
        for index, (start, end) in enumerate(spans):
            if index in marked or not support[index]:
                continue
            best = support[index][0]
            if best.id not in cited:
                sentence = " ".join(self.answer[start:end].split())
                cited[best.id] = Citation(best.id, best.rank, _cut(sentence), "overlap")
        order: dict[str, int] = {}
        for index, doc in enumerate(self.docs):
            order.setdefault(doc.id, index)
        return tuple(sorted(cited.values(), key=lambda c: (c.rank, order[c.doc_id])))

    def by_sentence(self) -> tuple[tuple[Citation, ...], ...]:
        spans = sentence_spans(self.answer)
        starts = [s for s, _ in spans]
        hits = sorted(self._hits(), key=lambda h: h.position)
        overlapping: set[str] = set()
        if any(len(h.docs) > 1 and h.shared for h in hits):
            overlapping = {d.id for sentence in self._support(spans) for d in sentence}
        cited: list[dict[str, Citation]] = [{} for _ in spans]
        for hit in hits:
            docs = hit.docs
            if len(docs) > 1 and hit.shared:
                docs = [d for d in docs if d.id in overlapping] or docs[:1]
            index = max(0, bisect.bisect_right(starts, hit.position) - 1)
            if index < len(cited):
                for doc in docs:
                    cited[index].setdefault(doc.id, Citation(doc.id, doc.rank, _cut(hit.marker), "marker"))
        return tuple(tuple(sorted(c.values(), key=lambda x: x.rank)) for c in cited)

    def _support(self, spans: Sequence[tuple[int, int]]) -> list[list[RetrievedDoc]]:
        """Per answer sentence, the documents covering >= threshold of it, best first."""
        # Each sentence's terms against each document's set (the intersection runs in C, on the sentence's few
        # terms): no index of every document term is built per call.
        doc_terms: list[frozenset[str]] | None = None
        result: list[list[RetrievedDoc]] = []
        for start, end in spans:
            terms = term_set(strip_markers(self.answer[start:end]))
            if len(terms) < _MIN_OVERLAP_TERMS:
                result.append([])
                continue
            if doc_terms is None:
                doc_terms = [_doc_terms(doc.content[:_MAX_DOC_CHARS]) for doc in self.docs]
            need = math.ceil(self.threshold * len(terms) - 1e-9)
            counts = [len(terms & these) for these in doc_terms]
            good = sorted((i for i, n in enumerate(counts) if n and n >= need), key=lambda i: (-counts[i], i))
            result.append([self.docs[i] for i in good])
        return result

    def _hits(self) -> Iterable[_Hit]:
        text = self.answer
        for match in _BRACKET_RE.finditer(text):
            content = match.group(1) if match.group(1) is not None else match.group(2)
            yield from self._resolve(content, match.start(), match.group())
        for match in _NOTE_RE.finditer(text):
            yield from self._resolve(match.group(1), match.start(), match.group())
        for match in _INLINE_SOURCE_RE.finditer(text):
            content = _SENTENCE_END_RE.split(match.group(1), maxsplit=1)[0]
            marker = text[match.start() : match.start(1) + len(content)].strip(_TRAILING)
            yield from self._resolve(content, match.start(), marker, loose=True)
        for match in _NAMED_RE.finditer(text):
            name = next(g for g in match.groups() if g is not None)
            hit = self._name_hit(name.rstrip(_TRAILING), match.start(), match.group().strip(_TRAILING))
            if hit is not None:
                yield hit
        for match in _POINTER_RE.finditer(text):
            marker = match.group().strip(_TRAILING)
            hit = self._lookup(match.group(1).rstrip(_TRAILING), match.start(), marker)
            if hit is not None:
                yield hit
        folded = text.lower()
        if len(folded) == len(text):  # offsets only line up when lowering kept the length
            yield from self._mentions(folded)

    def _mentions(self, folded: str) -> Iterable[_Hit]:
        taken: list[tuple[int, int]] = []
        for name in self.distinctive:
            start = folded.find(name)
            while start != -1:
                end = start + len(name)
                if _bounded(folded, start, end) and not any(s <= start < e for s, e in taken):
                    taken.append((start, end))
                    yield _Hit(start, self.answer[start:end], self.by_name[name], shared=True)
                start = folded.find(name, start + 1)

    def _resolve(self, content: str, position: int, marker: str, *, loose: bool = False) -> Iterable[_Hit]:
        content = content.strip()
        whole = self._lookup(content.rstrip(_TRAILING), position, marker)
        if whole is not None:
            yield whole
            return
        for part in _PART_SPLIT_RE.split(content):
            part = _PREFIX_RE.sub("", part.strip()).strip(_TRAILING)
            if not part:
                continue
            hit = self._lookup(part, position, marker)
            if hit is not None:
                yield hit
            elif loose:
                return  # "Sources: a.pdf, and then prose": stop at the first thing that is not a name

    def _lookup(self, part: str, position: int, marker: str) -> _Hit | None:
        if not part.isdigit():
            doc = self.by_id.get(part) or self.by_id_folded.get(part.lower())
            if doc is not None:
                return _Hit(position, marker, [doc])
        found = _RANGE_RE.match(part)
        if found:
            low, high = int(found.group(1)), int(found.group(2))
            ranks = range(low, min(high, low + _MAX_RANGE) + 1)
            docs = [self.by_rank[r] for r in ranks if r in self.by_rank]
            return _Hit(position, marker, docs) if docs else None
        found = _RANK_RE.match(part)
        if found:
            doc = self.by_rank.get(int(found.group(1)))
            return _Hit(position, marker, [doc]) if doc is not None else None
        return self._name_hit(part, position, marker)

    def _name_hit(self, name: str, position: int, marker: str) -> _Hit | None:
        folded = name.lower()
        docs = self.by_name.get(folded) or self.by_name.get(_basename(folded))
        if docs is None:
            doc = self.by_id_folded.get(folded)
            return _Hit(position, marker, [doc]) if doc is not None else None
        return _Hit(position, marker, docs, shared=True)


def _str_meta(doc: RetrievedDoc, key: str) -> str | None:
    value = doc.metadata.get(key)
    return value if isinstance(value, str) else None


@lru_cache(maxsize=2048)
def _doc_names(doc_id: str, source: str | None, section: str | None, title: str | None) -> tuple[str, ...]:
    """The names a document goes by, lower-cased, in the order they are added: its id when distinctive,
    its source (the path, its base name, the stem), its metadata ``section`` and ``title``. Cached: the same
    retrieved chunks come back turn after turn."""
    names: list[str] = []
    if source:
        source = source.strip()
        names.append(source)
        base = _basename(source)
        names.append(base)
        stem, dot, ext = base.rpartition(".")
        if dot and stem and ext.isalnum() and len(ext) <= 5:
            names.append(stem)
    for value in (section, title):
        if value is not None and value.strip():
            names.append(value.strip())
            if "_" in value:
                names.append(value.strip().replace("_", " "))
    kept = [n.lower() for n in names if n and len(n) <= 200]
    return (doc_id.lower(), *kept) if _is_distinctive(doc_id) else tuple(kept)


def _doc_terms(content: str) -> frozenset[str]:
    return _cached_terms(content) if len(content) <= _CACHED_CHARS else term_set(content)


# The same retrieved chunks come back turn after turn.
_cached_terms = lru_cache(maxsize=2048)(term_set)


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path.rstrip("/\\"))[-1]


def _is_distinctive(name: str) -> bool:
    """A name unlikely to occur as an ordinary word: ``return_policy.pdf``, ``doc-3``, ``faq2``."""
    return _DISTINCTIVE_RE.match(name) is not None


def _bounded(text: str, start: int, end: int) -> bool:
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-./\\"):
        return False
    if end < len(text):
        after = text[end]
        if after.isalnum() or after in "_-/\\":
            return False
        if after == "." and end + 1 < len(text) and text[end + 1].isalnum():
            return False
    return True


def _cut(text: str) -> str:
    return text if len(text) <= _MARKER_CHARS else text[: _MARKER_CHARS - 1].rstrip() + "…"
