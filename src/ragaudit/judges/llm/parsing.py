"""Reading a judge's reply: which object is the verdict, and what its scores are on [0, 1]. Never raises.

A score the judge did not give is None, never a number we made up. The rules, in order:

A. **Bound.** Only the first ``max_chars`` characters of a reply are read (default
   `DEFAULT_MAX_REPLY_CHARS`, 32 KiB); ``cut_chars`` records how many were not.
B. **Set aside what is not the judge's.** (1) Text between the protocol's markers
   (``<<<ragaudit:NAME:NONCE>>>`` ... ``<<<end:NAME:NONCE>>>``) is the judge echoing its input:
   removed. A marker without its partner is a mention, not an echo: the verdict after a reply that
   names a marker is read (an echo cut off before its closing marker is still caught by (2) and
   (3)). Text between an opening marker and its closing one is never read, whoever wrote it.
   (2) Every verbatim occurrence
   of an untrusted text the judge was shown (question, answer, documents: `Quoted`) that
   carries a score key is removed. (3) A JSON object equal to one written in those texts (same JSON,
   or the same text up to whitespace), and a ``key: value`` score pair written in them, is never read.
C. **Choose the verdict object** (`choose_verdict`). A *verdict-shaped* object has a score key
   at its top level or one level down (``{"scores": {...}}``).
   1. The object that is the whole reply (one code fence around it allowed), when verdict-shaped.
   2. Else every top-level verdict-shaped object of the reply (nested objects belong to their
      parent): when they all give the same scores, the last one; when two disagree the reply is
      **ambiguous** and has no verdict (the judge is asked once again, then the judgement fails).
   3. Else the text from the first ``{`` to the last ``}``, repaired (trailing commas, Python-style
      quotes and ``True``/``False``/``None``).
   4. Else (a reply cut off mid-object) the ``key: number`` score pairs after the first ``{``; a key
      given two different values makes the reply ambiguous.
D. **Read the values.** Numbers and numeric strings (``"0.8"``) are *plain*; percentages
   (``"80%"`` -> 0.8) and fractions (``"4/5"`` -> 0.8) state their own scale; ``{"score": x}`` is
   read as x. Negative values (``-1``, ``"-1"``: the usual "N/A"), booleans, null, other strings,
   lists, NaN and infinities give None with a note. A missing key gives None, **never 0**.
E. **The scale** (`read_unit_scores`). Nothing is ever clamped. Plain values in [0, 1] are
   read as they are. A plain value above 1 is read on another scale only when every plain value of
   the verdict agrees on one scale and

   * the judge **stated** it (``"scale": "1-5"``, ``"0 to 10"``, ``[1, 5]``, or a bare 5, 10 or 100
     meaning 1-5, 0-10, 0-100) and every plain value lies within it; x -> (x - lo) / (hi - lo); or
   * the values **leave no doubt**: they are whole or decimal numbers, none strictly between 0 and
     1 (that would be a second scale), all within one of the scales 1-5, 0-10 or 0-100 (tried in
     that order), and they include *both ends* of it (``4, 5, 1`` is 1-5; ``100, 50, 0`` is
     0-100; ``10, 7, 0`` is 0-10).

   Otherwise (``30, 20, 10``; ``7`` beside two ``0.5``; ``0, 1, 2``; ``1e308``) the scale of the
   whole verdict is in doubt: **every** score is None (a 1 beside a 2 is no perfect score), each
   listed in ``rejected``, with a note, and the judge is asked once again for scores from 0 to 1. A stated
   scale that the values do not fit is ignored with a note; percentages above 100% and fractions
   above 1 are None.

The building blocks (`bound_reply`, `Quoted`, `choose_verdict`,
`read_unit_scores`) take the verdict's shape as arguments, so a protocol with a richer verdict
(sentence verdicts, document grades) reuses the same rules; `parse_judgement` is the three-score
RAG verdict. `find_json_object` is the tolerant object reader for judges with their own reply
formats.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...records import SCORE_NAMES
from .scales import UnitScores, read_unit_scores

__all__ = [
    "DEFAULT_MAX_REPLY_CHARS",
    "ParsedScores",
    "Quoted",
    "UnitScores",
    "VerdictChoice",
    "bound_reply",
    "choose_verdict",
    "find_json_object",
    "norm_key",
    "parse_judgement",
    "prepare_reply",
    "read_unit_scores",
    "read_verdict_object",
    "shown_objects",
]

DEFAULT_MAX_REPLY_CHARS = 32 * 1024
"""How much of a judge's reply is read by default (a verdict is a few hundred characters)."""

_KEYS: dict[str, str] = {
    "faithfulnessscore": "faithfulness",
    "faithfulness": "faithfulness",
    "contextrelevancescore": "context_relevance",
    "contextrelevance": "context_relevance",
    "answerrelevancescore": "answer_relevance",
    "answerrelevance": "answer_relevance",
}
_REASON_KEYS = ("reason", "reasoning", "explanation", "rationale")
_SCALE_KEYS = ("scale", "scorescale", "range")
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")
_PY_LITERAL_RE = re.compile(r"\b(True|False|None)\b")
_JSON_LITERAL_RE = re.compile(r"\b(true|false|null)\b")
_PY_LITERALS = {"true": "True", "false": "False", "null": "None"}
_JSON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_PATTERN_KEY = r"[\"']?\s*(faithfulness(?:[_ -]?score)?|context[_ -]?relevance(?:[_ -]?score)?" \
    r"|answer[_ -]?relevance(?:[_ -]?score)?)\s*[\"']?\s*[:=]\s*[\"']?\s*"
_PATTERN_RE = re.compile(_PATTERN_KEY + rf"({_NUMBER}\s*%?)", re.IGNORECASE)
_SCORE_WORD_RE = re.compile(r"faithfulness|context[\s_-]*relevance|answer[\s_-]*relevance", re.IGNORECASE)
_MAX_STARTS = 256
_MAX_QUOTED_STARTS = 2000
_MIN_QUOTED_CHARS = 8
_DATA_SECTION_RE = re.compile(
    r"<<<\s*ragaudit\s*:\s*([a-z_]+)\s*:\s*([a-z0-9]+)\s*>>>.*?<<<\s*end\s*:\s*\1\s*:\s*\2\s*>>>",
    re.IGNORECASE | re.DOTALL,
)
_FENCE_RE = re.compile(r"\A```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\Z", re.DOTALL)
_WS_RE = re.compile(r"\s+")
_MAX_LITERAL_EVAL_CHARS = 100_000
_MAX_REASON_CHARS = 4000

# -- A. bound -------------------------------------------------------------------------------------


def bound_reply(text: str, max_chars: int = DEFAULT_MAX_REPLY_CHARS) -> tuple[str, int]:
    """*text* cut to *max_chars* characters, and how many characters were cut (0 when none)."""
    if len(text) <= max_chars:
        return text, 0
    return text[:max_chars], len(text) - max_chars


# -- B. what is not the judge's -------------------------------------------------------------------


class Quoted:
    """The untrusted texts a judge was shown (question, answer, documents), prepared for rule B.

    Only texts that hold a ``{`` or mention a score name can plant a verdict, so others cost
    nothing here. ``Quoted()`` (nothing quoted) is valid.
    """

    __slots__ = ("_canonical", "_collapsed", "_pairs", "_texts")

    def __init__(self, texts: Iterable[str | None] = ()) -> None:
        self._texts: list[str] = []
        self._canonical: set[str] = set()
        self._pairs: set[tuple[str, str]] = set()
        collapsed: list[str] = []
        for text in texts:
            if not isinstance(text, str) or len(text) < _MIN_QUOTED_CHARS:
                continue
            if "{" not in text and not _SCORE_WORD_RE.search(text):
                continue
            self._texts.append(text)
            collapsed.append(_collapse(text))
            for obj in _all_objects(text, _MAX_QUOTED_STARTS):
                self._canonical.add(_canonical(obj))
            for match in _PATTERN_RE.finditer(text):
                name = _KEYS.get(norm_key(match.group(1)))
                if name is not None:
                    self._pairs.add((name, _collapse(match.group(2))))
        self._collapsed = "\x00".join(collapsed)
        # longest first, so a text containing another is removed whole
        self._texts.sort(key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._texts)

    def remove_from(self, reply: str) -> tuple[str, int]:
        """*reply* without the verbatim occurrences of the quoted texts, and how many were removed."""
        removed = 0
        for text in self._texts:
            count = reply.count(text)
            if count:
                removed += count
                reply = reply.replace(text, "")
        return reply, removed

    def holds_object(self, obj: Mapping[str, Any], raw: str | None = None) -> bool:
        """True when *obj* (whose reply text is *raw*) is written in a quoted text."""
        if not self._texts:
            return False
        if _canonical(obj) in self._canonical:
            return True
        return raw is not None and len(raw) >= _MIN_QUOTED_CHARS and _collapse(raw) in self._collapsed

    def holds_pair(self, name: str, value: str) -> bool:
        """True when the score pair *name*: *value* is written in a quoted text."""
        return (name, _collapse(value)) in self._pairs


def _collapse(text: str) -> str:
    return _WS_RE.sub("", text)


def _canonical(obj: object) -> str:
    try:
        return json.dumps(obj, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(obj)


def _without_quoted_parts(obj: dict[str, Any], quoted: Quoted) -> dict[str, Any]:
    """*obj* without the objects one level down that are written in a quoted text."""
    if not quoted:
        return obj
    return {k: v for k, v in obj.items() if not (isinstance(v, dict) and quoted.holds_object(v))}


def prepare_reply(text: str, quoted: Quoted, max_chars: int, notes: list[str]) -> tuple[str, int]:
    """Rules A and B(1, 2) on *text*: bounded, echoed sections and verbatim quotes removed; and how
    many characters the bound cut. Every protocol's reader starts here."""
    text, cut = bound_reply(text, max_chars)
    if cut:
        notes.append(f"reply cut: the first {max_chars} characters read, {cut} not")
    if "<<<" in text:
        text, echoed = _DATA_SECTION_RE.subn(" ", text)
        if echoed:
            notes.append(f"{echoed} echoed data section(s) ignored")
    text, removed = quoted.remove_from(text)
    if removed:
        notes.append(f"{removed} verbatim quote(s) of the judged content ignored")
    return text, cut


# -- C. the verdict object ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerdictChoice:
    """What `choose_verdict` found: ``status`` ``"found"`` with ``verdict``, ``"ambiguous"``
    (two verdict-shaped objects disagree) or ``"none"``; ``how`` names the rule that chose it."""

    status: Literal["found", "ambiguous", "none"]
    verdict: dict[str, Any] | None = None
    how: str = ""


def choose_verdict(
    text: str,
    is_verdict: Callable[[dict[str, Any]], bool],
    agree_key: Callable[[dict[str, Any]], Any],
    *,
    quoted: Quoted | None = None,
    notes: list[str] | None = None,
) -> VerdictChoice:
    """The reply's own verdict object by rule C (rules A and B are the caller's, see `parse_judgement`).

    *is_verdict* says whether an object is verdict-shaped; *agree_key* gives what two verdicts must
    share to agree (for the RAG verdict: its raw score values). Never raises.
    """
    quoted = quoted if quoted is not None else Quoted()
    notes = notes if notes is not None else []

    def usable(obj: dict[str, Any] | None, raw: str | None) -> dict[str, Any] | None:
        if obj is None:
            return None
        if quoted.holds_object(obj, raw):
            notes.append("an object quoted from the judged content was set aside")
            return None
        obj = _without_quoted_parts(obj, quoted)
        return obj if is_verdict(obj) else None

    stripped = text.strip()
    fenced = _FENCE_RE.match(stripped)
    whole_text = fenced.group(1).strip() if fenced else stripped
    if whole_text.startswith("{") and whole_text.endswith("}"):
        whole = _loads(whole_text)
        repaired = False
        if whole is None and len(whole_text) <= _MAX_LITERAL_EVAL_CHARS:
            whole = _loads_repaired(whole_text)
            repaired = whole is not None
        chosen = usable(whole, whole_text)
        if chosen is not None:
            if repaired:
                notes.append("JSON repaired (trailing commas or quotes)")
            return VerdictChoice("found", chosen, "whole reply")

    candidates: list[dict[str, Any]] = []
    for start, end, obj in _top_objects(text, is_verdict):
        chosen = usable(obj, text[start:end])
        if chosen is not None:
            candidates.append(chosen)
    if candidates:
        keys = [agree_key(obj) for obj in candidates]
        if any(key != keys[0] for key in keys[1:]):
            notes.append(f"ambiguous: {len(candidates)} verdict objects with different scores")
            return VerdictChoice("ambiguous", None, "disagreeing objects")
        if len(candidates) > 1:
            notes.append(f"{len(candidates)} verdict objects that agree; the last one read")
        return VerdictChoice("found", candidates[-1], "last verdict object")

    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last and last - first <= _MAX_LITERAL_EVAL_CHARS:
        span = text[first : last + 1]
        chosen = usable(_loads_repaired(span), span)
        if chosen is not None:
            notes.append("JSON repaired (trailing commas or quotes)")
            return VerdictChoice("found", chosen, "repaired")
    return VerdictChoice("none")


def _top_objects(text: str, is_verdict: Callable[[dict[str, Any]], bool]) -> list[tuple[int, int, dict[str, Any]]]:
    """The JSON objects of *text* left to right; the inside of a verdict-shaped one is not searched."""
    decoder = json.JSONDecoder(strict=False)
    found: list[tuple[int, int, dict[str, Any]]] = []
    pos, tries = text.find("{"), 0
    while pos >= 0 and tries < _MAX_STARTS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found.append((pos, end, value))
            if _safe(is_verdict, value):
                pos = text.find("{", end)
                continue
        pos = text.find("{", pos + 1)
    return found


def _all_objects(text: str, max_starts: int) -> Iterable[dict[str, Any]]:
    """Every JSON object written in *text*, nested ones included (also Python-style ones)."""
    decoder = json.JSONDecoder(strict=False)
    pos, tries = text.find("{"), 0
    while pos >= 0 and tries < max_starts:
        tries += 1
        value: Any = None
        try:
            value, _ = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            close = text.find("}", pos)
            if close > pos and close - pos <= 4000:
                value = _loads_repaired(text[pos : close + 1])
        if isinstance(value, dict):
            yield from _nested_objects(value, 0)
        pos = text.find("{", pos + 1)


def shown_objects(texts: Iterable[str], is_verdict: Callable[[dict[str, Any]], bool],
                  max_starts: int = _MAX_STARTS) -> set[str]:
    """The verdict-shaped JSON objects written in *texts* (the content the judge was shown), as canonical JSON.

    A reply object equal to one of these is a quote of the judged content, never the judge's verdict.
    """
    return {_canonical(obj) for text in texts for obj in _all_objects(text, max_starts) if _safe(is_verdict, obj)}


def _nested_objects(value: object, depth: int) -> Iterable[dict[str, Any]]:
    if depth > 8:
        return
    if isinstance(value, dict):
        yield value
        for inner in value.values():
            yield from _nested_objects(inner, depth + 1)
    elif isinstance(value, list):
        for inner in value:
            yield from _nested_objects(inner, depth + 1)


def _safe(predicate: Callable[[dict[str, Any]], bool], obj: dict[str, Any]) -> bool:
    try:
        return bool(predicate(obj))
    except Exception:  # a caller's predicate must not take the reading down
        return False


def find_json_object(
    text: str, wanted: Callable[[dict[str, Any]], bool] | None = None, notes: list[str] | None = None
) -> dict[str, Any] | None:
    """The JSON object a judge replied with, for judges with their own reply formats.

    The object that is the whole reply (code fences and prose around it allowed), else the last
    top-level object *wanted* accepts (by default: one with a score key), else the text from the
    first ``{`` to the last ``}`` repaired (trailing commas, Python-style quotes and literals), else
    None. Unlike `choose_verdict` it does not check agreement: judges whose objects carry
    0-1 scores read them with `read_unit_scores`. Never raises.
    """
    wanted = _has_score_key if wanted is None else wanted
    notes = [] if notes is None else notes
    if not isinstance(text, str) or "{" not in text:
        return None
    choice = choose_verdict(text, wanted, lambda obj: None, notes=notes)
    if choice.verdict is not None:
        return choice.verdict
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        whole = _loads(text[first : last + 1])
        if whole is not None:
            return whole
    return None


def read_verdict_object(
    text: str,
    is_verdict: Callable[[dict[str, Any]], bool],
    *,
    quoted: Quoted | None = None,
    max_chars: int = DEFAULT_MAX_REPLY_CHARS,
    ignore_keys: Sequence[str] = _REASON_KEYS,
    notes: list[str] | None = None,
) -> VerdictChoice:
    """Rules A-C for a protocol with its own verdict shape (rubric levels, correctness, ...).

    Two verdict objects agree when they are equal apart from their *ignore_keys* (normalised, e.g.
    the reasons). Never raises.
    """
    notes = notes if notes is not None else []
    if not isinstance(text, str):
        notes.append(f"judge output is {type(text).__name__}, not text")
        return VerdictChoice("none")
    quoted = quoted if quoted is not None else Quoted()
    text, _ = prepare_reply(text, quoted, max_chars, notes)
    ignored = {norm_key(k) for k in ignore_keys}

    def agree_key(obj: dict[str, Any]) -> str:
        return _canonical({k: v for k, v in obj.items() if norm_key(k) not in ignored})

    try:
        return choose_verdict(text, is_verdict, agree_key, quoted=quoted, notes=notes)
    except Exception as exc:  # a reader bug must not take a judgement down with it
        notes.append(f"parser error: {type(exc).__name__}")
        return VerdictChoice("none")


def _loads(candidate: str) -> dict[str, Any] | None:
    try:
        value = json.loads(candidate, strict=False)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _loads_repaired(candidate: str) -> dict[str, Any] | None:
    fixed = _TRAILING_COMMA_RE.sub(r"\1", candidate)
    obj = _loads(fixed)
    if obj is not None or len(fixed) > _MAX_LITERAL_EVAL_CHARS:
        return obj
    try:  # Python-style dict: single quotes, True/False/None
        value = ast.literal_eval(_JSON_LITERAL_RE.sub(lambda m: _PY_LITERALS[m.group(1)], fixed))
        if isinstance(value, dict):
            return value
    except Exception:  # literal_eval raises many types (ValueError, SyntaxError, MemoryError, ...)
        pass
    return _loads(_PY_LITERAL_RE.sub(lambda m: _JSON_LITERALS[m.group(1)], fixed).replace("'", '"'))


def norm_key(key: object) -> str:
    """*key* without spaces, underscores and dashes, lower-cased: ``Faithfulness_Score`` -> ``faithfulnessscore``."""
    return re.sub(r"[\s_\-]", "", str(key)).lower()


def _has_score_key(obj: Mapping[str, Any] | None) -> bool:
    if obj is None:
        return False
    for key, value in obj.items():
        if norm_key(key) in _KEYS:
            return True
        if isinstance(value, dict) and any(norm_key(k) in _KEYS for k in value):
            return True
    return False


def _flatten(obj: Mapping[Any, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(value, Mapping) and norm_key(key) not in _KEYS:
            for inner_key, inner in value.items():
                flat.setdefault(norm_key(inner_key), inner)
    for key, value in obj.items():
        flat[norm_key(key)] = value
    return flat


def _raw_scores(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The RAG verdict's score values as written, by score name (first key of each name wins)."""
    flat = _flatten(obj)
    raw: dict[str, Any] = {}
    for key, name in _KEYS.items():
        if name not in raw and key in flat:
            raw[name] = flat[key]
    return raw


# -- the RAG verdict ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedScores:
    """What `parse_judgement` read from a judge's reply.

    Scores are in [0, 1] or None. ``scale`` names the scale the scores were read on (``"1-5"``,
    ``"0-10"``, ...) or is None for 0-1. ``notes`` say what was repaired, set aside or not read.
    ``parsed`` is True when a JSON object (possibly repaired) or score pattern was found at all;
    ``ambiguous`` when two verdict objects disagreed (no scores are then read); ``rejected`` names
    the scores given on no stated or certain scale; ``cut_chars`` how much of the reply was not read.
    """

    faithfulness: float | None = None
    context_relevance: float | None = None
    answer_relevance: float | None = None
    reason: str | None = None
    scale: str | None = None
    notes: tuple[str, ...] = ()
    parsed: bool = False
    ambiguous: bool = False
    rejected: tuple[str, ...] = ()
    cut_chars: int = 0

    @property
    def has_scores(self) -> bool:
        """True when at least one score was read."""
        return any(getattr(self, name) is not None for name in SCORE_NAMES)

    @property
    def needs_repair(self) -> bool:
        """True when the judge should be asked once again: nothing read, ambiguous, or a score rejected."""
        return self.ambiguous or bool(self.rejected) or not self.has_scores

    def scores(self) -> dict[str, float | None]:
        """The three scores by name."""
        return {name: getattr(self, name) for name in SCORE_NAMES}


def parse_judgement(
    text: str, *, quoted: Quoted | None = None, max_chars: int = DEFAULT_MAX_REPLY_CHARS
) -> ParsedScores:
    """Read the three scores, the reason and the scale from a judge's reply (see the module rules).

    *quoted* holds the untrusted texts the judge was shown; *max_chars* bounds the text read.
    Never raises, whatever *text* is.
    """
    notes: list[str] = []
    quoted = quoted if quoted is not None else Quoted()
    try:
        return _parse(text, quoted, max_chars, notes)
    except Exception as exc:  # a parser bug must not take a judgement down with it
        notes.append(f"parser error: {type(exc).__name__}")
        return ParsedScores(notes=tuple(notes))


def _parse(text: object, quoted: Quoted, max_chars: int, notes: list[str]) -> ParsedScores:
    if not isinstance(text, str):
        notes.append(f"judge output is {type(text).__name__}, not text")
        return ParsedScores(notes=tuple(notes))
    text, cut = prepare_reply(text, quoted, max_chars, notes)
    first = text.find("{")
    if first < 0:
        notes.append("no JSON object in the judge output")
        return ParsedScores(notes=tuple(notes), cut_chars=cut)
    choice = choose_verdict(text, _has_score_key, _agree_key, quoted=quoted, notes=notes)
    if choice.status == "ambiguous":
        return ParsedScores(notes=tuple(notes), parsed=True, ambiguous=True, cut_chars=cut)
    if choice.verdict is None:
        pattern, ambiguous = _scores_by_pattern(text[first:], quoted, notes)
        if ambiguous:
            return ParsedScores(notes=tuple(notes), parsed=True, ambiguous=True, cut_chars=cut)
        if pattern:
            notes.append("scores recovered by pattern from malformed JSON")
            return _build(pattern, None, None, notes, cut)
        obj = find_json_object(text, lambda o: not quoted.holds_object(o))
        if obj is not None and not quoted.holds_object(obj):
            return _build({}, _reason(_flatten(obj)), None, notes, cut)
        notes.append("no readable JSON object in the judge output")
        return ParsedScores(notes=tuple(notes), cut_chars=cut)
    flat = _flatten(choice.verdict)
    scale_hint = next((flat[k] for k in _SCALE_KEYS if k in flat), None)
    return _build(_raw_scores(choice.verdict), _reason(flat), scale_hint, notes, cut)


def _agree_key(obj: dict[str, Any]) -> str:
    return _canonical(_raw_scores(obj))


def _reason(flat: Mapping[str, Any]) -> str | None:
    for key in _REASON_KEYS:
        raw = flat.get(key)
        if raw is not None:
            reason = raw if isinstance(raw, str) else _canonical(raw)
            return reason[:_MAX_REASON_CHARS]
    return None


def _scores_by_pattern(text: str, quoted: Quoted, notes: list[str]) -> tuple[dict[str, Any], bool]:
    found: dict[str, str] = {}
    for match in _PATTERN_RE.finditer(text):
        name = _KEYS.get(norm_key(match.group(1)))
        value = match.group(2)
        if name is None:
            continue
        if quoted.holds_pair(name, value):
            notes.append(f"{name}: a score pair quoted from the judged content was set aside")
            continue
        if name in found and _collapse(found[name]) != _collapse(value):
            notes.append(f"ambiguous: {name} given as {found[name]!r} and {value!r}")
            return {}, True
        found.setdefault(name, value)
    return dict(found), False


def _build(
    raw: Mapping[str, Any], reason: str | None, scale_hint: Any, notes: list[str], cut: int
) -> ParsedScores:
    for name in SCORE_NAMES:
        if name not in raw:
            notes.append(f"{name}: missing")
    read = read_unit_scores({name: raw[name] for name in SCORE_NAMES if name in raw}, scale_hint, notes=notes)
    scores = {name: read.scores.get(name) for name in SCORE_NAMES}
    return ParsedScores(
        faithfulness=scores["faithfulness"],
        context_relevance=scores["context_relevance"],
        answer_relevance=scores["answer_relevance"],
        reason=reason,
        scale=read.scale,
        notes=tuple(notes),
        parsed=True,
        rejected=read.rejected,
        cut_chars=cut,
    )

