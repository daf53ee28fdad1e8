"""Sampled-out turns kept a while, so a user's thumbs-down can still get them judged (private).

``CostControl(retain_s=600)`` keeps each turn the sampler left out, with what recorded it, for
*retain_s* seconds and at most *max_retained* of them (the oldest go first, counted
``retained_evicted``). ``auditor.feedback(turn_id, value)`` with a negative value on a turn still
kept submits it for judging, past the sampler; a turn no longer kept is counted
``feedback_unmatched``. Off by default (``retain_s=None``): keeping turns costs memory.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from .. import _fork
from ..errors import ConfigurationError
from ..records import RagTurn

if TYPE_CHECKING:
    from ._submitting import Job

__all__ = ["FEEDBACK", "FeedbackRetention", "is_negative"]

FEEDBACK = ("feedback_judged", "feedback_unmatched", "retained_evicted")
"""The ``stats()`` counters of feedback and retention."""

_NEGATIVE_WORDS = frozenset({"down", "thumbs_down", "thumbs-down", "bad", "negative", "no", "wrong", "👎"})


def is_negative(value: object) -> bool:
    """Whether a feedback *value* is a thumbs-down: False, a number below 0.5 (0, -1, a 1-5 score is not
    accepted: give 0-1), or a word such as ``"down"``, ``"bad"``, ``"negative"``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return math.isfinite(value) and value < 0.5
    if isinstance(value, str):
        return value.strip().lower() in _NEGATIVE_WORDS
    return False


class FeedbackRetention:
    """A bounded, time-limited map ``turn_id -> (turn, recording)`` of sampled-out turns."""

    def __init__(self, retain_s: float | None, max_retained: int) -> None:
        if retain_s is not None and (isinstance(retain_s, bool) or not isinstance(retain_s, (int, float))
                                     or not math.isfinite(retain_s) or retain_s <= 0):
            raise ConfigurationError(f"retain_s must be a number of seconds > 0 or None, got {retain_s!r}")
        if isinstance(max_retained, bool) or not isinstance(max_retained, int) or max_retained < 1:
            raise ConfigurationError(f"max_retained must be an int >= 1, got {max_retained!r}")
        self.retain_s = retain_s
        self.max_retained = max_retained
        self._lock = _fork.lock()
        self._kept: OrderedDict[str, tuple[float, RagTurn, Job]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.retain_s is not None

    def keep(self, turn: RagTurn, recording: Job) -> int:
        """Keep *turn*; returns how many older turns were evicted to make room."""
        if self.retain_s is None:
            return 0
        now = time.monotonic()
        with self._lock:
            self._kept[turn.turn_id] = (now + self.retain_s, turn, recording)
            self._kept.move_to_end(turn.turn_id)
            evicted = 0
            while len(self._kept) > self.max_retained:
                self._kept.popitem(last=False)
                evicted += 1
            return evicted

    def take(self, turn_id: str) -> tuple[RagTurn, Job] | None:
        """The kept turn *turn_id* (removed), or None when it was never kept or has expired."""
        with self._lock:
            entry = self._kept.pop(turn_id, None)
            now = time.monotonic()
            while self._kept:  # expired entries are at the front (kept in insertion order)
                until, _, _ = next(iter(self._kept.values()))
                if until > now:
                    break
                self._kept.popitem(last=False)
        if entry is None or entry[0] <= now:
            return None
        return entry[1], entry[2]

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
