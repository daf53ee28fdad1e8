"""Served by real servers, stopped by SIGTERM: every answer ends as an audit line or a counted reason.

Issue 50 item 1. The app (``tests/reliability/_serving_app.py``) is issue 50's FastAPI ``/ask`` running an
LCEL RAG chain with the handler (a WSGI twin for gunicorn's sync and gthread workers), its model and judge
the loopback chat-completions servers of this process (the judge slow enough that judgements are still
pending when the signal comes). Each case starts the server as a user does (``gunicorn`` with 2 workers of
each kind, with and without ``--preload``; ``uvicorn --workers 2``; ``hypercorn --workers 2``), sends a
bounded number of requests, sends SIGTERM to the master and waits (bounded) for it to exit; then every
answer served must be a line of the audit log, or counted in a ``ragaudit:`` line on stderr -- never
silently gone. The same for a Celery prefork worker (``tests/reliability/_celery_app.py``, its broker a
redis-server of the test's own): the answers are task results, SIGTERM is Celery's warm shutdown.

Was, with ``--preload`` and uvicorn workers: the SIGTERM handler, installed in the master, was "installed"
in every forked worker too, uvicorn's worker reset SIGTERM and re-raised it at shutdown, and the worker
died with its turns in flight, nothing counted. Gunicorn's ``worker_exit`` hook is the documented line of
``docs/guides/serving.md``, used here exactly as written there; so is Celery's (``import ragaudit.celery``:
a pool child ends with ``os._exit``, no exit hook). Was, with hypercorn: its master terminates the
remaining workers once the first has exited, and a worker in its exit hook died at once, its judgements
lost.
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
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer

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


def hook_line(server: str) -> str:
    """The *server*'s line of docs/guides/serving.md (gunicorn.conf.py's, the Celery app's), as written there."""
    page = (ROOT / "docs" / "guides" / "serving.md").read_text(encoding="utf-8")
    marker = f"<!-- the {server} line tests/reliability/test_servers.py uses: keep it one line -->\n```python\n"
    block = page.split(marker, 1)[1]
    (line,) = block.split("\n```", 1)[0].splitlines()
    return line


def ask(port: int, path: str, i: int) -> dict[str, object] | None:
    try:
        with urlopen(f"http://127.0.0.1:{port}{path}?q=How+do+returns+work+{i}", timeout=120) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def serve(tmp_path: Path, servers: tuple[LLMServer, LLMServer], command: list[str],
          path: str = "/ask", in_flight: bool = False, broker: str | None = None) -> tuple[int, list[str], str]:
    """Start *command* (it serves on {port}), send REQUESTS requests, SIGTERM it; (answers served,
    audit-log questions, stderr). *in_flight*: SIGTERM while the first requests wait for the model
    (the server finishes them in its graceful shutdown; the later ones are refused). *broker*: a
    Celery worker's redis URL (the requests are tasks sent there, their results read back)."""
    model, judge = servers
    port = free_port()
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src"), str(tmp_path)]),
           "SERVE_MODEL_URL": model.base_url, "SERVE_JUDGE_URL": judge.base_url, "SERVE_AUDIT_LOG": str(log),
           "SERVE_BROKER_URL": broker or ""}
    # Only where the case names it: gunicorn also reads ./gunicorn.conf.py (the cwd) by itself.
    conf = tmp_path / "hooks" / "gunicorn.conf.py"
    if "{conf}" in command:
        conf.parent.mkdir()
        conf.write_text(hook_line("gunicorn") + "\n", encoding="utf-8")
    args = [a.format(port=port, conf=conf) for a in command]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if broker is not None:
            answers = celery_answers(broker, proc)
        else:
            wait_for_port(port, proc)
            answers = http_answers(port, path, proc, model if in_flight else None)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert all(a["answer"] == ANSWER for a in answers), answers
    logged = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return len(answers), [str(x["query"]) for x in logged], err


def http_answers(port: int, path: str, proc: subprocess.Popen[str],
                 in_flight: LLMServer | None) -> list[dict[str, object]]:
    """REQUESTS requests, 4 at a time, then SIGTERM; with *in_flight* (the model), SIGTERM as soon as
    4 requests wait for it."""
    with ThreadPoolExecutor(4) as pool:
        if in_flight is None:
            answers = [a for a in pool.map(lambda i: ask(port, path, i), range(REQUESTS)) if a is not None]
            proc.send_signal(signal.SIGTERM)
            return answers
        before = in_flight.request_count
        futures = [pool.submit(ask, port, path, i) for i in range(REQUESTS)]
        while in_flight.request_count < before + 4 and proc.poll() is None:  # 4 requests at the model
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        return [a for f in futures if (a := f.result()) is not None]


def celery_answers(broker: str, proc: subprocess.Popen[str], timeout: float = 120.0) -> list[dict[str, object]]:
    """REQUESTS tasks sent to the worker's queue (a client of its own: no Auditor in this process),
    their results read back, then SIGTERM (Celery's warm shutdown)."""
    from celery import Celery

    client = Celery("ragaudit_test", broker=broker, backend=broker)
    try:
        results = [client.send_task("ragaudit_test.ask", args=[f"How do returns work {i}"]) for i in range(REQUESTS)]
        deadline = time.monotonic() + timeout
        while not all(r.ready() for r in results) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        answers = [r.result for r in results if r.successful()]
    finally:
        client.close()
    proc.send_signal(signal.SIGTERM)
    return answers


def counted(err: str) -> int:
    """What ragaudit said on stderr it could not record (each a number of turns or judgements)."""
    return sum(int(n) for n in re.findall(r"ragaudit: .*?(\d+) (?:finished turn|judgement)\(s\)[^\n]*not recorded",
                                          err))


GUNICORN = [sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:{port}", "--workers", "2",
            "--graceful-timeout", "40", "--timeout", "60"]
UVICORN_WORKER = ["--worker-class", "uvicorn_worker.UvicornWorker"]
HYPERCORN = [sys.executable, "-m", "hypercorn", "--bind", "127.0.0.1:{port}"]
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
    # Workers are multiprocessing spawn children: the master's SIGTERM sets an event each worker polls;
    # the worker finishes its requests and exits normally (exit hooks run). Once one has exited, the
    # master sends SIGTERM to the others, which may still be in their exit hook (JUDGE_DELAY).
    "hypercorn-workers": [*HYPERCORN, "--workers", "2", ASGI],
    # The chain in FastAPI's thread pool: ragaudit's code never runs on a worker's main thread, so only
    # the documented gunicorn.conf.py line keeps its handler in front of uvicorn's.
    "gunicorn-uvicorn-preload-def-endpoint-hook": [*GUNICORN, "--config", "{conf}", *UVICORN_WORKER, "--preload",
                                                   ASGI, "/ask-sync"],
    "gunicorn-sync-hook": [*GUNICORN, "--config", "{conf}", "--worker-class", "sync", WSGI],
}


# Requests in flight at SIGTERM with one hypercorn worker: with two, the worker that exits first has the
# master terminate the other (SIGTERM, the default disposition) while it may still be serving its own.
IN_FLIGHT_CASES = {"hypercorn-one-worker": [*HYPERCORN, "--workers", "1", ASGI]}
# The judge slower than the shutdown takes: judgements are still pending in every worker as it exits.
JUDGE_DELAY = {"hypercorn-workers": 3.0}


def needs(command: list[str]) -> None:
    """Skip, saying why, when the server *command* runs (``python -m <server>``) is not installed."""
    for module in [command[2], *(["uvicorn_worker"] if "uvicorn_worker.UvicornWorker" in command else [])]:
        pytest.importorskip(module, reason=f"{module} is not installed (the dev extra has it)")


def command_and_path(case: str) -> tuple[list[str], str]:
    command = {**CASES, **IN_FLIGHT_CASES}[case]
    needs(command)
    return (command[:-1], command[-1]) if command[-1].startswith("/") else (command, "/ask")


@pytest.mark.parametrize("case", list(CASES))
def test_every_served_answer_is_audited_or_counted_after_sigterm(tmp_path: Path, servers: tuple[LLMServer, LLMServer],
                                                                 case: str) -> None:
    servers[1].delay = JUDGE_DELAY.get(case, 0.5)
    try:
        served, logged, err = serve(tmp_path, servers, *command_and_path(case))
    finally:
        servers[1].delay = 0.5
    print(f"\n{case}: {served} served, {len(logged)} audit lines, {counted(err)} counted on stderr")
    assert served == REQUESTS, err[-3000:]
    assert len(logged) + counted(err) == served, err[-3000:]
    assert len(logged) == served, err[-3000:]  # the exit timeout (20 s) is ample: nothing is even lost


@pytest.mark.parametrize("case", ["gunicorn-uvicorn-preload", "gunicorn-sync-preload", "uvicorn-workers",
                                  "gunicorn-uvicorn-preload-def-endpoint-hook", "hypercorn-one-worker"])
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


# What hypercorn's master does to its workers once the first has exited: SIGTERM (the default
# disposition) to a process already in its exit hook, its Auditor closed and judging its last turns.
DURING_EXIT = """
import logging, sys
from ragaudit import Auditor, ChatRagJudge, Limits
from ragaudit.integrations.langchain import RagAuditCallbackHandler
from tests.reliability._support import FixedRetriever, rag_chain
from langchain_core.documents import Document
logging.basicConfig(level=logging.INFO, format="%(message)s")  # the exit hook says when it starts flushing
log, judge_url = sys.argv[1], sys.argv[2]
auditor = Auditor(ChatRagJudge(base_url=judge_url, api_key="sk-test", max_retries=0), audit_log=log,
                  limits=Limits(exit_timeout_s=20.0))
handler = RagAuditCallbackHandler(auditor=auditor)
chain = rag_chain(FixedRetriever(documents=[Document(page_content="Returns take 30 days.", id="d1")]))
for i in range(4):
    chain.invoke(f"question {i}", config={"callbacks": [handler]})
"""


def test_a_sigterm_during_the_exit_hook_waits_for_it(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    with LLMServer(delay=2.0) as judge:  # the exit hook waits for the judge when the signal comes
        proc = subprocess.Popen([sys.executable, "-c", DURING_EXIT, str(log), judge.base_url], cwd=ROOT, env=env,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        before = []
        for line in proc.stderr:  # until the exit hook has begun
            before.append(line)
            if "ragaudit: flushing at exit" in line:
                break
        while judge.request_count < 4 and proc.poll() is None:  # the turns handed down: the Auditor closed
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    logged = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    assert any("flushing at exit" in line for line in before), before
    assert len(logged) == 4, (before, out, err)  # was: none, killed with its Auditor closed, nothing said
    assert proc.returncode == -signal.SIGTERM, err  # the signal took effect once the hook was done


# The pool child exits with os._exit after Celery's worker_process_shutdown: no exit hook. The judge
# is slower here than the warm shutdown takes, so the judgements are still pending in the children
# when they end (without the documented line they were lost, nothing counted).
CELERY = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=prefork", "-c", "2", "--loglevel=INFO"]


def test_celery_prefork_every_answer_is_audited_or_counted_after_sigterm(
        tmp_path: Path, servers: tuple[LLMServer, LLMServer], redis: RedisServer) -> None:
    needs(CELERY)
    # The module that makes the Celery app, with the line of docs/guides/serving.md among its imports.
    app = (ROOT / "tests" / "reliability" / "_celery_app.py").read_text(encoding="utf-8")
    app = app.replace("\nfrom celery import Celery\n", f"\n{hook_line('celery')}\nfrom celery import Celery\n", 1)
    assert hook_line("celery") in app, "the Celery app module no longer has the import the line goes before"
    (tmp_path / "celery_app.py").write_text(app, encoding="utf-8")
    servers[1].delay = 3.0
    try:
        served, logged, err = serve(tmp_path, servers, CELERY, broker=redis.url)
    finally:
        servers[1].delay = 0.5
    print(f"\ncelery-prefork: {served} served, {len(logged)} audit lines, {counted(err)} counted on stderr")
    assert served == REQUESTS, err[-3000:]
    assert len(logged) + counted(err) == served, err[-3000:]
    assert len(logged) == served, err[-3000:]
