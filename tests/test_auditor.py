from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ragaudit import Auditor, ConfigurationError, FakeJudge, Judgement, JudgeRequest, Limits, RagTurn, RetrievedDoc
from ragaudit.auditor import sampled, turn_metrics

ROOT = Path(__file__).resolve().parents[1]


def make_turn(i: int, **kw: object) -> RagTurn:
    docs = (RetrievedDoc(id=f"d{i}", content=f"doc {i}", rank=1, source="s.pdf"),)
    return RagTurn(turn_id=f"turn-{i}", query=f"question {i}", answer=f"answer {i}", documents=docs,
                   **kw)  # type: ignore[arg-type]


def scores(request: JudgeRequest) -> dict[str, object]:
    return {"faithfulness": 1.0, "context_relevance": 0.5, "answer_relevance": 0.25, "reason": request.query}


def check_invariant(stats: dict[str, int]) -> None:
    assert stats["submitted"] == (stats["judged"] + stats["failed"] + stats["dropped"]
                                  + stats["sampled_out"] + stats["pending"])


def test_background_judging_reaches_log_and_callback(tmp_path: Path) -> None:
    seen: list[tuple[str, Judgement]] = []
    log = tmp_path / "audit.jsonl"
    with Auditor(FakeJudge(scores), audit_log=log, on_judgement=lambda t, j: seen.append((t.turn_id, j))) as aud:
        statuses = [aud.submit(make_turn(i)) for i in range(20)]
        assert set(statuses) == {"queued"}
        assert aud.force_flush(10)
        stats = aud.stats()
    assert stats["judged"] == 20 and stats["pending"] == 0
    check_invariant(stats)
    assert sorted(t for t, _ in seen) == sorted(f"turn-{i}" for i in range(20))
    assert all(j.reason and j.reason.startswith("question") for _, j in seen)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 20
    first = next(x for x in lines if x["turn_id"] == "turn-3")
    assert first["faithfulness"] == 1.0 and first["query"] == "question 3"
    assert first["documents"][0]["id"] == "d3"


def test_queue_full_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    gate = threading.Event()

    def slow(request: JudgeRequest) -> dict[str, object]:
        gate.wait(10)
        return {"faithfulness": 1.0}

    aud = Auditor(FakeJudge(slow), limits=Limits(max_queue=3, max_concurrency=1), audit_log=None)
    statuses = [aud.submit(make_turn(i)) for i in range(10)]
    assert statuses.count("queued") == 3 and statuses.count("dropped") == 7
    stats = aud.stats()
    assert stats["dropped"] == 7 and stats["pending"] == 3
    check_invariant(stats)
    gate.set()
    assert aud.force_flush(10)
    stats = aud.stats()
    assert stats["judged"] == 3
    check_invariant(stats)
    aud.shutdown()
    assert aud.submit(make_turn(99)) == "dropped"
    check_invariant(aud.stats())


def test_sampling_is_deterministic_by_turn_id() -> None:
    ids = [f"t{i}" for i in range(2000)]
    picked = [i for i in ids if sampled(i, 0.1)]
    assert picked == [i for i in ids if sampled(i, 0.1)]
    assert 120 < len(picked) < 280
    with Auditor(FakeJudge(scores), sample_rate=0.1, audit_log=None) as aud:
        statuses = [aud.submit(make_turn(i)) for i in range(200)]
        aud.force_flush(10)
        stats = aud.stats()
    assert stats["sampled_out"] == statuses.count("sampled_out") > 0
    assert stats["judged"] == statuses.count("queued")
    check_invariant(stats)


def test_inline_mode_judges_before_returning() -> None:
    seen: list[str] = []
    with Auditor(FakeJudge(scores), mode="inline", audit_log=None,
                 on_judgement=lambda t, j: seen.append(t.turn_id)) as aud:
        assert aud.submit(make_turn(1)) == "judged"
        assert seen == ["turn-1"]
        assert Auditor(FakeJudge(lambda r: 1 / 0), mode="inline", audit_log=None).submit(make_turn(2)) == "failed"


def test_judge_errors_and_timeouts_are_recorded_not_raised(tmp_path: Path) -> None:
    gate = threading.Event()
    out: list[Judgement] = []

    def fn(request: JudgeRequest) -> dict[str, object]:
        if request.query.endswith("1"):
            raise RuntimeError("judge exploded")
        if request.query.endswith("2"):
            gate.wait(10)
        return {"faithfulness": 0.5}

    # Turn 3's instant judge is judged (and flushed) before the hanging one is submitted, so on a
    # loaded machine it cannot be cut by the deadline the hanging judge runs into (it once was, at
    # load 8-11 with turns 1-3 in flight together).
    log = tmp_path / "a.jsonl"
    with Auditor(FakeJudge(fn), limits=Limits(timeout_s=1.0), audit_log=log,
                 on_judgement=lambda t, j: out.append(j)) as aud:
        aud.submit(make_turn(3))
        assert aud.force_flush(10)
        for i in (1, 2):
            aud.submit(make_turn(i))
        assert aud.force_flush(10)
        stats = aud.stats()
    gate.set()
    assert stats["failed"] == 2 and stats["judged"] == 1
    errors = sorted(j.error or "" for j in out if j.error)
    assert errors[0].startswith("RuntimeError: judge exploded")
    assert errors[1].startswith("timeout")
    assert all(j.faithfulness is None for j in out if j.error)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert sorted(x["judge_status"] for x in lines) == ["failed", "failed", "judged"]


def test_failing_callback_is_counted_and_isolated() -> None:
    def bad(turn: RagTurn, j: Judgement) -> None:
        raise ValueError("sink down")

    with Auditor(FakeJudge(scores), audit_log=None, on_judgement=bad) as aud:
        aud.submit(make_turn(1))
        aud.force_flush(10)
        stats = aud.stats()
    assert stats["export_errors"] == 1 and stats["judged"] == 1


def test_flush_times_out_and_reports_false() -> None:
    gate = threading.Event()
    aud = Auditor(FakeJudge(lambda r: gate.wait(5) and {"faithfulness": 1.0}), audit_log=None)
    aud.submit(make_turn(1))
    assert aud.force_flush(0.05) is False
    gate.set()
    assert aud.force_flush(10) is True
    aud.shutdown()


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "later"}, "mode"),
    ({"sample_rate": 1.5}, "sample_rate"),
    ({"limits": {"max_queue": 0}}, "limits"),
    ({"cost": 5.0}, "cost"),
    ({"content": False}, "content"),
    ({"sessions": 300}, "sessions"),
    ({"on_judgement": 3}, "on_judgement"),
])
def test_bad_configuration_is_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Auditor(FakeJudge(scores), audit_log=None, **kwargs)  # type: ignore[arg-type]


def test_bad_judge_rejected() -> None:
    with pytest.raises(ConfigurationError, match="RagJudge"):
        Auditor(object(), audit_log=None)  # type: ignore[arg-type]


def test_turn_metrics_from_relevant_ids() -> None:
    turn = make_turn(1, relevant_ids=["d1"])
    m = turn_metrics(turn, ["recall@5", "mrr@10"])
    assert m == {"recall@5": 1.0, "mrr@10": 1.0}
    assert turn_metrics(make_turn(2)) is None


EXIT_SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    from ragaudit import Auditor, FakeJudge, Limits, RagTurn
    async def slow(request):
        await asyncio.sleep(0.05)
        return {{"faithfulness": 1.0, "reason": "ok"}}
    judge = FakeJudge(slow)
    {setup}
    aud = Auditor(judge, audit_log=sys.argv[1], limits=Limits(max_queue=int(sys.argv[2]), max_concurrency=4))
    for i in range(40):
        aud.submit(RagTurn(turn_id=f"t{{i}}", query="q", answer="a"))
    print(aud.stats()["dropped"])
    # exits normally without flush(): the exit hook must flush
""")


@pytest.mark.parametrize("judge_kind", ["async", "sync"])
def test_normal_exit_flushes_every_pending_judgement(tmp_path: Path, judge_kind: str) -> None:
    setup = "" if judge_kind == "async" else textwrap.dedent("""
        from ragaudit import BaseRagJudge, Judgement
        class Slow(BaseRagJudge):
            name = "slow-sync"
            def judge(self, request):
                time.sleep(0.05)
                return Judgement(faithfulness=1.0, judge=self.name)
        judge = Slow()
    """)
    log = tmp_path / "audit.jsonl"
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT.format(setup=setup), str(log), "10000"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"
    assert len(log.read_text().splitlines()) == 40, proc.stderr


def test_exit_with_small_queue_counts_drops(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    proc = subprocess.run([sys.executable, "-c", EXIT_SCRIPT.format(setup=""), str(log), "5"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    dropped = int(proc.stdout.strip())
    assert dropped == 35
    assert len(log.read_text().splitlines()) + dropped == 40
