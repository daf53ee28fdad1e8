"""[`TurnSource`][ragaudit.integrations.TurnSource]: the base every source of turns subclasses.

As openinference's instrumentors subclass its ``BaseTracer``, LangChain's callback handler, LlamaIndex's
collector and the OTLP worker subclass this one, and so close every turn the same way: the source's steps go
through one [`TurnAssembler`][ragaudit.integrations.TurnAssembler] and its
[`close`][ragaudit.integrations.TurnAssembler.close] into the Auditor, judged (`submit_turn`) or not
(`record_unjudged`, with the reason): every finished turn, in every source, ends as an `AuditRecord`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

from .._turn_metrics import DEFAULT_TURN_MEASURES
from ._assembler import ClosedTurn, TurnAssembler
from ._closing import closer_for
from ._common import check_measures, report_failure
from ._evidence import DocumentMemory
from .steps import ErrorStep, Step, dispatch

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..auditor import Auditor
    from ..content import ContentPolicy
    from ..tracing.spans import SpanRecorder, TurnHandle

__all__ = ["StepsAt", "TurnSource"]

StepsAt = Callable[[int], Iterable[Step]]
"""A finished turn's steps, read on the closing thread, given the time it closed (epoch ns)."""


class TurnSource:
    """The base of a source of turns: a framework adapter (LangChain, LlamaIndex) or the OTLP worker.

    A subclass reads its framework's events into its own run state and, when a turn finishes, calls
    [`hand_off`][ragaudit.integrations.TurnSource.hand_off] on the host's thread with a function that reads that
    state into [steps][ragaudit.integrations.steps]. The base does the rest, the same way for every source:

    * at hand-off, the Auditor decides whether the turn is closed at all (`Auditor.admit_turn`: sampling and
      shedding, each counted), then the close goes to the closing thread above the Auditor
      ([`closer_for`][ragaudit.integrations.closer_for]), never run on the host's;
    * there, [`close_turn`][ragaudit.integrations.TurnSource.close_turn] runs the steps through a
      [`TurnAssembler`][ragaudit.integrations.TurnAssembler], whose ``close`` records the turn's spans and submits
      it, or records it unjudged with its reason;
    * the source is registered with that closer (held weakly), so the Auditor's ``force_flush``, ``shutdown``,
      the exit hook and SIGTERM first close its ended turns
      ([`close_ended_turns`][ragaudit.integrations.TurnSource.close_ended_turns]);
    * [`force_flush`][ragaudit.integrations.TurnSource.force_flush] and
      [`stats`][ragaudit.integrations.TurnSource.stats] are the source's public face.

    *auditor* judges the turns; *recorder* writes their spans (None: the spans exist already, as in a
    received trace, and [`close_turn`][ragaudit.integrations.TurnSource.close_turn] is given the turn's
    ``handle``); *turn_measures*: the retrieval metrics put on a turn whose ground truth is known. A source keeps
    ``closed_turns`` up to date (under its own lock) and may extend ``stats()``. Nothing here raises into the host.
    """

    def __init__(self, auditor: Auditor, recorder: SpanRecorder | None, *,
                 turn_measures: Sequence[str] = DEFAULT_TURN_MEASURES) -> None:
        self.auditor = auditor
        self.recorder = recorder
        self.turn_measures = check_measures(turn_measures)
        self.memory = DocumentMemory()  # what earlier turns retrieved: a follow-up quoting it keeps the ids
        self.closed_turns = 0
        from ..auditor import Auditor

        if isinstance(auditor, Auditor):
            closer_for(auditor).attach(self)

    # -- the public face ------------------------------------------------------------------------

    def close_ended_turns(self) -> int:
        """Close every turn whose root run has ended but some child run has not (a hung tool thread, a lost
        callback), its open children marked unfinished; returns how many. Run by
        [`force_flush`][ragaudit.integrations.TurnSource.force_flush], the Auditor's ``force_flush`` and
        ``shutdown`` and at exit. None here (a source whose turns always finish); never raises."""
        return 0

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Close the ended turns, then wait until every turn closed so far is built, recorded, judged and
        exported (the closer, then `Auditor.force_flush`), within *timeout_s*. False when the time ran out or
        something was not delivered. Never raises."""
        try:
            self.close_ended_turns()
        except Exception as exc:
            report_failure("closing the ended turns", exc, self._policy())
        return closer_for(self.auditor).force_flush(timeout_s)

    def stats(self) -> dict[str, int]:
        """``closed_turns``: the turns this source closed (a subclass adds counts of its own)."""
        return {"closed_turns": self.closed_turns}

    # -- for subclasses -------------------------------------------------------------------------

    def hand_off(self, turn_id: str, steps: StepsAt, *, root_id: Hashable, framework: str,
                 parent: Context | None = None, retrieval_outside: bool = False,
                 answer_field: str | None = None) -> bool:
        """On the host's thread, once a turn has finished and no event can touch its state any more: leave it to
        the closing thread, which reads *steps* (given the time the turn closed) and
        [closes][ragaudit.integrations.TurnSource.close_turn] it. *turn_id* is the id the assembler gives the turn
        (its root's *root_id*): sampling and shedding are decided by it now, so a turn that will not be judged
        costs a counter, not an assembly. With an inline Auditor the turn is closed before this returns. False when
        the turn was declined or dropped (counted). Never raises."""
        now = time.time_ns()
        job = partial(self._close_later, steps, now, root_id, framework, parent, retrieval_outside, answer_field)
        try:
            if not self.auditor.admit_turn(turn_id):
                return False
            return closer_for(self.auditor).defer(job)
        except Exception as exc:
            report_failure("closing a turn", exc, self._policy())
            return False

    def close_turn(self, steps: Iterable[Step], *, closed_at: int | None, root_id: Hashable, framework: str,
                   parent: Context | None = None, handle: TurnHandle | None = None,
                   retrieval_outside: bool = False, answer_field: str | None = None) -> ClosedTurn:
        """Close one finished turn now, on this thread: *steps* through a
        [`TurnAssembler`][ragaudit.integrations.TurnAssembler] of *framework*, then its
        [`close`][ragaudit.integrations.TurnAssembler.close] (spans under *parent*; none when the recorder is
        None and *handle* names the turn's span in a received trace). A step still open ends at *closed_at* (epoch
        ns; None: the last time a step reported). A step that cannot be read ends the turn as an error
        (``unjudged`` ``failed``). Calls [`turn_closed`][ragaudit.integrations.TurnSource.turn_closed]. Never
        raises."""
        recorder = self.recorder
        assembler = TurnAssembler(framework, capture_content=recorder.capture_content if recorder else True,
                                  retrieval_outside=retrieval_outside, answer_field=answer_field, memory=self.memory)
        try:
            for step in steps:
                dispatch(assembler, step)
        except Exception as exc:
            report_failure(f"reading a {framework} turn", exc, self._policy())
            dispatch(assembler, ErrorStep(root_id, f"ragaudit could not read this turn: {exc}", closed_at))
        closed = assembler.close(recorder, self.auditor, parent=parent, closed_at=closed_at,
                                 measures=self.turn_measures, handle=handle)
        self.turn_closed(closed)
        return closed

    def turn_closed(self, closed: ClosedTurn) -> None:
        """Called with every turn [`close_turn`][ragaudit.integrations.TurnSource.close_turn] closed, on the thread
        that closed it (for a source's own counts); nothing here. Must not raise."""

    def _close_later(self, steps: StepsAt, now: int, root_id: Hashable, framework: str, parent: Context | None,
                     retrieval_outside: bool, answer_field: str | None) -> None:
        # The closing thread's job: a failure is logged with this source's content policy, not the Auditor's.
        try:
            self.close_turn(_read(steps, now), closed_at=now, root_id=root_id, framework=framework, parent=parent,
                            retrieval_outside=retrieval_outside, answer_field=answer_field)
        except Exception as exc:
            report_failure("closing a turn", exc, self._policy())

    def _policy(self) -> ContentPolicy | None:
        return self.recorder.content_policy if self.recorder is not None else None


def _read(steps: StepsAt, now: int) -> Iterator[Step]:
    # Lazily: a failure to read the turn's state happens inside close_turn, which ends the turn as an error.
    yield from steps(now)
