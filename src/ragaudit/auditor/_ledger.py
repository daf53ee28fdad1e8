"""The Auditor's ledger: the counts of ``stats()``, the pending gauge and the closed flag, under one lock.

Every part of the Auditor that decides what becomes of a turn (admission at hand-off, the submit strategy, the
judging of a turn, the export stage's delivery) counts here, each in one step with the pending gauge, so that one
snapshot always adds up: ``submitted == judged + failed + dropped + sampled_out + pending + to_worker`` plus the
turns not sent. The ledger knows nothing of the parts; they are given it at construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import _fork
from ..records import UNSUBMITTED_REASONS, AuditRecord
from ._governor import NOT_SENT

__all__ = ["Ledger"]


def _zero_counts() -> dict[str, int]:
    """Every count of ``stats()``, at zero (the gauges, ``pending`` and ``closing``, are kept apart)."""
    return {"submitted": 0, "judged": 0, "failed": 0, "dropped": 0, "sampled_out": 0, "to_worker": 0,
            "evidence_from_prompt": 0,
            **{f"unjudged_{reason}": 0 for reason in UNSUBMITTED_REASONS}, **dict.fromkeys(NOT_SENT, 0)}


class Ledger:
    """The counts, ``pending`` (turns queued or being judged) and ``closed`` (shutdown has begun). Callers that
    change several values in one step hold ``lock`` (a fork-safe lock) themselves."""

    __slots__ = ("closed", "counts", "lock", "pending")

    def __init__(self) -> None:
        self.lock = _fork.lock()
        self.counts = _zero_counts()
        self.pending = 0
        self.closed = False

    def count(self, key: str) -> bool:
        """Add one to ``counts[key]``; True the first time. A key that is not counted is ignored (False)."""
        with self.lock:
            if key not in self.counts:
                return False
            self.counts[key] += 1
            return self.counts[key] == 1

    def shed(self, key: str) -> None:
        """A turn decided before it was queued: submitted, and counted under *key* (``dropped``, ``sampled_out``...)."""
        with self.lock:
            self.counts["submitted"] += 1
            self.counts[key] += 1

    def done(self) -> int:
        """Turns finished so far (judged, failed or not sent). The caller holds ``lock``."""
        counts = self.counts
        return counts["judged"] + counts["failed"] + sum(map(counts.__getitem__, NOT_SENT))

    def unqueue(self, key: str = "dropped") -> None:
        """A queued turn that left the queue without a record of its own: counted under *key*."""
        with self.lock:
            self.pending -= 1
            self.counts[key] += 1

    def delivered(self, records: Sequence[AuditRecord]) -> None:
        """Every exporter had *records*: their turns are judged or failed now, in one step with ``pending`` (a
        snapshot taken meanwhile still adds up). An empty batch: a record that could not be made (one failed
        judgement). Records of turns not judged (``unjudged``) were counted when they were decided."""
        with self.lock:
            if not records:
                self.pending -= 1
                self.counts["failed"] += 1
            for record in records:
                if record.unjudged is None:
                    self.pending -= 1
                    self.counts[record.status] += 1

    def snapshot(self) -> dict[str, int]:
        """Every count and ``pending``, in one consistent step."""
        with self.lock:
            return {**self.counts, "pending": self.pending}

    def close(self) -> bool:
        """Mark shutdown begun; True when this call did (False: it had begun already)."""
        with self.lock:
            first, self.closed = not self.closed, True
            return first

    def after_fork(self) -> None:
        """In a forked child: the parent's judgements in flight are the parent's; the child's counts start at zero
        (the lock itself is reset by ``ragaudit._fork``)."""
        self.pending = 0
        self.counts = dict.fromkeys(self.counts, 0)
