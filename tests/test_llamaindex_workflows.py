"""LlamaIndex ``Workflow`` runs as turns: ragaudit.integrations.llamaindex with real workflows, Chroma and the OTel SDK.

One ``Workflow.run`` is one turn: the question from its ``StartEvent``, the answer from its
``StopEvent`` result (text, a ``Response``, a stream once consumed), every retrieval and model call
of its steps a span of the turn, never a turn of its own. The knowledge base and the stand-in LLM
are those of test_llamaindex_integration.py (the LLM answers with the first sentence of its context).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Settings
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragaudit import ConfigurationError
from ragaudit.integrations import llamaindex
from ragaudit.tracing import conventions as c
from ragaudit.tracing.files import read_audit_log
from tests.support.llamaindex_support import build_index, make_nodes
from tests.support.llamaindex_support import offline_settings as llamaindex_offline_settings
from tests.support.topics import QUESTIONS, answer_for
from tests.support.turns import AuditedRun, children

pytestmark = pytest.mark.timeout(60)

CHAT = "chat context-echo-1"
RETRIEVAL = "retrieval Chroma"


@pytest.fixture(scope="module", autouse=True)
def offline_settings() -> Iterator[None]:
    with llamaindex_offline_settings():
        yield


class KB:
    def __init__(self) -> None:
        self.index = build_index()
        texts = {n.node_id: n.text for n in make_nodes()}
        retriever = self.index.as_retriever(similarity_top_k=2)
        self.expected = {q: [n.node.node_id for n in retriever.retrieve(q)] for q in QUESTIONS}
        self.answers = {q: answer_for(texts[ids[0]]) for q, ids in self.expected.items()}


@pytest.fixture(scope="module")
def kb() -> KB:
    return KB()


class Setup(AuditedRun):
    framework = "llamaindex"


@pytest.fixture
def setup(memory_exporter: InMemorySpanExporter, memory_provider: TracerProvider,
          audit_log_path: Path) -> Iterator[Setup]:
    s = Setup(memory_exporter, memory_provider, audit_log_path)
    yield s
    llamaindex.uninstrument()
    s.auditor.shutdown()


class Retrieved(Event):
    question: str
    nodes: list[Any]


class QueryFlow(Workflow):
    """A step that asks a query engine; the StopEvent's result is its ``Response`` (or a stream)."""

    def __init__(self, index: Any, key: str = "query", streaming: bool = False) -> None:
        super().__init__(timeout=30)
        self.index, self.key, self.streaming = index, key, streaming

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        engine = self.index.as_query_engine(similarity_top_k=2, streaming=self.streaming)
        return StopEvent(result=await engine.aquery(ev.get(self.key)))


class PromptFlow(Workflow):
    """A retrieve step and a step that writes its own prompt and calls the LLM: the answer is text."""

    def __init__(self, index: Any) -> None:
        super().__init__(timeout=30)
        self.index = index

    @step
    async def retrieve(self, ctx: Context, ev: StartEvent) -> Retrieved:
        nodes = await self.index.as_retriever(similarity_top_k=2).aretrieve(ev.question)
        return Retrieved(question=ev.question, nodes=nodes)

    @step
    async def generate(self, ev: Retrieved) -> StopEvent:
        context = "\n\n".join(n.node.get_content() for n in ev.nodes)
        prompt = f"Context information is below.\n---------------------\n{context}\n---------------------\n" \
                 f"Query: {ev.question}\nAnswer: "
        return StopEvent(result=str(await Settings.llm.acomplete(prompt)))


def _run(start: Any) -> Any:
    """``await start()`` in a fresh event loop: a workflow is made and run inside a running loop."""
    async def main() -> Any:
        return await start()

    return asyncio.run(main())


@pytest.mark.parametrize("key", ["query", "user_msg", "input", "question", "topic"])
def test_workflow_run_is_one_turn_with_the_question_of_its_start_event(setup: Setup, kb: KB, key: str) -> None:
    llamaindex.instrument(auditor=setup.auditor, query_key="topic" if key == "topic" else None)
    q = QUESTIONS[2]
    result = _run(lambda: QueryFlow(kb.index, key).run(**{key: q}))
    assert str(result) == kb.answers[q]
    (turn,) = setup.check(kb, [q])
    names = sorted(s.name for s in children(setup.spans(), turn))
    assert names == sorted([RETRIEVAL, CHAT, c.SPAN_JUDGE])  # the engine inside is a step, not a turn


def test_workflow_with_its_own_prompt_answers_with_text_and_keeps_every_retrieval(setup: Setup, kb: KB) -> None:
    llamaindex.instrument(auditor=setup.auditor)
    qs = QUESTIONS[3:6]

    async def main() -> list[str]:
        return list(await asyncio.gather(*(PromptFlow(kb.index).run(question=q) for q in qs)))

    assert asyncio.run(main()) == [kb.answers[q] for q in qs]
    for turn in setup.check(kb, qs):  # concurrent runs never mix
        names = [s.name for s in children(setup.spans(), turn)]
        assert names.count(RETRIEVAL) == 1 and names.count(CHAT) == 1


def test_workflow_returning_a_stream_closes_when_the_stream_is_consumed(setup: Setup, kb: KB) -> None:
    llamaindex.instrument(auditor=setup.auditor)
    q = QUESTIONS[6]

    async def main() -> str:
        result = await QueryFlow(kb.index, streaming=True).run(query=q)
        return "".join([t async for t in result.async_response_gen()])

    assert asyncio.run(main()) == kb.answers[q]
    (turn,) = setup.check(kb, [q])
    assert [s.name for s in children(setup.spans(), turn)].count(CHAT) == 1  # the lazily made call is in the turn


class Token(Event):
    delta: str


class StreamingFlow(PromptFlow):
    """The generate step streams the model's tokens to the run's event stream, then stops with the text."""

    @step
    async def generate(self, ctx: Context, ev: Retrieved) -> StopEvent:
        context = "\n\n".join(n.node.get_content() for n in ev.nodes)
        text = ""
        async for chunk in await Settings.llm.astream_complete(
                f"---------------------\n{context}\n---------------------\nQuery: {ev.question}\n"):
            ctx.write_event_to_stream(Token(delta=chunk.delta or ""))
            text += chunk.delta or ""
        return StopEvent(result=text)


def test_workflow_streaming_events_through_its_handler(setup: Setup, kb: KB) -> None:
    llamaindex.instrument(auditor=setup.auditor)
    q = QUESTIONS[7]

    async def main() -> tuple[str, str]:
        handler = StreamingFlow(kb.index).run(question=q)
        streamed = "".join([ev.delta async for ev in handler.stream_events() if isinstance(ev, Token)])
        return streamed, str(await handler)

    streamed, result = _run(main)
    assert streamed == result == kb.answers[q]
    setup.check(kb, [q])


class OwnStoreFlow(Workflow):
    """A step that searches a plain list (no LlamaIndex retriever: nothing observed) and fills a
    ``PromptTemplate`` through ``llm.apredict``: the template's context is the evidence."""

    def __init__(self, passages: list[str]) -> None:
        super().__init__(timeout=30)
        self.passages = passages

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        from llama_index.core import PromptTemplate

        words = set(ev.query.lower().strip("?").split())
        found = [p for p in self.passages if words & set(p.lower().replace(".", " ").split())]
        template = PromptTemplate("Context information is below.\n---------------------\n{context_str}\n"
                                  "---------------------\nQuery: {query_str}\nAnswer: ")
        return StopEvent(result=await Settings.llm.apredict(template, context_str="\n\n".join(found),
                                                            query_str=ev.query))


def test_context_filled_into_a_template_is_the_evidence_when_no_retrieval_was_seen(setup: Setup, kb: KB) -> None:
    llamaindex.instrument(auditor=setup.auditor)
    texts = [n.text for n in make_nodes()]
    q = QUESTIONS[9]
    found = [t for t in texts if q.split()[-1].strip("?") in t]
    answer = _run(lambda: OwnStoreFlow(texts).run(query=q))
    assert answer == answer_for(found[0])
    setup.spans()  # flushed
    (line,) = read_audit_log(setup.log)
    assert [d["content"] for d in line["documents"]] == found
    assert {d["source"] for d in line["documents"]} == {"prompt"}
    assert setup.auditor.stats()["evidence_from_prompt"] == 1


def test_failing_workflow_step_is_an_error_turn_not_judged(setup: Setup, kb: KB) -> None:
    llamaindex.instrument(auditor=setup.auditor)
    with pytest.raises(RuntimeError, match="model overloaded"):
        _run(lambda: PromptFlow(kb.index).run(question="FAIL_MODEL warranty"))
    (turn,) = setup.spans(c.SPAN_TURN)
    assert turn.attributes[c.INPUT_VALUE] == "FAIL_MODEL warranty"
    assert turn.status.status_code == StatusCode.ERROR and "model overloaded" in str(turn.status.description)
    chat = [s for s in children(setup.spans(), turn) if s.name == CHAT]
    assert len(chat) == 1 and chat[0].status.status_code == StatusCode.ERROR
    assert not setup.spans(c.SPAN_JUDGE)


def test_query_key_must_be_a_field_name(setup: Setup) -> None:
    for bad in ("", 3):
        with pytest.raises(ConfigurationError, match="query_key"):
            llamaindex.instrument(auditor=setup.auditor, query_key=bad)  # type: ignore[arg-type]
