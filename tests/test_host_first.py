"""The host comes first: ragaudit's background work yields to a busy host, loses nothing, and the
judge's concurrent requests are spread over several connection pools.

No assertion is on wall-clock time: the pacing test compares how many items a paced and an unpaced
worker handled during the same amount of host work (a 2 % share against a free-running thread), and
the others check that everything is handled, exported and closed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ragaudit import ChatRagJudge, JudgeRequest
from ragaudit._worker import BatchWorker
from tests.support.llm_server import LLMServer
from tests.support.otlp_receiver import OTLPReceiver

REPO = Path(__file__).resolve().parent.parent


def _cpu_job() -> None:
    sum(i * i for i in range(20_000))  # a few hundred microseconds of interpreter time


def _handled_while_host_busy(paced: bool) -> tuple[int, int]:
    """(items handled while a host thread ran a fixed amount of Python, items in all)."""
    worker: BatchWorker[object] = BatchWorker("host-first-test", lambda items: [_cpu_job() for _ in items] and None,
                                              max_queue=10_000, max_batch=1, paced=paced)
    total = 400
    for _ in range(total):
        worker.put(object())
    started = threading.Event()

    def host() -> None:
        started.set()
        for _ in range(40):
            _cpu_job()

    thread = threading.Thread(target=host)
    thread.start()
    started.wait()
    thread.join()
    handled = worker.stats()["handled"]
    assert worker.force_flush(120) is True  # a flush is never paced: everything is handled
    assert worker.stats()["handled"] == total
    assert worker.shutdown(10) is True
    return handled, total


@pytest.mark.timeout(300)
def test_a_paced_worker_yields_to_a_busy_host_and_still_handles_everything() -> None:
    free, _ = _handled_while_host_busy(paced=False)
    paced, total = _handled_while_host_busy(paced=True)
    # Unpaced, the worker takes about half the interpreter from the host's thread; paced, a small share.
    assert paced < free, (paced, free, total)


@pytest.mark.timeout(120)
def test_shutdown_is_not_held_by_a_pause() -> None:
    worker: BatchWorker[object] = BatchWorker("host-first-shutdown", lambda items: [_cpu_job() for _ in items] and None,
                                              paced=True)
    stop = threading.Event()

    def host() -> None:
        while not stop.is_set():
            _cpu_job()

    thread = threading.Thread(target=host)
    thread.start()
    try:
        for _ in range(50):
            worker.put(object())
        assert worker.shutdown(60) is True  # shutdown flushes: no pauses while it waits
        assert worker.stats()["handled"] == 50
    finally:
        stop.set()
        thread.join()


SCRIPT = """
from opentelemetry import trace
from ragaudit.tracing import configure
from ragaudit.tracing.setup import spans_not_exported
provider = configure(endpoint={endpoint!r})
tracer = trace.get_tracer("host-first")
for i in range(300):
    with tracer.start_as_current_span(f"span-{{i}}"):
        pass
assert provider.force_flush(30000)
print("not exported", spans_not_exported())
"""


@pytest.mark.timeout(120)
def test_a_large_export_goes_out_in_chunks_with_every_span() -> None:
    with OTLPReceiver() as rx:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(endpoint=rx.endpoint))],
                              capture_output=True, text=True, timeout=100, cwd=REPO)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "not exported 0" in done.stdout
        spans = rx.wait_for_spans(300, timeout=30)
        assert sorted(s["name"] for s in spans) == sorted(f"span-{i}" for i in range(300))
        # The batch processor handed over 300 spans at once (or in a few batches); none went out
        # in a request of more than 64 spans.
        assert len(rx.requests) >= 5


@pytest.mark.timeout(120)
def test_concurrent_judgements_spread_over_several_connection_pools() -> None:
    with LLMServer(delay=0.05) as server:
        judge = ChatRagJudge(model="gpt-4o-mini", base_url=server.base_url, api_key="test", max_retries=0)
        request = JudgeRequest(query="How long is the return window?", answer="30 days [1].",
                               context="[1] Electronics can be returned within 30 days.")

        async def main() -> tuple[list[object], list[object]]:
            judgements = await asyncio.gather(*(judge.ajudge(request) for _ in range(32)))
            entry = judge._endpoint._async_per_loop[id(asyncio.get_running_loop())]
            clients = list(entry[1].clients)
            await judge.aclose_loop()
            return list(judgements), clients

        judgements, clients = asyncio.run(main())
        judge.close()
    assert all(j.error is None for j in judgements)  # type: ignore[attr-defined]
    assert 2 <= len(clients) <= 8  # 32 in flight: several pools, never more than eight
    assert all(client.is_closed() for client in clients)  # type: ignore[attr-defined]
