"""Small shared text utilities: content words, a light stemmer, sentence splitting.

Pure standard library and fast (precompiled regexes, a cached stemmer): the lexical judge and the
citation finder run on every audited turn. The functions are deliberately simple and predictable
rather than linguistically complete; both sides of every comparison go through the same
normalisation, so consistency matters more than correct English morphology.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = [
    "STOPWORDS",
    "EscapingWriter",
    "content_terms",
    "escape_controls",
    "exception_text",
    "is_number",
    "sentence_spans",
    "split_sentences",
    "stem",
    "strip_markers",
    "term_set",
    "tokens",
]


def _split(text: str) -> list[str]:
    return text.split()


def _words(text: str) -> frozenset[str]:
    return frozenset(_split(text))


STOPWORDS: frozenset[str] = _words(
    """
    a about above after again against all also am an and any anyone anything are aren't as at be because
    been before being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each either else ever every few for from further get gets getting got had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's however i i'd i'll i'm i've if in into is isn't it it's its itself just let's like may me
    might more most much must mustn't my myself neither no nor not now of off on once one only or other
    otherwise our ours ourselves out over own per please quite rather really same shall shan't she she'd
    she'll she's should shouldn't so some something such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those though through to
    too under until up upon us very via was wasn't we we'd we'll we're we've were weren't what what's
    when when's where where's whether which while who who's whom whose why why's will with within without
    won't would wouldn't yes yet you you'd you'll you're you've your yours yourself yourselves
    actually certain exactly general generally normal normally ordinary particular possible regular
    regularly specific standard typical typically usual usually
    tell know need want happen happens happened thing things way ok okay ago today yesterday tomorrow
    recently still already even anymore turned
    """
)
"""Function words and question filler ("ordinary", "tell", "happen") that carry no topic."""

# Irregular forms that a suffix stemmer cannot reach, as "form:base" (and "buy" is a purchase).
_IRREGULAR = dict(
    pair.split(":")
    for pair in _split(
        """
    bought:purchase buy:purchase buying:purchase buys:purchase sold:sell paid:pay gave:give given:give
    went:go made:make took:take taken:take
    brought:bring sent:send spent:spend kept:keep lost:lose left:leave told:tell found:find held:hold
    ran:run came:come chose:choose chosen:choose broke:break broken:break wrote:write written:write
    children:child men:man women:woman people:person feet:foot teeth:tooth mice:mouse
    """
    )
)
# "one" is left out on purpose: it is a pronoun as often as a number ("the one I bought").
_NUMBER_WORDS = {
    **{
        word: n
        for n, word in enumerate(
            _split(
                "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen"
            ),
            start=2,
        )
    },
    **{word: 10 * n for n, word in enumerate(_split("twenty thirty forty fifty sixty seventy eighty ninety"), start=2)},
}
_TENS = frozenset({"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"})
_UNITS = {"one": 1, **{w: n for w, n in _NUMBER_WORDS.items() if n < 10}}

# Applied to lower-cased text: a word ("don't", "naïve"), a number with thousands separators, a number.
_TOKEN_RE = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*|\d+(?:,\d{3})+(?![\d,])(?:\.\d+)?|\d+(?:\.\d+)?")
_VOWELS = frozenset("aeiouy")


def is_number(term: str) -> bool:
    """True for a numeric token such as ``"30"`` or ``"4.5"``."""
    return bool(term) and term[0].isdigit()


def _normalise_number(text: str) -> str:
    whole, _, fraction = text.replace(",", "").partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def tokens(text: str) -> list[str]:
    """Lowercase words and numbers of *text*, in order.

    Numbers are normalised (``"1,000"`` -> ``"1000"``, ``"30.0"`` -> ``"30"``), number words from
    two to ninety-nine become digits (``"forty-five"`` -> ``"45"``), possessive ``'s`` is dropped
    and curly apostrophes are straightened. Punctuation, symbols and single letters are dropped.
    """
    out: list[str] = []
    append = out.append
    tens = ""
    for token in _TOKEN_RE.findall(text.lower()):
        if token[0].isdigit():
            append(_normalise_number(token) if "," in token or "." in token or token[0] == "0" else token)
            tens = ""
            continue
        if "’" in token:
            token = token.replace("’", "'")
        if token.endswith("'s"):
            token = token[:-2]
        if tens and token in _UNITS:
            out[-1] = str(_NUMBER_WORDS[tens] + _UNITS[token])
            tens = ""
            continue
        tens = token if token in _TENS else ""
        if len(token) < 2:
            continue
        value = _NUMBER_WORDS.get(token)
        append(token if value is None else str(value))
    return out


def _has_vowel(text: str) -> bool:
    return any(ch in _VOWELS for ch in text)


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light stemmer: plurals, ``-ing``, ``-ed``, ``-able``/``-ible``, ``-ly``, a final ``e``.

    ``"refunds"``, ``"refunded"``, ``"refundable"`` -> ``"refund"``; ``"purchase"`` and
    ``"purchased"`` -> ``"purchas"``; ``"shipping"`` -> ``"ship"``; ``"policies"`` -> ``"policy"``.
    Common irregular forms map to their base (``"made"`` -> ``"mak"``, like ``"make"``), and ``"buy"``
    and ``"bought"`` to ``"purchas"``. Numbers are returned unchanged.
    """
    if not word or word[0].isdigit():
        return word
    if word in _IRREGULAR:
        return stem(_IRREGULAR[word])
    w = word
    if len(w) > 4 and w.endswith(("ies", "ied")):
        w = w[:-3] + "y"
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) >= 6 and _has_vowel(w[:-3]):
        w = w[:-3]
    elif w.endswith("ed") and len(w) >= 4 and _has_vowel(w[:-2]):
        w = w[:-2]
    elif w.endswith(("able", "ible")) and len(w) >= 8:
        w = w[:-4]
    elif w.endswith("ly") and len(w) >= 6:
        w = w[:-2]
    if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in _VOWELS and w[-1] not in "lsz":
        w = w[:-1]
    if len(w) >= 3 and w.endswith("e"):
        w = w[:-1]
    return w


def content_terms(text: str) -> dict[str, str]:
    """The content words of *text* as ``{stem: first surface form}``, in order of first appearance.

    Stopwords and question filler are dropped; numbers are kept (as their normalised digits). Use
    the keys for set operations (``terms.keys() & other``) and the values to name a term to a reader.
    """
    out: dict[str, str] = {}
    for token in tokens(text):
        if token in STOPWORDS:
            continue
        key = stem(token)
        if key and key not in out:
            out[key] = token
    return out


def term_set(text: str) -> frozenset[str]:
    """The stems of the content words of *text* (the keys of `content_terms`), as a set."""
    return frozenset(stem(t) for t in tokens(text) if t not in STOPWORDS)


# Bracketed citation markers ("[1]", "[doc-3]", "[1, 2]") and "(source: x.pdf)" notes: not claims.
_MARKER_RE = re.compile(
    r"\[[^\[\]\n]{1,80}\]|\(\s*(?:sources?|src|refs?|references?|see|cf\.?)\s*:[^()\n]{1,200}\)",
    re.IGNORECASE,
)


def strip_markers(text: str) -> str:
    """*text* without bracketed citation markers and ``(source: ...)`` notes (same length is not kept)."""
    return _MARKER_RE.sub(" ", text)


_ABBREVIATIONS = _words(
    """
    e.g i.e etc vs cf al approx appr dept est fig inc ltd co corp jr sr mr mrs ms dr prof st mt no nos
    vol pp ca min max jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
    """
)
# A paragraph break, or a line break before a list item ("- x", "* x", "• x", "1. x", "2) x").
_BLOCK_RE = re.compile(r"\n[ \t]*\n\s*|\n(?=[ \t]*(?:[-*•·]|\d{1,3}[.)])[ \t])|\n[ \t]*(?=#)")
# End of a sentence: terminal punctuation, closing quotes/brackets, then any trailing markers.
_END_RE = re.compile(r"(?:[.!?]+|…)[\"'”’)\]]*(?:[ \t]*\[[^\[\]\n]{1,80}\])*(?=\s|$)")
_WORD_BEFORE_RE = re.compile(r"([A-Za-z][A-Za-z.]*)$")


def _is_abbreviation(text: str, dot: int) -> bool:
    match = _WORD_BEFORE_RE.search(text, max(0, dot - 12), dot)
    if match is None:
        return False
    word = match.group(1).lower().rstrip(".")
    if len(word) == 1:
        return match.group(1)[0].isupper()  # an initial: "J. Smith", "U.S."
    if "." in word:
        return True  # "e.g", "i.e"
    if word in ("no", "nos"):
        rest = text[dot + 1 : dot + 4].lstrip()
        return bool(rest) and rest[0].isdigit()
    return word in _ABBREVIATIONS


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the sentences of *text*, whitespace trimmed, empty ones skipped.

    Splits at ``.``, ``!``, ``?`` and ``…`` followed by whitespace (so decimals such as ``4.5`` and
    names such as ``policy.pdf`` stay whole), but not after common abbreviations (``e.g.``,
    ``approx.``, ``Dr.``, ``No. 5``) or single initials; a citation marker right after the stop
    (``... refunded. [1]``) stays with its sentence. Paragraph breaks and list items also end a
    sentence; a single line break inside a paragraph does not. A segment that only cites
    (``(source: returns.md)``, ``[1][2]``, ``Sources: a, b``, a footnote line ``[1] returns.md``, the
    items of a list of sources after it) belongs to the sentence before it, as ALCE reads citations:
    it is never a sentence of its own. This is the one splitter the judges, the citation checks and
    the report share.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    blocks = [m.start() for m in _BLOCK_RE.finditer(text)] + [len(text)]
    for block_end in blocks:
        start = pos
        for match in _END_RE.finditer(text, pos, block_end):
            stop = match.group()
            if (
                stop.startswith(".")
                and not stop.startswith("..")
                and (_is_abbreviation(text, match.start()) or text[start : match.start()].strip().isdigit())
            ):
                continue  # "e.g. x", "Dr. Smith", or a list number "1. x"
            _add_span(text, start, match.end(), spans)
            start = match.end()
        _add_span(text, start, block_end, spans)
        pos = block_end
    return _attach_citations(text, spans)


# A segment that only cites (ALCE: it belongs to the sentence before): bracket markers ("[1][2]",
# "【3】"), a source note ("(source: returns.md)"), a "Sources: a, b" line, a footnote ("[1] returns.md",
# "[^1]: https://..."), or an item of a list of sources after one of these ("- returns.md").
_MARKERS = r"(?:\[[^\[\]\n]{1,80}\]|【[^【】\n]{1,80}】)(?:[ \t,;]*(?:\[[^\[\]\n]{1,80}\]|【[^【】\n]{1,80}】))*"
_NOTE = r"\(\s*(?:sources?|src|refs?|references?|see|cf\.?|from|citations?)\s*:[^()\n]{1,200}\)"
_CITATION_ONLY_RE = re.compile(
    rf"(?:{_MARKERS}|{_NOTE})[.,;]?"
    r"|(?:sources?|references?|citations?|refs?)\s*:[^\n]{0,300}"
    r"|\[\^?\d{1,3}\]:?[ \t]+\S[^\n]{0,200}",
    re.IGNORECASE,
)
_LEADING_CITATION_RE = re.compile(rf"(?:{_MARKERS}|{_NOTE})[.,;]?(?=\s)", re.IGNORECASE)
_SOURCE_ITEM_RE = re.compile(r"(?:[-*•·]|\d{1,3}[.)])[ \t]+\S+(?:[ \t]+\S+){0,3}")


def _attach_citations(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """*spans* with every citation-only segment joined to the sentence before it, and a citation
    that opens a segment ("(source: a.md) Next sentence.") moved to the sentence before."""
    out: list[tuple[int, int]] = []
    citing = False  # the last segment was citation-only: short list items after it are sources
    for start, end in spans:
        segment = text[start:end]
        if out and (_CITATION_ONLY_RE.fullmatch(segment) or (citing and _SOURCE_ITEM_RE.fullmatch(segment))):
            out[-1] = (out[-1][0], end)
            citing = True
            continue
        citing = False
        lead = _LEADING_CITATION_RE.match(segment) if out else None
        if lead is not None:
            out[-1] = (out[-1][0], start + lead.end())
            _add_span(text, start + lead.end(), end, out)
            continue
        out.append((start, end))
    return out


def _add_span(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def split_sentences(text: str) -> list[str]:
    """The sentences of *text* (see `sentence_spans`), inner line breaks turned into spaces."""
    return [" ".join(text[s:e].split()) for s, e in sentence_spans(text)]


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)] if c not in (0x09, 0x0A)}


def escape_controls(text: str) -> str:
    """*text* with terminal control characters (C0 but tab and newline, DEL, C1) shown as ``\\xNN``.

    Recorded text (answers, documents, reasons) is untrusted: printed raw, an escape sequence in it
    could rewrite the operator's terminal (move the cursor, hide lines, set the title).
    """
    return text.translate(_CONTROL)


class EscapingWriter:
    """A text stream wrapper that writes everything through `escape_controls`.

    Wrapping one twice is harmless (escaped text has no control characters left); other stream
    attributes (``encoding``, ``isatty``) are the wrapped stream's.
    """

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return int(self._out.write(escape_controls(text)) or 0)

    def flush(self) -> None:
        self._out.flush()

    def __getattr__(self, name: str) -> Any:
        if name == "_out":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._out, name)


def exception_text(exc: BaseException) -> str:
    """``Type: message (file line N)`` of *exc*, at the innermost frame of its traceback: one line
    saying what a user's code raised and where, for the command line (which shows no traceback)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    place = f" ({frames[-1].filename} line {frames[-1].lineno})" if frames else ""
    message = str(exc)
    return f"{type(exc).__name__}{': ' + message if message else ''}{place}"
