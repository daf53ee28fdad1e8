"""What the model saw: which observed documents reached the model call that produced the answer, and
how much of each.

The input of that call (its messages and prompt) is the reference. An observed document is evidence
when its text is in the reference, whole or cut: an app or a middleware that cut it to fit (at any
character) passed the model its first part, and that part is the evidence (`Match.chars`;
the document is marked ``truncated``). Documents retrieved and then dropped are not evidence. Context in
the reference that no observed document explains becomes evidence of its own
(`prompt_passages`), with ids from its text and ``source="prompt"``, unless it is a document an
earlier turn observed (`DocumentMemory`: a follow-up answered from the conversation keeps the
documents' ids).

Matching compares words, not characters: both sides are read as their runs of letters and digits,
lower-cased, so whitespace, markup (``**``, ``#``, bullets, quotes) and the escapes of a document quoted
inside a tool message (JSON or a Python repr: ``\\n``, ``\\u00e9``) do not matter. The reference is
indexed once by the `KEY_WORDS` words at each position, and each document is looked up by its
first words and extended word by word at the positions found (at most `MAX_CANDIDATES` of them),
so the cost is linear in the reference and the documents (no pairwise comparison of documents and
passages).
"""

from __future__ import annotations

import bisect
import itertools
import re
import sys
from collections import OrderedDict
from collections.abc import Iterable, Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from .. import _fork
from ..records import Message, RetrievedDoc, stable_doc_id

__all__ = [
    "KEY_WORDS",
    "MAX_CANDIDATES",
    "MAX_REFERENCE_CHARS",
    "MIN_MESSAGE_CONTEXT_WORDS",
    "PROMPT_SOURCE",
    "DocumentMemory",
    "Match",
    "Reference",
    "normalize",
    "numbers_from_zero",
    "prompt_passages",
]

PROMPT_SOURCE = "prompt"
"""The ``source`` of evidence taken from the prompt itself."""
KEY_WORDS = 4
"""Documents are looked up in the reference by this many of their first words; a document cut shorter
than this is not evidence (what is left says too little to judge on)."""
MAX_CANDIDATES = 64
"""At most this many places in the reference are tried for one document (the longest match wins)."""
MAX_REFERENCE_CHARS = 4_000_000
"""The reference is searched up to here (far beyond any model's context window)."""

_CACHED_CHARS = 4_000  # documents up to this long keep their words in a cache (see _content_words)
_MIN_PASSAGE_WORDS = 4  # shorter leftovers ("Answer:", a date, a name) are not context
MIN_MESSAGE_CONTEXT_WORDS = 40
"""System and tool messages are taken as context (when no observed document reached the call) only
when they hold at least this many words: a short system prompt is an instruction, and a chat with
one is not a RAG turn to judge."""
_QUESTION_KEYS = frozenset({"question", "input", "query", "q", "user_input", "user_question"})
_HISTORY_KEYS = frozenset({"chat_history", "history", "messages", "conversation", "agent_scratchpad"})
_JOIN_RE = re.compile(r"\n\s*\n|\n-{3,}\n|\n={3,}\n")
_WORD_RE = re.compile(r"[^\W_]+")
# The escapes of a text quoted in JSON or a Python repr (once or more: a JSON string inside a JSON
# string): \n glued to the next word would hide it, \u00e9 would split it.
_ESCAPE_RE = re.compile(r"\\+(?:u([0-9a-fA-F]{4})|[nrt])")


def normalize(text: str) -> str:
    """*text* with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code, 16)) if code else " "


def _words(text: str) -> list[str]:
    # interned: the same word on both sides is one object, so comparing runs of words is by identity
    return list(map(sys.intern, _WORD_RE.findall(text.lower())))


def _read_words(content: str) -> list[str]:
    return list(map(sys.intern, map(str.lower, _WORD_RE.findall(content))))


@lru_cache(maxsize=2048)
def _content_words(content: str) -> tuple[str, ...]:
    # The same retrieved chunks come back turn after turn, and each is matched against every reference.
    return tuple(_read_words(content))


def _read_key(content: str) -> str:
    return " ".join(m.group() for m in itertools.islice(_WORD_RE.finditer(content.lower()), KEY_WORDS))


_cached_key = lru_cache(maxsize=2048)(_read_key)


def _doc_key(content: str) -> str:
    """``_key(_words(content))``, without reading more than the first `KEY_WORDS` words (cached, as
    `_content_words`)."""
    return _cached_key(content) if len(content) <= _CACHED_CHARS else _read_key(content)


def _key(words: Sequence[str], at: int = 0) -> str:
    return " ".join(words[at:at + KEY_WORDS])


@dataclass(frozen=True, slots=True)
class Match:
    """Where a document reached the reference: at word ``at``, ``words`` whole words of it (and
    ``chars`` characters of its content: all of it when it reached whole)."""

    at: int
    words: int
    chars: int
    whole: bool


class _Words:
    """A document's words (interned, as the reference's are), and where each is in its content."""

    __slots__ = ("content", "words")

    def __init__(self, content: str) -> None:
        self.content = content
        self.words = list(_content_words(content)) if len(content) <= _CACHED_CHARS else _read_words(content)

    def span(self, n: int) -> tuple[int, int]:
        """Where word *n* starts and ends in the content (read once, for a document that reached in part)."""
        found = next(itertools.islice(_WORD_RE.finditer(self.content), n, None))
        return found.start(), found.end()


class Reference:
    """The text of one model call's input, as words, indexed for `match`. The model's own earlier
    replies in it (assistant messages) count for documents that reached it whole only: a part of a
    document there is an earlier answer quoting it, not the document."""

    __slots__ = ("_first", "_heads", "_keys", "_last", "_replies", "text", "words")

    def __init__(self, messages: Sequence[Message], prompt: str | None) -> None:
        parts = [(role, text) for role, text in messages if text]
        if prompt and not parts:
            parts.append(("user", prompt))
        self.text = normalize("\n".join(text for _, text in parts))[:MAX_REFERENCE_CHARS]
        words: list[str] = []
        self._replies: list[tuple[int, int]] = []  # the word ranges of assistant messages, in order
        budget = MAX_REFERENCE_CHARS
        for role, text in parts:
            found = _words(_ESCAPE_RE.sub(_unescape, text[:budget]))
            budget -= len(text) + 1
            if role == "assistant" and found:
                self._replies.append((len(words), len(words) + len(found)))
            words.extend(found)
            if budget <= 0:
                break
        # The key at each position (built in C: no Python step per word), and where each key is first.
        keys = list(map(" ".join, zip(*(words[i:] for i in range(KEY_WORDS)), strict=False)))
        keys.extend(_key(words, at) for at in range(len(keys), len(words)))  # the last, shorter keys
        self.words = words
        self._keys = keys
        self._first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
        self._last = dict(zip(keys, range(len(keys)), strict=True))
        self._heads: dict[str, list[int]] | None = None

    def __bool__(self) -> bool:
        return bool(self.text)

    def word_keys(self) -> KeysView[str]:
        """The word keys of the reference (the `KEY_WORDS` words at each position), each once."""
        return self._first.keys()

    def _positions(self, key: str) -> Iterator[int]:
        """Where *key* is in the reference, in order, the first `MAX_CANDIDATES` of them (a key that recurs:
        the next place found by a scan of the keys in C, from the last, up to its last place)."""
        at = self._first.get(key)
        if at is None:
            return
        last, keys = self._last[key], self._keys
        for _ in range(MAX_CANDIDATES):
            yield at
            if at == last:
                return
            at = keys.index(key, at + 1, last + 1)

    def match(self, content: str) -> Match | None:
        """Where and how much of *content* reached the model (see the module docstring), or None."""
        doc = _Words(content)
        words = doc.words
        if not words:
            return None
        if len(words) < KEY_WORDS:  # too short for the index: whole, as a run of the reference's words
            return self._short(words, doc, len(content))
        best: tuple[int, int, int] | None = None  # (words agreeing, letters of the next one, at)
        budget = 4 * len(words)  # words compared: linear in the document, however often its opening recurs
        for at in self._positions(_key(words)):
            found = self._extend(words, at)
            budget -= found[0]
            if found[0] == len(words):
                return Match(at, found[0], len(content), True)
            if not self._in_reply(at) and (best is None or found > best):
                best = found
            if budget < 0:
                break
        if best is None:
            return None
        n, letters, at = best
        # where the part ends in the content, read once: after the last whole word, or in the next one
        chars = doc.span(n)[0] + letters if letters else doc.span(n - 1)[1]
        return Match(at, n, chars, False)

    def _in_reply(self, at: int) -> bool:
        i = bisect.bisect_right(self._replies, (at, len(self.words) + 1)) - 1
        return i >= 0 and self._replies[i][0] <= at < self._replies[i][1]

    def _extend(self, words: list[str], at: int) -> tuple[int, int, int]:
        """``(words agreeing, letters of the next word that did, at)`` of a document at *at*."""
        ref = self.words
        n = _agreeing(words, ref, at, KEY_WORDS, min(len(words), len(ref) - at))
        if n < len(words) and at + n < len(ref) and words[n].startswith(ref[at + n]):
            return n, len(ref[at + n]), at  # cut inside a word: its first letters reached the model too
        return n, 0, at

    def _short(self, words: list[str], doc: _Words, length: int) -> Match | None:
        # the index keys hold KEY_WORDS words: a shorter document is looked up by its first word
        if self._heads is None:
            heads: dict[str, list[int]] = {}
            for at, word in enumerate(self.words):
                heads.setdefault(word, []).append(at)
            self._heads = heads
        ref = self.words
        for at in (self._heads.get(words[0]) or ())[:MAX_CANDIDATES]:
            if ref[at:at + len(words)] == words:
                return Match(at, len(words), length, True)
        return None

    def contains(self, content: str) -> bool:
        """Whether *content* reached the model whole."""
        found = self.match(content)
        return found is not None and found.whole


def _agreeing(words: list[str], ref: list[str], at: int, n: int, limit: int) -> int:
    """How many first words of *words* equal those of *ref* from *at* (the first *n* do), up to *limit*:
    compared a slice at a time (doubling, then halving at a difference), so a long document costs list
    comparisons, not a Python step per word."""
    step = 8
    while n < limit:
        end = min(limit, n + step)
        if words[n:end] == ref[at + n:at + end]:
            n, step = end, step * 2
            continue
        low, high = n, end  # words[:low] agree; the first difference is in [low, high)
        while high - low > 1:
            mid = (low + high) // 2
            if words[low:mid] == ref[at + low:at + mid]:
                low = mid
            else:
                high = mid
        return low
    return n


def reached(references: Sequence[Reference], documents: Iterable[RetrievedDoc]) -> list[RetrievedDoc]:
    """The *documents* that reached any of *references*, in order, each as the part of it that reached
    (its first characters, ``truncated=True``) when only a part did. A part that starts where another
    document reached whole is that document's text, not this one's: it is left out."""
    found: list[tuple[RetrievedDoc, int, Match]] = []
    for doc in documents:
        best: tuple[int, Match] | None = None
        for i, reference in enumerate(references):
            match = reference.match(doc.content)
            if match is not None and (best is None or match.chars > best[1].chars):
                best = (i, match)
        if best is not None:
            found.append((doc, *best))
    # (reference, first word, end) of each document that reached whole
    covered = [(ref, match.at, match.at + match.words) for _, ref, match in found if match.whole]
    out = []
    for doc, ref, match in found:
        if match.whole:
            out.append(doc)
        elif not any(r == ref and start <= match.at < end for r, start, end in covered):
            out.append(replace(doc, content=doc.content[:match.chars], truncated=True))
    return out


class DocumentMemory:
    """The documents a source's recent turns observed, so that a later turn whose model input quotes
    them (a follow-up answered from the conversation a checkpointer or a memory keeps) is judged on them
    with their ids, not on passages of its prompt. Bounded to the *max_documents* most recently observed
    (documents of fewer than `KEY_WORDS` words are not kept); thread-safe."""

    __slots__ = ("_docs", "_keys", "_lock", "max_documents")

    def __init__(self, max_documents: int = 4096) -> None:
        self.max_documents = max_documents
        self._docs: OrderedDict[str, tuple[str, RetrievedDoc]] = OrderedDict()  # id -> (key, doc)
        self._keys: dict[str, dict[str, None]] = {}  # key -> the ids of the documents that start so
        self._lock = _fork.lock()

    def __len__(self) -> int:
        return len(self._docs)

    def remember(self, documents: Iterable[RetrievedDoc]) -> None:
        """Keep *documents* (whole ones: a part or a passage of a prompt is not a document)."""
        keyed = [(_doc_key(doc.content), doc) for doc in documents
                 if not doc.truncated and doc.source != PROMPT_SOURCE]
        with self._lock:
            for key, doc in keyed:
                if len(key.split(" ")) < KEY_WORDS:
                    continue
                self._forget(doc.id)
                self._docs[doc.id] = (key, doc)
                self._keys.setdefault(key, {})[doc.id] = None
            while len(self._docs) > self.max_documents:
                self._forget(next(iter(self._docs)))

    def _forget(self, doc_id: str) -> None:
        old = self._docs.pop(doc_id, None)
        if old is not None:
            ids = self._keys[old[0]]
            ids.pop(doc_id, None)
            if not ids:
                del self._keys[old[0]]

    def candidates(self, reference: Reference) -> list[RetrievedDoc]:
        """The remembered documents that start somewhere in *reference* (by their first words), in the
        order they were observed."""
        with self._lock:
            keys, found = self._keys, reference.word_keys()
            small, large = (keys.keys(), found) if len(keys) < len(found) else (found, keys.keys())
            ids = {doc_id for key in small if key in large for doc_id in keys[key]}
            return [doc for doc_id, (_, doc) in self._docs.items() if doc_id in ids] if ids else []


def _holds_any(value: str, explained: Iterable[str]) -> bool:
    """Whether *value* holds the text of an explained document."""
    return any(text and text in value for text in explained)


def _passages(text: str) -> list[str]:
    """The passages of *text*, split where the app's join is visible (blank lines, rules)."""
    out = []
    for part in _JOIN_RE.split(text):
        passage = part.strip()
        if len(passage.split()) >= _MIN_PASSAGE_WORDS:
            out.append(passage)
    return out


def _prompt_doc(text: str) -> RetrievedDoc:
    return RetrievedDoc(id=stable_doc_id(text, PROMPT_SOURCE), content=text, source=PROMPT_SOURCE)


def prompt_passages(
    messages: Sequence[Message],
    template_variables: Mapping[str, str],
    *,
    question: str,
    explained: Sequence[RetrievedDoc],
) -> tuple[RetrievedDoc, ...]:
    """The context in a model call's input that no observed document explains, as evidence.

    From the prompt template's variables when there are any (other than the question and the
    history) and none of the *explained* documents' text is in them, split into the passages the
    app joined; else, when no observed document reached the call, the text of its tool messages (an
    agent's context arrives through its tools: its system message is then its instructions, never
    evidence), or of its system messages when it has no tool message (a prompt that carries the
    context), at least `MIN_MESSAGE_CONTEXT_WORDS` words of it, split the same way. Each passage:
    id from its text, ``source="prompt"``.
    """
    asked = normalize(question)
    known = [doc.content.strip() for doc in explained]
    texts: list[str] = []
    variables = [value for key, value in template_variables.items()
                 if key not in _QUESTION_KEYS and key not in _HISTORY_KEYS and normalize(value) != asked]
    if variables:
        for value in variables:
            # A value that holds observed documents is explained: what is left of it is the app's
            # formatting around them (headers, numbers, separators), not context of its own.
            if not _holds_any(value, known):
                texts.extend(_passages(value))
    elif not explained:
        roles = ("tool",) if any(role == "tool" for role, _ in messages) else ("system",)
        context = [text for role, text in messages if role in roles]
        if sum(len(text.split()) for text in context) >= MIN_MESSAGE_CONTEXT_WORDS:
            for text in context:
                texts.extend(_passages(text))
    seen: set[str] = set()
    docs = []
    for text in texts:
        if text not in seen and normalize(text) != asked:
            seen.add(text)
            docs.append(_prompt_doc(text))
    return tuple(docs)


_ZERO_REACH = len("document") + 12 + 1  # the longest label, what may stand between it and the 0, the boundary
_ZERO_LABEL_RE = re.compile(r"\b(?:source|doc(?:ument)?|passage|context|chunk|id)\b[^\n\d]{0,12}\b0\b|\[0\]",
                            re.IGNORECASE)


def numbers_from_zero(text: str) -> bool:
    """Whether the documents in *text* (a model's input) are numbered from 0 (``Source ID: 0``,
    ``[0]``), as ``enumerate()`` numbers them: then a structured answer's integer citations are
    0-based indices."""
    # A match ends at a "0" (or "0]") and starts at most _ZERO_REACH characters before it: the pattern is tried
    # around each "0" only, from its real position (so its word boundaries see the text as it is), instead of at
    # every character of a long input.
    search, find = _ZERO_LABEL_RE.search, text.find
    at = find("0")
    while at != -1:
        if search(text, max(0, at - _ZERO_REACH), at + 2) is not None:
            return True
        at = find("0", at + 1)
    return False
