"""Apps that fork while ragaudit is busy, run in a fresh process by ``test_fork.py``.

Each is what a prefork server (gunicorn ``--preload``, Celery prefork) does: the parent builds the
app and its handler, has used them, and forks while one of its threads is inside ragaudit. Each
prints one JSON object (the figures) on stdout; a child that hangs is killed at *deadline_s* and
counted as not finished.

The LangChain app follows the LCEL RAG tutorial of the current docs
(https://python.langchain.com/docs/tutorials/rag/ : a vector store's ``as_retriever()``, a
``ChatPromptTemplate`` with the context, ``ChatOpenAI``, ``StrOutputParser``), with an
``InMemoryVectorStore`` (Chroma's Rust client is not fork-safe itself) and ``ChatOpenAI`` and
``ChatRagJudge`` against the loopback chat-completions server, which keeps serving from the parent.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["audit_log_mid_write", "children_while_a_callback_is_held"]

ANSWER_PREFIX = "From the context: "


def _app_rule(body: dict[str, Any]) -> str | None:
    from tests.support.llm_server import judgement_json

    messages = body.get("messages") or []
    system = " ".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    if "evaluator" in system.lower() or "response_format" in body:
        return judgement_json(0.9, 0.8, 0.7, reason="fork test verdict")
    human = str(messages[-1].get("content")) if messages else ""
    return ANSWER_PREFIX + human.split("Question:", 1)[0].strip()[:80]


def _wait_children(pids: dict[int, int], deadline_s: float) -> dict[int, int | None]:
    """Exit code of each child (by index), None for one still running at the deadline (then killed)."""
    codes: dict[int, int | None] = {}
    end = time.monotonic() + deadline_s
    while len(codes) < len(pids) and time.monotonic() < end:
        for index, pid in pids.items():
            if index in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[index] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    for index, pid in pids.items():
        if index not in codes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[index] = None
    return codes


def _fork_children(children: int, deadline_s: float, chain: Any, handler: Any, auditor: Any,
                   out: Path) -> tuple[dict[int, int], dict[int, int | None]]:
    from tests.reliability._support import QUESTIONS

    questions = list(QUESTIONS.values())
    pids: dict[int, int] = {}
    for index in range(children):
        pid = os.fork()
        if pid == 0:  # the child: its own request, judged, then out without exit hooks
            code = 3
            try:
                question = questions[index % len(questions)]
                answer = chain.invoke(question, config={"callbacks": [handler]})
                flushed = handler.force_flush(60)
                stats = auditor.stats()
                (out / f"child-{index}.json").write_text(json.dumps(
                    {"answer": answer, "flushed": flushed, "stats": stats, "pid": os.getpid()}))
                code = 0 if flushed and stats["judged"] == 1 and answer.startswith(ANSWER_PREFIX) else 1
            finally:
                os._exit(code)
        pids[index] = pid
    return pids, _wait_children(pids, deadline_s)


def children_while_a_callback_is_held(workdir: str, children: str = "50", deadline_s: str = "120") -> None:
    """Fork *children* children while a parent thread is held inside a callback of the handler."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI

    from ragaudit import Auditor, ChatRagJudge, Limits, RagTurn, RetrievedDoc
    from ragaudit.integrations.langchain import RagAuditCallbackHandler
    from tests.reliability._support import DOCS, HashEmbeddings
    from tests.support.llm_server import LLMServer

    out = Path(workdir)
    with LLMServer(_app_rule) as srv:
        store = InMemoryVectorStore(HashEmbeddings())
        store.add_texts([t for _, t, _ in DOCS], metadatas=[m for _, _, m in DOCS], ids=[i for i, _, _ in DOCS])
        prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])
        llm = ChatOpenAI(model="gpt-4o-mini", base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=20)
        chain = ({"context": store.as_retriever(search_kwargs={"k": 2})
                  | RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs)),
                  "question": RunnablePassthrough()} | prompt | llm | StrOutputParser())
        judge = ChatRagJudge(base_url=srv.base_url, api_key="sk-test", timeout_s=20, max_retries=0)
        auditor = Auditor(judge, audit_log=out / "audit.jsonl", limits=Limits(exit_timeout_s=10))
        handler = RagAuditCallbackHandler(auditor=auditor)

        # Warmed up like a preloaded app: the parent's judging worker, its loop and the judge's
        # client are running at the fork.
        auditor.submit(RagTurn(turn_id="parent-warmup", query="q", answer="a",
                               documents=(RetrievedDoc(id="d", content="c", rank=1),)))
        assert auditor.force_flush(30), "the parent's warm-up judgement"

        entered, release = threading.Event(), threading.Event()

        class HeldError(Exception):
            def __str__(self) -> str:  # read by the handler's on_chain_error, under its lock
                entered.set()
                release.wait(float(deadline_s) + 60)
                return "held"

        def failing_step(_: Any) -> str:
            raise HeldError()

        def parent_thread() -> None:
            try:
                RunnableLambda(failing_step).invoke("parent", config={"callbacks": [handler]})
            except HeldError:
                pass

        holder = threading.Thread(target=parent_thread, daemon=True)
        holder.start()
        try:
            assert entered.wait(30), "the parent thread never reached the handler's callback"
            pids, codes = _fork_children(int(children), float(deadline_s), chain, handler, auditor, out)
        finally:
            release.set()
        holder.join(10)

    lines = [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines() if x.strip()]
    judged_lines = [x for x in lines if x.get("judge_status") == "judged" and x.get("turn_id") != "parent-warmup"]
    print(json.dumps({
        "children": len(pids),
        "finished": sum(1 for c in codes.values() if c is not None),
        "judged": sum(1 for c in codes.values() if c == 0),
        "hung": sum(1 for c in codes.values() if c is None),
        "audit_lines_judged": len(judged_lines),
    }), flush=True)


def _pipe_bytes(fd: int) -> int:
    import array
    import termios

    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def audit_log_mid_write(workdir: str, deadline: str = "60") -> None:
    """Fork while the parent's audit-log writer is blocked inside a write; the child judges 5 turns.

    The audit log is a FIFO whose reader reads nothing until the fork: the parent's 300 kB line fills
    the pipe, so its writer thread is inside ``write()`` (holding every lock on the way) when the
    main thread forks. Then the reader drains the pipe, and both processes' lines come through.
    """
    from ragaudit import Auditor, FakeJudge, Limits, RagTurn, RetrievedDoc

    deadline_s = float(deadline)
    out = Path(workdir)
    fifo = out / "audit.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists: the writer's open does not wait
    capacity = fcntl.fcntl(reader, 1032)  # F_GETPIPE_SZ
    auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0, "reason": "ok"}), audit_log=fifo,
                      limits=Limits(exit_timeout_s=5))
    docs = (RetrievedDoc(id="big", content="x" * (4 * capacity), rank=1),)
    auditor.submit(RagTurn(turn_id="parent-big", query="q", answer="a", documents=docs))
    end = time.monotonic() + 30
    while _pipe_bytes(reader) < capacity and time.monotonic() < end:
        time.sleep(0.01)
    assert _pipe_bytes(reader) >= capacity, "the parent's write never filled the pipe"

    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            small = (RetrievedDoc(id="d", content="Returns within 30 days.", rank=1),)
            statuses = [auditor.submit(RagTurn(turn_id=f"child-{i}", query="q", answer="a", documents=small))
                        for i in range(5)]
            flushed = auditor.force_flush(deadline_s / 3)
            (out / "child.json").write_text(json.dumps({"statuses": statuses, "flushed": flushed,
                                                         "stats": auditor.stats()}))
            code = 0 if flushed else 1
        finally:
            os._exit(code)

    received = bytearray()
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([reader], [], [], 0.05)
            if ready:
                try:
                    received.extend(os.read(reader, 1 << 16))
                except BlockingIOError:
                    pass

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    codes = _wait_children({0: pid}, deadline_s)
    parent_flushed = auditor.force_flush(10)
    stop.set()
    drainer.join(5)
    while True:  # every write has returned by now: what is left is in the pipe
        try:
            chunk = os.read(reader, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        received.extend(chunk)
    lines = [json.loads(x) for x in bytes(received).decode("utf-8").splitlines() if x.strip()]
    child = json.loads((out / "child.json").read_text()) if (out / "child.json").exists() else None
    print(json.dumps({
        "child_exit": codes[0],
        "child": child,
        "parent_flushed": parent_flushed,
        "child_lines": sorted(x["turn_id"] for x in lines if x["turn_id"].startswith("child-")),
        "parent_lines": [x["turn_id"] for x in lines if x["turn_id"].startswith("parent-")],
    }), flush=True)


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
