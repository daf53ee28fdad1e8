"""The turn rules of integrations/_assembler.py, on the parts a third integration would hand over.

The app matrix (tests/test_app_matrix.py) checks the same rules end to end through LangChain and
LlamaIndex; these tests pin each rule on its own, as the contract an integration relies on.
"""

from __future__ import annotations

import logging

import pytest

from ragaudit import Auditor, FakeJudge, Generation, Retrieval, RetrievedDoc
from ragaudit.integrations._assembler import (
    MAX_HISTORY_MESSAGES,
    MAX_MESSAGE_CHARS,
    UNFINISHED,
    Step,
    TurnParts,
    build_turn,
    close_turn,
    step_end,
    unjudged_reason,
)
from ragaudit.records import ToolCall
from ragaudit.tracing.spans import SpanRecorder


def doc(doc_id: str, rank: int = 1) -> RetrievedDoc:
    return RetrievedDoc(id=doc_id, content=f"text of {doc_id}", rank=rank)


def retrieval(run: str, parent: str | None, seq: int, *ids: str, query: str = "q") -> Step:
    return Step(run, parent, seq, Retrieval(name=run, documents=tuple(doc(i, r) for r, i in enumerate(ids, 1)),
                                            query=query))


def parts(*steps: Step, **kw: object) -> TurnParts:
    p = TurnParts(turn_id="t1", framework="test", root_kind=str(kw.pop("root_kind", "chain")), started_at=1,
                  ended_at=2, steps=list(steps), **kw)  # type: ignore[arg-type]
    p.parents = {s.run_id: s.parent_id for s in steps}
    return p


MODEL = Step("llm", "root", 99, Generation(model="m", output="the model's answer"))


def test_only_outermost_retrievals_are_evidence() -> None:
    # a compression retriever (outer) around a base retriever (inner): the judge sees what the outer returned
    turn = build_turn(parts(retrieval("inner", "outer", 1, "a", "b", "c"), retrieval("outer", "root", 0, "b"),
                            MODEL, answer="x"))
    assert [d.id for d in turn.documents] == ["b"]
    assert [r.name for r in turn.retrievals] == ["outer", "inner"]  # both are still spans


def test_nesting_is_found_through_intermediate_runs() -> None:
    p = parts(retrieval("outer", "root", 0, "a"), retrieval("inner", "chain-in-between", 1, "z"), MODEL, answer="x")
    p.parents = {**p.parents, "chain-in-between": "outer"}
    assert [d.id for d in build_turn(p).documents] == ["a"]


def test_tool_outputs_are_evidence_with_their_documents_or_their_call_id() -> None:
    text_tool = Step("tool1", "root", 0, ToolCall(name="lookup", call_id="call_7", output="Store opens at 9."))
    doc_tool = Step("tool2", "root", 1, ToolCall(name="search", call_id="call_8", output="joined text"),
                    documents=(doc("d1"), doc("d2", 2)))
    turn = build_turn(parts(text_tool, doc_tool, MODEL, answer="x"))
    assert [(d.id, d.source, d.rank) for d in turn.documents] == [
        ("call_7", "lookup", 1), ("d1", None, 2), ("d2", None, 3)]
    assert turn.documents[0].content == "Store opens at 9."
    assert len(turn.tool_calls) == 2


def test_a_tool_whose_text_came_from_its_retrievals_adds_them_not_its_text() -> None:
    tool = Step("tool", "root", 0, ToolCall(name="policies", call_id="call_1", output="Synthesized answer."))
    turn = build_turn(parts(tool, retrieval("r", "tool", 1, "a", "b"), MODEL, answer="x"))
    assert [d.id for d in turn.documents] == ["a", "b"]


def test_question_is_the_users_last_message_and_history_the_messages_before() -> None:
    messages = [("system", "be nice"), ("user", "first?"), ("assistant", "one."), ("tool", "raw"),
                ("assistant", ""), ("user", "second?")]
    turn = build_turn(parts(retrieval("r", "root", 0, "a", query="second?"), MODEL, messages=messages, answer="x"))
    assert turn.query == "second?"
    assert turn.history == (("user", "first?"), ("assistant", "one."))  # no system, tool or empty messages
    assert turn.standalone_query is None  # retrieval used the question itself


def test_history_is_capped_and_the_rewrite_is_the_standalone_question() -> None:
    history = [("user" if i % 2 == 0 else "assistant", f"m{i}" + "x" * MAX_MESSAGE_CHARS) for i in range(15)]
    turn = build_turn(parts(retrieval("r", "root", 0, "a", query="What is the refund window for laptops?"), MODEL,
                            query="And for laptops?", history=history, answer="x"))
    assert len(turn.history) == MAX_HISTORY_MESSAGES and turn.history[-1][1].startswith("m14")
    assert all(len(text) < MAX_MESSAGE_CHARS + 40 for _, text in turn.history)
    assert turn.standalone_query == "What is the refund window for laptops?"


def test_agent_history_comes_from_its_first_model_call_when_its_input_is_one_message() -> None:
    prompt = [("system", "tools"), ("user", "earlier?"), ("assistant", "before."), ("user", "now?")]
    turn = build_turn(parts(MODEL, root_kind="agent", messages=[("user", "now?")], prompt_messages=prompt,
                            answer="x"))
    assert turn.query == "now?" and turn.history == (("user", "earlier?"), ("assistant", "before."))


@pytest.mark.parametrize(("answer", "steps", "root_kind", "reason"), [
    ("An answer.", [retrieval("r", "root", 0, "a"), MODEL], "chain", None),
    ("An answer.", [retrieval("r", "root", 0), MODEL], "chain", None),  # retrieval found nothing: judged
    ("An answer.", [MODEL], "chain", "no_evidence"),
    ("An answer.", [], "chain", "no_model"),
    ("  ", [retrieval("r", "root", 0, "a"), MODEL], "chain", "empty_answer"),
    ("Empty Response", [retrieval("r", "root", 0, "a"), MODEL], "query", "empty_answer"),
    (None, [retrieval("r", "root", 0, "a")], "chain", "no_answer"),
    ("An answer.", [retrieval("r", "root", 0, "a"), MODEL], "retrieve", "standalone"),
])
def test_whether_a_turn_is_judged(answer: str | None, steps: list[Step], root_kind: str,
                                  reason: str | None) -> None:
    p = parts(*steps, root_kind=root_kind, answer=answer)
    if answer is None:
        p.steps = [s for s in p.steps if not isinstance(s.record, Generation)]
    assert unjudged_reason(build_turn(p), root_kind) == reason


def test_evicted_turns_and_unfinished_steps() -> None:
    assert step_end(None, None, 50) == (50, UNFINISHED)
    assert step_end(40, "boom", 50) == (40, "boom")
    turn = build_turn(parts(retrieval("r", "root", 0, "a"), MODEL, answer="x", evicted_at=10))
    assert turn.error is not None and "10 turns were open" in turn.error and turn.answer is None


def test_close_turn_counts_and_warns_once_per_auditor(caplog: pytest.LogCaptureFixture) -> None:
    judged: list[str] = []
    auditor = Auditor(FakeJudge(lambda r: (judged.append(r.query), {"faithfulness": 1.0})[1]), mode="inline")
    recorder = SpanRecorder()
    try:
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            for _ in range(3):
                close_turn(parts(MODEL, answer="An answer."), recorder, auditor)
            close_turn(parts(retrieval("r", "root", 0, "a"), MODEL, answer="Empty Response", root_kind="query"),
                       recorder, auditor)
            close_turn(parts(retrieval("r", "root", 0, "a"), MODEL, query="q?", answer="An answer."), recorder,
                       auditor)
        stats = auditor.stats()
        assert stats["unjudged_no_evidence"] == 3 and stats["unjudged_empty_answer"] == 1
        assert judged == ["q?"] and stats["submitted"] == 1
        warnings = [r.getMessage() for r in caplog.records if "unjudged_no_evidence" in r.getMessage()]
        assert len(warnings) == 1 and "ContextThreadPoolExecutor" in warnings[0]
    finally:
        auditor.shutdown()
