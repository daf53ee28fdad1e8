"""What the app matrices (``tests/test_app_matrix_*.py``) share: their two loopback chat-completions
servers, as module-scoped fixtures registered in ``tests/conftest.py``, and the checks of a run.

``app_server`` answers the app's own model calls by the requesting module's ``app_model`` fixture
(its rule: what the app's model says to each prompt); ``judge_server`` is the judge's endpoint, whose
default reply is a well-formed three-score judgement.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.trace import StatusCode

from ragaudit import RagTurn
from ragaudit.tracing import conventions as c
from tests.support.llm_server import LLMServer

if TYPE_CHECKING:  # the OTel SDK is not installed where only the judge is tested (noxfile.py's judge_matrix)
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["app_server", "check_judged_turns", "check_turn_traces", "check_unjudged_counts", "judge_server"]


@pytest.fixture(scope="module")
def app_server(app_model: Any) -> Iterator[LLMServer]:
    """The app's model: a loopback server answering by the module's ``app_model`` rule."""
    with LLMServer(app_model) as srv:
        yield srv


@pytest.fixture(scope="module")
def judge_server() -> Iterator[LLMServer]:
    """The judge's endpoint (its default reply is a well-formed three-score judgement)."""
    with LLMServer() as srv:
        yield srv


# --- the checks both matrices make ------------------------------------------------------------------------
# An app matrix's Env has: expects (each with question, ids, answer, unjudged), judged (the RagTurns
# the judge got), final_inputs (per message, the documents in its last model call), judge_srv,
# auditor and exporter.


def check_judged_turns(env: Any) -> list[tuple[Any, RagTurn]]:
    """The common checks of the judged user messages (one judge call per judged message, its answer,
    and as its evidence exactly the documents of its final model call); each as ``(expect, turn)``."""
    judged = [e for e in env.expects if e.unjudged is None]
    assert sorted(t.query for t in env.judged) == sorted(e.question for e in judged)
    assert env.judge_srv.request_count == len(judged)  # one judge call per judged user message
    turns = {t.query: t for t in env.judged}
    checked = []
    for expect, final_input in zip(env.expects, env.final_inputs, strict=True):
        if expect.unjudged is not None:
            continue
        turn = turns[expect.question]
        assert turn.answer == expect.answer, expect.question
        assert [d.id for d in turn.documents] == expect.ids == final_input, (turn.documents, final_input)
        checked.append((expect, turn))
    return checked


def check_unjudged_counts(env: Any) -> None:
    """Each message not judged is counted under its reason, ``stats()["unjudged_<reason>"]``."""
    stats = env.auditor.stats()
    for reason in {e.unjudged for e in env.expects} - {None}:
        assert stats[f"unjudged_{reason}"] == sum(e.unjudged == reason for e in env.expects), stats


def check_turn_traces(env: Any) -> list[tuple[Any, list[ReadableSpan]]]:
    """The common checks of the traces (a trace per user message, a judge span only for a judged one,
    every span under the turn span, a failed message's turn span an error); each turn as ``(expect,
    the spans of its trace)``."""
    spans = list(env.exporter.get_finished_spans())
    # the turn span: ragaudit.turn, or invoke_agent {name} for an agent's turn
    turns = [s for s in spans if s.name == c.SPAN_TURN or s.name.startswith(c.SPAN_AGENT)]
    checked = []
    assert sorted(str(t.attributes[c.INPUT_VALUE]) for t in turns) == sorted(e.question for e in env.expects)
    assert len({t.context.trace_id for t in turns}) == len(turns)  # a trace per user message
    for turn in turns:
        expect = next(e for e in env.expects if e.question == turn.attributes[c.INPUT_VALUE])
        in_trace = [s for s in spans if s.context.trace_id == turn.context.trace_id]
        assert [s.name for s in in_trace].count(c.SPAN_JUDGE) == (1 if expect.unjudged is None else 0)
        for span in in_trace:  # every step and the judge hang under the turn span
            if span is not turn:
                assert span.parent is not None and span.parent.span_id == turn.context.span_id, span.name
        if expect.unjudged == "failed":  # the turn carries the error
            assert turn.status.status_code is StatusCode.ERROR
        checked.append((expect, in_trace))
    return checked
