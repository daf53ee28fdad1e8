"""The turn rules, written once: what an integration's runs become as a :class:`~ragaudit.RagTurn`.

An integration reads its framework's events into :class:`TurnParts` (the root run, its child
runs as :class:`Step` s with their parents, what the root was given and returned) and calls
:func:`close_turn` on the auditor's closing thread. Everything that decides what a judge sees is
here and nowhere else:

* **Which run is the turn**: the integration's root run (one per user message: a chain, a query
  or chat engine call, an agent run). Runs below it are its steps.
* **Question**: the root's own question; for a conversation given as messages (an agent), the
  user's last message (:func:`last_user_text`); else the first retrieval's query; else "".
* **Evidence** (:func:`evidence`): what reached the model. The documents the framework says the
  answer was built from, when it says so (LlamaIndex ``source_nodes``); else every *outermost*
  retriever run (a retriever called inside another retriever, such as the base retriever of a
  compression, multi-query or ensemble retriever, is a child span, not evidence) and every tool
  output (the documents it returned, or one document: source = tool name, id = tool call id;
  a tool whose text came from retrievals it ran adds those retrievals instead), in start order,
  each id once, ranked 1..n.
* **Answer**: the root's output; else the last successful model output. ``""`` and LlamaIndex's
  ``"Empty Response"`` are empty answers: traced and counted, not judged.
* **History and standalone question** (:func:`conversation`): the earlier user and assistant
  messages (the last :data:`MAX_HISTORY_MESSAGES`, each cut at :data:`MAX_MESSAGE_CHARS`), and,
  in a conversation, the first outermost retrieval's query when it differs from the question
  (the rewrite a history-aware retriever or a condensing chat engine made).
* **Eviction and unfinished children**: an evicted turn is an error turn; a step still open at
  close is recorded ending then, with :data:`UNFINISHED` as its error.
* **Whether a turn is judged** (:func:`unjudged_reason`): it is when it has no error, a non-empty
  answer and evidence. A turn with an answer, a model call and no evidence is counted in the
  auditor's ``stats()["unjudged_no_evidence"]`` and logged once at WARNING with the fix; an
  empty answer in ``stats()["unjudged_empty_answer"]``.

Nothing here imports a framework.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .._turn_metrics import DEFAULT_TURN_MEASURES, turn_metrics
from ..records import (
    Citation,
    Generation,
    Message,
    RagTurn,
    Retrieval,
    RetrievedDoc,
    ToolCall,
    normalize_relevance,
    stable_doc_id,
    truncate,
)
from ._common import ground_truth_from, report_failure

if TYPE_CHECKING:
    from ..auditor import Auditor

__all__ = [
    "EMPTY_ANSWERS",
    "MAX_HISTORY_MESSAGES",
    "MAX_MESSAGE_CHARS",
    "UNFINISHED",
    "Step",
    "TurnParts",
    "build_turn",
    "close_turn",
    "conversation",
    "evicted_error",
    "evidence",
    "finish_turn",
    "last_user_text",
    "merge_documents",
    "step_end",
    "tool_document",
    "unjudged_reason",
]

logger = logging.getLogger("ragaudit")

UNFINISHED = "unfinished when the turn closed"
"""The error of a step (retrieval, model or tool call) still open when its turn closed."""

EMPTY_ANSWERS = frozenset({"", "Empty Response"})
"""Answers that say nothing (after stripping): LlamaIndex answers ``"Empty Response"`` when every
node was filtered out. Traced and counted (``stats()["unjudged_empty_answer"]``), never judged."""

MAX_HISTORY_MESSAGES = 10
"""At most this many earlier messages (the most recent) go into a turn's ``history``."""
MAX_MESSAGE_CHARS = 2_000
"""Each history message is cut here."""

_NO_EVIDENCE_FIX = (
    "ragaudit: a turn had an answer but no evidence, so it was not judged (counted in "
    "stats()['unjudged_no_evidence']; first: turn %s). The retriever probably ran outside the callback tree: "
    "in LangChain, pass the run's `config` to the retriever (retriever.invoke(q, config=config)) or run "
    "it with langchain_core.runnables.config.ContextThreadPoolExecutor instead of a plain thread pool; "
    "in LlamaIndex, call it inside the engine or agent. Logged once per auditor."
)


# --- the raw turn an integration hands over -----------------------------------------------------


@dataclass(slots=True)
class Step:
    """One child run of a turn, as a record, with where it sat in the run tree.

    ``documents`` is set for a tool call whose output carried documents (a retriever tool's
    artifact, a list of nodes); None for a tool that returned text.
    """

    run_id: Hashable
    parent_id: Hashable | None
    seq: int
    record: Retrieval | Generation | ToolCall
    documents: tuple[RetrievedDoc, ...] | None = None


@dataclass(slots=True)
class TurnParts:
    """What an integration read of one root run, in framework-neutral form.

    ``root_kind`` is ``"chain"``, ``"query"``, ``"chat"``, ``"agent"`` (judged when they qualify),
    ``"retrieve"`` or ``"model"`` (a retriever or a model called on its own: traced, never judged).
    ``query`` is the root's question when it had one as text; ``messages`` the conversation it was
    given (an agent's input), from which the question is the last user message;
    ``prompt_messages`` the first model call's messages (an agent's history when its memory, not
    its input, holds the conversation); ``history`` earlier messages the framework keeps (a chat
    engine's memory). ``sources`` are the documents the framework says the answer was built from.
    ``parents`` maps every run of the turn to its parent (for nesting); ``tags`` is the root's
    metadata (ground truth keys are read from it).
    """

    turn_id: str
    framework: str
    root_kind: str
    started_at: int
    ended_at: int
    query: str | None = None
    messages: Sequence[Message] = ()
    prompt_messages: Sequence[Message] = ()
    history: Sequence[Message] = ()
    answer: str | None = None
    sources: Sequence[RetrievedDoc] | None = None
    steps: list[Step] = field(default_factory=list)
    parents: Mapping[Any, Any] = field(default_factory=dict)
    error: str | None = None
    evicted_at: int | None = None  # max_runs when the turn was evicted
    tags: Mapping[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def step_end(ended_at: int | None, error: str | None, now: int) -> tuple[int, str | None]:
    """``(ended_at, error)`` of a step: a step that never ended ends at *now* with :data:`UNFINISHED`."""
    if ended_at is None:
        return now, error or UNFINISHED
    return ended_at, error


def evicted_error(max_runs: int) -> str:
    """The error of a turn evicted because *max_runs* turns were open."""
    return (f"ragaudit: turn evicted before it finished ({max_runs} turns were open; raise max_runs or look "
            "for runs that never end)")


def tool_document(name: str, call_id: str | None, text: str, rank: int = 1) -> RetrievedDoc:
    """A tool's text output as evidence: source = the tool's name, id = the tool call's id (else a
    hash of name and text)."""
    return RetrievedDoc(id=call_id or stable_doc_id(text, name), content=text, rank=rank, source=name or None)


# --- the rules -------------------------------------------------------------------------------------


def last_user_text(messages: Sequence[Message]) -> str | None:
    """The text of the last user message of *messages*, or None."""
    for role, text in reversed(messages):
        if role == "user":
            return text
    return None


def merge_documents(groups: Iterable[Sequence[RetrievedDoc]]) -> tuple[RetrievedDoc, ...]:
    """The documents of all *groups* in order, each id once (first occurrence), re-ranked 1..n.

    This is the turn's document list when a pipeline retrieves more than once (two retrievers in
    parallel, a retry, an agent's tool calls): the ranks are positions in the merged list, the
    per-retriever ranks stay on each :class:`~ragaudit.records.Retrieval`.
    """
    seen: set[str] = set()
    out: list[RetrievedDoc] = []
    for group in groups:
        for doc in group:
            if doc.id in seen:
                continue
            seen.add(doc.id)
            rank = len(out) + 1
            out.append(doc if doc.rank == rank else replace(doc, rank=rank))
    return tuple(out)


def _ancestors(step: Step, parents: Mapping[Any, Any]) -> Iterable[Hashable]:
    seen: set[Hashable] = set()
    run = parents.get(step.run_id, step.parent_id)
    while run is not None and run not in seen:
        yield run
        seen.add(run)
        run = parents.get(run)


def _nested_in_retrieval(step: Step, retrieval_runs: set[Hashable], parents: Mapping[Any, Any]) -> bool:
    return any(run in retrieval_runs for run in _ancestors(step, parents))


def outermost_retrievals(steps: Sequence[Step], parents: Mapping[Any, Any]) -> list[Step]:
    """The retrieval steps that are not inside another retrieval, in start order."""
    retrieval_runs = {s.run_id for s in steps if isinstance(s.record, Retrieval)}
    return [s for s in sorted(steps, key=lambda s: s.seq)
            if isinstance(s.record, Retrieval) and not _nested_in_retrieval(s, retrieval_runs, parents)]


def evidence(parts: TurnParts) -> tuple[RetrievedDoc, ...]:
    """The documents that reached the model (see the module docstring), ranked 1..n."""
    groups: list[Sequence[RetrievedDoc]] = []
    if parts.sources is not None:
        groups.append(parts.sources)
    else:
        retrieval_runs = {s.run_id for s in parts.steps if isinstance(s.record, Retrieval)}
        for step in sorted(parts.steps, key=lambda s: s.seq):
            record = step.record
            if isinstance(record, Retrieval) and record.error is None \
                    and not _nested_in_retrieval(step, retrieval_runs, parts.parents):
                groups.append(record.documents)
    # A tool that returned text made of retrievals it ran (a retriever tool, a query engine tool)
    # adds no evidence of its own: its retrievals are the evidence, with their documents' ids.
    tool_runs = {s.run_id for s in parts.steps if isinstance(s.record, ToolCall)}
    retrieving_tools = {run for s in parts.steps if isinstance(s.record, Retrieval)
                        for run in _ancestors(s, parts.parents) if run in tool_runs}
    for step in sorted(parts.steps, key=lambda s: s.seq):
        record = step.record
        if isinstance(record, ToolCall) and record.error is None:
            if step.documents is not None:
                groups.append(step.documents)
            elif record.output and step.run_id not in retrieving_tools:
                groups.append((tool_document(record.name, record.call_id, record.output),))
    return merge_documents(groups)


def _cap_history(messages: Iterable[Message]) -> tuple[Message, ...]:
    kept = [(role, truncate(text, MAX_MESSAGE_CHARS)) for role, text in messages
            if role in ("user", "assistant") and text]
    return tuple(kept[-MAX_HISTORY_MESSAGES:])


def _before_last_user(messages: Sequence[Message]) -> list[Message]:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i][0] == "user":
            return list(messages[:i])
    return []


def conversation(parts: TurnParts, query: str) -> tuple[tuple[Message, ...], str | None]:
    """``(history, standalone_query)`` of a turn (see the module docstring)."""
    if parts.history:
        history = _cap_history(parts.history)
    elif len(parts.messages) > 1:
        history = _cap_history(_before_last_user(parts.messages))
    elif parts.root_kind == "agent" or parts.messages:
        history = _cap_history(_before_last_user(parts.prompt_messages))
    else:
        history = ()
    standalone: str | None = None
    if history:
        for step in outermost_retrievals(parts.steps, parts.parents):
            rewritten = step.record.query if isinstance(step.record, Retrieval) else None
            if rewritten and rewritten.strip() != query.strip():
                standalone = rewritten
            break
    return history, standalone


def _answer(parts: TurnParts, generations: Sequence[Generation]) -> str | None:
    if parts.error is not None:
        return None
    if parts.answer is not None:
        return parts.answer
    return next((g.output for g in reversed(generations) if g.output is not None and g.error is None), None)


def _citations(answer: str | None, documents: Sequence[RetrievedDoc]) -> tuple[Citation, ...]:
    if not answer or not documents:
        return ()
    try:
        from ..citations import find_citations

        return tuple(find_citations(answer, documents))
    except Exception as exc:
        report_failure("finding citations", exc)
        return ()


def build_turn(parts: TurnParts, handle: Any = None) -> RagTurn:
    """The :class:`~ragaudit.RagTurn` of *parts* (the rules in the module docstring).

    ``trace_id``/``span_id`` come from *handle* (the turn span's
    :class:`~ragaudit.tracing.spans.TurnHandle`). Raises :class:`~ragaudit.ConfigurationError`
    only for values a record rejects.
    """
    if parts.evicted_at is not None:
        parts.error = evicted_error(parts.evicted_at)
    ordered = sorted(parts.steps, key=lambda s: s.seq)
    retrievals = tuple(s.record for s in ordered if isinstance(s.record, Retrieval))
    generations = tuple(s.record for s in ordered if isinstance(s.record, Generation))
    tool_calls = tuple(s.record for s in ordered if isinstance(s.record, ToolCall))
    query = parts.query
    if not query:
        query = last_user_text(parts.messages)
    if not query:
        query = next((r.query for r in retrievals if r.query), "")
    history, standalone = conversation(parts, query)
    answer = _answer(parts, generations)
    documents = evidence(parts)
    relevant_ids, reference = ground_truth_from(parts.tags)
    metadata = dict(parts.metadata)
    if parts.tags:
        for key, value in parts.tags.items():
            if isinstance(key, str) and not key.startswith(("ragaudit_", "ls_")):
                metadata.setdefault(key, value)
    if reference is not None:
        metadata["reference_answer"] = reference
    model = next((g.model for g in reversed(generations) if g.model), None)
    return RagTurn(
        turn_id=parts.turn_id,
        query=query,
        answer=answer,
        documents=documents,
        citations=_citations(answer, documents),
        model=model,
        framework=parts.framework,
        started_at=parts.started_at,
        ended_at=parts.ended_at,
        trace_id=getattr(handle, "trace_id", None),
        span_id=getattr(handle, "span_id", None),
        sampled_out=bool(getattr(handle, "sampled_out", False)),
        relevant_ids=normalize_relevance(relevant_ids),
        metadata=metadata,
        error=parts.error,
        retrievals=retrievals,
        generations=generations,
        tool_calls=tool_calls,
        history=history,
        standalone_query=standalone,
    )


def unjudged_reason(turn: RagTurn, root_kind: str) -> str | None:
    """Why *turn* is not judged, or None when it is.

    ``"error"``, ``"no_answer"``, ``"standalone"`` (a retriever or model called on its own),
    ``"empty_answer"`` (counted), ``"no_evidence"`` (an answer from a model call and no evidence:
    counted and warned about), ``"no_model"`` (an answer that no model call made).
    """
    if turn.error is not None:
        return "error"
    if root_kind in ("retrieve", "model"):
        return "standalone"
    if turn.answer is None:
        return "no_answer"
    if turn.answer.strip() in EMPTY_ANSWERS:
        return "empty_answer"
    if not turn.documents and not turn.retrievals and not turn.tool_calls:
        # A retriever that ran and found nothing is judged (an honest "I don't know" is faithful).
        return "no_evidence" if turn.generations else "no_model"
    return None


def _note_unjudged(auditor: Auditor, turn: RagTurn, reason: str, recorder: Any) -> None:
    if reason not in ("no_evidence", "empty_answer"):
        return
    try:
        first = auditor.record_unjudged(turn, reason, content_policy=recorder.content,
                                        tracer_provider=recorder.tracer_provider)
    except Exception as exc:  # a user's stand-in auditor
        report_failure("counting an unjudged turn", exc)
        return
    if reason == "no_evidence" and first:
        logger.warning(_NO_EVIDENCE_FIX, turn.turn_id)


def finish_turn(
    recorder: Any,
    auditor: Auditor | None,
    handle: Any,
    turn: RagTurn,
    *,
    measures: Sequence[str] = DEFAULT_TURN_MEASURES,
) -> str | None:
    """Submit *turn* to *auditor* (skipped when it is None) and end its span. Never raises.

    Returns the submit status (``"queued"``, ``"judged"``, ...), or None when the turn was not
    submitted; the status and the retrieval metrics (*measures*, when the turn's ``relevant_ids``
    are known; computed once, for the span and the turn's audit record) go on the turn span. The
    turn's retrieval spans are started first, so its record carries their ids.
    """
    status: str | None = None
    metrics: Mapping[str, float] | None = None
    try:
        metrics = turn_metrics(turn, measures)
    except Exception as exc:
        report_failure("computing retrieval metrics", exc)
    try:
        turn = recorder.start_children(handle, turn)
    except Exception as exc:
        report_failure("starting the retrieval spans", exc)
    record = None
    if auditor is not None:
        try:
            # The handler's policy and provider go with the turn: its record follows them.
            submitted = auditor.submit_turn(turn, content_policy=recorder.content,
                                            tracer_provider=recorder.tracer_provider, ground_truth_metrics=metrics)
            status, record = submitted.status, submitted.record
        except Exception as exc:  # Auditor.submit_turn never raises; a user's stand-in might
            report_failure("submitting a turn", exc)
            status = "dropped"
    try:
        recorder.end_turn(handle, turn, judge_status=status, retrieval_metrics=metrics, record=record)
    except Exception as exc:
        report_failure("ending a turn span", exc)
    return status


def close_turn(
    parts: TurnParts,
    recorder: Any,
    auditor: Auditor,
    *,
    parent: Any = None,
    measures: Sequence[str] = DEFAULT_TURN_MEASURES,
) -> RagTurn:
    """On the closing thread: open the turn span (under *parent*, the OTel context at the root's
    start), build the turn, submit it when it is to be judged (else count why not), end the span.
    Never raises; a turn that cannot be built is recorded as an error turn."""
    handle = recorder.start_turn(start_ns=parts.started_at, parent=parent)
    try:
        turn = build_turn(parts, handle)
    except Exception as exc:
        report_failure(f"building a {parts.framework} turn", exc)
        turn = RagTurn(turn_id=parts.turn_id, query=parts.query or "", answer=None, framework=parts.framework,
                       started_at=parts.started_at, ended_at=parts.ended_at,
                       error=f"ragaudit could not build this turn: {exc}")
    reason = unjudged_reason(turn, parts.root_kind)
    if reason is not None:
        _note_unjudged(auditor, turn, reason, recorder)
    finish_turn(recorder, auditor if reason is None else None, handle, turn, measures=measures)
    return turn
