"""instrument() / uninstrument() while chains and engines run: every audited run is one turn, never more.

LangChain: a real LCEL chain over the Chroma retriever runs on several threads while another thread
toggles the process-wide handler, alternating the same arguments (the same handler comes back) and
other arguments (a new handler replaces it). LlamaIndex: the same with a ``VectorStoreIndex`` over
Chroma, its query engine and its context chat engine, and ``OpenAILike`` against the loopback
server; plus a run in flight across ``uninstrument()`` and one in flight across ``instrument()``.
The figures are printed (``-s``) for RELIABILITY.md.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ragaudit import Auditor, FakeJudge, JudgeRequest
from ragaudit.integrations import llamaindex
from ragaudit.integrations.langchain import RagAuditCallbackHandler, instrument, uninstrument
from ragaudit.tracing import conventions as c
from tests.reliability.conftest import Traced
from tests.support.langchain_support import KB, rag_chain
from tests.support.llamaindex_support import build_index
from tests.support.llm_server import LLMServer
from tests.support.topics import QUESTIONS
from tests.support.turns import children

pytestmark = pytest.mark.timeout(300)

RUNS_PER_THREAD = 150
THREADS = 6


def scores(request: JudgeRequest) -> dict[str, object]:
    return {"faithfulness": 1.0, "reason": "ok"}


def test_instrument_twice_returns_the_same_handler_and_installs_it_once(traced: Traced) -> None:
    from langchain_core.callbacks.manager import CallbackManager

    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    try:
        first = instrument(auditor=auditor)
        assert instrument(auditor=auditor) is first
        assert uninstrument() is first
        assert instrument(auditor=auditor) is first  # toggled back: still the one handler
        manager = CallbackManager.configure()
        assert [h for h in manager.handlers if isinstance(h, RagAuditCallbackHandler)] == [first]
        other = instrument(auditor=auditor, max_runs=500)  # other arguments: replaces it
        assert other is not first
        manager = CallbackManager.configure()
        assert [h for h in manager.handlers if isinstance(h, RagAuditCallbackHandler)] == [other]
    finally:
        uninstrument()
        auditor.shutdown()


def _toggle_while_running(
    install: Callable[..., Any], uninstall: Callable[[], Any], work: Callable[[int], None], *, threads: int,
    join_s: float,
) -> tuple[list[Any], list[BaseException]]:
    """Run *work(t)* on *threads* threads while another thread installs (alternating the same arguments
    and other ones) and uninstalls every ~1 ms; then uninstall. Returns what the installs returned
    (each distinct object once) and the workers' errors."""
    installed: list[Any] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def toggle() -> None:
        i = 0
        while not done.is_set():
            got = install() if i % 4 < 2 else install(max_runs=5000)
            if all(got is not x for x in installed):
                installed.append(got)
            done.wait(0.001)
            uninstall()
            done.wait(0.001)
            i += 1

    def guarded(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:
            errors.append(exc)

    toggler = threading.Thread(target=toggle)
    workers = [threading.Thread(target=guarded, args=(t,)) for t in range(threads)]
    try:
        toggler.start()
        for w in workers:
            w.start()
        for w in workers:
            w.join(join_s)
    finally:
        done.set()
        toggler.join(30)
        uninstall()
    return installed, errors


def test_toggling_instrument_while_chains_run_gives_one_turn_per_audited_run(traced: Traced) -> None:
    kb = KB()
    chain = rag_chain(kb.retriever)
    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)

    def work(t: int) -> None:
        for i in range(RUNS_PER_THREAD):
            q = QUESTIONS[(t * RUNS_PER_THREAD + i) % len(QUESTIONS)]
            assert chain.invoke(q) == kb.answers[q]

    handlers, errors = _toggle_while_running(lambda **kw: instrument(auditor=auditor, **kw), uninstrument,
                                             work, threads=THREADS, join_s=150)
    assert not errors
    for handler in handlers:
        assert handler.force_flush(60)
    assert auditor.force_flush(60)

    runs = RUNS_PER_THREAD * THREADS
    spans = traced.spans()
    turns = [s for s in spans if s.name == c.SPAN_TURN]
    judgements = [s for s in spans if s.name == c.SPAN_JUDGE]
    closed = sum(h.stats()["closed_turns"] for h in handlers)
    print(f"\nruns={runs} turns={len(turns)} judgements={len(judgements)} handlers={len(handlers)}")
    assert 0 < len(turns) <= runs
    # A turn shed at hand-off (this loop saturates the process: Limits.max_cpu_share) is closed and counted, and
    # has no span: closed is what was traced plus what was shed.
    assert len(turns) + auditor.stats()["shed_cpu"] == closed and all(h.stats()["open_turns"] == 0 for h in handlers)
    assert len(judgements) <= len(turns)
    assert auditor.stats()["judged"] == len(judgements)
    # Every turn is a whole run: its question and answer, one retrieval and one model call under it.
    asked: Counter[str] = Counter()
    for turn in turns:
        q = str(turn.attributes[c.INPUT_VALUE])
        assert turn.attributes[c.OUTPUT_VALUE] == kb.answers[q]
        asked[q] += 1
        kids = sorted(s.name for s in children(spans, turn) if s.name != c.SPAN_JUDGE)
        assert kids == ["chat context-echo-1", "retrieval Chroma"]
    assert sum(asked.values()) == len(turns)
    # A run outside any turn leaves no stray retrieval or model span of its own.
    turn_ids = {t.context.span_id for t in turns}
    for s in spans:
        if s.name != c.SPAN_TURN:
            assert s.parent is not None and s.parent.span_id in turn_ids
    auditor.shutdown()


# -- LlamaIndex ------------------------------------------------------------------------------------

LI_RUNS_PER_THREAD = 100
LI_THREADS = 6
MODEL = "loopback-model"


def _question_of(body: Mapping[str, Any]) -> str:
    """The user's question in a request of the query engine (text QA template) or the chat engine."""
    user = [m for m in body.get("messages") or [] if m.get("role") == "user"][-1]
    text = str(user.get("content") or "")
    if "Query: " in text:  # LlamaIndex's text QA template: "...Query: {query_str}\nAnswer: "
        return text.rpartition("Query: ")[2].partition("\n")[0].strip()
    return text.strip()


def _answer(question: str) -> str:
    return f"About {question.rstrip('?')}: see the policy."


def _answering(body: Mapping[str, Any]) -> str:
    return _answer(_question_of(body))


def _llm(server: LLMServer) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    return OpenAILike(model=MODEL, api_base=server.base_url, api_key="test", is_chat_model=True, max_retries=0,
                      timeout=60)


def ours_on_dispatcher() -> int:
    from llama_index.core.instrumentation import get_dispatcher

    d = get_dispatcher()
    return sum(type(h).__module__.startswith(llamaindex.__name__ + ".") for h in [*d.span_handlers, *d.event_handlers])


def whole_turns(spans: list[Any]) -> list[Any]:
    """The turn spans, each checked to be one whole run: its question, the answer to it, one
    retrieval and one model call under it, at most one judgement; no span outside a turn."""
    turns = [s for s in spans if s.name == c.SPAN_TURN]
    for turn in turns:
        q = str(turn.attributes[c.INPUT_VALUE])
        assert turn.attributes[c.OUTPUT_VALUE] == _answer(q), q
        kids = children(spans, turn)
        assert sorted(s.name for s in kids if s.name != c.SPAN_JUDGE) == [f"chat {MODEL}", "retrieval Chroma"], q
        assert sum(s.name == c.SPAN_JUDGE for s in kids) <= 1
    turn_ids = {t.context.span_id for t in turns}
    for s in spans:
        if s.name != c.SPAN_TURN:
            assert s.parent is not None and s.parent.span_id in turn_ids, s.name
    return turns


def test_toggling_llamaindex_instrument_while_engines_run_gives_one_turn_per_audited_run(traced: Traced) -> None:
    from llama_index.core.chat_engine.types import BaseChatEngine

    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    index = build_index()

    with LLMServer(rule=_answering) as server:
        llm = _llm(server)

        def work(t: int) -> None:
            # As LlamaIndex's docs write them: a query engine and a chat engine over the index.
            query_engine = index.as_query_engine(llm=llm, similarity_top_k=2)
            chat_engine: BaseChatEngine = index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2)
            for i in range(LI_RUNS_PER_THREAD):
                q = QUESTIONS[(t * LI_RUNS_PER_THREAD + i) % len(QUESTIONS)]
                if (t + i) % 2:
                    assert str(query_engine.query(q)) == _answer(q)
                else:
                    chat_engine.reset()
                    assert str(chat_engine.chat(q)) == _answer(q)

        installed, errors = _toggle_while_running(lambda **kw: llamaindex.instrument(auditor=auditor, **kw),
                                                  llamaindex.uninstrument, work, threads=LI_THREADS, join_s=240)
    assert not errors, errors[:3]
    for inst in installed:
        assert inst.force_flush(60)
    assert auditor.force_flush(60)

    runs = LI_RUNS_PER_THREAD * LI_THREADS
    spans = traced.spans()
    turns = whole_turns(spans)
    judgements = [s for s in spans if s.name == c.SPAN_JUDGE]
    closed = sum(x.stats()["closed_turns"] for x in installed)
    print(f"\nllamaindex: runs={runs} turns={len(turns)} judgements={len(judgements)} "
          f"instrumentations={len(installed)}")
    assert 0 < len(turns) <= runs
    assert len(turns) + auditor.stats()["shed_cpu"] == closed  # shed at hand-off: closed, counted, no span
    assert all(x.stats()["open_turns"] == 0 for x in installed)
    assert len(judgements) <= len(turns)
    assert auditor.stats()["judged"] == len(judgements)
    asked = Counter(str(t.attributes[c.INPUT_VALUE]) for t in turns)
    assert sum(asked.values()) == len(turns)
    assert ours_on_dispatcher() == 0  # every detached instrumentation left once its turns closed
    auditor.shutdown()


def _gated(gate: threading.Event, entered: threading.Event, when: str) -> Callable[[Mapping[str, Any]], str]:
    """A rule that holds the model call whose prompt has *when* until *gate* is set."""

    def rule(body: Mapping[str, Any]) -> str:
        text = json.dumps(body.get("messages"))
        if when in text:
            entered.set()
            gate.wait(30)
        return _answering(body)

    return rule


def test_a_llamaindex_run_in_flight_at_uninstrument_finishes_as_one_turn(traced: Traced) -> None:
    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    index = build_index()
    gate, entered = threading.Event(), threading.Event()
    q, later = QUESTIONS[4], QUESTIONS[5]
    with LLMServer(rule=_gated(gate, entered, q)) as server:
        engine = index.as_query_engine(llm=_llm(server), similarity_top_k=2)
        inst = llamaindex.instrument(auditor=auditor)
        answers: list[str] = []
        runner = threading.Thread(target=lambda: answers.append(str(engine.query(q))))
        try:
            runner.start()
            assert entered.wait(30)  # retrieved, now inside the model call
            assert llamaindex.uninstrument() is inst and not inst.attached
            assert ours_on_dispatcher() == 2  # still there for the run in flight
            assert str(engine.query(later)) == _answer(later)  # started after: not audited
            gate.set()
            runner.join(30)
        finally:
            gate.set()
            llamaindex.uninstrument()
    assert answers == [_answer(q)]
    assert inst.force_flush(30) and auditor.force_flush(30)
    (turn,) = whole_turns(traced.spans())
    assert turn.attributes[c.INPUT_VALUE] == q
    assert inst.stats() == {"open_turns": 0, "closed_turns": 1, "evicted": 0}
    assert ours_on_dispatcher() == 0  # left the dispatcher with its last turn
    assert auditor.stats()["judged"] == 1
    auditor.shutdown()


def test_a_llamaindex_run_in_flight_at_instrument_is_not_audited_not_even_its_later_steps(traced: Traced) -> None:
    from llama_index.core.chat_engine import CondensePlusContextChatEngine
    from llama_index.core.llms import ChatMessage

    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    index = build_index()
    gate, entered = threading.Event(), threading.Event()
    q = QUESTIONS[6]
    # With a history, the chat engine first condenses the question (a model call), then retrieves
    # (a retriever call, which on its own would be a turn), then answers.
    with LLMServer(rule=_gated(gate, entered, "standalone question")) as server:
        llm = _llm(server)
        engine = CondensePlusContextChatEngine.from_defaults(
            index.as_retriever(similarity_top_k=2), llm=llm,
            chat_history=[ChatMessage(role="user", content="hello"), ChatMessage(role="assistant", content="hi")])
        answers: list[str] = []
        runner = threading.Thread(target=lambda: answers.append(str(engine.chat(q))))
        try:
            runner.start()
            assert entered.wait(30)  # condensing: the retrieval has not started yet
            inst = llamaindex.instrument(auditor=auditor)
            gate.set()
            runner.join(30)
            assert answers and inst.force_flush(30)
            fresh = index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2)
            assert str(fresh.chat(QUESTIONS[7])) == _answer(QUESTIONS[7])  # started under it: audited
        finally:
            gate.set()
            llamaindex.uninstrument()
    assert inst.force_flush(30) and auditor.force_flush(30)
    (turn,) = whole_turns(traced.spans())  # the run in flight left no turn, not even a retrieval one
    assert turn.attributes[c.INPUT_VALUE] == QUESTIONS[7]
    auditor.shutdown()


def test_a_llamaindex_stream_being_read_at_uninstrument_finishes_as_one_turn(traced: Traced) -> None:
    auditor = Auditor(FakeJudge(scores), audit_log=None, tracer_provider=traced.provider)
    index = build_index()
    q = QUESTIONS[8]
    with LLMServer(rule=_answering) as server:
        engine = index.as_query_engine(llm=_llm(server), similarity_top_k=2, streaming=True)
        inst = llamaindex.instrument(auditor=auditor)
        try:
            response = engine.query(q)  # the answer streams in as it is read
            first = next(response.response_gen)
            llamaindex.uninstrument()
            assert inst.stats()["open_turns"] == 1 and ours_on_dispatcher() == 2
            text = first + "".join(response.response_gen)
        finally:
            llamaindex.uninstrument()
    assert text == _answer(q)
    assert inst.force_flush(30) and auditor.force_flush(30)
    (turn,) = whole_turns(traced.spans())
    assert turn.attributes[c.OUTPUT_VALUE] == _answer(q)  # the whole streamed answer
    assert ours_on_dispatcher() == 0
    auditor.shutdown()
