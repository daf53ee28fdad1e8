"""parse_judgement: tolerant, None for what the judge did not give, never raises."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragaudit.judges.llm.parsing import ParsedScores, parse_judgement


def scores(text: str) -> tuple[float | None, float | None, float | None]:
    parsed = parse_judgement(text)
    return parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance


def obj(**values: Any) -> str:
    keys = {"f": "faithfulnessScore", "c": "contextRelevanceScore", "a": "answerRelevanceScore"}
    return json.dumps({keys.get(k, k): v for k, v in values.items()})


def test_plain_json() -> None:
    parsed = parse_judgement(obj(f=0.9, c=0.5, a=0.25, reason="Grounded."))
    assert parsed == ParsedScores(0.9, 0.5, 0.25, "Grounded.", None, (), True)
    assert parsed.has_scores
    assert parsed.scores() == {"faithfulness": 0.9, "context_relevance": 0.5, "answer_relevance": 0.25}


def test_prose_and_code_fences_around_the_object() -> None:
    text = (
        "Here is my evaluation of the answer.\n```json\n"
        + obj(f=1, c=0.75, a=0.5, reason="ok")
        + "\n```\nLet me know if you need more {details}."
    )
    parsed = parse_judgement(text)
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (1.0, 0.75, 0.5)
    assert parsed.reason == "ok" and parsed.parsed


def test_scores_as_numeric_strings_and_percentages() -> None:
    assert scores(obj(f="0.8", c="80%", a=" 45 % ")) == (0.8, 0.8, 0.45)
    assert scores(obj(f="4/5", c="1e-1", a=".5")) == (0.8, 0.1, 0.5)


def test_percentages_are_not_rescaled_with_other_scales() -> None:
    assert scores(obj(f="90%", c=1, a=5)) == (0.9, 0.0, 1.0)  # the bare numbers are a 1-5 scale (both ends)


def test_out_of_range_and_negative_values_are_never_clamped() -> None:
    # A value above 1 on no stated or certain scale: the whole verdict's scale is in doubt, every score None.
    parsed = parse_judgement(obj(f=1.3, c=-0.5, a=0.5))
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (None, None, None)
    assert parsed.rejected == ("faithfulness", "answer_relevance") and parsed.needs_repair
    assert not any("clamp" in note for note in parsed.notes)
    assert any("scale is in doubt" in note for note in parsed.notes)
    assert scores(obj(f=42, c=0.5, a="-3")) == (None, None, None)
    assert scores(obj(f=250, c=30, a=11)) == (None, None, None)  # no stated or certain scale
    assert scores(obj(f=-1, c=0.5, a=0.25)) == (None, 0.5, 0.25)  # a negative is "no score", not a scale
    assert scores(obj(f="120%", c="5/4", a=0.5)) == (None, None, 0.5)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinities_give_none(bad: str) -> None:
    text = f'{{"faithfulnessScore": {bad}, "contextRelevanceScore": "nan", "answerRelevanceScore": 0.5}}'
    parsed = parse_judgement(text)
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (None, None, 0.5)
    assert any("not finite" in note for note in parsed.notes)


def test_missing_key_is_none_never_zero() -> None:
    parsed = parse_judgement(obj(f=0.7, reason="no relevance scores"))
    assert parsed.faithfulness == 0.7
    assert parsed.context_relevance is None and parsed.answer_relevance is None
    assert "context_relevance: missing" in parsed.notes


@pytest.mark.parametrize("value", [True, False, None, [0.5], "high", "", "0.5 or so"])
def test_non_numeric_values_are_none(value: Any) -> None:
    parsed = parse_judgement(obj(f=value, c=0.5, a=0.5))
    assert parsed.faithfulness is None
    assert parsed.context_relevance == 0.5


def test_snake_case_short_and_nested_keys() -> None:
    snake = '{"faithfulness": 0.1, "context_relevance": 0.2, "answer_relevance": 0.3}'
    assert scores(snake) == (0.1, 0.2, 0.3)
    assert scores('{"Faithfulness-Score": 0.4, "CONTEXT_RELEVANCE_SCORE": 0.5}') == (0.4, 0.5, None)
    assert scores('{"scores": {"faithfulness": 0.6, "answer_relevance": 0.7}}') == (0.6, None, 0.7)
    assert scores('{"faithfulness": {"score": 0.9, "why": "x"}}') == (0.9, None, None)


def test_explicit_scales() -> None:
    one_to_five = parse_judgement(obj(f=3, c=5, a=1, scale="1-5"))
    assert one_to_five.scores() == {"faithfulness": 0.5, "context_relevance": 1.0, "answer_relevance": 0.0}
    assert one_to_five.scale == "1-5"
    assert scores(obj(f=7, c=2, a=10, scale="0 to 10")) == (0.7, 0.2, 1.0)
    assert scores(obj(f=40, c=100, a=0, scale="0-100")) == (0.4, 1.0, 0.0)
    assert scores(obj(f=2, c=4, a=3, scale=5)) == (0.25, 0.75, 0.5)
    assert scores(obj(f=2, c=4, a=3, scale=[0, 4])) == (0.5, 1.0, 0.75)
    assert parse_judgement(obj(f=0.5, c=1, a=0, scale="0-1")).scale is None


def test_explicit_scale_ignored_when_scores_lie_outside_it() -> None:
    parsed = parse_judgement(obj(f=0.8, c=0.6, a=0.4, scale="1-5"))
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (0.8, 0.6, 0.4)
    assert parsed.scale is None and any("ignored" in note for note in parsed.notes)
    assert any("unknown scale" in n for n in parse_judgement(obj(f=0.5, scale="stars")).notes)


def test_implicit_scales() -> None:
    parsed = parse_judgement(obj(f=4, c=5, a=1))
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (0.75, 1.0, 0.0)
    assert parsed.scale == "1-5"
    ten = parse_judgement(obj(f=7, c=0, a=10))
    assert (ten.faithfulness, ten.context_relevance, ten.answer_relevance) == (0.7, 0.0, 1.0)
    assert ten.scale == "0-10"
    assert scores(obj(f=8, c=9, a=6)) == (None, None, None)  # 0-10? 0-100? not certain: asked again
    assert parse_judgement(obj(f=1, c=1, a=0)).scale is None  # all within [0, 1]: already the right scale
    mixed = parse_judgement(obj(f=0.9, c=3, a=0.2))  # a value strictly inside (0, 1): no rescaling
    assert (mixed.faithfulness, mixed.context_relevance, mixed.answer_relevance, mixed.scale) == (
        None, None, None, None)
    assert mixed.rejected == ("faithfulness", "context_relevance", "answer_relevance")
    # 0, 1 and 2: not both ends of any scale, so 1 is no perfect score: every score None, asked again
    doubt = parse_judgement(obj(f=0, c=1, a=2))
    assert doubt.scores() == {"faithfulness": None, "context_relevance": None, "answer_relevance": None}
    assert doubt.needs_repair and doubt.rejected == ("faithfulness", "context_relevance", "answer_relevance")


def test_recoverable_invalid_json() -> None:
    assert scores('{"faithfulnessScore": 0.5, "contextRelevanceScore": 0.7,}') == (0.5, 0.7, None)
    single = parse_judgement("{'faithfulnessScore': 0.5, 'answerRelevanceScore': 1, 'reason': 'it\\'s fine'}")
    assert (single.faithfulness, single.answer_relevance, single.reason) == (0.5, 1.0, "it's fine")
    pythonic = "{'faithfulness': 0.2, 'context_relevance': 0.3, 'ok': true, 'x': null}"
    assert scores(pythonic) == (0.2, 0.3, None)
    assert scores('{"faithfulness": 0.2, "ok": True, "x": None,}') == (0.2, None, None)


def test_truncated_reply_recovered_by_pattern() -> None:
    parsed = parse_judgement('```json\n{"faithfulnessScore": 0.5, "contextRelevanceScore": "70%", "answerRel')
    assert (parsed.faithfulness, parsed.context_relevance, parsed.answer_relevance) == (0.5, 0.7, None)
    assert parsed.parsed and "pattern" in parsed.notes[0]


def test_object_found_after_other_braces() -> None:
    text = 'The set {a, b} is irrelevant. {"faithfulnessScore": 0.3, "answerRelevanceScore": 0.6} {junk'
    assert scores(text) == (0.3, None, 0.6)


@pytest.mark.parametrize("text", ["", "no braces at all", "}{", "{not json", "{{{", "[1, 2]", "null"])
def test_nothing_parses(text: str) -> None:
    parsed = parse_judgement(text)
    assert not parsed.parsed and not parsed.has_scores
    assert parsed.notes


def test_object_without_score_keys_parses_with_all_missing() -> None:
    parsed = parse_judgement('{"verdict": "good"}')
    assert parsed.parsed and not parsed.has_scores
    assert len([n for n in parsed.notes if n.endswith("missing")]) == 3


def test_reason_variants() -> None:
    assert parse_judgement('{"faithfulness": 1, "explanation": "because"}').reason == "because"
    assert parse_judgement('{"faithfulness": 1, "reason": ["a", "b"]}').reason == '["a", "b"]'
    assert parse_judgement('{"faithfulness": 1}').reason is None


def test_non_string_input_never_raises() -> None:
    assert not parse_judgement(None).parsed  # type: ignore[arg-type]
    assert not parse_judgement(b"{}").parsed  # type: ignore[arg-type]


def test_deep_nesting_and_huge_numbers_do_not_raise() -> None:
    assert not parse_judgement('{"a":' + "[" * 100_000 + "]" * 100_000 + "}").has_scores
    huge = '{"faithfulnessScore": 1e999, "contextRelevanceScore": ' + "9" * 5000 + "}"
    assert scores(huge) == (None, None, None)


def _check(parsed: ParsedScores) -> None:
    assert isinstance(parsed, ParsedScores)
    for value in parsed.scores().values():
        assert value is None or (isinstance(value, float) and 0.0 <= value <= 1.0 and not math.isnan(value))
    if parsed.has_scores:
        assert parsed.parsed


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    _check(parse_judgement(text))


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=10,
)
score_keys = st.sampled_from(
    ["faithfulnessScore", "contextRelevanceScore", "answerRelevanceScore", "faithfulness", "answer_relevance",
     "scale", "reason", "other"]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(score_keys, json_values, max_size=6), st.text(max_size=20), st.text(max_size=20))
def test_never_raises_on_any_json_object_in_prose(payload: dict[str, Any], before: str, after: str) -> None:
    text = before + json.dumps(payload) + after
    _check(parse_judgement(text))
    _check(parse_judgement(text[: len(text) // 2]))
