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
from ragaudit.records import UNSUBMITTED_REASONS, RagTurn
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
        assert len(warnings) == 1 and "No retrieval was observed" in warnings[0] and "instrument()" in warnings[0]
    finally:
        auditor.shutdown()


def test_the_no_evidence_warning_names_what_it_saw(caplog: pytest.LogCaptureFixture) -> None:
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), mode="inline")
    try:
        with caplog.at_level(logging.WARNING, logger="ragaudit"):
            assembler = assemble(MODEL, answer="An answer.")
            assembler.retrieval_outside = True  # the source saw a search that belonged to no run
            assembler.close(SpanRecorder(), auditor)
            variables = {"context": "Returns are accepted within 30 days of delivery.", "question": "q"}
            assemble(call("x", variables=variables), answer="An answer.").close(SpanRecorder(), auditor)
        messages = [r.getMessage() for r in caplog.records]
        assert any("outside the callback tree" in m and "ContextThreadPoolExecutor" in m for m in messages)
        assert any("context found only in the prompt" in m and "evidence_from_prompt" in m for m in messages)
        assert auditor.stats()["evidence_from_prompt"] == 1 and auditor.stats()["judged"] == 1
    finally:
        auditor.shutdown()


def test_every_unjudged_reason_is_counted() -> None:
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), mode="inline")
    try:
        failed = assemble(retrieval("r", "root", "a"), MODEL, ended=False)
        dispatch(failed, RunEnded("root", 3, error="ValueError: boom"))
        cases = [failed, assemble(retrieval("r", "root", "a"), answer=None),  # no model, no answer
                 assemble(answer="canned"),  # an answer no model made
                 assemble(retrieval("r", "root", "a"), MODEL, kind=RunKind.RETRIEVE, answer="x")]
        for assembler in cases:
            assembler.close(SpanRecorder(), auditor)
        stats = auditor.stats()
        assert {reason: stats[f"unjudged_{reason}"] for reason in UNSUBMITTED_REASONS} == {
            "failed": 1, "no_evidence": 0, "empty_answer": 0, "no_answer": 1, "no_model": 1, "standalone": 1}
        assert stats["submitted"] == 0
    finally:
        auditor.shutdown()


# --- what the model saw (issue 23) ------------------------------------------------------------------


def call(*texts: str, output: str = "x", run: str = "llm", variables: dict[str, str] | None = None,
         role: str = "user") -> ModelCall:
    return ModelCall(run, "root", 1, 2, messages=((role, "\n\n".join(texts)),), output=output,
                     template_variables=variables or {})


def test_evidence_is_what_reached_the_final_model_call() -> None:
    # three retrieved, two kept by the app (a filter, a grader): the judge sees those two
    turn = build(retrieval("r", "root", "a", "b", "c"), call("Context:", "text of a", "text of c", "Q: q"), answer="x")
    assert [d.id for d in turn.documents] == ["a", "c"] and [d.rank for d in turn.documents] == [1, 2]
    assert turn.retrievals[0].used_ids == ("a", "c")


def test_an_abandoned_first_retrieval_is_not_evidence() -> None:
    # agentic RAG: retrieve, grade (rejects), rewrite, retrieve again, generate on the second
    grade = call("text of a", "Is this relevant? yes or no", output="no", run="grade")
    rewrite = call("Rewrite the question: q", output="better q", run="rewrite")
    final = call("Answer from: text of b", output="The answer.", run="generate")
    turn = build(retrieval("r1", "root", "a"), grade, rewrite, retrieval("r2", "root", "b", query="better q"),
                 final, answer="The answer.")
    assert [d.id for d in turn.documents] == ["b"]
    assert [r.used_ids for r in turn.retrievals] == [(), ("b",)]


def test_the_final_call_is_the_one_whose_output_is_the_answer() -> None:
    answer_call = call("text of a", output="The answer.", run="answer")
    title_call = call("Give the chat a title: The answer.", output="Refunds", run="title")
    turn = build(retrieval("r", "root", "a", "b"), answer_call, title_call, answer="The answer.")
    assert [d.id for d in turn.documents] == ["a"]


def test_whitespace_and_a_cut_document_still_match() -> None:
    long_text = " ".join(f"word{i}" for i in range(100))
    docs = (RetrievedDoc(id="long", content=long_text), RetrievedDoc(id="spaced", content="one  two\nthree four"))
    step = RetrievalStep("r", "root", "r", 1, 2, documents=docs)
    turn = build(step, call(long_text[:300], "one two three\tfour"), answer="x")
    assert [d.id for d in turn.documents] == ["long", "spaced"]


def test_unexplained_template_variables_become_prompt_evidence() -> None:
    variables = {"context": "Returns are accepted within 30 days.\n\nRefunds go to the original card.",
                 "question": "How do refunds work?"}
    assembler = assemble(call("Returns are accepted within 30 days.", "Refunds go to the original card.",
                              variables=variables), answer="x", question="How do refunds work?")
    turn = assembler.build()
    assert [d.content for d in turn.documents] == ["Returns are accepted within 30 days.",
                                                    "Refunds go to the original card."]
    assert {d.source for d in turn.documents} == {"prompt"} and assembler.from_prompt == 2
    assert assembler.unjudged_reason(turn) is None
    again = assemble(call("x", variables=variables), answer="x", question="How do refunds work?").build()
    assert [d.id for d in again.documents] == [d.id for d in turn.documents]  # ids from the text


def test_template_variables_explained_by_observed_documents_add_nothing() -> None:
    variables = {"context": "text of a\n\ntext of b", "question": "q"}
    assembler = assemble(retrieval("r", "root", "a", "b"), call("text of a", "text of b", variables=variables),
                         answer="x")
    assert [d.id for d in assembler.build().documents] == ["a", "b"] and assembler.from_prompt == 0


def test_system_message_context_is_evidence_when_no_retrieval_was_seen() -> None:
    context = ("Our store accepts returns of unused items within thirty days of delivery, and refunds "
               "are paid to the original payment method within five business days of receiving the item. "
               "Laptops that were opened can be returned within fourteen days for a full refund.")
    turn = build(ModelCall("llm", "root", 1, 2, messages=(("system", f"Use this context:\n\n{context}"),
                                                          ("user", "q")), output="x"), answer="x")
    assert [d.content for d in turn.documents] == [context]  # "Use this context:" is too short to be a passage
    assert turn.documents[0].source == "prompt"


def test_a_short_instruction_is_not_context() -> None:
    assembler = assemble(ModelCall("llm", "root", 1, 2, messages=(("system", "You are a helpful assistant."),
                                                                  ("user", "q")), output="x"), answer="x")
    assert assembler.unjudged_reason(assembler.build()) == "no_evidence"


def test_matching_ten_thousand_documents_is_linear() -> None:
    # 10,000 retrieved, every other one in the prompt: each is found (or not) by one index lookup
    docs = tuple(RetrievedDoc(id=f"d{i}", content=f"document number {i} says fact {i * 7} about item {i}.")
                 for i in range(10_000))
    prompt = "\n\n".join(d.content for d in docs[::2])
    step = RetrievalStep("r", "root", "r", 1, 2, documents=docs)
    turn = build(step, call(prompt), answer="x")
    assert [d.id for d in turn.documents] == [f"d{i}" for i in range(0, 10_000, 2)]
