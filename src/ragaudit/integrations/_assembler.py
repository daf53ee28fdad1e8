"""The turn rules, written once: what a source's steps become as a [`RagTurn`][ragaudit.RagTurn].

A source (an integration, the OTLP worker) translates one user message's run into the steps of
[`ragaudit.integrations.steps`][ragaudit.integrations.steps] and hands them to a
[`TurnAssembler`][ragaudit.integrations.TurnAssembler] through [`dispatch`][ragaudit.integrations.steps.dispatch], on
the auditor's closing thread. Everything that decides what a judge sees is here and nowhere else:

* **Which run is the turn**: the first [`RunStarted`][ragaudit.integrations.steps.RunStarted] (one per
  user message: a chain, a query or chat engine call, an agent or workflow run). Steps below it
  are its children.
* **Question**: the root's own question; for a conversation given as messages (an agent), the
  user's last message (`last_user_text`); else the first retrieval's query; else "".
* **Evidence** (`evidence`): what reached the model, as much of each document as reached it
  (a document cut on the way is evidence with its first part, ``truncated``); when none reached it,
  the documents of earlier turns its input quotes whole (a follow-up answered from memory keeps
  their ids). The documents
  the framework says the answer was built from, when it says so (LlamaIndex ``source_nodes``); else
  every *outermost* retrieval (a retriever called inside another retriever, such as the base
  retriever of a compression, multi-query or ensemble retriever, is a child span, not evidence) and
  every tool output (the documents it returned, or one document: source = tool name, id = tool call
  id; a tool whose text came from retrievals it ran adds those retrievals instead), in start order,
  each id once, ranked 1..n.
* **Answer**: the text field of the root's structured answer (``with_structured_output``, an agent's
  ``structured_response`` by tool calling or by the provider's JSON mode); else the root's answer; else,
  when that is empty and a tool ended the run (``return_direct``), the tool's output; else the last
  successful model output. ``""`` and LlamaIndex's ``"Empty Response"`` are empty answers: traced and
  counted, not judged.
* **History and standalone question** (`conversation`): the earlier user and assistant
  messages (the last `MAX_HISTORY_MESSAGES`, each cut at `MAX_MESSAGE_CHARS`), and,
  in a conversation, the first outermost retrieval's query when it differs from the question
  (the rewrite a history-aware retriever or a condensing chat engine made).
* **Cut-off turns and unfinished children**: a turn with an
  [`ErrorStep`][ragaudit.integrations.steps.ErrorStep] is an error turn; a step still open at close is
  recorded ending then, with `UNFINISHED` as its error.
* **Whether a turn is judged** (`unjudged_reason`): it is when it has no error, a non-empty
  answer and evidence. A turn with an answer, a model call and no evidence is counted in the
  auditor's ``stats()["unjudged_no_evidence"]`` and logged once at WARNING with the fix; an
  empty answer in ``stats()["unjudged_empty_answer"]``.

Nothing here imports a framework.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

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
from ._evidence import DocumentMemory, Reference, normalize, numbers_from_zero, prompt_passages, reached
from ._structured import structured_answer, structured_citations
from .steps import ErrorStep, ModelCall, RetrievalStep, RunEnded, RunKind, RunStarted, ToolResult

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..auditor import Auditor
    from ..tracing.spans import SpanRecorder, TurnHandle

__all__ = [
    "EMPTY_ANSWERS",
    "MAX_HISTORY_MESSAGES",
    "MAX_MESSAGE_CHARS",
    "UNFINISHED",
    "ClosedTurn",
    "TurnAssembler",
    "conversation",
    "direct_tool_answer",
    "evicted_error",
    "evidence",
    "finish_turn",
    "last_user_text",
    "merge_documents",
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

_NO_EVIDENCE_FIX = {
    "none": (
        "ragaudit: a turn had an answer but no evidence, so it was not judged (counted in "
        "stats()['unjudged_no_evidence']; first: turn %s). No retrieval was observed and the model's input held "
        "no context beyond the question. If the app retrieves, let ragaudit see it: in LangChain, call "
        "ragaudit.integrations.langchain.instrument() (it also sees vector-store searches such as "
        "similarity_search) or use a retriever inside the chain; in LlamaIndex, call the retriever inside the "
        "engine, agent or workflow. Logged once per auditor."
    ),
    "outside": (
        "ragaudit: a turn had an answer but no evidence, so it was not judged (counted in "
        "stats()['unjudged_no_evidence']; first: turn %s). A retrieval ran outside the callback tree: in "
        "LangChain, pass the run's `config` to the retriever (retriever.invoke(q, config=config)) or run it "
        "with langchain_core.runnables.config.ContextThreadPoolExecutor instead of a plain thread pool. "
        "Logged once per auditor."
    ),
}
_FROM_PROMPT_NOTE = (
    "ragaudit: a turn's evidence is context found only in the prompt (passages with ids from their text, "
    "source='prompt'; counted in stats()['evidence_from_prompt']; first: turn %s): no observed retrieval "
    "explains it. To judge on the real documents and their ids, let ragaudit see the retrieval: in "
    "LangChain, ragaudit.integrations.langchain.instrument() sees vector-store searches "
    "(similarity_search, max_marginal_relevance_search) and retrievers called with the run's config. "
    "Logged once per auditor."
)


def evicted_error(max_runs: int) -> str:
    """The error of a turn evicted because *max_runs* turns were open (a source sends it as an
    [`ErrorStep`][ragaudit.integrations.steps.ErrorStep])."""
    return (f"ragaudit: turn evicted before it finished ({max_runs} turns were open; raise max_runs or look "
            "for runs that never end)")


def tool_document(name: str, call_id: str | None, text: str, rank: int = 1) -> RetrievedDoc:
    """A tool's text output as evidence: source = the tool's name, id = the tool call's id (else a
    hash of name and text)."""
    return RetrievedDoc(id=call_id or stable_doc_id(text, name), content=text, rank=rank, source=name or None)


# --- what the assembler collects -------------------------------------------------------------------

_Child = RetrievalStep | ToolResult | ModelCall


@dataclass(slots=True)
class _Entry:
    """One child step of a turn, as the record it became, with where it sat in the run tree."""

    step: _Child
    seq: int
    record: Retrieval | Generation | ToolCall

    @property
    def run_id(self) -> Hashable:
        return self.step.run_id


def _end(ended_at: int | None, error: str | None, now: int) -> tuple[int, str | None]:
    """``(ended_at, error)`` of a step: a step that never ended ends at *now* with `UNFINISHED`."""
    if ended_at is None:
        return now, error or UNFINISHED
    return ended_at, error


class TurnAssembler:
    """Takes one turn's steps (a [`StepConsumer`][ragaudit.integrations.steps.StepConsumer]) and makes its
    [`RagTurn`][ragaudit.RagTurn] by the rules of this module ([`build`][ragaudit.integrations.TurnAssembler.build],
    [`close`][ragaudit.integrations.TurnAssembler.close]).

    *framework* names the source (the turn's ``framework``). *capture_content* False: the model
    calls' prompts and messages and the tool calls' arguments are not kept in the turn (the
    evidence is: the judge needs it; the content policy decides what is exported).
    *retrieval_outside*: the source saw a retrieval run outside any turn (a vector-store search
    with no run to belong to), which names the case in the no-evidence warning. *answer_field*:
    the text field of a structured answer (`_structured`). *memory*: the
    documents the source's earlier turns observed (one `DocumentMemory`
    per source): a turn whose model input quotes them keeps their ids; each build adds its turn's.
    """

    __slots__ = ("_capture", "_entries", "_last", "answer_field", "end", "errors", "framework", "from_prompt",
                 "memory", "parents", "retrieval_outside", "root")

    def __init__(self, framework: str, *, capture_content: bool = True, retrieval_outside: bool = False,
                 answer_field: str | None = None, memory: DocumentMemory | None = None) -> None:
        self.framework = framework
        self.answer_field = answer_field
        self.memory = memory
        self._capture = capture_content
        self.retrieval_outside = retrieval_outside
        self.from_prompt = 0  # passages of the prompt in the evidence of the last build()
        self.root: RunStarted | None = None
        self.end: RunEnded | None = None
        self.parents: dict[Hashable, Hashable | None] = {}
        self._entries: list[tuple[_Child, int]] = []
        self.errors: list[str] = []  # of the ErrorSteps
        self._last = 0  # the last time a step reported

    # -- StepConsumer ---------------------------------------------------------------------------------

    def _child(self, step: _Child) -> None:
        self.parents.setdefault(step.run_id, step.parent_id)
        self._entries.append((step, len(self._entries)))
        self._last = max(self._last, step.started_at, step.ended_at or 0)

    def on_run_started(self, step: RunStarted) -> None:
        if self.root is None:
            self.root = step
        else:
            self.parents.setdefault(step.run_id, step.parent_id)
        self._last = max(self._last, step.started_at)

    def on_run_ended(self, step: RunEnded) -> None:
        if self.root is not None and step.run_id == self.root.run_id:
            self.end = step
            self._last = max(self._last, step.ended_at)

    def on_retrieval(self, step: RetrievalStep) -> None:
        self._child(step)

    def on_tool_result(self, step: ToolResult) -> None:
        self._child(step)

    def on_model_call(self, step: ModelCall) -> None:
        self._child(step)

    def on_error(self, step: ErrorStep) -> None:
        self.errors.append(step.error)
        self._last = max(self._last, step.at or 0)

    # -- the turn ---------------------------------------------------------------------------------

    @property
    def kind(self) -> RunKind:
        """The root run's kind ([`RunKind.CHAIN`][ragaudit.integrations.steps.RunKind.CHAIN] before any run started)."""
        return self.root.kind if self.root is not None else RunKind.CHAIN

    @property
    def agent(self) -> str | None:
        """The agent's name when the turn is an agent's run, else None: an agent root (LlamaIndex
        agents, OTLP agent spans), or a model in it that asked for tools (LangGraph's
        ``create_react_agent``, LangChain's ``create_agent``). A chain that runs a tool itself is no
        agent. The name is the root run's (``"agent"`` when it has none)."""
        root = self.root
        if root is None:
            return None
        if root.kind is not RunKind.AGENT and not any(
                isinstance(step, ModelCall) and step.tool_calls for step, _ in self._entries):
            return None
        return root.name or "agent"

    def _record(self, step: _Child, now: int) -> Retrieval | Generation | ToolCall:
        ended_at, error = _end(step.ended_at, step.error, now)
        if isinstance(step, RetrievalStep):
            return Retrieval(name=step.name, documents=step.documents, query=step.query,
                             started_at=step.started_at, ended_at=ended_at, error=error)
        capture = self._capture
        if isinstance(step, ToolResult):
            return ToolCall(name=step.name, call_id=step.call_id, arguments=step.input if capture else None,
                            output=step.output, started_at=step.started_at, ended_at=ended_at, error=error)
        return Generation(model=step.model, prompt=step.prompt if capture else None, output=step.output,
                          input_tokens=step.input_tokens, output_tokens=step.output_tokens,
                          started_at=step.started_at, ended_at=ended_at, error=error, provider=step.provider,
                          messages=step.messages if capture else (),
                          tool_calls=tuple(ToolCall(name=t.name, call_id=t.call_id,
                                                    arguments=t.arguments if capture else None)
                                           for t in step.tool_calls))

    def entries(self, closed_at: int | None = None) -> list[_Entry]:
        """The child steps with their records, in the order they were handed over; a step still
        open ends at *closed_at* (None: the last time a step reported) as `UNFINISHED`."""
        now = self._last if closed_at is None else closed_at
        return [_Entry(step, seq, self._record(step, now)) for step, seq in self._entries]

    def build(self, handle: TurnHandle | None = None, *, closed_at: int | None = None) -> RagTurn:
        """The [`RagTurn`][ragaudit.RagTurn] of the steps so far (the rules in the module docstring).

        ``trace_id``/``span_id`` come from *handle* (the turn span's); *closed_at* as in
        [`entries`][ragaudit.integrations.TurnAssembler.entries], also the end of a turn whose root never ended. Raises
        [`ConfigurationError`][ragaudit.ConfigurationError] only for values a record rejects.
        """
        entries = self.entries(closed_at)
        turn, found = _build(self, entries, handle, self._last if closed_at is None else closed_at)
        self.from_prompt = found.from_prompt
        if self.memory is not None:
            sources = self.end.sources if self.end is not None else None
            self.memory.remember(doc for group in observed(entries, self.parents, sources) for doc in group)
        return turn

    def unjudged_reason(self, turn: RagTurn) -> str | None:
        """Why *turn* (made by [`build`][ragaudit.integrations.TurnAssembler.build]) is not judged, or None (see
        [`unjudged_reason`][ragaudit.integrations.TurnAssembler.unjudged_reason])."""
        return unjudged_reason(turn, self.kind)

    def close(
        self,
        recorder: SpanRecorder | None,
        auditor: Auditor,
        *,
        parent: Context | None = None,
        closed_at: int | None = None,
        measures: Sequence[str] = DEFAULT_TURN_MEASURES,
        handle: TurnHandle | None = None,
    ) -> ClosedTurn:
        """On the closing thread: open the turn span (under *parent*, the OTel context at the root's
        start), build the turn, submit it when it is to be judged (else record it unjudged, with the
        reason), end the span. *recorder* None: the turn's spans exist already (a received trace, its
        root span *handle*): none is recorded, the judgement goes into that trace. Never raises; a turn
        that cannot be built is recorded as an error turn."""
        root = self.root
        started_at = root.started_at if root is not None else self._last
        if recorder is not None:
            handle = recorder.start_turn(start_ns=started_at, parent=parent)
        try:
            turn = self.build(handle, closed_at=closed_at)
        except Exception as exc:
            report_failure(f"building a {self.framework} turn", exc)
            turn = RagTurn(turn_id=_turn_id(root), query=(root.question if root else None) or "", answer=None,
                           framework=self.framework, started_at=started_at,
                           ended_at=max(started_at, closed_at or self._last),
                           error=f"ragaudit could not build this turn: {exc}")
        agent = self.agent
        if agent is not None and recorder is not None and handle is not None:  # the turn span is the agent's
            recorder.mark_agent(handle, agent)
        reason = unjudged_reason(turn, self.kind)
        if reason is not None:
            _note_unjudged(auditor, turn, reason, recorder, "outside" if self.retrieval_outside else "none")
        elif self.from_prompt:
            _note_from_prompt(auditor, turn)
        status = finish_turn(recorder, auditor if reason is None else None, handle, turn, measures=measures)
        return ClosedTurn(turn, status, reason)


@dataclass(frozen=True, slots=True)
class ClosedTurn:
    """What [`TurnAssembler.close`][ragaudit.integrations.TurnAssembler.close] did with a turn: the *turn*, the
    Auditor's submit *status* (None: not submitted) and, for a turn not judged, the *unjudged* reason (one of
    `UNSUBMITTED_REASONS`; the turn was recorded with it)."""

    turn: RagTurn
    status: str | None
    unjudged: str | None

    @property
    def accepted(self) -> bool:
        """The Auditor took the turn for judging (queued, or judged inline with or without an error)."""
        return self.status in ("queued", "judged", "failed")


def _turn_id(root: RunStarted | None) -> str:
    return str(root.run_id) if root is not None else "unknown"


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
    per-retriever ranks stay on each [`Retrieval`][ragaudit.Retrieval].
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


def _ancestors(run_id: Hashable, parents: Mapping[Hashable, Hashable | None]) -> Iterable[Hashable]:
    seen: set[Hashable] = set()
    run = parents.get(run_id)
    while run is not None and run not in seen:
        yield run
        seen.add(run)
        run = parents.get(run)


def _nested_in(run_id: Hashable, runs: set[Hashable], parents: Mapping[Hashable, Hashable | None]) -> bool:
    return any(run in runs for run in _ancestors(run_id, parents))


def outermost_retrievals(entries: Sequence[_Entry], parents: Mapping[Hashable, Hashable | None]) -> list[_Entry]:
    """The retrieval entries that are not inside another retrieval, in order."""
    retrieval_runs = {e.run_id for e in entries if isinstance(e.record, Retrieval)}
    return [e for e in entries
            if isinstance(e.record, Retrieval) and not _nested_in(e.run_id, retrieval_runs, parents)]


def observed(entries: Sequence[_Entry], parents: Mapping[Hashable, Hashable | None],
             sources: Sequence[RetrievedDoc] | None = None) -> list[Sequence[RetrievedDoc]]:
    """The documents a turn's steps showed, in groups (one per retrieval or tool, in order): the
    framework's *sources* when it gave them, else every outermost retrieval; then every tool output."""
    groups: list[Sequence[RetrievedDoc]] = []
    if sources is not None:
        groups.append(sources)
    else:
        groups.extend(e.record.documents for e in outermost_retrievals(entries, parents)
                      if isinstance(e.record, Retrieval) and e.record.error is None)
    # A tool that returned text made of retrievals it ran (a retriever tool, a query engine tool)
    # adds no evidence of its own: its retrievals are the evidence, with their documents' ids.
    tool_runs = {e.run_id for e in entries if isinstance(e.record, ToolCall)}
    retrieving_tools = {run for e in entries if isinstance(e.record, Retrieval)
                        for run in _ancestors(e.run_id, parents) if run in tool_runs}
    for entry in entries:
        record, step = entry.record, entry.step
        if isinstance(record, ToolCall) and isinstance(step, ToolResult) and record.error is None:
            if step.documents is not None:
                groups.append(step.documents)
            elif record.output and entry.run_id not in retrieving_tools:
                groups.append((tool_document(record.name, record.call_id, record.output),))
    return groups


def final_call(entries: Sequence[_Entry], answer: str | None) -> ModelCall | None:
    """The model call that produced the answer: the last successful call whose output is the answer
    (or holds it, or is held by it: a stream cut short), else the last successful call; None when
    no call's input is known."""
    calls = [e.step for e in entries if isinstance(e.step, ModelCall) and e.step.error is None
             and (e.step.messages or e.step.prompt)]
    if not calls:
        return None
    wanted = normalize(answer or "")
    if wanted:
        for call in reversed(calls):
            said = normalize(call.output or "")
            if said and (said == wanted or wanted in said or said in wanted):
                return call
            # an answer given as a tool call's arguments (a structured response by tool calling)
            if any(wanted in normalize(t.arguments or "") for t in call.tool_calls):
                return call
    return calls[-1]


_MIN_FED_WORDS = 4  # a model output this short ("yes", a grade) reaching a prompt says nothing


def _feeding(final: ModelCall, entries: Sequence[_Entry], reference: Reference) -> list[Reference]:
    """The inputs of the earlier model calls whose output reached *final*'s input, directly or through
    each other: a query engine tool's synthesis read by the agent, a refine step's previous answer,
    a summary of summaries. What reached those reached the answer too."""
    calls = [e.step for e in entries if isinstance(e.step, ModelCall) and e.step is not final
             and e.step.error is None and (e.step.messages or e.step.prompt)
             and len((e.step.output or "").split()) >= _MIN_FED_WORDS]
    found: list[Reference] = []
    frontier = [reference]
    while frontier and calls:
        current = frontier.pop()
        fed = [c for c in calls if current.contains(c.output or "")]
        taken = {id(c) for c in fed}
        calls = [c for c in calls if id(c) not in taken]
        for call in fed:
            ref = Reference(call.messages, call.prompt)
            found.append(ref)
            frontier.append(ref)
    return found


@dataclass(frozen=True, slots=True)
class Evidence:
    """A turn's evidence: ``documents`` ranked 1..n; ``used`` the ids of the observed documents that
    reached the final model call, or the framework's sources when it named them (None when neither is
    known: every observed document is evidence then); ``from_prompt`` how many documents are
    passages of the prompt itself."""

    documents: tuple[RetrievedDoc, ...]
    used: frozenset[str] | None = None
    from_prompt: int = 0
    numbered_from_zero: bool = False  # the final call's input numbers its documents from 0


def evidence(
    entries: Sequence[_Entry],
    parents: Mapping[Hashable, Hashable | None],
    *,
    sources: Sequence[RetrievedDoc] | None = None,
    answer: str | None = None,
    question: str = "",
    template_variables: Mapping[str, str] | None = None,
    memory: DocumentMemory | None = None,
) -> Evidence:
    """What reached the model (see the module docstring): the observed documents whose text is in
    the input of the call that produced *answer* (the part that reached it, for a document cut on the
    way); when none did, the whole documents of earlier turns it quotes (*memory*: a follow-up answered
    from the conversation); then the context of that input no document explains
    (`prompt_passages`)."""
    groups = observed(entries, parents, sources)
    call = final_call(entries, answer) if sources is None else None
    reference = Reference(call.messages, call.prompt) if call is not None else None
    if call is None or not reference:
        # the framework's sources are what it built the answer from: those are the used documents
        used = frozenset(doc.id for doc in sources) if sources is not None else None
        return Evidence(merge_documents(groups), used)
    references = [reference, *_feeding(call, entries, reference)]
    seen = merge_documents(groups)
    found = reached(references, seen)
    used = frozenset(doc.id for doc in found)
    if memory is not None and not found:
        # A follow-up answered from the conversation: whole documents an earlier turn retrieved keep
        # their ids (a part of one is more likely an earlier answer quoting its first sentence).
        ids = {doc.id for doc in seen}
        remembered = [d for r in references for d in memory.candidates(r) if d.id not in ids]
        found.extend(doc for doc in reached(references, remembered) if not doc.truncated)
    kept = merge_documents([found])
    variables = call.template_variables or template_variables or {}
    passages = prompt_passages(call.messages or (("user", call.prompt or ""),), variables, question=question,
                               explained=kept)
    return Evidence(merge_documents([kept, passages]), used, len(passages), numbers_from_zero(reference.text))


def _cap_history(messages: Iterable[Message]) -> tuple[Message, ...]:
    kept = [(role, truncate(text, MAX_MESSAGE_CHARS)) for role, text in messages
            if role in ("user", "assistant") and text]
    return tuple(kept[-MAX_HISTORY_MESSAGES:])


def _before_last_user(messages: Sequence[Message]) -> list[Message]:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i][0] == "user":
            return list(messages[:i])
    return []


def conversation(root: RunStarted, entries: Sequence[_Entry], parents: Mapping[Hashable, Hashable | None],
                 query: str) -> tuple[tuple[Message, ...], str | None]:
    """``(history, standalone_query)`` of a turn (see the module docstring): the root's history;
    else the messages before the last user message of its conversation; else, for an agent or a
    conversation of one message, those of its first model call (a checkpointer's or a memory's)."""
    if root.history:
        history = _cap_history(root.history)
    elif len(root.messages) > 1:
        history = _cap_history(_before_last_user(root.messages))
    elif root.kind is RunKind.AGENT or root.messages:
        first = next((e.step.messages for e in entries if isinstance(e.step, ModelCall)), ())
        history = _cap_history(_before_last_user(first))
    else:
        history = ()
    standalone: str | None = None
    if history:
        for entry in outermost_retrievals(entries, parents):
            rewritten = entry.record.query if isinstance(entry.record, Retrieval) else None
            if rewritten and rewritten.strip() != query.strip():
                standalone = rewritten
            break
    return history, standalone


def direct_tool_answer(entries: Sequence[_Entry], parents: Mapping[Hashable, Hashable | None]) -> str | None:
    """The output of the tool that ended the run (a ``return_direct`` tool: its output is the reply),
    or None: the last tool's output, when a model asked for that tool and no model call started after
    it other than inside it."""
    last = next((e for e in reversed(entries) if isinstance(e.step, ToolResult)), None)
    if last is None or not isinstance(last.step, ToolResult) or last.record.error is not None:
        return None
    tool = last.step
    asked = any(isinstance(e.step, ModelCall) and any(t.name == tool.name for t in e.step.tool_calls)
                for e in entries[:last.seq])
    if not asked or not (tool.output or "").strip():
        return None
    for entry in entries[last.seq + 1:]:
        if isinstance(entry.step, ModelCall) and last.run_id not in set(_ancestors(entry.run_id, parents)):
            return None
    return tool.output


def _answer(end: RunEnded | None, error: str | None, entries: Sequence[_Entry],
            parents: Mapping[Hashable, Hashable | None], answer_field: str | None) -> str | None:
    """The structured answer's text field; else the root's answer; else, when that is empty, the output
    of a tool that answered (`direct_tool_answer`); else the last successful model output."""
    if error is not None:
        return None
    if end is not None and end.structured is not None:
        text = structured_answer(end.structured, answer_field)
        if text is not None:
            return text
    if end is not None and end.answer is not None and end.answer.strip():
        return end.answer
    direct = direct_tool_answer(entries, parents)
    if direct is not None:
        return direct
    if end is not None and end.answer is not None:
        return end.answer
    generations = [e.record for e in entries if isinstance(e.record, Generation)]
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


def _turn_citations(end: RunEnded | None, answer: str | None, found: Evidence) -> tuple[Citation, ...]:
    """A structured answer's own citations when it has them, else the markers and overlaps in its text."""
    if end is not None and end.structured is not None:
        cited = structured_citations(end.structured, found.documents, zero_based=found.numbered_from_zero)
        if cited:
            return cited
    return _citations(answer, found.documents)


def _metadata(root: RunStarted, end: RunEnded | None, reference: str | None) -> dict[str, object]:
    metadata: dict[str, object] = {"run_name": root.name} if root.name else {}
    if end is not None:
        metadata.update(end.annotations)
    for key, value in root.tags.items():
        if isinstance(key, str) and not key.startswith(("ragaudit_", "ls_")):
            metadata.setdefault(key, value)
    if reference is not None:
        metadata["reference_answer"] = reference
    return metadata


def _build(assembler: TurnAssembler, entries: list[_Entry], handle: TurnHandle | None,
           now: int) -> tuple[RagTurn, Evidence]:
    root = assembler.root
    if root is None:
        raise ValueError("no run started: a turn begins with its root's RunStarted step")
    end = assembler.end
    error = end.error if end is not None and end.error is not None else next(iter(assembler.errors), None)
    retrievals = tuple(e.record for e in entries if isinstance(e.record, Retrieval))
    generations = tuple(e.record for e in entries if isinstance(e.record, Generation))
    tool_calls = tuple(e.record for e in entries if isinstance(e.record, ToolCall))
    query = root.question or last_user_text(root.messages) or next((r.query for r in retrievals if r.query), "")
    history, standalone = conversation(root, entries, assembler.parents, query)
    answer = _answer(end, error, entries, assembler.parents, assembler.answer_field)
    found = evidence(entries, assembler.parents, sources=end.sources if end is not None else None, answer=answer,
                     question=query, template_variables=root.template_variables, memory=assembler.memory)
    documents = found.documents
    if found.used is not None:
        used = found.used
        retrievals = tuple(replace(r, used_ids=tuple(d.id for d in r.documents if d.id in used)) for r in retrievals)
    relevant_ids, reference = ground_truth_from(root.tags)
    turn = RagTurn(
        turn_id=_turn_id(root),
        query=query,
        answer=answer,
        documents=documents,
        citations=_turn_citations(end, answer, found),
        model=next((g.model for g in reversed(generations) if g.model), None),
        framework=assembler.framework,
        started_at=root.started_at,
        ended_at=max(root.started_at, end.ended_at if end is not None else now),
        trace_id=handle.trace_id if handle is not None else None,
        span_id=handle.span_id if handle is not None else None,
        sampled_out=handle.sampled_out if handle is not None else False,
        relevant_ids=normalize_relevance(relevant_ids),
        metadata=_metadata(root, end, reference),
        error=error,
        retrievals=retrievals,
        generations=generations,
        tool_calls=tool_calls,
        history=history,
        standalone_query=standalone,
    )
    return turn, found


def unjudged_reason(turn: RagTurn, kind: RunKind) -> str | None:
    """Why *turn* is not judged, or None when it is: one of
    `UNSUBMITTED_REASONS`, each counted.

    ``"failed"`` (the run raised, or was cut off), ``"no_answer"``, ``"standalone"`` (a retriever or
    model called on its own), ``"empty_answer"``, ``"no_evidence"`` (an answer from a model call
    and no evidence: warned about once), ``"no_model"`` (an answer that no model call made).
    """
    if turn.error is not None:
        return "failed"
    if kind.standalone:
        return "standalone"
    if turn.answer is None:
        return "no_answer"
    if turn.answer.strip() in EMPTY_ANSWERS:
        return "empty_answer"
    if not turn.documents and not turn.retrievals and not turn.tool_calls:
        # A retriever that ran and found nothing is judged (an honest "I don't know" is faithful).
        return "no_evidence" if turn.generations else "no_model"
    return None


def _note_unjudged(auditor: Auditor, turn: RagTurn, reason: str, recorder: SpanRecorder | None, seen: str) -> None:
    try:
        # Counted, and the turn ends as a record (with its reason) like every finished turn.
        first = auditor.record_unjudged(turn, reason, content_policy=recorder.content_policy if recorder else None,
                                        tracer_provider=recorder.tracer_provider if recorder else None)
    except Exception as exc:  # a user's stand-in auditor
        report_failure("counting an unjudged turn", exc)
        return
    if reason == "no_evidence" and first:
        logger.warning(_NO_EVIDENCE_FIX[seen], turn.turn_id)


def _note_from_prompt(auditor: Auditor, turn: RagTurn) -> None:
    try:
        first = auditor.count("evidence_from_prompt")
    except Exception as exc:  # a user's stand-in auditor
        report_failure("counting a turn judged on its prompt", exc)
        return
    if first:
        logger.warning(_FROM_PROMPT_NOTE, turn.turn_id)


def finish_turn(
    recorder: SpanRecorder | None,
    auditor: Auditor | None,
    handle: TurnHandle | None,
    turn: RagTurn,
    *,
    measures: Sequence[str] = DEFAULT_TURN_MEASURES,
) -> str | None:
    """Submit *turn* to *auditor* (skipped when it is None) and end its span (none without a *recorder*: the
    turn's spans are recorded elsewhere). Never raises.

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
    if recorder is not None and handle is not None:
        try:
            turn = recorder.start_children(handle, turn)
        except Exception as exc:
            report_failure("starting the retrieval spans", exc)
    record = None
    if auditor is not None:
        try:
            # The handler's policy and provider go with the turn: its record follows them.
            submitted = auditor.submit_turn(turn, content_policy=recorder.content_policy if recorder else None,
                                            tracer_provider=recorder.tracer_provider if recorder else None,
                                            ground_truth_metrics=metrics)
            status, record = submitted.status, submitted.record
        except Exception as exc:  # Auditor.submit_turn never raises; a user's stand-in might
            report_failure("submitting a turn", exc)
            status = "dropped"
    if recorder is not None and handle is not None:
        try:
            recorder.end_turn(handle, turn, judge_status=status, retrieval_metrics=metrics, record=record)
        except Exception as exc:
            report_failure("ending a turn span", exc)
    return status
