"""The turn rules of integrations/_assembler.py, on the parts a third integration would hand over.

The app matrix (tests/test_app_matrix.py) checks the same rules end to end through LangChain and
LlamaIndex; these tests pin each rule on its own, as the contract an integration relies on.
"""

from __future__ import annotations

import logging

import pytest

from ragaudit import Auditor, FakeJudge, RetrievedDoc
from ragaudit.integrations import TurnAssembler, evicted_error
from ragaudit.integrations._assembler import MAX_HISTORY_MESSAGES, MAX_MESSAGE_CHARS, UNFINISHED
from ragaudit.integrations.steps import (
    ErrorStep,
    ModelCall,
    RetrievalStep,
    RunEnded,
    RunKind,
    RunStarted,
    Step,
    ToolResult,
    dispatch,
)
from ragaudit.records import RagTurn
from ragaudit.tracing.spans import SpanRecorder


def doc(doc_id: str, rank: int = 1) -> RetrievedDoc:
    return RetrievedDoc(id=doc_id, content=f"text of {doc_id}", rank=rank)


def retrieval(run: str, parent: str | None, *ids: str, query: str = "q") -> RetrievalStep:
    return RetrievalStep(run, parent, run, 1, 2, query=query, documents=tuple(doc(i, r) for r, i in enumerate(ids, 1)))


def nested(run: str, parent: str) -> RunStarted:
    return RunStarted(run, RunKind.STEP, 1, parent_id=parent)


MODEL = ModelCall("llm", "root", 1, 2, model="m", output="the model's answer")


def assemble(*steps: Step, kind: RunKind = RunKind.CHAIN, answer: str | None = None, ended: bool = True,
             **root: object) -> TurnAssembler:
    assembler = TurnAssembler("test")
    assert dispatch(assembler, RunStarted("root", kind, 1, **root))  # type: ignore[arg-type]
    for step in steps:
        assert dispatch(assembler, step)
    if ended:
        dispatch(assembler, RunEnded("root", 3, answer=answer))
    return assembler


def build(*steps: Step, **kw: object) -> RagTurn:
    return assemble(*steps, **kw).build()  # type: ignore[arg-type]


def test_only_outermost_retrievals_are_evidence() -> None:
    # a compression retriever (outer) around a base retriever (inner): the judge sees what the outer returned
    turn = build(retrieval("outer", "root", "b"), retrieval("inner", "outer", "a", "b", "c"), MODEL, answer="x")
    assert [d.id for d in turn.documents] == ["b"]
    assert [r.name for r in turn.retrievals] == ["outer", "inner"]  # both are still spans


def test_nesting_is_found_through_intermediate_runs() -> None:
    turn = build(retrieval("outer", "root", "a"), nested("chain-in-between", "outer"),
                 retrieval("inner", "chain-in-between", "z"), MODEL, answer="x")
    assert [d.id for d in turn.documents] == ["a"]


def test_tool_outputs_are_evidence_with_their_documents_or_their_call_id() -> None:
    text_tool = ToolResult("tool1", "root", "lookup", 1, 2, call_id="call_7", output="Store opens at 9.")
    doc_tool = ToolResult("tool2", "root", "search", 1, 2, call_id="call_8", output="joined text",
                          documents=(doc("d1"), doc("d2", 2)))
    turn = build(text_tool, doc_tool, MODEL, answer="x")
    assert [(d.id, d.source, d.rank) for d in turn.documents] == [
        ("call_7", "lookup", 1), ("d1", None, 2), ("d2", None, 3)]
    assert turn.documents[0].content == "Store opens at 9."
    assert len(turn.tool_calls) == 2


def test_a_tool_whose_text_came_from_its_retrievals_adds_them_not_its_text() -> None:
    tool = ToolResult("tool", "root", "policies", 1, 2, call_id="call_1", output="Synthesized answer.")
    turn = build(tool, retrieval("r", "tool", "a", "b"), MODEL, answer="x")
    assert [d.id for d in turn.documents] == ["a", "b"]


def test_question_is_the_users_last_message_and_history_the_messages_before() -> None:
    messages = (("system", "be nice"), ("user", "first?"), ("assistant", "one."), ("tool", "raw"),
                ("assistant", ""), ("user", "second?"))
    turn = build(retrieval("r", "root", "a", query="second?"), MODEL, messages=messages, answer="x")
    assert turn.query == "second?"
    assert turn.history == (("user", "first?"), ("assistant", "one."))  # no system, tool or empty messages
    assert turn.standalone_query is None  # retrieval used the question itself


def test_history_is_capped_and_the_rewrite_is_the_standalone_question() -> None:
    history = tuple(("user" if i % 2 == 0 else "assistant", f"m{i}" + "x" * MAX_MESSAGE_CHARS) for i in range(15))
    turn = build(retrieval("r", "root", "a", query="What is the refund window for laptops?"), MODEL,
                 question="And for laptops?", history=history, answer="x")
    assert len(turn.history) == MAX_HISTORY_MESSAGES and turn.history[-1][1].startswith("m14")
    assert all(len(text) < MAX_MESSAGE_CHARS + 40 for _, text in turn.history)
    assert turn.standalone_query == "What is the refund window for laptops?"


def test_agent_history_comes_from_its_first_model_call_when_its_input_is_one_message() -> None:
    prompt = (("system", "tools"), ("user", "earlier?"), ("assistant", "before."), ("user", "now?"))
    first = ModelCall("llm0", "root", 1, 2, messages=prompt, output="thinking")
    turn = build(first, MODEL, kind=RunKind.AGENT, messages=(("user", "now?"),), answer="x")
    assert turn.query == "now?" and turn.history == (("user", "earlier?"), ("assistant", "before."))


@pytest.mark.parametrize(("answer", "steps", "kind", "reason"), [
    ("An answer.", [retrieval("r", "root", "a"), MODEL], RunKind.CHAIN, None),
    ("An answer.", [retrieval("r", "root"), MODEL], RunKind.CHAIN, None),  # retrieval found nothing: judged
    ("An answer.", [MODEL], RunKind.CHAIN, "no_evidence"),
    ("An answer.", [], RunKind.CHAIN, "no_model"),
    ("  ", [retrieval("r", "root", "a"), MODEL], RunKind.CHAIN, "empty_answer"),
    ("Empty Response", [retrieval("r", "root", "a"), MODEL], RunKind.QUERY, "empty_answer"),
    (None, [retrieval("r", "root", "a")], RunKind.CHAIN, "no_answer"),
    ("An answer.", [retrieval("r", "root", "a"), MODEL], RunKind.RETRIEVE, "standalone"),
])
def test_whether_a_turn_is_judged(answer: str | None, steps: list[Step], kind: RunKind, reason: str | None) -> None:
    assembler = assemble(*steps, kind=kind, answer=answer)
    assert assembler.unjudged_reason(assembler.build()) == reason


def test_evicted_turns_and_unfinished_steps() -> None:
    open_model = ModelCall("llm", "root", 1, None, output=None)
    assembler = assemble(retrieval("r", "root", "a"), open_model, ErrorStep("root", evicted_error(10), 40),
                         ended=False)
    turn = assembler.build(closed_at=50)
    assert turn.error is not None and "10 turns were open" in turn.error and turn.answer is None
    assert turn.generations[0].ended_at == 50 and turn.generations[0].error == UNFINISHED
    assert turn.retrievals[0].error is None and turn.ended_at == 50


def test_dispatch_never_raises_and_says_what_it_refused(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(TurnAssembler):
        def on_model_call(self, step: ModelCall) -> None:
            raise RuntimeError("sink bug")

    with caplog.at_level(logging.WARNING, logger="ragaudit"):
        assert dispatch(Broken("test"), MODEL) is False
        assert dispatch(TurnAssembler("test"), "not a step") is False  # type: ignore[arg-type]
    text = caplog.text
    assert "taking a ModelCall step" in text and "RuntimeError" in text and "taking a str step" in text


def test_close_counts_and_warns_once_per_auditor(caplog: pytest.LogCaptureFixture) -> None:
    judged: list[str] = []
    auditor = Auditor(FakeJudge(lambda r: (judged.append(r.query), {"faithfulness": 1.0})[1]), mode="inline")
    recorder = SpanRecorder()
    try:
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            for _ in range(3):
                assemble(MODEL, answer="An answer.").close(recorder, auditor)
            assemble(retrieval("r", "root", "a"), MODEL, answer="Empty Response", kind=RunKind.QUERY).close(
                recorder, auditor)
            assemble(retrieval("r", "root", "a"), MODEL, question="q?", answer="An answer.").close(recorder, auditor)
        stats = auditor.stats()
        assert stats["unjudged_no_evidence"] == 3 and stats["unjudged_empty_answer"] == 1
        assert judged == ["q?"] and stats["submitted"] == 1
        warnings = [r.getMessage() for r in caplog.records if "unjudged_no_evidence" in r.getMessage()]
        assert len(warnings) == 1 and "ContextThreadPoolExecutor" in warnings[0]
    finally:
        auditor.shutdown()
