"""Trace readiness with an injected clock: nothing here sleeps."""

from __future__ import annotations

import pytest

from ragaudit.errors import ConfigurationError
from ragaudit.integrations.otlp._buffer import TraceBuffer
from ragaudit.integrations.otlp._decode import SpanData


def span(trace: str, span_id: str, parent: str | None = None) -> SpanData:
    return SpanData(trace_id=trace * 32, span_id=span_id * 16, parent_id=parent * 16 if parent else None,
                    name="s", kind=1, start_ns=1, end_ns=2, attributes={})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ready_once_root_arrived_and_quiet() -> None:
    clock = Clock()
    buf = TraceBuffer(quiet_s=2.0, max_wait_s=30.0, clock=clock)
    buf.add([span("a", "2", parent="1")])
    clock.now += 5
    assert buf.due() == []  # quiet but no root yet
    buf.add([span("a", "1")])
    clock.now += 1.9
    assert buf.due() == []  # root, not quiet long enough
    buf.add([span("a", "3", parent="1")])  # a late child restarts the quiet period
    clock.now += 1.9
    assert buf.due() == []
    clock.now += 0.1
    [ready] = buf.due()
    assert {s.span_id[0] for s in ready.spans} == {"1", "2", "3"} and ready.has_root
    assert len(buf) == 0 and buf.spans_buffered == 0


def test_max_wait_without_root_and_late_spans_counted() -> None:
    clock = Clock()
    buf = TraceBuffer(quiet_s=2.0, max_wait_s=10.0, clock=clock)
    buf.add([span("b", "2", parent="1")])
    for _ in range(3):  # keeps arriving: never quiet
        clock.now += 2.5
        buf.add([span("b", "3", parent="1")])
        assert buf.due() == []
    clock.now = 110.0
    ready = buf.due()
    assert [r.trace_id for r in ready] == ["b" * 32] and not ready[0].has_root
    buf.add([span("b", "4", parent="1"), span("b", "1")])
    assert buf.late_spans == 2 and len(buf) == 0  # after the judgement: counted, never a second turn


def test_oldest_trace_evicted_and_counted() -> None:
    clock = Clock()
    buf = TraceBuffer(quiet_s=1.0, max_wait_s=5.0, max_traces=2, clock=clock)
    buf.add([span("a", "1"), span("a", "2", parent="1")])
    clock.now += 0.1
    buf.add([span("b", "1")])
    evicted = buf.add([span("c", "1")])
    assert [t.trace_id[0] for t in evicted] == ["a"]
    assert (buf.evicted_traces, buf.evicted_spans, len(buf), buf.spans_buffered) == (1, 2, 2, 2)
    clock.now += 1.0
    assert sorted(t.trace_id[0] for t in buf.due()) == ["b", "c"]


def test_quiet_rootless_trace_does_not_hide_ready_ones() -> None:
    clock = Clock()
    buf = TraceBuffer(quiet_s=1.0, max_wait_s=60.0, clock=clock)
    buf.add([span("a", "2", parent="1")])  # never gets its root
    buf.add([span("b", "1")])
    clock.now += 1.0
    assert [t.trace_id[0] for t in buf.due()] == ["b"]
    buf.add([span("c", "1")])
    clock.now += 1.0
    assert [t.trace_id[0] for t in buf.due()] == ["c"]
    assert [t.trace_id[0] for t in buf.drain()] == ["a"]


@pytest.mark.parametrize("kwargs", [{"quiet_s": -1}, {"max_wait_s": 1, "quiet_s": 2}, {"max_traces": 0}])
def test_bad_settings_named(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(kwargs))):
        TraceBuffer(clock=Clock(), **kwargs)  # type: ignore[arg-type]
