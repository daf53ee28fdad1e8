"""Framework-neutral pieces every integration uses: run grouping, document ids, turn assembly, closing.

An integration sees a tree of runs (LangChain run ids, LlamaIndex span ids) and must turn each
root run into one [`RagTurn`][ragaudit.RagTurn]. `RunStore` does the grouping (bounded, so a
long-running process cannot leak), `doc_id_from` / `source_from` / `score_from`
read documents the way DESIGN.md says and [`retrieved_doc`][ragaudit.integrations.retrieved_doc] makes one into a
[`RetrievedDoc`][ragaudit.RetrievedDoc]. The rules that make a turn of the runs are in
`ragaudit.integrations._assembler`. Nothing here imports a framework.

The host's thread does as little as it can: while a run is open, dictionary updates; when it ends,
the source ([`TurnSource.hand_off`][ragaudit.integrations.TurnSource.hand_off]) hands the raw run data (with the OTel
context captured at its start by `current_context`) to a background thread, which builds the turn, finds its
citations, records its spans with the framework's timestamps and submits it for judging.
"""

from __future__ import annotations

import json
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from opentelemetry import context as _otel_context

from .. import _fork
from .._log import RateLimitedLog
from ..content import ContentPolicy, log_exception
from ..errors import ConfigurationError
from ..records import RetrievedDoc, normalize_relevance, stable_doc_id

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import TracerProvider

    from ..auditor import Auditor
    from ..judges.base import RagJudge
    from ..tracing.spans import SpanRecorder

__all__ = [
    "REFERENCE_ANSWER_KEY",
    "RELEVANT_IDS_KEY",
    "RunStore",
    "check_measures",
    "current_context",
    "default_auditor",
    "doc_id_from",
    "each_or_none",
    "ground_truth_from",
    "input_text",
    "judge_auditor",
    "report_failure",
    "resolve_backend",
    "retrieved_doc",
    "score_from",
    "source_from",
]

S = TypeVar("S")
R = TypeVar("R")
_I = TypeVar("_I")

RELEVANT_IDS_KEY = "ragaudit_relevant_ids"
"""Run metadata key holding a turn's ground truth: a list of relevant ids or ``{id: graded label}``."""
REFERENCE_ANSWER_KEY = "ragaudit_reference_answer"
"""Run metadata key holding a reference answer; it goes into the turn's ``metadata["reference_answer"]``."""

_ID_KEYS = ("id", "doc_id")
_SOURCE_KEYS = ("source", "file_name", "file_path", "url")
_SCORE_KEYS = ("score", "relevance_score", "_distance")

_log = RateLimitedLog()


def report_failure(where: str, exc: BaseException, content: ContentPolicy | None = None) -> None:
    """Log that an integration callback failed; once per kind, then at most once a minute with a count.
    *content*: the handler's policy, when at hand."""
    name = type(exc).__name__
    # log_exception withholds the message once any policy has capture off, and applies *content*.
    _log.warning(f"{where}:{name}", "ragaudit: %s failed (the pipeline is unaffected): %s",
                 where, log_exception(exc, content))


# --- documents -------------------------------------------------------------------------------------


def _id_text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        text = str(value)
        return text or None
    return None


def source_from(metadata: Mapping[str, object] | None) -> str | None:
    """The document's source: metadata ``source``, ``file_name``, ``file_path`` or ``url``, first set."""
    if not metadata:
        return None
    for key in _SOURCE_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def doc_id_from(obj_id: object, metadata: Mapping[str, object] | None, content: str, source: str | None) -> str:
    """A document's id: its own id (store id, ``Document.id``, node id), else metadata ``id`` /
    ``doc_id``, else [`stable_doc_id`][ragaudit.records.stable_doc_id] of *source* and *content*."""
    own = _id_text(obj_id)
    if own is not None:
        return own
    if metadata:
        for key in _ID_KEYS:
            found = _id_text(metadata.get(key))
            if found is not None:
                return found
    return stable_doc_id(content, source)


def score_from(metadata: Mapping[str, object] | None) -> float | None:
    """The score a retriever left in the metadata (``score``, ``relevance_score``, ``_distance``), if
    it is a finite number; the value is kept as the store reported it (a distance stays a distance)."""
    if not metadata:
        return None
    for key in _SCORE_KEYS:
        value = metadata.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def retrieved_doc(
    rank: int, obj_id: object, content: object, metadata: Mapping[str, object], score: float | None
) -> RetrievedDoc:
    """The [`RetrievedDoc`][ragaudit.RetrievedDoc] at *rank* of a framework's document or node: *content* as
    text ("" for None), the source from *metadata* and the id from *obj_id*, *metadata* or the text
    (`source_from`, `doc_id_from`)."""
    if not isinstance(content, str):
        content = "" if content is None else str(content)
    source = source_from(metadata)
    return RetrievedDoc(id=doc_id_from(obj_id, metadata, content, source), content=content, score=score,
                        rank=rank, source=source, metadata=metadata)


def ground_truth_from(metadata: Mapping[str, Any] | None) -> tuple[Mapping[str, int] | None, str | None]:
    """``(relevant_ids, reference_answer)`` from run metadata (`RELEVANT_IDS_KEY`,
    `REFERENCE_ANSWER_KEY`). Malformed ground truth is logged and ignored, never raised."""
    if not metadata:
        return None, None
    relevant: Mapping[str, int] | None = None
    raw = metadata.get(RELEVANT_IDS_KEY)
    if raw is not None:
        try:
            relevant = normalize_relevance(raw)
        except (ConfigurationError, TypeError) as exc:
            report_failure(f"reading metadata[{RELEVANT_IDS_KEY!r}]", exc)
    reference = metadata.get(REFERENCE_ANSWER_KEY)
    return relevant, reference if isinstance(reference, str) else None


def current_context() -> Context:
    """The OpenTelemetry context now: what a turn span started later must take as its parent."""
    return _otel_context.get_current()


# --- the shared default auditor --------------------------------------------------------------------

_defaults_lock = _fork.lock()
_default: list[Auditor] = []


def default_auditor() -> Auditor:
    """The process-wide [`Auditor`][ragaudit.Auditor] handlers use when given neither judge nor auditor.

    Created on first use with the default judge ([`ragaudit.judges.default_judge`][ragaudit.default_judge]) and shared
    by every such handler and ``instrument()``, whatever tracer provider, ``capture_content`` or
    ``redact`` they pass: those shape how each handler's turns are recorded, and travel with each
    turn ([`recorder_for`][ragaudit.Auditor.recorder_for]), so a handler made per call starts no thread and
    opens no file of its own.
    """
    with _defaults_lock:
        if not _default or _default[0].closed:  # shut down by hand: the next handlers get a working one
            from ..auditor import Auditor

            _default[:] = [Auditor(None)]
        return _default[0]


# Held weakly: the Auditor of a judge lives while a handler given that judge does (each handler
# holds it), then goes, its threads and file with it. The Auditor keeps its judge alive, so the
# judge's id cannot be reused while the entry exists.
_judge_auditors: weakref.WeakValueDictionary[int, Auditor] = weakref.WeakValueDictionary()


def judge_auditor(judge: RagJudge) -> Auditor:
    """The [`Auditor`][ragaudit.Auditor] of handlers given ``judge=``: one per judge object in use.

    A judge needs a worker of its own (its async client belongs to the event loop of the Auditor that
    calls it, a sync judge to that Auditor's thread pool, and ``timeout_s``, ``stats()`` and a cache
    are per Auditor), but not one per handler: handlers made per call with the same judge share it.
    The handlers' recording settings travel with their turns ([`recorder_for`][ragaudit.Auditor.recorder_for]).
    """
    with _defaults_lock:
        found = _judge_auditors.get(id(judge))
        if found is None or found.judge is not judge or found.closed:
            from ..auditor import Auditor

            found = Auditor(judge)
            _judge_auditors[id(judge)] = found
        return found


def resolve_backend(
    judge: RagJudge | None,
    auditor: Auditor | None,
    tracer_provider: TracerProvider | None,
    capture_content: bool | None,
    redact: Callable[[str], str] | None,
    *,
    owner: str,
) -> tuple[Auditor, SpanRecorder]:
    """``(auditor, recorder)`` for an integration handler, from its constructor arguments.

    The auditor is *auditor*; else `judge_auditor` of *judge* (shared by the handlers given
    that judge object); else `default_auditor`. The recorder of the handler's turns is
    [`Auditor.recorder_for`][ragaudit.Auditor.recorder_for] of the tracing settings (the auditor's own when none is
    given): the handler's turn spans and, since each turn is submitted with it, that turn's judge span, audit-log
    line and exporter records follow it. Raises [`ConfigurationError`][ragaudit.ConfigurationError] naming *owner* for
    contradictory arguments.
    """
    if judge is not None and auditor is not None:
        raise ConfigurationError(f"give {owner} a judge or an auditor, not both")
    from ..auditor import Auditor

    if auditor is not None and not isinstance(auditor, Auditor):
        raise ConfigurationError(f"auditor must be a ragaudit.Auditor, got {type(auditor).__name__}")
    if auditor is None:
        auditor = default_auditor() if judge is None else judge_auditor(judge)
    return auditor, auditor.recorder_for(tracer_provider, capture_content=capture_content, redact=redact)


def check_measures(measures: Sequence[str]) -> tuple[str, ...]:
    """*measures* as a tuple, each name checked now ([`MetricError`][ragaudit.MetricError] for an unknown one)."""
    if isinstance(measures, str):
        raise ConfigurationError("turn_measures must be a sequence of metric names, not a string")
    from ..metrics import parse_measure

    names = tuple(measures)
    for name in names:
        parse_measure(name)
    return names


# --- run grouping ----------------------------------------------------------------------------------


class _Root(Generic[S]):
    __slots__ = ("ended", "open", "runs", "state")

    def __init__(self, state: S, run_id: Hashable) -> None:
        self.state = state
        self.runs: list[Hashable] = [run_id]
        self.open: set[Hashable] = set()
        self.ended = False


class RunStore(Generic[S]):
    """Groups a framework's nested runs by their root run, with one state object per root.

    Not locked itself: call every method with `lock` held, and hold it only for these calls
    and small updates of the state (no judging, no export under it). At most *max_runs* roots are
    open at once; past that the oldest is evicted (returned to the caller to close, and counted in
    `evicted`). A run whose parent is unknown starts a new root (a handler attached below
    the top of a run tree, or a parent run from another tracer). Runs of a closed turn, and later
    runs under them, are remembered (the last *max_runs* ids) and ignored.
    """

    def __init__(self, max_runs: int = 10_000) -> None:
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ConfigurationError(f"max_runs must be an int >= 1, got {max_runs!r}")
        self.max_runs = max_runs
        # Re-entrant: the garbage collector may finalize an abandoned stream's generator (whose
        # cleanup emits end events) on this thread while it is inside one of these sections.
        self.lock = _fork.rlock()
        self.evicted = 0
        self._roots: OrderedDict[Hashable, _Root[S]] = OrderedDict()
        self._owner: dict[Hashable, Hashable] = {}
        self._closed: OrderedDict[Hashable, None] = OrderedDict()
        _fork.on_fork_in_child(self._after_fork)

    def _after_fork(self) -> None:
        # In a forked child the parent's open runs are the parent's: their threads are not here and
        # their ends will never come (the lock itself is reset by ragaudit._fork).
        self._roots.clear()
        self._owner.clear()

    def __len__(self) -> int:
        return len(self._roots)

    def start(
        self, run_id: Hashable, parent_id: Hashable | None, new_state: Callable[[], S] | None
    ) -> tuple[S | None, bool, list[S]]:
        """Record that *run_id* started under *parent_id*.

        Returns ``(state, is_root, evicted)``: the state of the turn the run belongs to (None when
        it is to be ignored), whether it starts a new turn (then *new_state* made the state; with
        *new_state* None a run that would start a turn is ignored), and the states evicted to make
        room, which the caller closes after releasing the lock.
        """
        if parent_id is not None:
            root_id = self._owner.get(parent_id)
            if root_id is not None:
                entry = self._roots[root_id]
                self._owner[run_id] = root_id
                entry.runs.append(run_id)
                entry.open.add(run_id)
                return entry.state, False, []
            if parent_id in self._closed:
                self._tombstone(run_id)
                return None, False, []
        if new_state is None or run_id in self._owner or run_id in self._closed:
            return None, False, []
        evicted: list[S] = []
        while len(self._roots) >= self.max_runs:
            _, old = self._roots.popitem(last=False)
            self._forget(old)
            self.evicted += 1
            evicted.append(old.state)
        entry = _Root(new_state(), run_id)
        self._roots[run_id] = entry
        self._owner[run_id] = run_id
        return entry.state, True, evicted

    def state_of(self, run_id: Hashable) -> S | None:
        """The state of the turn *run_id* belongs to, or None."""
        root_id = self._owner.get(run_id)
        return None if root_id is None else self._roots[root_id].state

    def end(self, run_id: Hashable, *, force: bool = False) -> tuple[S | None, bool]:
        """Record that *run_id* ended; returns ``(state, complete)``.

        A turn is complete when its root has ended and none of its runs is still open (a stream
        abandoned by its consumer ends the root before its model), or at once when *force* is set
        on the root's end (the root failed). A complete turn is removed here, so exactly one caller
        sees ``complete=True`` and closes it.
        """
        root_id = self._owner.get(run_id)
        if root_id is None:
            return None, False
        entry = self._roots[root_id]
        if run_id == root_id:
            entry.ended = True
        else:
            entry.open.discard(run_id)
            if not entry.ended:
                return entry.state, False
        if entry.open and not (force and run_id == root_id):
            return entry.state, False
        del self._roots[root_id]
        self._forget(entry)
        return entry.state, True

    def pop_ended(self) -> list[S]:
        """Remove and return the turns whose root has ended while some of their runs are still open."""
        ended = [root_id for root_id, entry in self._roots.items() if entry.ended]
        states = []
        for root_id in ended:
            entry = self._roots.pop(root_id)
            self._forget(entry)
            states.append(entry.state)
        return states

    def _forget(self, entry: _Root[S]) -> None:
        owner = self._owner
        for run_id in entry.runs:
            owner.pop(run_id, None)
        self._tombstone(entry.runs[0])
        for run_id in entry.open:
            self._tombstone(run_id)

    def _tombstone(self, run_id: Hashable) -> None:
        closed = self._closed
        closed[run_id] = None
        if len(closed) > self.max_runs:
            closed.popitem(last=False)


def each_or_none(items: Iterable[_I], read: Callable[[_I], R | None]) -> list[R] | None:
    """*read* of every one of *items*, in order; None as soon as one reads as None (then *items* is not a
    list of such things: a list of messages, of documents)."""
    out: list[R] = []
    for item in items:
        found = read(item)
        if found is None:
            return None
        out.append(found)
    return out


def input_text(value: object) -> str | None:
    """A tool call's input as text: strings as they are, anything else as JSON (``str()`` if it is not JSON)."""
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except Exception:
        return str(value)
