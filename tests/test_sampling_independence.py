"""Every documented sampling rate means what it says, also when two of them apply to one turn.

The Auditor's ``sample_rate`` and a TieredJudge's ``detailed_rate`` used to hash the same turn id the
same way, so with 0.2 and 0.1 every detailed turn was also sampled: half of the judged turns got the
detailed judge instead of a tenth.
"""

from __future__ import annotations

import uuid

from ragaudit import JudgeRequest, RuleJudge, TieredJudge
from ragaudit._sampling import sampled

IDS = [str(uuid.UUID(int=i * 2_654_435_761 % 2**128)) for i in range(100_000)]


def _request(turn_id: str) -> JudgeRequest:
    return JudgeRequest(query="q", answer="a", context="c", metadata={"turn_id": turn_id})


def test_auditor_and_tiered_rates_are_independent_on_100_000_ids() -> None:
    tiered = TieredJudge(RuleJudge(min_chars=1), RuleJudge(min_chars=1), detailed_rate=0.1)
    judged = [i for i in IDS if sampled(i, 0.2)]
    detailed = [i for i in judged if tiered.in_sample(_request(i))]
    assert abs(len(judged) / len(IDS) - 0.2) < 0.01
    assert abs(len(detailed) / len(judged) - 0.1) < 0.01, "detailed share of the judged turns"
    everyone = [i for i in IDS if tiered.in_sample(_request(i))]
    assert abs(len(everyone) / len(IDS) - 0.1) < 0.01


def test_salted_decisions_are_deterministic_and_differ_by_salt() -> None:
    a = [sampled(i, 0.5, salt="a") for i in IDS[:2000]]
    assert a == [sampled(i, 0.5, salt="a") for i in IDS[:2000]]
    b = [sampled(i, 0.5, salt="b") for i in IDS[:2000]]
    agree = sum(x == y for x, y in zip(a, b)) / 2000
    assert 0.45 < agree < 0.55, "two salts agree as two independent coins would"
