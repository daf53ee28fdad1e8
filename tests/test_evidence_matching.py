"""What reached the model, rule by rule (issue 45): documents cut at any character, whitespace and markup
changes, documents quoted inside tool messages, a follow-up quoting earlier turns' documents, instructions
that are never evidence, the answer of a tool that answered and of a structured response by tool calling.

The app matrix (tests/test_app_matrix_langchain.py) and the worker (tests/worker/test_e2e_agents.py) check
the same rules end to end on real LangChain agents; these pin each one on the steps a source hands over.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ragaudit import Auditor, ConfigurationError, FakeJudge, RetrievedDoc
from ragaudit.integrations import TurnAssembler
from ragaudit.integrations._evidence import KEY_WORDS, DocumentMemory
from ragaudit.integrations.steps import (
    ModelCall,
    ModelToolCall,
    RetrievalStep,
    RunEnded,
    RunKind,
    RunStarted,
    Step,
    ToolResult,
    dispatch,
)
from ragaudit.records import RagTurn

RULE = ("Returns policy: unused items can be returned within thirty days of delivery, and refunds reach the "
        "original card within five business days.")
DESK = "For returns questions, call extension 104 or visit the returns desk on the second floor."
SYSTEM = ("Answer questions about the store's policies. Use the retrieve_context tool to look up the policy "
          "documents before you answer, answer in one sentence, never make up a policy, say that you do not "
          "know when the documents do not say, and keep a friendly tone with every customer who writes in.")


def kb(*texts: str) -> tuple[RetrievedDoc, ...]:
    return tuple(RetrievedDoc(id=f"d{i}", content=t, rank=i, source="returns.md") for i, t in enumerate(texts, 1))


def turn_of(*steps: Step, answer: str | None = "An answer.", memory: DocumentMemory | None = None,
            structured: dict[str, object] | None = None, kind: RunKind = RunKind.CHAIN) -> RagTurn:
    assembler = TurnAssembler("test", memory=memory)
    dispatch(assembler, RunStarted("root", kind, 1, question="What about returns?"))
    for step in steps:
        assert dispatch(assembler, step)
    dispatch(assembler, RunEnded("root", 9, answer=answer, structured=structured))
    return assembler.build()


def retrieved(*docs: RetrievedDoc, run: str = "r", parent: str = "root") -> RetrievalStep:
    return RetrievalStep(run, parent, "retriever", 2, 3, query="returns", documents=docs)


def llm(*messages: tuple[str, str], output: str = "An answer.", run: str = "llm", parent: str = "root",
        tool_calls: tuple[ModelToolCall, ...] = (), at: int = 4) -> ModelCall:
    return ModelCall(run, parent, at, at + 1, messages=messages, output=output, tool_calls=tool_calls)


def seen(turn: RagTurn) -> list[tuple[str, str, bool]]:
    return [(d.id, d.content, d.truncated) for d in turn.documents]


def test_a_document_cut_at_any_character_is_evidence_with_the_part_that_reached() -> None:
    words = RULE.split(" ")
    key_end = len(" ".join(words[:KEY_WORDS]))  # a cut before this leaves too little to look the document up
    for cut in range(1, len(RULE) + 1):
        turn = turn_of(retrieved(*kb(RULE)), llm(("user", f"Context:\n{RULE[:cut]}\n\nQuestion: What about returns?")))
        if cut < key_end:
            assert turn.documents == (), cut
            continue
        part = re.sub(r"[^\w]+$", "", RULE[:cut])  # what the model saw, to its last letter or digit
        whole = part == RULE.rstrip(".")  # every word reached: the document did
        assert seen(turn) == [("d1", RULE if whole else part, not whole)], cut
        assert turn.retrievals[0].used_ids == ("d1",)


def test_whitespace_and_markup_changes_do_not_hide_a_document() -> None:
    markdown = "**Returns policy:** unused items can be returned within *thirty days* of delivery.\n\n- Refunds: 5 days"
    plain = "Returns policy: unused items can be returned within thirty days of delivery. Refunds: 5 days"
    for doc_text, prompt in ((markdown, plain), (plain, markdown), (plain, plain.upper().replace(" ", "\n  \t"))):
        turn = turn_of(retrieved(*kb(doc_text)), llm(("user", prompt)))
        assert seen(turn) == [("d1", doc_text, False)]


def test_documents_quoted_inside_a_tool_message_are_found() -> None:
    quoted = RULE.replace("thirty", "thirty (\"30\")") + "\nCafé returns: same rules."
    docs = kb(quoted, DESK)
    as_json = json.dumps([{"page_content": d.content, "metadata": {"id": d.id}} for d in docs])
    as_repr = str([f"Document(page_content={d.content!r})" for d in docs])
    escaped = json.dumps(as_json)  # quoted twice: a JSON string inside a JSON string
    for text in (as_json, as_repr, escaped):
        turn = turn_of(ToolResult("t", "root", "retrieve_context", 2, 3, output=text, documents=docs),
                       llm(("user", "What about returns?"), ("tool", text)))
        assert seen(turn) == [("d1", quoted, False), ("d2", DESK, False)], text[:80]


def test_a_part_that_starts_where_another_document_reached_whole_is_not_evidence() -> None:
    other = "Returns policy: unused items can be exchanged at any store."
    turn = turn_of(retrieved(*kb(RULE, other)), llm(("user", RULE)))
    assert seen(turn) == [("d1", RULE, False)]


def test_a_follow_up_keeps_the_ids_of_documents_earlier_turns_retrieved() -> None:
    memory = DocumentMemory()
    docs = kb(RULE, DESK)
    tool_text = "\n\n".join(f"Source: returns.md\nContent: {d.content}" for d in docs)
    first = turn_of(llm(("system", SYSTEM), ("user", "What about returns?"), output="",
                        tool_calls=(ModelToolCall("retrieve_context", "c1", "{}"),)),
                    ToolResult("t", "root", "retrieve_context", 5, 6, call_id="c1", output=tool_text, documents=docs),
                    llm(("system", SYSTEM), ("user", "What about returns?"), ("tool", tool_text), run="llm2", at=7),
                    memory=memory)
    assert [d.id for d in first.documents] == ["d1", "d2"] and len(memory) == 2
    conversation = (("system", SYSTEM), ("user", "What about returns?"), ("tool", tool_text),
                    ("assistant", "An answer."), ("user", "Could you repeat that?"))
    follow_up = turn_of(llm(*conversation), memory=memory)
    assert seen(follow_up) == [("d1", RULE, False), ("d2", DESK, False)]
    # without the memory: passages of the prompt (ids from their text), from the tool message only
    alone = turn_of(llm(*conversation))
    assert {d.source for d in alone.documents} == {"prompt"}
    assert all(SYSTEM not in d.content and d.content in tool_text for d in alone.documents)


def test_earlier_documents_are_not_evidence_of_a_turn_whose_own_documents_reached_the_model() -> None:
    memory = DocumentMemory()
    memory.remember(kb(RULE))
    other = RetrievedDoc(id="x1", content=DESK.replace("returns", "shipping"))
    # a second question that retrieved its own document: the history quoting the first turn's is history
    turn = turn_of(retrieved(other), llm(("tool", RULE), ("assistant", "An answer."), ("user", other.content)),
                   memory=memory)
    assert [d.id for d in turn.documents] == ["x1"]
    # a follow-up whose history quotes an earlier document's first sentence only (an earlier answer): no id
    first_sentence = RULE.split(", and")[0]
    quoted = turn_of(llm(("assistant", first_sentence), ("user", "Could you repeat that?")), memory=memory)
    assert [d.id for d in quoted.documents] == []


def test_the_memory_is_bounded_and_keeps_whole_documents_only() -> None:
    memory = DocumentMemory(max_documents=2)
    memory.remember([RetrievedDoc(id=f"m{i}", content=f"{RULE} ({i})") for i in range(3)])
    memory.remember([RetrievedDoc(id="cut", content=RULE, truncated=True),
                     RetrievedDoc(id="short", content="Three words only")])
    assert len(memory) == 2  # the oldest went; a part and a document too short to look up are not kept
    memory.remember([RetrievedDoc(id="m2", content=DESK)])  # the same id again: its new text replaces the old
    turn = turn_of(llm(("tool", f"{RULE} (1)\n\n{DESK}")), memory=memory)
    assert [d.id for d in turn.documents] == ["m1", "m2"]


def test_an_agents_system_prompt_is_never_evidence() -> None:
    tool_text = "\n\n".join([RULE, DESK, RULE.replace("thirty", "sixty").replace("Returns", "Exchanges")])
    turn = turn_of(llm(("system", SYSTEM), ("user", "What about returns?"), ("tool", tool_text)))
    assert turn.documents and all(SYSTEM not in d.content for d in turn.documents)
    assert [d.content for d in turn.documents] == tool_text.split("\n\n")
    # a prompt with no tool message: its system message carries the context (a dynamic prompt)
    prompt_only = turn_of(llm(("system", f"Use this context:\n\n{tool_text}"), ("user", "What about returns?")))
    assert [d.content for d in prompt_only.documents] == tool_text.split("\n\n")


def test_a_tool_that_answered_gives_the_answer_and_its_model_call_is_the_final_one() -> None:
    docs = kb(RULE, DESK)
    answer = "Returns policy: unused items can be returned within thirty days of delivery."
    steps: list[Step] = [
        llm(("system", SYSTEM), ("user", "What about returns?"), output="",
            tool_calls=(ModelToolCall("answer_policy_question", "c1", "{}"),)),
        ToolResult("tool", "root", "answer_policy_question", 5, 9, call_id="c1", output=answer),
        retrieved(*docs, parent="tool"),
        llm(("user", f"Context:\n{RULE}\n\nQuestion: What about returns?"), output=answer, run="inner",
            parent="tool", at=6),
    ]
    turn = turn_of(*steps, answer="")
    assert turn.answer == answer and seen(turn) == [("d1", RULE, False)]
    # a model call after the tool, outside it: the model answered (here, nothing), the tool did not
    after = turn_of(*steps, llm(("user", "q"), output="", run="last", at=10), answer="")
    assert after.answer == ""


def test_a_structured_response_by_tool_calling_is_the_answer_and_its_call_the_final_one() -> None:
    answer = "Unused items can be returned within thirty days."
    arguments = json.dumps({"answer": answer, "confidence": 1.0})
    turn = turn_of(retrieved(*kb(RULE, DESK)),
                   llm(("user", f"{RULE}\n\n{DESK}"), output="",
                       tool_calls=(ModelToolCall("PolicyAnswer", "c2", arguments),)),
                   llm(("user", f"Give the chat a title: {DESK}"), output="Returns", run="title", at=8),
                   answer="", structured={"answer": answer, "confidence": 1.0})
    assert turn.answer == answer and [d.id for d in turn.documents] == ["d1", "d2"]


def test_matching_ten_thousand_cut_documents_is_linear() -> None:
    # 10,000 retrieved, each cut in half on its way to the prompt: each found by one index lookup
    docs = tuple(RetrievedDoc(id=f"d{i}", content=f"document number {i} says fact {i * 7} about item {i} and more.")
                 for i in range(10_000))
    prompt = "\n\n".join(d.content[: len(d.content) // 2 + 8] for d in docs)
    turn = turn_of(retrieved(*docs), llm(("user", prompt)))
    assert len(turn.documents) == 10_000 and all(d.truncated for d in turn.documents)


def test_retrieved_doc_truncated_must_be_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="truncated"):
        RetrievedDoc(id="a", content="x", truncated="yes")  # type: ignore[arg-type]


def test_the_turn_span_and_the_audit_log_show_a_document_that_reached_in_part(tmp_path: Path,
                                                                               memory_exporter: Any,
                                                                               memory_provider: Any) -> None:
    from ragaudit.tracing import conventions as c
    from ragaudit.tracing.spans import SpanRecorder

    log = tmp_path / "audit.jsonl"
    with Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), mode="inline", audit_log=log,
                 tracer_provider=memory_provider) as auditor:
        assembler = TurnAssembler("test")
        for step in (RunStarted("root", RunKind.CHAIN, 1, question="What about returns?"), retrieved(*kb(RULE, DESK)),
                     llm(("user", f"{RULE}\n\n{DESK[:30]}")), RunEnded("root", 9, answer="An answer.")):
            dispatch(assembler, step)
        assembler.close(SpanRecorder(tracer_provider=memory_provider), auditor)
        assert auditor.force_flush(10)
    turn_span = next(s for s in memory_exporter.get_finished_spans() if s.name == c.SPAN_TURN)
    assert list(turn_span.attributes[c.ATTR_DOCUMENT_IDS]) == ["d1", "d2"]
    assert list(turn_span.attributes[c.ATTR_DOCUMENT_TRUNCATED_IDS]) == ["d2"]
    line = json.loads(log.read_text().splitlines()[0])
    assert [(d["id"], d["content"], d.get("truncated", False)) for d in line["documents"]] == [
        ("d1", RULE, False), ("d2", DESK[:30].rstrip(), True)]


def test_a_part_of_a_document_in_an_earlier_reply_is_not_evidence() -> None:
    # the model's earlier answer quoted the document's first sentence; this turn's grader dropped it
    first_sentence = RULE.split(", and")[0]
    conversation = (("user", "What about returns?"), ("assistant", first_sentence), ("user", "And the desk?"),
                    ("user", f"Context: {DESK}"))
    turn = turn_of(retrieved(*kb(RULE, DESK)), llm(*conversation))
    assert [d.id for d in turn.documents] == ["d2"]
    # quoted whole in a reply, it did reach the model (as before)
    whole = turn_of(retrieved(*kb(RULE, DESK)), llm(("assistant", RULE), ("user", DESK)))
    assert [d.id for d in whole.documents] == ["d1", "d2"]
