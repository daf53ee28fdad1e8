"""Scale, simulated honestly: 3 ``ragaudit worker`` processes behind a test router that stands in for
the Collector's ``load_balancing`` exporter (tests/worker/router.py: the same trace-id hashing), load
from 8 concurrent sender processes (real OTel SDK + OTLP exporter), one worker killed mid-run.

Every turn is judged exactly once, or lost with a count: a lost turn is one whose batch the sender's
exporter reported as failed, or one the killed worker held in flight when it was killed (bounded by
its own ``/stats`` taken just before the kill, under the router's lock so nothing reached it in
between). A turn the senders' SDK never handed to its exporter would fail the test (none is).
``RAGAUDIT_SCALE_TURNS`` sets the load (default 10,000: about a minute on a loaded 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from tests.support.ports import free_port
from tests.worker.conftest import ROOT, wait_for
from tests.worker.router import Router

pytestmark = pytest.mark.slow

TURNS = int(os.environ.get("RAGAUDIT_SCALE_TURNS", "10000"))
SENDERS = 8


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        return dict(json.loads(response.read()))


def _start_worker(port: int, endpoint: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    # Short export delays: judge spans leave the worker within 0.1 s, so "in flight" at the kill is
    # what its /stats says, not a 5 s batch besides.
    env.update(PYTHONPATH=str(ROOT / "src"), OTEL_BSP_SCHEDULE_DELAY="100", OTEL_BLRP_SCHEDULE_DELAY="100",
               OTEL_BSP_MAX_QUEUE_SIZE="100000", OTEL_BLRP_MAX_QUEUE_SIZE="100000")
    return subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port), "--otlp-endpoint",
                             endpoint, "--quiet", "0.5", "--max-wait", "20"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _healthy(url: str) -> bool:
    try:
        return _stats(url) is not None
    except OSError:
        return False


@pytest.mark.timeout(1800)
def test_three_workers_each_turn_judged_once_or_counted(collector: Any) -> None:
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    workers = [_start_worker(p, collector.endpoint) for p in ports]
    router = Router(urls).start()
    senders: list[subprocess.Popen[str]] = []
    try:
        for url, proc in zip(urls, workers):
            wait_for(lambda u=url, p=proc: _healthy(u) or p.poll() is not None, timeout=90, what="a worker")
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(PYTHONPATH=str(ROOT), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=router.url + "/v1/traces")
        senders = [subprocess.Popen([sys.executable, "-m", "tests.worker.apps.sender", "--turns",
                                     str(TURNS // SENDERS), "--name", f"s{i}"], env=env, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for i in range(SENDERS)]
        victim = urls[1]
        wait_for(lambda: sum(1 for w in router.routed.values() if victim in w) >= TURNS // 6, timeout=900,
                 what="half of the victim's share routed")
        with router.lock:  # no forward in progress: what the victim holds is what its stats say
            at_kill = _stats(victim)
            workers[1].send_signal(signal.SIGKILL)
            workers[1].wait(30)
        outputs = []
        for sender in senders:
            out, err = sender.communicate(timeout=900)
            assert sender.returncode == 0, err[-3000:]
            outputs.append(json.loads(out))
        for url in (urls[0], urls[2]):
            wait_for(lambda u=url: (lambda s: s["traces_in_flight"] == 0 and s["judge_pending"] == 0)(_stats(u)),
                     timeout=300, what="the live workers to finish")
        live = [_stats(u) for u in (urls[0], urls[2])]
        for proc in (workers[0], workers[2]):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(120) == 0
    finally:
        for proc in [*workers, *senders]:
            if proc.poll() is None:
                proc.kill()
        router.stop()

    turns: dict[str, str] = {}
    failed: set[str] = set()
    unsent: set[str] = set()
    for out in outputs:
        turns.update(out["turns"])
        failed.update(out["failed"])
        unsent.update(out["unsent"])
    assert not unsent, f"{len(unsent)} turns never left their senders (the SDK dropped them)"
    assert len(turns) == TURNS // SENDERS * SENDERS
    judged: dict[str, int] = {}
    expected = sum(s["turns_judged"] for s in live) + at_kill["turns_judged"]
    wait_for(lambda: len(collector.spans_named("ragaudit.judge")) >= expected - at_kill["turns_judged"],
             timeout=120, what="the judge spans")
    time.sleep(0.5)
    for span in collector.spans_named("ragaudit.judge"):
        judged[span["trace_id"]] = judged.get(span["trace_id"], 0) + 1
    assert max(judged.values()) == 1, "a turn was judged twice"
    assert set(judged) <= set(turns)
    lost = set(turns) - set(judged)
    on_victim = {t for t in lost if victim in router.routed.get(t, set())}
    unexplained = lost - failed - on_victim
    keys = ("turns_found", "turns_judged", "turns_unjudged_no_evidence", "turns_unjudged_no_model", "late_spans",
            "dropped_evicted_traces", "judge_dropped", "requests_refused_full", "spans_received")
    assert not unexplained, (f"{len(unexplained)} turn(s) lost without a count; routed to "
                             f"{[sorted(router.routed.get(t, ())) for t in list(unexplained)[:5]]}; live workers: "
                             f"{[{k: s[k] for k in keys} for s in live]}")
    uncounted = on_victim - failed
    # What the victim held when it was killed: traces in flight, turns waiting for the judge, and
    # judgements it made whose spans had not reached the receiver yet.
    victim_judged_received = sum(1 for t in judged if victim in router.routed.get(t, set()))
    in_flight = at_kill["traces_in_flight"] + at_kill["judge_pending"] + max(
        0, at_kill["turns_judged"] - victim_judged_received)
    assert len(uncounted) <= in_flight
    assert failed, "no sender counted a failure, yet a worker died mid-run"
    assert all(s["late_spans"] == 0 and s["dropped_evicted_traces"] == 0 for s in live)
    print(f"\nscale: {len(turns)} turns, {len(judged)} judged once, {len(lost)} lost "
          f"({len(lost & failed)} in failed sender batches, {len(uncounted)} in flight on the killed worker, "
          f"which held {in_flight}); victim stats at kill: {at_kill['spans_received']} spans")
