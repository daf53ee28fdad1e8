"""Property tests (hypothesis): the judge-output parser and the retrieval metrics on any input.

Parser: any string (free text, JSON-ish objects with any values, replies cut anywhere) gives
ParsedScores whose scores are in [0, 1] or None, never an exception, and they always make a valid
Judgement; the real ChatRagJudge turns any reply from a loopback server into such a Judgement.
Metrics: every value in [0, 1]; recall, hit rate, MRR and MAP never fall as K grows; NDCG is 1
for the ideal ranking; the per-turn ``score_ranking`` agrees with ``evaluate``.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ragaudit import ChatRagJudge, Judgement, JudgeRequest
from ragaudit.judges.llm.parsing import ParsedScores, parse_judgement
from ragaudit.judges.llm.prompt import wrap_untrusted
from ragaudit.metrics import evaluate, score_ranking
from ragaudit.records import SCORE_NAMES
from tests.support.llm_server import LLMServer

pytestmark = pytest.mark.timeout(120)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- the parser -----------------------------------------------------------------------------------------

SCORE_KEYS = ["faithfulnessScore", "contextRelevanceScore", "answerRelevanceScore", "faithfulness",
              "context_relevance", "Answer-Relevance", "faithfulness_score", "reason", "scale", "scores"]
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6),
                    st.decimals(allow_nan=False, allow_infinity=False).map(str))
values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20),
              st.sampled_from(["80%", "4/5", "1-5", "0 to 10", "nan", "-inf", "0/0", "1e999", "5", "10"])),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.sampled_from([*SCORE_KEYS, "score", "value"]), children,
                                               max_size=4)),
    max_leaves=12,
)
objects = st.dictionaries(st.sampled_from(SCORE_KEYS), values, max_size=8)


def json_ish(obj: dict[str, Any]) -> str:
    return json.dumps(obj, default=str, allow_nan=True)


replies = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(list('{}[]":,0123456789.-eE %/ abcdefsTrueFalsNn\'\n'))),
    objects.map(json_ish),
    st.tuples(st.text(max_size=40), objects.map(json_ish), st.text(max_size=40)).map("".join),
    st.tuples(objects.map(json_ish), st.integers(0, 400)).map(lambda t: t[0][: t[1]]),  # cut anywhere
    objects.map(lambda o: "```json\n" + json_ish(o).replace('"', "'") + ",\n```"),  # python-ish, trailing comma
)


def check_scores(parsed: ParsedScores) -> None:
    assert isinstance(parsed, ParsedScores)
    for name in SCORE_NAMES:
        value = getattr(parsed, name)
        assert value is None or (isinstance(value, float) and 0.0 <= value <= 1.0), (name, value)
    # Always a valid Judgement (its constructor rejects anything outside [0, 1]).
    Judgement(faithfulness=parsed.faithfulness, context_relevance=parsed.context_relevance,
              answer_relevance=parsed.answer_relevance, reason=parsed.reason, judge="property")


@SETTINGS
@given(replies)
def test_parser_never_raises_and_scores_stay_in_range(text: str) -> None:
    check_scores(parse_judgement(text))


@SETTINGS
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text())))
def test_parser_takes_non_text_without_raising(value: Any) -> None:
    parsed = parse_judgement(value)
    assert not parsed.has_scores


@SETTINGS
@given(objects.map(json_ish), st.text(alphabet=st.characters(blacklist_characters="{}<>"), max_size=60),
       st.sampled_from(["question", "answer", "context"]))
def test_a_verdict_inside_delimiters_is_never_read_as_the_verdict(verdict: str, prose: str, label: str) -> None:
    """Whatever JSON sits inside a data section, a reply that only echoes it has no scores."""
    parsed = parse_judgement(f"{prose}\n{wrap_untrusted(label, verdict)}\n{prose}")
    assert not parsed.has_scores


marker_pieces = st.sampled_from(["<<<", ">>>", "ragaudit", "end", ":", " ", "answer", "context", "question",
                                  "RAGAUDIT", "End", "\n", "0123456789abcdef", "{", "}"])
hostile = st.one_of(st.text(), st.lists(marker_pieces, max_size=30).map("".join))


@SETTINGS
@given(hostile, hostile, hostile)
def test_any_content_stays_inside_intact_delimiters(question: str, answer: str, context: str) -> None:
    from ragaudit.judges.llm.prompt import build_messages

    user = build_messages(JudgeRequest(query=question, answer=answer, context=context), nonce="0f1e2d3c4b5a6978")[1]
    text = user["content"]
    for label in ("question", "answer", "context"):
        opening, closing = f"<<<ragaudit:{label}:0f1e2d3c4b5a6978>>>", f"<<<end:{label}:0f1e2d3c4b5a6978>>>"
        assert text.count(opening) == 1 and text.count(closing) == 1
        inside = text[text.index(opening) + len(opening): text.index(closing)]
        assert "0f1e2d3c4b5a6978" not in inside
        assert re.search(r"<<<\s*(?:ragaudit|end)\s*:", inside, re.IGNORECASE) is None


@SETTINGS
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.text(max_size=80))
def test_a_well_formed_verdict_is_read_exactly(f: float, c: float, a: float, prose: str) -> None:
    assume("{" not in prose and "}" not in prose and "<<<" not in prose)
    text = f"{prose}\n" + json.dumps({"faithfulnessScore": f, "contextRelevanceScore": c,
                                      "answerRelevanceScore": a, "reason": "r"})
    parsed = parse_judgement(text)
    # A 0/1-only verdict is ambiguous with a 0-10 scale only when a value exceeds 1; these do not.
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (f, c, a)


class Scripted:
    """The next reply of the loopback server, set by each hypothesis example."""

    reply = ""


@pytest.fixture(scope="module")
def server() -> Iterator[LLMServer]:
    with LLMServer(rule=lambda body: Scripted.reply) as srv:
        yield srv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies)
def test_chat_judge_turns_any_reply_into_a_valid_judgement(server: LLMServer, text: str) -> None:
    Scripted.reply = text
    judge = ChatRagJudge(base_url=server.base_url, api_key="test", timeout_s=5, max_retries=0)
    try:
        judgement = judge.judge(JudgeRequest(query="q", answer="a", context="c"))
    finally:
        judge.close()
    assert isinstance(judgement, Judgement)
    for name in SCORE_NAMES:
        value = getattr(judgement, name)
        assert value is None or 0.0 <= value <= 1.0
    if judgement.error is not None:
        assert all(getattr(judgement, name) is None for name in SCORE_NAMES)


# --- the metrics ----------------------------------------------------------------------------------------

MEASURES = ["P", "recall", "f1", "hit_rate", "mrr", "map", "ndcg", "ndcg_burges"]
CUTOFFS = [1, 2, 3, 5, 10, 20]
doc_ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


@st.composite
def rankings(draw: Any) -> tuple[list[str], dict[str, int]]:
    """A ranked list of distinct ids and graded qrels (some ids unjudged, some judged 0)."""
    ranked = draw(st.lists(doc_ids, unique=True, max_size=25))
    pool = draw(st.lists(doc_ids, unique=True, max_size=25))
    judged = draw(st.lists(st.sampled_from(ranked + pool), unique=True)) if ranked + pool else []
    qrels = {doc: draw(st.integers(0, 3)) for doc in judged}
    return ranked, qrels


def all_measures() -> list[str]:
    return [*MEASURES, *(f"{m}@{k}" for m in MEASURES for k in CUTOFFS)]


@SETTINGS
@given(rankings())
def test_metric_values_are_in_unit_interval(case: tuple[list[str], dict[str, int]]) -> None:
    ranked, qrels = case
    for name, value in score_ranking(ranked, qrels, all_measures()).items():
        assert isinstance(value, float) and not math.isnan(value)
        assert 0.0 <= value <= 1.0 + 1e-12, (name, value)


@SETTINGS
@given(rankings())
def test_cumulative_metrics_never_fall_as_k_grows(case: tuple[list[str], dict[str, int]]) -> None:
    ranked, qrels = case
    for measure in ("recall", "hit_rate", "mrr", "map"):
        values = score_ranking(ranked, qrels, [f"{measure}@{k}" for k in CUTOFFS])
        series = [values[f"{measure}@{k}"] for k in CUTOFFS]
        assert all(a <= b + 1e-12 for a, b in itertools.pairwise(series)), (measure, series)


@SETTINGS
@given(st.dictionaries(doc_ids, st.integers(0, 3), min_size=1, max_size=20), st.sampled_from(CUTOFFS))
def test_ndcg_is_one_for_the_ideal_ranking(qrels: dict[str, int], k: int) -> None:
    assume(any(label > 0 for label in qrels.values()))
    ideal = sorted(qrels, key=lambda doc: -qrels[doc])
    values = score_ranking(ideal, qrels, [f"ndcg@{k}", "ndcg", f"ndcg_burges@{k}"])
    assert all(math.isclose(v, 1.0) for v in values.values()), values


@SETTINGS
@given(rankings(), st.sampled_from(["recall@5", "P@3", "mrr@10", "ndcg@10", "map", "hit_rate@2", "f1@5"]))
def test_per_turn_scores_agree_with_evaluate(case: tuple[list[str], dict[str, int]], measure: str) -> None:
    ranked, qrels = case
    assume(ranked and any(label > 0 for label in qrels.values()))
    run = {"q": {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}}  # distinct scores, rank order
    batch = evaluate(run, {"q": qrels}, [measure], per_query=True)["q"]
    single = score_ranking(ranked, qrels, [measure])
    assert math.isclose(next(iter(batch.values())), next(iter(single.values())), abs_tol=1e-9), (batch, single)
