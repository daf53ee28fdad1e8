"""Behaviour unchanged by the record/exporter refactoring: the demo's spans, audit lines and exporter
payloads carry the same keys and values as before (ids, times and latencies aside).

``tests/data/demo_shape.json`` was written by ``python -m tests.support.demo_shape`` on the code
before ``AuditRecord`` and the exporters (main at 1b6d4e3), and the refactoring matched it exactly.
A change made on purpose rewrites it in the same commit: rewritten once since, for the ids issue 28
added to each ``gen_ai.evaluation.result`` event (``ragaudit.{judge.name,judgement.id,score.id,
turn.id}``), nothing else differing; and again for issue 23: the demo's offline stand-in cites after
the sentence ("... purchase. [1]", was "... purchase [1]."), so its answers and sentence texts changed,
and retrieval spans gained ``ragaudit.document.used`` / ``used_count`` (which of their documents
reached the model) — nothing else differing; and for issue 24's rename of the retrieval metrics of
the judge's grades: ``judged_metrics`` / ``judged_<metric>`` / ``ragaudit.retrieval.judged_*`` /
Phoenix ``judged_relevance`` / Langfuse ``retrieval.judged_*`` became ``graded_*`` — the old file with
those names replaced (and its lists sorted again) equals the new one.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.demo_shape import demo_shape

_BEFORE = Path(__file__).parent / "data" / "demo_shape.json"


def test_demo_spans_audit_lines_and_exporter_payloads_are_unchanged() -> None:
    before = json.loads(_BEFORE.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(demo_shape(), sort_keys=True))
    assert sorted(now) == sorted(before)
    for part in sorted(before):
        assert len(now[part]) == len(before[part]), part
        for index, (item_now, item_before) in enumerate(zip(now[part], before[part])):
            assert item_now == item_before, f"{part}[{index}] differs"
