"""What the model saw: which observed documents reached the model call that produced the answer.

The input of that call (its messages and prompt) is the reference. An observed document is evidence
when its text is in the reference (whitespace aside; or its first `PROBE_CHARS` characters,
for an app that cut its documents); documents retrieved and then dropped are not. Context in the
reference that no observed document explains becomes evidence of its own
(`prompt_passages`), with ids from its text and ``source="prompt"``.

Matching is a substring search on whitespace-normalised text, fast on large inputs: the
reference is indexed once by the `KEY_CHARS` characters at each word boundary, and each
document is looked up by its first characters and confirmed at the positions found, so the cost is
linear in the reference and the documents (no pairwise comparison of documents and passages).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ..records import Message, RetrievedDoc, stable_doc_id

__all__ = [
    "KEY_CHARS",
    "MAX_REFERENCE_CHARS",
    "MIN_MESSAGE_CONTEXT_WORDS",
    "PROBE_CHARS",
    "PROMPT_SOURCE",
    "Reference",
    "normalize",
    "numbers_from_zero",
    "prompt_passages",
]

PROMPT_SOURCE = "prompt"
"""The ``source`` of evidence taken from the prompt itself."""
KEY_CHARS = 24
"""Documents are looked up in the reference by this many of their first (normalised) characters."""
PROBE_CHARS = 160
"""A document longer than this reached the model when its first this-many characters did (the app
cut it to fit)."""
MAX_REFERENCE_CHARS = 4_000_000
"""The reference is searched up to here (far beyond any model's context window)."""

_MIN_PASSAGE_WORDS = 4  # shorter leftovers ("Answer:", a date, a name) are not context
MIN_MESSAGE_CONTEXT_WORDS = 40
"""System and tool messages are taken as context (when no observed document reached the call) only
when they hold at least this many words: a short system prompt is an instruction, and a chat with
one is not a RAG turn to judge."""
_QUESTION_KEYS = frozenset({"question", "input", "query", "q", "user_input", "user_question"})
_HISTORY_KEYS = frozenset({"chat_history", "history", "messages", "conversation", "agent_scratchpad"})
_CONTEXT_ROLES = frozenset({"system", "tool"})
# Word boundaries: after a space, a word character after other punctuation, punctuation after a word.
_BOUNDARY_RE = re.compile(r"(?<!\S)\S|(?<=[^\w\s])\w|(?<=\w)[^\w\s]")
_JOIN_RE = re.compile(r"\n\s*\n|\n-{3,}\n|\n={3,}\n")


def normalize(text: str) -> str:
    """*text* with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


class Reference:
    """The normalised text of one model call's input, indexed for `contains`."""

    __slots__ = ("_index", "text")

    def __init__(self, messages: Sequence[Message], prompt: str | None) -> None:
        parts = [text for _, text in messages if text]
        if prompt and not parts:
            parts.append(prompt)
        self.text = normalize("\n".join(parts))[:MAX_REFERENCE_CHARS]
        index: dict[str, list[int]] = {}
        text = self.text
        for match in _BOUNDARY_RE.finditer(text):
            at = match.start()
            index.setdefault(text[at:at + KEY_CHARS], []).append(at)
        self._index = index

    def __bool__(self) -> bool:
        return bool(self.text)

    def find(self, text: str) -> int:
        """Where normalised *text* starts in the reference (at a word boundary), or -1."""
        key = text[:KEY_CHARS]
        positions = self._index.get(key)
        if positions is None and len(key) < KEY_CHARS:
            # a short text: the index keys at a boundary are longer; fall back to a plain search
            return self.text.find(text)
        for at in positions or ():
            if self.text.startswith(text, at):
                return at
        return -1

    def contains(self, content: str) -> bool:
        """Whether a document with this *content* reached the model (see the module docstring)."""
        text = normalize(content)
        if not text:
            return False
        if self.find(text) >= 0:
            return True
        return len(text) > PROBE_CHARS and self.find(text[:PROBE_CHARS]) >= 0


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
    app joined; else, when no observed document reached the call, the text of its system and tool
    messages (at least `MIN_MESSAGE_CONTEXT_WORDS` words of it), split the same way. Each
    passage: id from its text, ``source="prompt"``.
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
        context = [text for role, text in messages if role in _CONTEXT_ROLES]
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


_ZERO_LABEL_RE = re.compile(r"\b(?:source|doc(?:ument)?|passage|context|chunk|id)\b[^\n\d]{0,12}\b0\b|\[0\]",
                            re.IGNORECASE)


def numbers_from_zero(text: str) -> bool:
    """Whether the documents in *text* (a model's input) are numbered from 0 (``Source ID: 0``,
    ``[0]``), as ``enumerate()`` numbers them: then a structured answer's integer citations are
    0-based indices."""
    return _ZERO_LABEL_RE.search(text) is not None
