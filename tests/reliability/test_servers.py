"""Served by real servers, stopped by SIGTERM: every answer ends as an audit line or a counted reason.

Issue 50 item 1. The app (``tests/reliability/_serving_app.py``) is issue 50's FastAPI ``/ask`` running an
LCEL RAG chain with the handler (a WSGI twin for gunicorn's sync and gthread workers), its model and judge
the loopback chat-completions servers of this process (the judge slow enough that judgements are still
pending when the signal comes). Each case starts the server as a user does (``gunicorn`` with 2 workers of
each kind, with and without ``--preload``; ``uvicorn --workers 2``), sends a bounded number of requests,
sends SIGTERM to the master and waits (bounded) for it to exit; then every answer served must be a line
of the audit log, or counted in a ``ragaudit:`` line on stderr -- never silently gone.

Was, with ``--preload`` and uvicorn workers: the SIGTERM handler, installed in the master, was "installed"
in every forked worker too, uvicorn's worker reset SIGTERM and re-raised it at shutdown, and the worker
died with its turns in flight, nothing counted. Gunicorn's ``worker_exit`` hook is the documented line of
``docs/guides/serving.md``, used here exactly as written there.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.request import urlopen

import pytest

from tests.support.llm_server import LLMServer

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 12
ANSWER = "Returns are accepted within 30 days of delivery."

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.skipif(sys.platform == "win32",
                                                                               reason="POSIX servers")]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LLMServer, LLMServer]]:
    # The judge takes 0.5 s per call: the last answers are still being judged when SIGTERM comes.
    with LLMServer(default=ANSWER, delay=0.03) as model, LLMServer(delay=0.5) as judge:
        yield model, judge


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited at start: {proc.communicate()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the server did not listen within {timeout} s: {proc.communicate()}")


def hook_line() -> str:
    """The gunicorn.conf.py line of docs/guides/serving.md, as written there."""
    page = (ROOT / "docs" / "guides" / "serving.md").read_text(encoding="utf-8")
    block = page.split("<!-- the line tests/reliability/test_servers.py uses: keep it one line -->\n```python\n", 1)[1]
    (line,) = block.split("\n```", 1)[0].splitlines()
    return line


def ask(port: int, path: str, i: int) -> dict[str, object] | None:
    try:
        with urlopen(f"http://127.0.0.1:{port}{path}?q=How+do+returns+work+{i}", timeout=120) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def serve(tmp_path: Path, servers: tuple[LLMServer, LLMServer], command: list[str],
          path: str = "/ask", in_flight: bool = False) -> tuple[int, list[str], str]:
    """Start *command* (it serves on {port}), send REQUESTS requests, SIGTERM it; (answers served,
    audit-log questions, stderr). *in_flight*: SIGTERM while the first requests wait for the model
    (the server finishes them in its graceful shutdown; the later ones are refused)."""
    model, judge = servers
    port = free_port()
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")]),
           "SERVE_MODEL_URL": model.base_url, "SERVE_JUDGE_URL": judge.base_url, "SERVE_AUDIT_LOG": str(log)}
    # Only where the case names it: gunicorn also reads ./gunicorn.conf.py (the cwd) by itself.
    conf = tmp_path / "hooks" / "gunicorn.conf.py"
    if "{conf}" in command:
        conf.parent.mkdir()
        conf.write_text(hook_line() + "\n", encoding="utf-8")
    args = [a.format(port=port, conf=conf) for a in command]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, proc)
        with ThreadPoolExecutor(4) as pool:
            if in_flight:
                before = model.request_count
                futures = [pool.submit(ask, port, path, i) for i in range(REQUESTS)]
                while model.request_count < before + 4 and proc.poll() is None:  # 4 requests at the model
                    time.sleep(0.01)
                proc.send_signal(signal.SIGTERM)
                answers = [a for f in futures if (a := f.result()) is not None]
            else:
                answers = [a for a in pool.map(lambda i: ask(port, path, i), range(REQUESTS)) if a is not None]
        if not in_flight:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert all(a["answer"] == ANSWER for a in answers), answers
    logged = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return len(answers), [str(x["query"]) for x in logged], err


def counted(err: str) -> int:
    """What ragaudit said on stderr it could not record (each a number of turns or judgements)."""
    return sum(int(n) for n in re.findall(r"ragaudit: .*?(\d+) (?:finished turn|judgement)\(s\)[^\n]*not recorded",
                                          err))


GUNICORN = [sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:{port}", "--workers", "2",
            "--graceful-timeout", "40", "--timeout", "60"]
UVICORN_WORKER = ["--worker-class", "uvicorn_worker.UvicornWorker"]
ASGI = "tests.reliability._serving_app:app"
WSGI = "tests.reliability._serving_app:wsgi"

CASES = {
    "gunicorn-uvicorn": [*GUNICORN, *UVICORN_WORKER, ASGI],
    "gunicorn-uvicorn-preload": [*GUNICORN, *UVICORN_WORKER, "--preload", ASGI],
    "gunicorn-sync": [*GUNICORN, "--worker-class", "sync", WSGI],
    "gunicorn-sync-preload": [*GUNICORN, "--worker-class", "sync", "--preload", WSGI],
    "gunicorn-gthread": [*GUNICORN, "--worker-class", "gthread", "--threads", "4", WSGI],
    "gunicorn-gthread-preload": [*GUNICORN, "--worker-class", "gthread", "--threads", "4", "--preload", WSGI],
    "uvicorn-workers": [sys.executable, "-m", "uvicorn", "--port", "{port}", "--workers", "2", ASGI],
    # The chain in FastAPI's thread pool: ragaudit's code never runs on a worker's main thread, so only
    # the documented gunicorn.conf.py line keeps its handler in front of uvicorn's.
    "gunicorn-uvicorn-preload-def-endpoint-hook": [*GUNICORN, "--config", "{conf}", *UVICORN_WORKER, "--preload",
                                                   ASGI, "/ask-sync"],
    "gunicorn-sync-hook": [*GUNICORN, "--config", "{conf}", "--worker-class", "sync", WSGI],
}


def command_and_path(case: str) -> tuple[list[str], str]:
    command = CASES[case]
    return (command[:-1], command[-1]) if command[-1].startswith("/") else (command, "/ask")


@pytest.mark.parametrize("case", list(CASES))
def test_every_served_answer_is_audited_or_counted_after_sigterm(tmp_path: Path, servers: tuple[LLMServer, LLMServer],
                                                                 case: str) -> None:
    served, logged, err = serve(tmp_path, servers, *command_and_path(case))
    print(f"\n{case}: {served} served, {len(logged)} audit lines, {counted(err)} counted on stderr")
    assert served == REQUESTS, err[-3000:]
    assert len(logged) + counted(err) == served, err[-3000:]
    assert len(logged) == served, err[-3000:]  # the exit timeout (20 s) is ample: nothing is even lost


@pytest.mark.parametrize("case", ["gunicorn-uvicorn-preload", "gunicorn-sync-preload", "uvicorn-workers",
                                  "gunicorn-uvicorn-preload-def-endpoint-hook"])
def test_requests_in_flight_at_sigterm_are_audited_too(tmp_path: Path, servers: tuple[LLMServer, LLMServer],
                                                       case: str) -> None:
    # The server finishes them in its graceful shutdown, after ragaudit's SIGTERM handler ran: their
    # turns are recorded by the exit hook (uvicorn's re-raise of SIGTERM waits for it).
    model, _ = servers
    model.delay = 1.0
    try:
        served, logged, err = serve(tmp_path, servers, *command_and_path(case), in_flight=True)
    finally:
        model.delay = 0.03
    print(f"\n{case}, in flight: {served} served, {len(logged)} audit lines, {counted(err)} counted on stderr")
    assert served >= 4, err[-3000:]
    assert len(logged) + counted(err) == served, err[-3000:]
    assert len(logged) == served, err[-3000:]


# What uvicorn does, without a server: a SIGTERM handler of its own set after the Auditor (so
# ragaudit's is put back in front at the first turn), a graceful end once it ran, then the default
# disposition restored and SIGTERM re-raised ("reraise"), or a normal exit ("return").
RERAISE = """
import signal, sys, time
from ragaudit import Auditor, ChatRagJudge, Limits
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from tests.reliability._support import FixedRetriever, rag_chain
from tests.support.llm_server import LLMServer
from langchain_core.documents import Document
log, ending = sys.argv[1], sys.argv[2]
srv = LLMServer(delay=0.3).start()
auditor = Auditor(ChatRagJudge(base_url=srv.base_url, api_key="sk-test", max_retries=0), audit_log=log,
                  limits=Limits(exit_timeout_s=20.0))
stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))  # the server's, set later
handler = RagAuditCallbackHandler(auditor=auditor)
chain = rag_chain(FixedRetriever(documents=[Document(page_content="Returns take 30 days.", id="d1")]))
for i in range(6):
    chain.invoke(f"question {i}", config={"callbacks": [handler]})
print("ready", flush=True)
while not stopping:
    time.sleep(0.01)
for i in range(6, 8):  # requests finished during the graceful shutdown
    chain.invoke(f"question {i}", config={"callbacks": [handler]})
if ending == "reraise":
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)
print("exiting normally", flush=True)
"""


@pytest.mark.parametrize("ending", ["reraise", "return"])
def test_a_reraised_sigterm_waits_for_the_exit_hook(tmp_path: Path, ending: str) -> None:
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.Popen([sys.executable, "-c", RERAISE, str(log), ending], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=90)
    logged = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    assert len(logged) == 8, (out, err)  # was, with "reraise": the 2 turns after the signal lost
    assert "exiting normally" in out  # the re-raise was held back: the process went on to its exit
    # Then the held SIGTERM ends it as the server meant; with nothing re-raised, it exits normally.
    assert proc.returncode == (-signal.SIGTERM if ending == "reraise" else 0), err
