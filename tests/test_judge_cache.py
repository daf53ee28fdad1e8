"""Cost controls: the judgement cache (memory and sqlite, across a restart) and the pre-run cost estimate."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragaudit import BaseRagJudge, ChatRagJudge, FakeJudge, Judgement, JudgeRequest, LexicalJudge
from ragaudit.errors import ConfigurationError, RagAuditError
from ragaudit.evaluation.runner import load_dataset
from ragaudit.judges.combinators.cache import CachedJudge, JudgementCache, MemoryCache, SqliteCache, cache_key
from ragaudit.judges.combinators.tiered import TieredJudge
from ragaudit.judges.cost import CostEstimate, estimate_cost
from ragaudit.judges.rubric import Criterion, RubricJudge
from ragaudit.judges.rules import RuleJudge
from tests.support.llm_server import LLMServer, RecordedRequest, judgement_json

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
REQUEST = JudgeRequest(query="How long is the return window?", answer="30 days [1].",
                       context="[1] id=policy\nItems can be returned within 30 days.", reference="30 days.")


def scored(request: JudgeRequest) -> Judgement:
    return Judgement(faithfulness=0.9, context_relevance=0.8, answer_relevance=0.7, reason="fine", judge="fake",
                     latency_s=0.5, usage={"calls": 1, "prompt_tokens": 120, "completion_tokens": 30},
                     details={"model": "m", "steps": ("a", "b")})


@pytest.fixture(scope="module")
def server() -> Iterator[LLMServer]:
    with LLMServer(default=judgement_json(0.9, 0.8, 0.7)) as srv:
        yield srv


@pytest.fixture
def srv(server: LLMServer) -> LLMServer:
    server.reset()
    return server


# --- the cache ----------------------------------------------------------------------------------------


def test_memory_cache_hit_is_marked_and_costs_nothing() -> None:
    inner = FakeJudge(scored)
    judge = CachedJudge(inner)
    first = judge.judge(REQUEST)
    second = judge.judge(REQUEST)
    assert inner.calls == 1
    assert "cached" not in first.details and first.usage["calls"] == 1
    assert second.scores() == first.scores() and second.reason == "fine"
    assert second.details["cached"] is True
    assert second.usage == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    assert second.details["cached_usage"] == {"calls": 1, "prompt_tokens": 120, "completion_tokens": 30}
    assert second.details["cached_latency_s"] == 0.5
    assert judge.stats() == {"hits": 1, "misses": 1, "stores": 1, "cache_errors": 0, "cache_timeouts": 0}
    assert judge.name == "fake" and isinstance(judge.cache, JudgementCache)


def test_every_request_field_and_the_judge_configuration_are_in_the_key() -> None:
    base = cache_key(FakeJudge(scored), REQUEST)
    variants = [
        JudgeRequest(query="other", answer=REQUEST.answer, context=REQUEST.context, reference=REQUEST.reference),
        JudgeRequest(query=REQUEST.query, answer="other", context=REQUEST.context, reference=REQUEST.reference),
        JudgeRequest(query=REQUEST.query, answer=REQUEST.answer, context="other", reference=REQUEST.reference),
        JudgeRequest(query=REQUEST.query, answer=REQUEST.answer, context=REQUEST.context, reference=None),
    ]
    keys = {cache_key(FakeJudge(scored), v) for v in variants}
    assert base not in keys and len(keys) == 4
    same = JudgeRequest(query=REQUEST.query, answer=REQUEST.answer, context=REQUEST.context,
                        reference=REQUEST.reference, metadata={"turn_id": "t-9"})
    assert cache_key(FakeJudge(scored), same) == base  # metadata is not what the judge sees
    assert cache_key(FakeJudge(scored, name="other"), REQUEST) != base
    assert cache_key(RuleJudge(max_chars=10), REQUEST) != cache_key(RuleJudge(max_chars=11), REQUEST)


def test_judgements_with_an_error_are_not_cached() -> None:
    outcomes = iter([RuntimeError("flaky"), None])

    def fn(request: JudgeRequest) -> Judgement:
        exc = next(outcomes)
        if exc is not None:
            raise exc
        return scored(request)

    judge = CachedJudge(FakeJudge(fn))
    assert judge.judge(REQUEST).error is not None
    retried = judge.judge(REQUEST)
    assert retried.error is None and "cached" not in retried.details
    assert judge.judge(REQUEST).details["cached"] is True
    assert judge.stats() == {"hits": 1, "misses": 2, "stores": 1, "cache_errors": 0, "cache_timeouts": 0}


def test_memory_cache_evicts_the_least_recently_used() -> None:
    cache = MemoryCache(max_entries=2)
    judgement = scored(REQUEST)
    cache.put("a", judgement)
    cache.put("b", judgement)
    assert cache.get("a") is judgement  # a is now the most recent
    cache.put("c", judgement)
    assert cache.get("b") is None and cache.get("a") is judgement and len(cache) == 2
    with pytest.raises(ConfigurationError, match="max_entries"):
        MemoryCache(max_entries=0)


def test_a_chat_judge_is_not_called_twice(srv: LLMServer) -> None:
    chat = ChatRagJudge("judge-model", base_url=srv.base_url, timeout_s=5.0, max_retries=0)
    judge = CachedJudge(chat)
    assert judge.blocking is False
    first = judge.judge(REQUEST)

    async def again() -> Judgement:
        try:
            return await judge.ajudge(REQUEST)
        finally:
            await chat.aclose()

    second = asyncio.run(again())
    assert srv.request_count == 1
    assert first.usage["calls"] == 1 and second.usage["calls"] == 0 and second.details["cached"] is True
    assert second.faithfulness == first.faithfulness == 0.9


def test_sqlite_round_trip_keeps_the_judgement(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "nested" / "judgements.sqlite")
    judgement = scored(REQUEST)
    cache.put("k", judgement)
    back = cache.get("k")
    assert len(cache) == 1
    # Every field comes back equal; the one documented change is JSON's: tuples come back as lists.
    assert back == dataclasses.replace(judgement, details={"model": "m", "steps": ["a", "b"]})
    assert [getattr(back, f.name) for f in dataclasses.fields(Judgement) if f.name != "details"] == [
        getattr(judgement, f.name) for f in dataclasses.fields(Judgement) if f.name != "details"]
    none_scores = Judgement(faithfulness=None, context_relevance=0.0, answer_relevance=None, reason=None,
                            judge="fake", error=None)
    cache.put("none", none_scores)
    assert cache.get("none") == none_scores  # a missing score stays None, a 0 stays 0
    assert cache.get("missing") is None
    odd = Judgement(faithfulness=1.0, reason="naïve \ud800 text", judge="fake")  # a lone surrogate
    cache.put("odd", odd)
    assert cache.get("odd") == odd
    with sqlite3.connect(tmp_path / "nested" / "judgements.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cache.clear()
    assert len(cache) == 0
    cache.close()
    cache.close()


_WRITER = """
import sys
from ragaudit import FakeJudge, Judgement, JudgeRequest
from ragaudit.judges.combinators.cache import CachedJudge, SqliteCache

cache = SqliteCache(sys.argv[1])
judge = CachedJudge(FakeJudge(lambda r: Judgement(faithfulness=0.25, reason="made in the first process",
                                                  judge="fake", usage={"calls": 1})), cache)
result = judge.judge(JudgeRequest(query="q", answer="a", context="c"))
assert result.error is None and "cached" not in result.details
print(judge.stats()["stores"])
"""


def test_sqlite_cache_survives_a_process_restart(tmp_path: Path) -> None:
    path = tmp_path / "judgements.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_WRITER), str(path)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    inner = FakeJudge(lambda r: {"faithfulness": 1.0})
    judge = CachedJudge(inner, SqliteCache(path))
    result = judge.judge(JudgeRequest(query="q", answer="a", context="c"))
    assert inner.calls == 0
    assert result.faithfulness == 0.25 and result.reason == "made in the first process"
    assert result.details["cached"] is True and judge.stats()["hits"] == 1
    judge.close()  # the cache was passed in: it stays open
    assert len(judge.cache) == 1  # type: ignore[arg-type]


def test_sqlite_cache_is_thread_safe_and_shared_by_connections(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    cache, other = SqliteCache(path), SqliteCache(path)  # two connections, as two processes would have
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(40):
                key = f"{worker}-{i}"
                (cache if i % 2 else other).put(key, Judgement(faithfulness=i / 40, judge=f"w{worker}"))
                back = (other if i % 2 else cache).get(key)
                assert back is not None and back.faithfulness == i / 40
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) == len(other) == 320
    cache.close()
    other.close()


def test_a_failing_cache_degrades_to_uncached_judging(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "c.sqlite")
    cache.close()
    with pytest.raises(RagAuditError, match="closed"):
        cache.get("k")
    inner = FakeJudge(scored)
    judge = CachedJudge(inner, cache)
    assert judge.judge(REQUEST).faithfulness == 0.9
    assert judge.judge(REQUEST).error is None
    assert inner.calls == 2
    assert judge.stats() == {"hits": 0, "misses": 2, "stores": 0, "cache_errors": 4, "cache_timeouts": 0}


def test_an_unreadable_entry_is_a_miss(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = SqliteCache(path)
    cache.put("k", scored(REQUEST))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ragaudit_judgements SET judgement = '{\"faithfulness\": 7}'")
    assert cache.get("k") is None
    cache.close()


def test_sqlite_cache_configuration_errors(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(ConfigurationError, match="cannot open the judgement cache"):
        SqliteCache(tmp_path / "dir")
    with pytest.raises(ConfigurationError, match="timeout"):
        SqliteCache(tmp_path / "x.sqlite", timeout_s=0)
    with pytest.raises(ConfigurationError, match="cache must have"):
        CachedJudge(FakeJudge(scored), cache=object())  # type: ignore[arg-type]
    memory = SqliteCache(":memory:")
    memory.put("k", scored(REQUEST))
    assert memory.get("k") is not None


# --- the cost estimate --------------------------------------------------------------------------------

ROWS: list[dict[str, Any]] = [
    {"question": "How long is the return window?", "answer": "30 days [1].",
     "contexts": ["Items can be returned within 30 days.", "Shipping takes 3-5 days."]},
    {"question": "Do you ship abroad?", "answer": "Yes, to 40 countries.", "contexts": ["We ship to 40 countries."]},
]


def tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def prompt_chars(request: RecordedRequest) -> int:
    return sum(len(m["content"]) for m in request.messages)


def test_estimate_matches_the_prompts_actually_sent(srv: LLMServer) -> None:
    srv.rule = lambda body: '{"scores": {"clarity": 4}}' if "criterion" in body["messages"][0]["content"] else None
    chat = ChatRagJudge("judge-model", base_url=srv.base_url, timeout_s=5.0, max_retries=0)
    estimate = estimate_cost(chat, ROWS)
    rubric = RubricJudge("judge-model", criteria=[Criterion("clarity", "Easy to follow.")], base_url=srv.base_url,
                         timeout_s=5.0, max_retries=0)
    rubric_estimate = estimate_cost(rubric, ROWS)
    for row in ROWS:
        request = JudgeRequest(query=row["question"], answer=row["answer"], context=_context(row))
        chat.judge(request)
        rubric.judge(request)
    sent = srv.requests
    assert len(sent) == 4
    assert estimate.calls == 2 and estimate.rows == 2 and estimate.cached_rows == 0
    assert estimate.prompt_tokens == tokens(prompt_chars(sent[0])) + tokens(prompt_chars(sent[2]))
    assert rubric_estimate.prompt_tokens == tokens(prompt_chars(sent[1])) + tokens(prompt_chars(sent[3]))
    assert estimate.completion_tokens > 0 and estimate.assumptions == ()
    assert estimate.total_tokens == estimate.prompt_tokens + estimate.completion_tokens
    chat.close()
    rubric.close()


def _context(row: dict[str, Any]) -> str:
    from ragaudit import RetrievedDoc
    from ragaudit.records import stable_doc_id

    docs = [RetrievedDoc(id=stable_doc_id(text), content=text, rank=i) for i, text in enumerate(row["contexts"], 1)]
    return JudgeRequest.build_context(docs)


def test_rows_without_answers_use_assumed_sizes() -> None:
    chat = ChatRagJudge("m", base_url="http://127.0.0.1:9/v1")
    rows = [{"question": "q1"}, {"question": "q2", "answer": "short"}]
    small = estimate_cost(chat, rows, answer_chars=100, context_chars=1000)
    large = estimate_cost(chat, rows, answer_chars=100, context_chars=5000)
    assert small.calls == 2 and large.prompt_tokens - small.prompt_tokens == 2 * 1000
    assert small.assumptions == ("answer: 100 chars assumed for 1 row(s)", "context: 1000 chars assumed for 2 row(s)")
    assert estimate_cost(chat, rows, chars_per_token=2).prompt_tokens > estimate_cost(chat, rows).prompt_tokens
    dataset = load_dataset([{"question": "q1", "reference_answer": "30 days"}, {"question": "q2"}])
    assert estimate_cost(chat, dataset).calls == 2


def test_judges_without_model_calls_cost_nothing() -> None:
    for judge in (RuleJudge(max_chars=10), LexicalJudge(), FakeJudge(scored)):
        estimate = estimate_cost(judge, ROWS)
        assert (estimate.calls, estimate.prompt_tokens, estimate.completion_tokens, estimate.rows) == (0, 0, 0, 2)


def test_other_judges_use_calls_per_judgement() -> None:
    class Jury(BaseRagJudge):
        calls_per_judgement = 3

        def judge(self, request: JudgeRequest) -> Judgement:
            return scored(request)

    one = estimate_cost(ChatRagJudge("m", base_url="http://127.0.0.1:9/v1", protocol="three-score"), ROWS)
    jury = estimate_cost(Jury(), ROWS)
    assert jury.calls == 6 and jury.prompt_tokens == 3 * one.prompt_tokens


def test_cached_rows_are_not_counted() -> None:
    judge = CachedJudge(ChatRagJudge("m", base_url="http://127.0.0.1:9/v1"))
    judge.cache.put(judge.key(JudgeRequest(query=ROWS[0]["question"], answer=ROWS[0]["answer"],
                                           context=_context(ROWS[0]))), scored(REQUEST))
    estimate = estimate_cost(judge, ROWS)
    assert estimate.calls == 1 and estimate.cached_rows == 1 and estimate.rows == 2
    assert estimate.prompt_tokens == estimate_cost(judge.inner, ROWS[1:]).prompt_tokens


def test_tiered_counts_the_detailed_judge_on_its_sample_only() -> None:
    chat = ChatRagJudge("m", base_url="http://127.0.0.1:9/v1")
    tiered = TieredJudge(RuleJudge(max_chars=10), chat, detailed_rate=0.3)
    rows: list[dict[str, Any]] = [{"question": f"q{i}", "answer": f"a{i}", "contexts": ["c"]} for i in range(200)]
    sampled_rows = [r for r in rows if tiered.in_sample(JudgeRequest(query=r["question"], answer=r["answer"],
                                                                     context="c"))]
    estimate = estimate_cost(tiered, rows)
    assert estimate.calls == len(sampled_rows) and 30 < len(sampled_rows) < 90
    assert estimate == estimate_cost(chat, sampled_rows) + CostEstimate(rows=200 - len(sampled_rows))


@pytest.mark.parametrize("rows, kwargs, match", [
    ([{"answer": "a"}], {}, "row 1: 'question'"),
    ([{"question": "q", "contexts": "one string"}], {}, "list of strings"),
    ([{"question": "q", "answer": 3}], {}, "'answer' must be a string"),
    ({"question": "q"}, {}, "not a single row"),
    ([{"question": "q"}], {"chars_per_token": 0}, "chars_per_token"),
    ([{"question": "q"}], {"answer_chars": -1}, "answer_chars"),
])
def test_estimate_input_errors(rows: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        estimate_cost(RuleJudge(max_chars=1), rows, **kwargs)
