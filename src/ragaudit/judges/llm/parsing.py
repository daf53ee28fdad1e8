"""Tolerant reading of a judge's reply into three scores in [0, 1]; never raises.

The rules, in order:

0. **Ignore echoed data.** Text between the protocol's markers (``<<<ragaudit:NAME:NONCE>>>`` ...
   ``<<<end:NAME:NONCE>>>``, or to the end of the reply when the closing marker is missing) is the
   question, answer or context quoted back, never the judge's verdict: it is removed first, so a
   fake verdict planted in an answer cannot be read as the judge's when a judge echoes its input.
1. **Find the object.** The text from the first ``{`` to the last ``}`` is read as JSON, so prose and
   code fences around it do not matter. If that fails, a best-effort repair is tried (trailing
   commas removed, Python-style single quotes and ``True``/``False``/``None``), then each ``{`` in
   turn is tried as the start of an object, and last the three scores are picked out of the text
   after the first ``{`` by pattern (for a reply cut off mid-object). Nothing found -> ``parsed`` is
   False and all scores are None.
2. **Find the keys.** ``faithfulnessScore``, ``contextRelevanceScore``, ``answerRelevanceScore`` and
   ``reason``; also ``faithfulness``/``faithfulness_score``, ``context_relevance``,
   ``answer_relevance`` (case, ``_`` and ``-`` do not matter), at the top level or one level down
   (``{"scores": {...}}``). A missing key gives None, **never 0**.
3. **Read the values.** Numbers, numeric strings (``"0.8"``), percentages (``"80%"`` -> 0.8),
   fractions (``"4/5"`` -> 0.8) and ``{"score": x}`` are read; booleans, other strings, lists and
   null give None; NaN and infinities give None.
4. **Normalise the scale.** An explicit ``"scale"`` (``"1-5"``, ``"0 to 10"``, ``[1, 5]``, or a bare 5,
   10 or 100 meaning 1-5, 0-10, 0-100) maps ``x`` to ``(x - lo) / (hi - lo)``; it is ignored when a
   score lies outside it (the judge said 1-5 but gave 0.8). Without one, plain
   numbers are taken to be on a 1-5 scale when all are within [1, 5] and one is above 1 (``(x-1)/4``),
   or on a 0-10 scale when all are within [0, 10], one is above 5 or one is 0, and none lies strictly
   between 0 and 1 (``x/10``). Percentages and fractions are never rescaled.
5. **Clamp** every score to [0, 1] (a note records it).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...records import SCORE_NAMES

__all__ = ["ParsedScores", "find_json_object", "norm_key", "parse_judgement"]

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
_NUMBER_RE = re.compile(rf"\s*({_NUMBER})\s*(%?)\s*")
_FRACTION_RE = re.compile(rf"\s*({_NUMBER})\s*/\s*({_NUMBER})\s*")
_SCALE_RE = re.compile(rf"({_NUMBER})\s*(?:-|–|—|to|\.\.)\s*({_NUMBER})")
_TRAILING_COMMA_RE = re.compile(r",\s*([}\]])")
_PY_LITERAL_RE = re.compile(r"\b(True|False|None)\b")
_JSON_LITERAL_RE = re.compile(r"\b(true|false|null)\b")
_PY_LITERALS = {"true": "True", "false": "False", "null": "None"}
_JSON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_PATTERN_KEY = r"[\"']?\s*(faithfulness(?:[_ -]?score)?|context[_ -]?relevance(?:[_ -]?score)?" \
    r"|answer[_ -]?relevance(?:[_ -]?score)?)\s*[\"']?\s*[:=]\s*[\"']?\s*"
_PATTERN_RE = re.compile(_PATTERN_KEY + rf"({_NUMBER}\s*%?)", re.IGNORECASE)
_BARE_SCALES = {1.0: (0.0, 1.0), 5.0: (1.0, 5.0), 10.0: (0.0, 10.0), 100.0: (0.0, 100.0)}
_MAX_STARTS = 64
_DATA_SECTION_RE = re.compile(
    r"<<<\s*ragaudit\s*:\s*([a-z_]+)\s*:\s*([a-z0-9]+)\s*>>>.*?(?:<<<\s*end\s*:\s*\1\s*:\s*\2\s*>>>|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_MAX_LITERAL_EVAL_CHARS = 100_000
_MAX_REASON_CHARS = 4000


@dataclass(frozen=True, slots=True)
class ParsedScores:
    """What :func:`parse_judgement` read from a judge's reply.

    Scores are in [0, 1] or None. ``scale`` names the scale the scores were normalised from
    (``"1-5"``, ``"0-10"``, ...) or is None. ``notes`` says what was repaired, clamped or ignored.
    ``parsed`` is True when a JSON object (possibly repaired) or score pattern was found at all.
    """

    faithfulness: float | None = None
    context_relevance: float | None = None
    answer_relevance: float | None = None
    reason: str | None = None
    scale: str | None = None
    notes: tuple[str, ...] = ()
    parsed: bool = False

    @property
    def has_scores(self) -> bool:
        """True when at least one score was read."""
        return any(getattr(self, name) is not None for name in SCORE_NAMES)

    def scores(self) -> dict[str, float | None]:
        """The three scores by name."""
        return {name: getattr(self, name) for name in SCORE_NAMES}


@dataclass(slots=True)
class _Value:
    number: float
    rescalable: bool


def parse_judgement(text: str) -> ParsedScores:
    """Read the three scores, the reason and the scale from a judge's reply (see the module rules).

    Never raises, whatever *text* is.
    """
    notes: list[str] = []
    try:
        return _parse(text, notes)
    except Exception as exc:  # a parser bug must not take a judgement down with it
        notes.append(f"parser error: {type(exc).__name__}")
        return ParsedScores(notes=tuple(notes))


def _parse(text: Any, notes: list[str]) -> ParsedScores:
    if not isinstance(text, str):
        notes.append(f"judge output is {type(text).__name__}, not text")
        return ParsedScores(notes=tuple(notes))
    if "<<<" in text:
        text, echoed = _DATA_SECTION_RE.subn(" ", text)
        if echoed:
            notes.append(f"{echoed} echoed data section(s) ignored")
    first = text.find("{")
    if first < 0:
        notes.append("no JSON object in the judge output")
        return ParsedScores(notes=tuple(notes))
    obj = find_json_object(text, notes=notes)
    if obj is None:
        pattern = _scores_by_pattern(text[first:])
        if pattern:
            notes.append("scores recovered by pattern from malformed JSON")
            return _build(pattern, None, None, notes)
        notes.append("no readable JSON object in the judge output")
        return ParsedScores(notes=tuple(notes))
    values, reason, scale_hint = _extract(obj, notes)
    return _build(values, reason, scale_hint, notes)


def find_json_object(
    text: str, wanted: Callable[[dict[str, Any]], bool] | None = None, notes: list[str] | None = None
) -> dict[str, Any] | None:
    """The JSON object a judge replied with, by the protocol's tolerant rule.

    The text from the first ``{`` to the last ``}``, parsed as JSON or repaired (trailing commas,
    Python-style quotes and literals); when that is not an object *wanted* accepts (by default: one
    with a score key), the first object inside the text that it accepts. Never raises; None when
    there is no object. Repairs are described in *notes* when given. Judges with their own reply
    formats (rubric, correctness, G-Eval, pairwise) pass their own *wanted*.
    """
    wanted = _has_score_key if wanted is None else wanted
    notes = [] if notes is None else notes
    first, last = text.find("{"), text.rfind("}")
    if first < 0:
        return None
    whole: dict[str, Any] | None = None
    if last > first:
        candidate = text[first : last + 1]
        whole = _loads(candidate)
        if whole is None:
            whole = _loads_repaired(candidate)
            if whole is not None:
                notes.append("JSON repaired (trailing commas or quotes)")
        if whole is not None and wanted(whole):
            return whole
    decoder = json.JSONDecoder(strict=False)
    start, tries = first, 0
    while start >= 0 and tries < _MAX_STARTS:
        tries += 1
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            value = None
        obj = _as_object(value)
        if obj is not None and wanted(obj):
            notes.append("JSON object found after other braces")
            return obj
        start = text.find("{", start + 1)
    return whole


def _loads(candidate: str) -> dict[str, Any] | None:
    try:
        return _as_object(json.loads(candidate, strict=False))
    except (ValueError, RecursionError):
        return None


def _loads_repaired(candidate: str) -> dict[str, Any] | None:
    fixed = _TRAILING_COMMA_RE.sub(r"\1", candidate)
    obj = _loads(fixed)
    if obj is not None or len(fixed) > _MAX_LITERAL_EVAL_CHARS:
        return obj
    try:  # Python-style dict: single quotes, True/False/None
        return _as_object(ast.literal_eval(_JSON_LITERAL_RE.sub(lambda m: _PY_LITERALS[m.group(1)], fixed)))
    except Exception:  # literal_eval raises many types (ValueError, SyntaxError, MemoryError, ...)
        pass
    return _loads(_PY_LITERAL_RE.sub(lambda m: _JSON_LITERALS[m.group(1)], fixed).replace("'", '"'))


def _as_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                return item
    return None


def norm_key(key: Any) -> str:
    """*key* without spaces, underscores and dashes, lower-cased: ``Faithfulness_Score`` -> ``faithfulnessscore``."""
    return re.sub(r"[\s_\-]", "", str(key)).lower()


def _has_score_key(obj: dict[str, Any] | None) -> bool:
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


def _extract(
    obj: dict[str, Any], notes: list[str]
) -> tuple[dict[str, _Value | None], str | None, Any]:
    flat = _flatten(obj)
    values: dict[str, _Value | None] = {}
    for key, name in _KEYS.items():
        if name in values and values[name] is not None:
            continue
        if key in flat:
            values[name] = _read_value(flat[key], name, notes)
    for name in SCORE_NAMES:
        if name not in values:
            values[name] = None
            notes.append(f"{name}: missing")
    reason = None
    for key in _REASON_KEYS:
        raw = flat.get(key)
        if raw is not None:
            reason = raw if isinstance(raw, str) else json.dumps(raw, default=str)
            reason = reason[:_MAX_REASON_CHARS]
            break
    scale_hint = next((flat[k] for k in _SCALE_KEYS if k in flat), None)
    return values, reason, scale_hint


def _read_value(raw: Any, name: str, notes: list[str]) -> _Value | None:
    if isinstance(raw, Mapping):
        inner = next((raw[k] for k in ("score", "value") if k in raw), None)
        return None if inner is None else _read_value(inner, name, notes)
    if isinstance(raw, bool) or raw is None:
        notes.append(f"{name}: not a number ({raw!r})")
        return None
    value: _Value | None = None
    if isinstance(raw, (int, float)):
        value = _Value(float(raw), True)
    elif isinstance(raw, str):
        value = _read_string(raw)
    if value is None:
        notes.append(f"{name}: not a number ({str(raw)[:40]!r})")
        return None
    if not math.isfinite(value.number):
        notes.append(f"{name}: not finite ({raw!r})")
        return None
    return value


def _read_string(raw: str) -> _Value | None:
    match = _NUMBER_RE.fullmatch(raw)
    if match:
        number = float(match.group(1))
        if match.group(2):
            return _Value(number / 100.0, False)
        return _Value(number, True)
    match = _FRACTION_RE.fullmatch(raw)
    if match:
        numerator, denominator = float(match.group(1)), float(match.group(2))
        if denominator > 0:
            return _Value(numerator / denominator, False)
        return None
    lowered = raw.strip().lower()
    if lowered in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
        return _Value(float(lowered.replace("infinity", "inf")), True)
    return None


def _scores_by_pattern(text: str) -> dict[str, _Value | None]:
    found: dict[str, _Value | None] = {}
    for match in _PATTERN_RE.finditer(text):
        name = _KEYS.get(norm_key(match.group(1)))
        if name is None or found.get(name) is not None:
            continue
        value = _read_string(match.group(2))
        found[name] = value if value is not None and math.isfinite(value.number) else None
    if not any(v is not None for v in found.values()):
        return {}
    return {name: found.get(name) for name in SCORE_NAMES}


def _explicit_scale(hint: Any) -> tuple[float, float] | None:
    lo, hi = math.nan, math.nan
    if isinstance(hint, str):
        match = _SCALE_RE.search(hint)
        if match is not None:
            lo, hi = float(match.group(1)), float(match.group(2))
        else:
            single = _read_string(hint)
            hint = single.number if single is not None else None
    if isinstance(hint, (int, float)) and not isinstance(hint, bool):
        return _BARE_SCALES.get(float(hint))
    if isinstance(hint, (list, tuple)) and len(hint) == 2:
        try:
            lo, hi = float(hint[0]), float(hint[1])
        except (TypeError, ValueError):
            return None
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        return lo, hi
    return None


def _implicit_scale(values: list[float]) -> tuple[float, float] | None:
    if not values or max(values) <= 1.0 or min(values) < 0.0:
        return None
    if any(0.0 < v < 1.0 for v in values):
        return None
    if min(values) >= 1.0 and max(values) <= 5.0:
        return 1.0, 5.0
    if max(values) <= 10.0:
        return 0.0, 10.0
    return None


def _fmt(number: float) -> str:
    return f"{number:g}"


def _build(
    values: dict[str, _Value | None], reason: str | None, scale_hint: Any, notes: list[str]
) -> ParsedScores:
    rescalable = [v.number for v in values.values() if v is not None and v.rescalable]
    scale = None
    if scale_hint is not None:
        scale = _explicit_scale(scale_hint)
        if scale is None:
            notes.append(f"unknown scale {str(scale_hint)[:40]!r} ignored")
        elif any(not scale[0] <= v <= scale[1] for v in rescalable):
            notes.append(f"scale {str(scale_hint)[:40]!r} ignored: scores lie outside it")
            scale = None
    if scale is None:
        scale = _implicit_scale(rescalable)
        if scale is not None:
            notes.append(f"scores read as a {_fmt(scale[0])}-{_fmt(scale[1])} scale")
    scale_name = None if scale is None or scale == (0.0, 1.0) else f"{_fmt(scale[0])}-{_fmt(scale[1])}"
    scores: dict[str, float | None] = {}
    for name in SCORE_NAMES:
        value = values.get(name)
        if value is None:
            scores[name] = None
            continue
        number = value.number
        if scale_name is not None and scale is not None and value.rescalable:
            number = (number - scale[0]) / (scale[1] - scale[0])
        if not 0.0 <= number <= 1.0:
            clamped = min(1.0, max(0.0, number))
            notes.append(f"{name}: {_fmt(number)} clamped to {_fmt(clamped)}")
            number = clamped
        scores[name] = number
    return ParsedScores(
        faithfulness=scores["faithfulness"],
        context_relevance=scores["context_relevance"],
        answer_relevance=scores["answer_relevance"],
        reason=reason,
        scale=scale_name,
        notes=tuple(notes),
        parsed=True,
    )
