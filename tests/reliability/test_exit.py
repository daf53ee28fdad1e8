"""Exit: a process that ends with judgements pending records them all, or says on stderr what it lost.

Each case is a fresh Python process (so exit hooks and signal dispositions are real) with a
subprocess timeout well above the flush timeout: a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TURNS = 20
SHORTFALL = rf"ragaudit: {TURNS} judgement\(s\) still pending .*(lost|not recorded)"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]  # a fresh interpreter per test

# The child: a judge of the given kind, an Auditor with the given extra arguments, TURNS turns
# submitted, "ready" printed, then the given ending.
CHILD = textwrap.dedent("""
    import asyncio, os, signal, sys, threading, time
    from ragaudit import Auditor, ChatRagJudge, FakeJudge, Limits, RagTurn, RetrievedDoc
    log, judge_kind, ending, turns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5])
    extra = eval(sys.argv[4])
    if judge_kind == "slow":          # 0.1 s per judgement: all of them finish within the flush timeout
        async def fn(request):
            await asyncio.sleep(0.1)
            return {"faithfulness": 1.0, "reason": "ok"}
        judge = FakeJudge(fn)
    elif judge_kind == "stuck":       # never finishes on its own: only the flush timeout ends it
        async def fn(request):
            await asyncio.sleep(3600)
        judge = FakeJudge(fn)
    else:                             # the real ChatRagJudge against a loopback server
        from tests.support.llm_server import Fault, LLMServer
        srv = LLMServer(delay=0.05).start()
        if judge_kind == "hanging_server":
            srv.rule = lambda body: Fault.hang(3600)
        judge = ChatRagJudge(base_url=srv.base_url, api_key="test", timeout_s=600, max_retries=0)
    # The application's own SIGTERM handler ("host_{before,after}_{sysexit,osexit}"), installed
    # before or after the Auditor; it ends the process with sys.exit (exit hooks run) or os._exit
    # (none run: only a flush before it can have recorded anything).
    def on_term(signum, frame):
        print(f"host handler ran, {sum(1 for _ in open(log)) if os.path.exists(log) else 0} lines logged",
              flush=True)
        if ending.endswith("osexit"):
            os._exit(0)
        sys.exit(0)
    if ending.startswith("host_before"):
        signal.signal(signal.SIGTERM, on_term)
    via = extra.pop("via", "submit")
    limits = Limits(max_concurrency=4, exit_timeout_s=extra.pop("exit_timeout_s", 30.0))
    aud = Auditor(judge, audit_log=log, limits=limits, **extra)
    if ending.startswith("host_after"):
        signal.signal(signal.SIGTERM, on_term)
    if via == "chain":                # a LangChain chain with the handler: turns are closed in the background
        from langchain_core.documents import Document
        from ragaudit.integrations.langchain import RagAuditCallbackHandler
        from tests.reliability._support import FixedRetriever, rag_chain
        handler = RagAuditCallbackHandler(auditor=aud)
        chain = rag_chain(FixedRetriever(documents=[Document(page_content="Returns take 30 days.", id="d1")]))
        for i in range(turns):
            chain.invoke(f"question {i}", config={"callbacks": [handler]})
    else:
        docs = (RetrievedDoc(id="d1", content="Returns are accepted within 30 days.", rank=1),)
        for i in range(turns):
            aud.submit(RagTurn(turn_id=f"t{i}", query=f"question {i}", answer="30 days.", documents=docs))
    print("ready", flush=True)
    if ending != "exit":
        time.sleep(60)                # the parent sends a signal meanwhile
    # "exit": fall off the end without flush() or shutdown(): the exit hook must do it
""")


def start(tmp_path: Path, judge_kind: str, ending: str, **extra: object) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(log), judge_kind, ending, repr(extra),
                             str(TURNS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"child did not get ready: {line!r} {proc.communicate()}")
    return proc, log


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the process hung past its flush timeout") from None
    return out, err


def lines(log: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("judge_kind, via", [("slow", "submit"), ("loopback", "submit"), ("slow", "chain")])
def test_normal_exit_records_every_judgement(tmp_path: Path, judge_kind: str, via: str) -> None:
    proc, log = start(tmp_path, judge_kind, "exit", via=via)
    _, err = finish(proc)
    assert proc.returncode == 0, err
    recorded = lines(log)
    if via == "submit":
        assert sorted(str(x["turn_id"]) for x in recorded) == sorted(f"t{i}" for i in range(TURNS)), err
    else:
        assert sorted(str(x["query"]) for x in recorded) == sorted(f"question {i}" for i in range(TURNS)), err
    assert all(x["judge_status"] == "judged" for x in recorded)
    assert "still pending" not in err


@pytest.mark.parametrize("judge_kind", ["stuck", "hanging_server"])
def test_exit_with_a_judge_that_never_finishes_reports_the_shortfall(tmp_path: Path, judge_kind: str) -> None:
    proc, log = start(tmp_path, judge_kind, "exit", exit_timeout_s=1.0)
    _, err = finish(proc)  # bounded: the flush gives up after 1 s
    assert proc.returncode == 0, err
    assert lines(log) == []
    assert re.search(SHORTFALL, err), err


@pytest.mark.parametrize("via", ["submit", "chain"])
@pytest.mark.parametrize("option", [{}, {"handle_signals": True}], ids=["default", "handle_signals"])
def test_sigterm_flushes_then_dies_by_sigterm(tmp_path: Path, via: str, option: dict[str, object]) -> None:
    # Was (by default): killed at once, every pending judgement lost without a word.
    proc, log = start(tmp_path, "slow", "signal", exit_timeout_s=20.0, via=via, **option)
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc)
    assert proc.returncode == -signal.SIGTERM, err  # the default disposition, re-raised after the flush
    assert len(lines(log)) == TURNS, err
    assert err == "", err


def test_sigterm_with_a_stuck_judge_reports_the_shortfall(tmp_path: Path) -> None:
    proc, log = start(tmp_path, "stuck", "signal", exit_timeout_s=1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc)
    assert proc.returncode == -signal.SIGTERM, err
    assert lines(log) == []
    assert re.search(SHORTFALL, err), err


def test_sigterm_with_handle_signals_false_is_python_default(tmp_path: Path) -> None:
    """The opt-out: SIGTERM kills at once, no exit hook runs (what every process got before)."""
    proc, log = start(tmp_path, "stuck", "signal", handle_signals=False)
    proc.send_signal(signal.SIGTERM)
    finish(proc)
    assert proc.returncode == -signal.SIGTERM
    assert lines(log) == []


def test_a_host_handler_installed_before_is_chained_after_the_flush(tmp_path: Path) -> None:
    # The host's handler ends with os._exit (no exit hooks): every line logged before it ran shows
    # ragaudit's handler flushed first and then called it. Was: left alone, everything lost.
    proc, log = start(tmp_path, "slow", "host_before_osexit", exit_timeout_s=20.0)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert f"host handler ran, {TURNS} lines logged" in out, (out, err)
    assert proc.returncode == 0 and err == "", err
    assert len(lines(log)) == TURNS


def test_a_host_handler_installed_before_hears_what_the_flush_could_not_record(tmp_path: Path) -> None:
    proc, _ = start(tmp_path, "stuck", "host_before_osexit", exit_timeout_s=1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert "host handler ran, 0 lines logged" in out, (out, err)
    assert re.search(rf"ragaudit: SIGTERM: {TURNS} judgement\(s\) still pending .*handler runs now", err), err


def test_a_host_handler_installed_after_replaces_ours_and_its_sys_exit_flushes(tmp_path: Path) -> None:
    proc, log = start(tmp_path, "slow", "host_after_sysexit", exit_timeout_s=20.0)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert "host handler ran" in out, (out, err)
    assert proc.returncode == 0, err
    assert len(lines(log)) == TURNS, err  # by the normal exit flush its sys.exit runs
    assert "SIGTERM" not in err


def test_a_host_handler_installed_after_replaces_ours_entirely(tmp_path: Path) -> None:
    # With a stuck judge a flush of ours would say on stderr what it could not record before the
    # host's handler ran: nothing is said, because ours is off. The host's os._exit runs no exit
    # hook, so nothing is recorded: the host's choice, as documented.
    proc, _ = start(tmp_path, "stuck", "host_after_osexit", exit_timeout_s=1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert "host handler ran, 0 lines logged" in out, (out, err)
    assert proc.returncode == 0 and err == "", err


def test_sigint_unwinds_normally_and_flushes(tmp_path: Path) -> None:
    proc, log = start(tmp_path, "slow", "signal", exit_timeout_s=20.0)
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc)
    assert "KeyboardInterrupt" in err
    assert len(lines(log)) == TURNS, err


def test_handle_signals_from_a_worker_thread_warns_instead_of_failing() -> None:
    # A fresh process: in this one an Auditor made on the main thread has installed the handler
    # already (then one made on a worker thread is covered by it, and nothing needs saying).
    code = textwrap.dedent("""
        import logging, signal, threading
        from ragaudit import Auditor, FakeJudge
        logging.basicConfig(level=logging.WARNING)
        before = signal.getsignal(signal.SIGTERM)
        made = []
        thread = threading.Thread(target=lambda: made.append(
            Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}), audit_log=None, handle_signals=True)))
        thread.start()
        thread.join(10)
        assert made and signal.getsignal(signal.SIGTERM) is before
        made[0].shutdown()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "needs the main thread" in proc.stderr


# -- nothing at exit but what we mean to say (issue 25 item 8) -------------------------------------

QUIET_CONSTRUCTED = """
from ragaudit import Auditor, FakeJudge
auditor = Auditor(FakeJudge(lambda r: {"faithfulness": 1.0}))
"""
QUIET_JUDGED = """
import sys
from ragaudit import Auditor, ChatRagJudge, RagTurn, RetrievedDoc
from tests.support.llm_server import LLMServer
with LLMServer() as srv:
    auditor = Auditor(ChatRagJudge(base_url=srv.base_url, api_key="test", timeout_s=10, max_retries=0),
                      audit_log=sys.argv[1])
    docs = (RetrievedDoc(id="d1", content="Returns are accepted within 30 days.", rank=1),)
    assert auditor.submit(RagTurn(turn_id="t1", query="How do returns work?", answer="30 days.",
                                  documents=docs)) == "queued"
    assert auditor.force_flush(20)
"""


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", [QUIET_CONSTRUCTED, QUIET_JUDGED], ids=["constructed", "judged"])
def test_normal_exit_prints_nothing_in_20_runs(tmp_path: Path, script: str) -> None:
    # Was: "Exception ignored in: <function WeakMethod.__new__.<locals>._cb>" on stderr at exit, in
    # about one run of ten (the after-fork hook's WeakMethod and its Auditor freed together).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    outputs = []
    for batch in range(4):  # 5 at a time: 20 fresh interpreters
        procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"audit-{batch}-{i}.jsonl")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
                 for i in range(5)]
        for proc in procs:
            out, err = finish(proc, timeout=120)
            outputs.append((proc.returncode, out, err))
    noisy = [o for o in outputs if o != (0, "", "")]
    print(f"\nexit output: {len(outputs) - len(noisy)} of {len(outputs)} runs silent")
    assert noisy == [], noisy[:3]
