"""A turn's texts through the content policy once (issue 50): `TextMemo` gives what the policy gives, runs
the redact hook once per distinct text, and never keeps a text unscrubbed of a secret registered after it;
the turn's spans record what they recorded before."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragaudit.content import REDACTION_FAILED, SECRET_MARKER, ContentPolicy, TextMemo, register_secret
from ragaudit.records import Generation, RagTurn, Retrieval, RetrievedDoc
from ragaudit.tracing import SpanRecorder
from ragaudit.tracing import conventions as c


def _card(text: str) -> str:
    return text.replace("card-4111", "[CARD]")


TEXTS = ["", "plain", "pay with card-4111 " * 40, "x" * 9000, "lone \ud800 surrogate", "Ünïcode card-4111"]


@pytest.mark.parametrize("limit", [None, 0, 10, 100, 8192])
def test_memo_gives_what_the_policy_gives(limit: int | None) -> None:
    policy = ContentPolicy(capture_content=True, redact=_card)
    memo = TextMemo(policy)
    for _ in range(2):  # the first ask and the memoised one
        for text in TEXTS:
            assert memo.text(text, limit) == policy.text(text, limit)
    nested = {"card-4111": {"k": ["card-4111", 3, None, 1.5]}, 7: ("a", "card-4111")}
    assert memo.metadata(nested) == policy.metadata(nested)
    assert memo.metadata(None) is None
    assert TextMemo(ContentPolicy(capture_content=False)).metadata({"k": "v"}) is None


def test_redact_runs_once_per_distinct_text() -> None:
    seen: list[str] = []

    def redact(text: str) -> str:
        seen.append(text)
        return text.upper()

    memo = TextMemo(ContentPolicy(capture_content=True, redact=redact))
    assert [memo.text("question"), memo.text("question", 3), memo.text("answer"), memo.text("question")] == [
        "QUESTION",
        "QUE…[truncated 5 chars]",
        "ANSWER",
        "QUESTION",
    ]
    assert seen == ["question", "answer"]


def test_a_failing_redact_withholds_the_text_every_time() -> None:
    def broken(text: str) -> str:
        raise RuntimeError(text)

    memo = TextMemo(ContentPolicy(capture_content=True, redact=broken))
    assert memo.text("secret question") == memo.text("secret question") == REDACTION_FAILED


def test_a_secret_registered_after_a_text_was_memoised_is_scrubbed() -> None:
    secret = f"sk-memo-{uuid.uuid4().hex}"
    memo = TextMemo(ContentPolicy(capture_content=True))
    text = f"the key is {secret}, really"
    assert memo.text(text) == text  # not a known secret yet
    register_secret(secret)
    assert memo.text(text) == f"the key is {SECRET_MARKER}, really"
    assert memo.metadata({"key": secret}) == {"key": SECRET_MARKER}


def test_a_turns_spans_scrub_a_secret_registered_between_its_retrieval_and_turn_spans() -> None:
    # start_children writes the retrieval span (query memoised); the secret is registered before end_turn
    # writes the turn span with the same query: the turn span has it scrubbed.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    recorder = SpanRecorder(provider, capture_content=True)
    secret = f"sk-turn-{uuid.uuid4().hex}"
    query = f"why was {secret} rejected?"
    doc = RetrievedDoc(id="d1", content=f"about {secret}", source="kb/keys.md", metadata={"source": "kb/keys.md"})
    turn = RagTurn(
        turn_id="t1",
        query=query,
        answer=f"{secret} expired",
        documents=(doc,),
        retrievals=(Retrieval(name="kb", documents=(doc,)),),
        generations=(Generation(model="m", output=f"{secret} expired", messages=(("user", query),)),),
    )
    handle = recorder.start_turn()
    traced = recorder.start_children(handle, turn)
    register_secret(secret)
    recorder.end_turn(handle, traced)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    retrieval, chat, turn_span = spans["retrieval kb"], spans["chat m"], spans[c.SPAN_TURN]
    assert retrieval.attributes[c.INPUT_VALUE] == query  # written before the secret was known
    assert turn_span.attributes[c.INPUT_VALUE] == f"why was {SECRET_MARKER} rejected?"
    assert turn_span.attributes[c.OUTPUT_VALUE] == f"{SECRET_MARKER} expired"
    assert chat.attributes[c.OUTPUT_VALUE] == f"{SECRET_MARKER} expired"
    assert handle._texts is None  # the turn's texts are let go when its span ends
