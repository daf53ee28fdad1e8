"""The Auditor's parts (issue 49): `Limits`, `CostControl`, `ContentPolicy`, `Sessions` are values, each checked
when made with an error naming the field; the Auditor takes them, and none of its old keywords."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from ragaudit import (
    Auditor,
    Budget,
    ConfigurationError,
    ContentPolicy,
    CostControl,
    FakeJudge,
    LexicalJudge,
    Limits,
    RagTurn,
    Sessions,
)

OLD_KEYWORDS = ["max_queue", "max_concurrency", "timeout_s", "max_closing", "max_context_chars", "exit_timeout_s",
                "budget", "max_rps", "budget_store", "budget_fail", "pause_s", "prices", "judge_if", "retain_s",
                "max_retained", "capture_content", "capture_reason", "redact"]


@pytest.mark.parametrize(("make", "field"), [
    (lambda: Limits(max_queue=0), "Limits.max_queue"),
    (lambda: Limits(max_concurrency=True), "Limits.max_concurrency"),
    (lambda: Limits(max_closing=-1), "Limits.max_closing"),
    (lambda: Limits(max_context_chars=0), "Limits.max_context_chars"),
    (lambda: Limits(timeout_s=0), "Limits.timeout_s"),
    (lambda: Limits(timeout_s=math.nan), "Limits.timeout_s"),
    (lambda: Limits(exit_timeout_s=math.inf), "Limits.exit_timeout_s"),
    (lambda: CostControl(budget="100 calls"), "CostControl.budget"),  # type: ignore[arg-type]
    (lambda: CostControl(budget=[Budget(max_calls=1), 3]), "CostControl.budget"),  # type: ignore[list-item]
    (lambda: CostControl(max_rps=0), "CostControl.max_rps"),
    (lambda: CostControl(store=6379), "CostControl.store"),  # type: ignore[arg-type]
    (lambda: CostControl(fail="maybe"), "CostControl.fail"),  # type: ignore[arg-type]
    (lambda: CostControl(pause_s=math.nan), "CostControl.pause_s"),
    (lambda: CostControl(prices=[("m", (1.0, 1.0))]), "CostControl.prices"),  # type: ignore[arg-type]
    (lambda: CostControl(judge_if=True), "CostControl.judge_if"),  # type: ignore[arg-type]
    (lambda: CostControl(retain_s=0), "CostControl.retain_s"),
    (lambda: CostControl(max_retained=0), "CostControl.max_retained"),
    (lambda: Sessions(session_idle_s=0), "Sessions.session_idle_s"),
    (lambda: Sessions(max_sessions=0), "Sessions.max_sessions"),
    (lambda: Sessions(max_session_turns=1.5), "Sessions.max_session_turns"),  # type: ignore[arg-type]
    (lambda: Sessions(clock=3), "Sessions.clock"),  # type: ignore[arg-type]
    (lambda: ContentPolicy(redact="[x]"), "redact"),  # type: ignore[arg-type]
])
def test_a_bad_value_is_refused_when_made_naming_its_field(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError, match="^" + re.escape(field) + r"\b"):
        make()


@pytest.mark.parametrize("old", OLD_KEYWORDS)
def test_the_old_keywords_are_gone_no_alias(old: str) -> None:
    with pytest.raises(TypeError, match=old):
        Auditor(LexicalJudge(), audit_log=None, handle_signals=False, **{old: None})


def test_the_auditor_takes_a_handful_of_keywords() -> None:
    import inspect

    names = list(inspect.signature(Auditor.__init__).parameters)[1:]
    assert names == ["judge", "mode", "sample_rate", "exporters", "audit_log", "limits", "cost", "content",
                     "sessions", "tracer_provider", "meter_provider", "on_judgement", "judge_trace", "handle_signals"]


def test_the_auditor_reads_its_limits_and_keeps_its_parts() -> None:
    limits = Limits(max_queue=7, max_concurrency=3, max_closing=9, timeout_s=5, max_context_chars=100,
                    exit_timeout_s=2)
    cost = CostControl(budget=[Budget(max_calls=5)], max_rps=2)
    with Auditor(LexicalJudge(), audit_log=None, handle_signals=False, limits=limits, cost=cost) as auditor:
        assert (auditor.max_queue, auditor.max_concurrency, auditor.max_closing, auditor.timeout_s,
                auditor.max_context_chars, auditor.exit_timeout_s) == (7, 3, 9, 5.0, 100, 2.0)
        assert auditor.limits is limits and auditor.cost is cost
        assert cost.budgets == (Budget(max_calls=5),)  # a list is kept as a tuple: the value stays frozen
    with Auditor(LexicalJudge(), audit_log=None, handle_signals=False) as auditor:
        assert auditor.limits == Limits() and auditor.cost == CostControl()
        assert auditor.max_queue == 10_000 and auditor.timeout_s == 60.0


def test_cost_control_acts_through_the_auditor() -> None:
    judge = FakeJudge(lambda request: {"faithfulness": 1.0})
    cost = CostControl(judge_if=lambda turn: turn.turn_id != "skip", budget=Budget(max_calls=1))
    with Auditor(judge, mode="inline", audit_log=None, handle_signals=False, cost=cost) as auditor:
        assert auditor.submit(RagTurn(turn_id="skip", query="q", answer="a")) == "filtered_out"
        assert auditor.submit(RagTurn(turn_id="t1", query="q", answer="a")) == "judged"
        assert auditor.submit(RagTurn(turn_id="t2", query="q", answer="a")) == "not_sent"
        assert auditor.stats()["over_budget"] == 1 and auditor.stats()["filtered_out"] == 1


def test_a_content_policy_given_binds_the_handlers_the_default_leaves_them_in_charge() -> None:
    given = ContentPolicy(capture_content=False)
    with Auditor(LexicalJudge(), audit_log=None, handle_signals=False, content=given) as auditor:
        assert auditor.content_policy is given
        assert auditor.content_policy_for(capture_content=True).capture_content is False
    with Auditor(LexicalJudge(), audit_log=None, handle_signals=False) as auditor:
        assert auditor.content_policy_for(capture_content=True).capture_content is True


def test_the_store_password_never_shows_in_the_cost_controls_repr() -> None:
    shown = repr(CostControl(store="redis://:hunter2-store-pw@127.0.0.1:6379/0"))
    assert "hunter2-store-pw" not in shown and "127.0.0.1:6379" in shown
