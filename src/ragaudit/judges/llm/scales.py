"""Rules D and E of `ragaudit.judges.llm.parsing`: reading a verdict's values onto [0, 1], and on
which scale. Nothing is ever clamped; a scale in doubt gives no score (see the parsing module)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["UnitScores", "read_unit_scores"]

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_NUMBER_RE = re.compile(rf"\s*({_NUMBER})\s*(%?)\s*")
_FRACTION_RE = re.compile(rf"\s*({_NUMBER})\s*/\s*({_NUMBER})\s*")
_SCALE_RE = re.compile(rf"({_NUMBER})\s*(?:-|–|—|to|\.\.)\s*({_NUMBER})")
_BARE_SCALES = {1.0: (0.0, 1.0), 5.0: (1.0, 5.0), 10.0: (0.0, 10.0), 100.0: (0.0, 100.0)}
_CERTAIN_SCALES = ((1.0, 5.0), (0.0, 10.0), (0.0, 100.0))


# -- D, E. values and the scale -------------------------------------------------------------------


@dataclass(slots=True)
class _Value:
    number: float
    plain: bool  # False: a percentage or fraction, which states its own scale


@dataclass(frozen=True, slots=True)
class UnitScores:
    """Scores on [0, 1] read by `read_unit_scores`.

    ``scores``: every name given, None where no score could be read; ``scale``: the scale the plain
    values were read on (``"1-5"``, ...) or None for 0-1; ``rejected``: names whose value was a
    number above 1 on no stated or certain scale (ask the judge again).
    """

    scores: Mapping[str, float | None]
    scale: str | None = None
    rejected: tuple[str, ...] = ()


def read_unit_scores(raw: Mapping[str, Any], scale_hint: Any = None, *, notes: list[str]) -> UnitScores:
    """Read each value of *raw* (score name -> value as written) onto [0, 1] by rules D and E.

    *scale_hint* is the scale the judge stated, if any (the verdict's ``"scale"``). Never clamps.
    """
    values = {name: _read_value(value, name, notes) for name, value in raw.items()}
    plain = [v.number for v in values.values() if v is not None and v.plain]
    scale: tuple[float, float] | None = None
    if scale_hint is not None:
        stated = _explicit_scale(scale_hint)
        if stated is None:
            notes.append(f"unknown scale {str(scale_hint)[:40]!r} ignored")
        elif any(not stated[0] <= v <= stated[1] for v in plain):
            notes.append(f"scale {str(scale_hint)[:40]!r} ignored: scores lie outside it")
        else:
            scale = stated
    if scale is None and any(v > 1.0 for v in plain):
        scale = _certain_scale(plain)
        if scale is not None:
            notes.append(f"scores read as a {_fmt(scale[0])}-{_fmt(scale[1])} scale (both ends given)")
    unit = scale is None or scale == (0.0, 1.0)
    scores: dict[str, float | None] = {}
    rejected: list[str] = []
    if scale is None and any(v > 1.0 for v in plain):
        # A value off [0, 1] on no stated or certain scale puts the scale of the whole verdict in
        # doubt: 0, 1 and 2 are not "0, a perfect score and an error", they are on some other scale.
        shown = ", ".join(_fmt(v) for v in plain)
        notes.append(f"the verdict's scale is in doubt ({shown}: a value above 1 on no stated or certain "
                     "scale): no score")
        for name, value in values.items():
            scores[name] = None
            if value is not None:
                rejected.append(name)
        return UnitScores(scores, None, tuple(rejected))
    for name, value in values.items():
        if value is None:
            scores[name] = None
            continue
        number = value.number
        if value.plain and scale is not None and not unit:
            number = (number - scale[0]) / (scale[1] - scale[0])
        if not 0.0 <= number <= 1.0:
            notes.append(f"{name}: {_fmt(value.number)} is on no stated or certain scale: no score")
            scores[name] = None
            rejected.append(name)
            continue
        scores[name] = number
    name_of_scale = None if unit or scale is None else f"{_fmt(scale[0])}-{_fmt(scale[1])}"
    return UnitScores(scores, name_of_scale, tuple(rejected))


def _read_value(raw: object, name: str, notes: list[str]) -> _Value | None:
    if isinstance(raw, Mapping):
        inner = next((raw[k] for k in ("score", "value") if k in raw), None)
        if inner is None:
            notes.append(f"{name}: no score in {str(raw)[:40]!r}")
            return None
        return _read_value(inner, name, notes)
    if isinstance(raw, bool) or raw is None:
        notes.append(f"{name}: not a number ({raw!r})")
        return None
    value: _Value | None = None
    if isinstance(raw, (int, float)):
        try:
            value = _Value(float(raw), True)
        except OverflowError:  # an int too large for a float
            value = _Value(math.inf, True)
    elif isinstance(raw, str):
        value = _read_string(raw)
    if value is None:
        notes.append(f"{name}: not a number ({str(raw)[:40]!r})")
        return None
    if not math.isfinite(value.number):
        notes.append(f"{name}: not finite ({str(raw)[:40]!r})")
        return None
    if value.number < 0.0:
        notes.append(f"{name}: negative ({str(raw)[:40]!r}), read as no score")
        return None
    if not value.plain and value.number > 1.0:
        notes.append(f"{name}: {str(raw)[:40]!r} is above 100%: no score")
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
        if denominator > 0 and math.isfinite(denominator):
            return _Value(numerator / denominator, False)
        return None
    lowered = raw.strip().lower()
    if lowered in ("nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"):
        return _Value(math.nan, True)
    return None


def _explicit_scale(hint: object) -> tuple[float, float] | None:
    lo, hi = math.nan, math.nan
    if isinstance(hint, str):
        match = _SCALE_RE.search(hint)
        if match is not None:
            lo, hi = float(match.group(1)), float(match.group(2))
        else:
            single = _read_string(hint)
            hint = single.number if single is not None and single.plain else None
    if isinstance(hint, (int, float)) and not isinstance(hint, bool):
        return _BARE_SCALES.get(float(hint))
    if isinstance(hint, (list, tuple)) and len(hint) == 2:
        try:
            lo, hi = float(hint[0]), float(hint[1])
        except (TypeError, ValueError, OverflowError):
            return None
    if math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi:
        return lo, hi
    return None


def _certain_scale(values: Sequence[float]) -> tuple[float, float] | None:
    """The one scale the plain *values* leave no doubt about (rule E), or None."""
    if any(0.0 < v < 1.0 for v in values):
        return None
    present = set(values)
    for lo, hi in _CERTAIN_SCALES:
        if lo in present and hi in present and all(lo <= v <= hi for v in values):
            return lo, hi
    return None


def _fmt(number: float) -> str:
    return f"{number:g}"
