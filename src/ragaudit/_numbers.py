"""Numbers given to constructors and command-line flags, checked once and said the same way (private).

A NaN passes every ``value < 0`` test and an infinity every ``value > 0`` one, so a check written as a
comparison lets both in (``--shutdown-timeout nan`` once started a worker that then judged nothing at
SIGTERM). `check_number` is the one check: finite, of the right kind, in range, else a
[`ConfigurationError`][ragaudit.ConfigurationError] naming the argument, what it must be and what it got.
The CLI's argparse types (``ragaudit.cli._numbers``) say the same words.
"""

from __future__ import annotations

import math
from typing import overload

from .errors import ConfigurationError

__all__ = ["check_number", "describe", "problem"]


def describe(low: float | None = None, high: float | None = None, *, low_open: bool = False,
             whole: bool = False) -> str:
    """What a number in this range is, in words: ``"a finite number > 0"``, ``"a whole number in [0, 65535]"``."""
    kind = "a whole number" if whole else "a finite number"
    if low is not None and high is not None:
        return f"{kind} in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{kind} <= {high:g}"
    return kind


def problem(value: object, low: float | None = None, high: float | None = None, *, low_open: bool = False,
            whole: bool = False) -> bool:
    """Whether *value* is not a number of this kind and range (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if whole and not isinstance(value, int):
        return True
    if not math.isfinite(value):
        return True
    if low is not None and (value <= low if low_open else value < low):
        return True
    return high is not None and value > high


@overload
def check_number(name: str, value: int, low: float | None = ..., high: float | None = ..., *,
                 low_open: bool = ..., whole: bool = ...) -> int: ...
@overload
def check_number(name: str, value: float, low: float | None = ..., high: float | None = ..., *,
                 low_open: bool = ..., whole: bool = ...) -> float: ...
def check_number(name: str, value: float, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, whole: bool = False) -> float:
    """*value* when it is a finite number in range (``low_open``: *low* itself excluded; ``whole``: an int),
    else [`ConfigurationError`][ragaudit.ConfigurationError] ``"<name> must be <what>, got <value>"``."""
    if problem(value, low, high, low_open=low_open, whole=whole):
        raise ConfigurationError(f"{name} must be {describe(low, high, low_open=low_open, whole=whole)}, "
                                 f"got {value!r}")
    return value
