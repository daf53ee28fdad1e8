"""Which of ragaudit's source files one turn passes through, from its spans to its record.

Not a timing: a map. One OpenInference RAG trace (the worker's test trace, made with the real OTel
SDK) goes into an in-process `Worker` (``ingest`` → ``tick`` → the Auditor → every exporter). A first
worker's turn imports what the pipeline needs; a second worker's turn is watched, every Python call
on every thread (``sys.setprofile``, ``threading.setprofile``), and the files under ``src/ragaudit``
that ran are listed in the order first entered.

``langchain``: the same for one LCEL RAG turn through the callback handler; ``metrics``: one
``metrics.evaluate`` call.

```bash
python benchmarks/turn_walk.py             # a span at the worker, to its record
python benchmarks/turn_walk.py langchain   # a LangChain turn, to its record
python benchmarks/turn_walk.py metrics     # metrics.evaluate
```
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _watch(seen: dict[str, None]) -> Any:
    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_name != "<module>":
            name = frame.f_code.co_filename
            if "/ragaudit/" in name and name not in seen:
                seen[name] = None

    return profile


def worker_walk() -> list[str]:
    from tests.support.otlp_receiver import OTLPReceiver
    from tests.worker.file_exporter import Records
    from tests.worker.spans import SpanMaker, encode, rag_trace

    from ragaudit import LexicalJudge
    from ragaudit.integrations.otlp import Worker

    maker = SpanMaker()
    receiver = OTLPReceiver().start()

    def make() -> tuple[Any, Records, list[float]]:
        now = [0.0]
        records = Records()
        worker = Worker(
            LexicalJudge(),
            port=0,
            exporters=[records],
            clock=lambda: now[0],
            quiet_s=0.5,
            audit_log=None,
            metrics_interval_s=60,
            otlp_endpoint=receiver.endpoint,
        )
        return worker, records, now

    def one_turn(worker: Any, now: list[float]) -> None:
        worker.ingest(encode(rag_trace(maker)))
        now[0] += 5
        worker.tick(now[0])
        worker.auditor.force_flush(30)

    worker, records, now = make()
    one_turn(worker, now)  # a first worker imports what the pipeline needs: not part of a turn's walk
    worker.auditor.shutdown(10)
    worker, records, now = make()  # its threads start with its first turn, watched
    files = _watched(lambda: one_turn(worker, now))
    worker.auditor.shutdown(10)
    assert len(records.records) == 1, records.records
    receiver.stop()
    return files


def _watched(call: Callable[[], object]) -> list[str]:
    """The ragaudit files *call* runs code of, on every thread started meanwhile too."""
    seen: dict[str, None] = {}
    profile = _watch(seen)
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return list(seen)


def langchain_walk() -> list[str]:
    """One LCEL RAG turn (a real retriever over an in-memory store, a real fake chat model) through the
    handler, judged and exported."""
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from tests.worker.file_exporter import Records
    from tests.worker.spans import ANSWER, DOCS, QUESTION

    from ragaudit import Auditor, LexicalJudge
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_texts([text for _, text in DOCS], ids=[doc_id for doc_id, _ in DOCS])
    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    chain = (
        {"context": store.as_retriever(), "question": RunnablePassthrough()}
        | prompt
        | FakeListChatModel(responses=[ANSWER] * 2)
        | StrOutputParser()
    )

    def make() -> tuple[Any, Records, Any]:
        records = Records()
        auditor = Auditor(LexicalJudge(), exporters=[records], audit_log=None, handle_signals=False)
        return auditor, records, RagAuditCallbackHandler(auditor=auditor)

    auditor, records, handler = make()
    chain.invoke(QUESTION, config={"callbacks": [handler]})  # imports
    auditor.shutdown(10)
    auditor, records, handler = make()

    def one_turn() -> None:
        chain.invoke(QUESTION, config={"callbacks": [handler]})
        auditor.force_flush(30)

    files = _watched(one_turn)
    auditor.shutdown(10)
    assert len(records.records) == 1, records.records
    return files


def metrics_walk() -> list[str]:
    """``metrics.evaluate`` of a small run (after one call that imports)."""
    from ragaudit import metrics

    run = {f"q{i}": {f"d{j}": 1.0 / (j + 1) for j in range(20)} for i in range(10)}
    qrels = {f"q{i}": {f"d{j}": 1 for j in range(0, 20, 3)} for i in range(10)}
    measures = ["ndcg_cut_10", "map", "recall_100", "P_5"]
    metrics.evaluate(run, qrels, measures)
    return _watched(lambda: metrics.evaluate(run, qrels, measures))


WALKS = {"worker": worker_walk, "langchain": langchain_walk, "metrics": metrics_walk}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("walk", nargs="?", choices=sorted(WALKS), default="worker")
    args = parser.parse_args(argv)
    files = WALKS[args.walk]()
    src = str(ROOT / "src") + "/"
    for name in files:
        print(name.replace(src, ""))
    print(f"{len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
