"""The argparse types of every numeric flag: finite, in range, else one line and exit 2.

``type=float`` takes ``nan`` and ``inf`` (``--shutdown-timeout nan`` started a worker that then judged
nothing at SIGTERM; ``--quiet nan`` ended in "unexpected error: ValueError"). These types refuse
them at parse time, where argparse says ``ragaudit worker: error: argument --quiet: must be a finite
number >= 0, got 'nan'`` and exits 2, the convention of every argparse command.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from .._numbers import describe, problem

__all__ = ["finite_float", "whole_number"]


def finite_float(low: float | None = None, high: float | None = None, *,
                 low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite float in range (``low_open``: *low* itself excluded)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None  # said below, with the range
        if value is None or problem(value, low, high, low_open=low_open):
            raise argparse.ArgumentTypeError(f"must be {describe(low, high, low_open=low_open)}, got {text!r}")
        return value

    parse.__name__ = "number"  # argparse names the type in some messages
    return parse


def whole_number(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an int in range (``5``, not ``5.0`` nor ``nan``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or problem(value, low, high, whole=True):
            raise argparse.ArgumentTypeError(f"must be {describe(low, high, whole=True)}, got {text!r}")
        return value

    parse.__name__ = "whole number"
    return parse
