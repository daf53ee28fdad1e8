"""Judged turns per second through the real OpenTelemetry Collector, for 1, 2 and 3 workers (issue 47).

    python benchmarks/otelcol_fleet.py            # 600 turns per round, rounds 1,2,3,3,2,1 workers (interleaved)
    python benchmarks/otelcol_fleet.py --quick    # 100 turns, rounds 1,2,3
    python benchmarks/otelcol_fleet.py --ceiling [--quick]   # one worker's ingest vs the Collector's, same bodies

Method. The fleet of tests/support/fleet.py, on the files of examples/collector/ as they are: tier 1
(``loadbalancing`` by trace id, a static resolver over the tier 2s) -> one tier-2 Collector per worker
(``tail_sampling``, 100 %) -> N worker processes sharing one Redis budget, each judging with a real
``ChatRagJudge`` against a loopback judge that answers every call after a fixed 0.2 s -> judge spans
through tier 1's ``otlp/judgements`` to a loopback OTLP receiver (the backend). The Collector is the one
``make otelcol`` builds (otelcol/builder-config.yaml). One sender process (the real OTel SDK, OTLP/HTTP,
tests/worker/apps/sender.py) sends the round's turns to tier 1 as fast as its batch exporter goes.

Judged turns/s = turns / (the first root span's start -> the last judge span's end), both span timestamps
as the backend received them. Latency per turn = its root span's end -> its judge span's end (p50, p95):
it includes, by design, tier 2's ``decision_wait_after_root_received`` (2 s) and the worker's quiet
period (0.5 s). The machine's load average (``uptime``) is recorded before and after each round.

``--ceiling``: the per-worker ceiling beside the Collector's own ingest, on the same request bodies in
the same run (rounds alternate). The bodies are benchmarks/worker_ingest.py's: OpenInference LangChain
turns of 9 spans, OTLP/HTTP protobuf requests of 512 spans, posted one after the other over one
keep-alive connection (a 503 is retried). One ``ragaudit worker`` process (``--quiet 0 --sample-rate 0``:
every trace decoded, assembled into a turn and handed to the Auditor, which samples it out, so no judge)
until its ``/stats`` counts every trace assembled; one Collector (``otelcol-ragaudit``: the ``otlp``
receiver -> ``batch`` -> ``debug`` at ``verbosity: basic``, its log sampled) until its own metrics count
every span sent on by the exporter. Spans/s = spans / (first request -> all counted); the CPU seconds
of each process (``/proc/<pid>/stat``) are recorded too, the figure that holds on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._bench import machine_info, print_machine, write_result
from benchmarks.worker_ingest import SPANS_PER_TRACE, make_payloads, start_worker, worker_round
from benchmarks.worker_ingest import _cpu_s as cpu_s
from benchmarks.worker_ingest import _post_all as post_all
from tests.support.fleet import fleet, send_load
from tests.support.llm_server import LLMServer
from tests.support.otelcol import otelcol_binary, start_collector, write_overlay
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.redis_server import start_redis
from tests.worker.conftest import wait_for

JUDGE_DELAY_S = 0.2


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()


def one_round(workers: int, turns: int, name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, OTLPReceiver() as backend, LLMServer(delay=JUDGE_DELAY_S) as judge:
        redis = start_redis(Path(tmp))
        try:
            with fleet(Path(tmp), backend, judge, redis.url, max_calls=10 * turns, workers=workers) as f:
                before = _uptime()
                sent = send_load(f.gateway_url, turns, name)
                wait_for(lambda: len(backend.spans_named("ragaudit.judge")) >= turns, timeout=900,
                         what="every turn's judge span")
                after = _uptime()
                stats = f.stats()
        finally:
            redis.stop()
    spans = backend.spans
    roots = {s["trace_id"]: s for s in spans if s["parent_span_id"] is None and s["name"] != "ragaudit.judge"}
    judges = {s["trace_id"]: s for s in spans if s["name"] == "ragaudit.judge"}
    assert len(judges) == turns == len(sent["turns"]), (len(judges), turns)
    start = min(s["start_time_ns"] for s in roots.values())
    end = max(s["end_time_ns"] for s in judges.values())
    latencies = sorted((judges[t]["end_time_ns"] - roots[t]["end_time_ns"]) / 1e9 for t in judges)
    return {"workers": workers, "turns": turns, "judge_calls": judge.request_count,
            "turns_per_s": turns / ((end - start) / 1e9), "latency_p50_s": statistics.median(latencies),
            "latency_p95_s": latencies[int(0.95 * (len(latencies) - 1))],
            "judged_per_worker": [s["turns_judged"] for s in stats], "uptime_before": before, "uptime_after": after}


def _collector_ingest_config(tmp: Path, http_port: int, metrics_port: int) -> Path:
    """The Collector's ingest alone: otlp (HTTP) -> batch -> debug (one line a batch, sampled)."""
    reader = {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": metrics_port}}}}
    return write_overlay(tmp / "ingest.yaml", {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{http_port}"}}}},
        "processors": {"batch": {}},
        "exporters": {"debug": {"verbosity": "basic", "sampling_initial": 1, "sampling_thereafter": 1000}},
        "service": {"telemetry": {"metrics": {"level": "normal", "readers": [reader]}},
                    "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                             "exporters": ["debug"]}}}})


def _exported_spans(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith("otelcol_exporter_sent_spans"))


def collector_round(url: str, metrics_url: str, pid: int, bodies: list[bytes], spans: int) -> dict[str, float]:
    before = _exported_spans(metrics_url)
    cpu0, t0 = cpu_s(pid), time.perf_counter()
    post_all(url, bodies)
    wait_for(lambda: _exported_spans(metrics_url) - before >= spans, timeout=600, what="every span exported")
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_s(pid) - cpu0}


def ceiling(traces: int, rounds: int) -> dict[str, Any]:
    """One worker's ingest and the Collector's, on the same bodies, rounds alternating."""
    binary = otelcol_binary()
    assert binary is not None
    spans = traces * SPANS_PER_TRACE
    rows: dict[str, list[dict[str, Any]]] = {"worker": [], "collector": []}
    with tempfile.TemporaryDirectory() as tmp, OTLPReceiver() as sink:
        http_port, metrics_port = _ports(2)
        config = _collector_ingest_config(Path(tmp), http_port, metrics_port)
        worker, worker_url = start_worker(sink.endpoint)
        collector = start_collector(binary, [config], {}, http_port, Path(tmp) / "collector.log")
        try:
            for r in range(rounds):
                bodies = make_payloads(traces, f"ceiling-{r}")
                for name in ("worker", "collector"):
                    before = _uptime()
                    if name == "worker":
                        row = worker_round(worker_url, worker.pid, bodies, traces)
                    else:
                        row = collector_round(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{metrics_port}/metrics",
                                              collector.process.pid, bodies, spans)
                    row.update(spans_per_s=spans / row["seconds"], spans_per_cpu_s=spans / max(row["cpu_s"], 1e-9),
                               uptime_before=before, uptime_after=_uptime())
                    rows[name].append(row)
                    print(f"round {r + 1}: {name:9} {row['spans_per_s']:,.0f} spans/s, "
                          f"{row['spans_per_cpu_s']:,.0f} spans per CPU-second; {row['uptime_after']}", flush=True)
        finally:
            worker.terminate()
            worker.wait(60)
            collector.stop()
    return {"traces": traces, "spans_per_trace": SPANS_PER_TRACE, "rounds": rows,
            **{f"{name}_{key}_median": statistics.median(r[key] for r in rows[name])
               for name in rows for key in ("spans_per_s", "spans_per_cpu_s")}}


def _ports(n: int) -> list[int]:
    from tests.support.fleet import _ports as ports

    return ports(n)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ceiling", action="store_true", help="one worker's ingest beside the Collector's")
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if otelcol_binary() is None:
        print("the OpenTelemetry Collector is not built: run `make otelcol` (needs Go)", file=sys.stderr)
        return 1
    if args.ceiling:
        info = machine_info()
        print_machine(info)
        result = ceiling(args.turns or (300 if args.quick else 1000), 2 if args.quick else 3)
        print(f"median spans/s: worker {result['worker_spans_per_s_median']:,.0f}, Collector "
              f"{result['collector_spans_per_s_median']:,.0f}; spans per CPU-second: worker "
              f"{result['worker_spans_per_cpu_s_median']:,.0f}, "
              f"Collector {result['collector_spans_per_cpu_s_median']:,.0f}")
        write_result("otelcol_ceiling", result, quick=args.quick, out=args.out)
        return 0
    turns = args.turns or (100 if args.quick else 600)
    order = [1, 2, 3] if args.quick else [1, 2, 3, 3, 2, 1]
    info = machine_info()
    print_machine(info)
    rounds = []
    for i, workers in enumerate(order):
        result = one_round(workers, turns, f"r{i}")
        rounds.append(result)
        print(f"{workers} worker(s): {result['turns_per_s']:.1f} judged turns/s, latency p50 "
              f"{result['latency_p50_s']:.2f} s p95 {result['latency_p95_s']:.2f} s, per worker "
              f"{result['judged_per_worker']}; {result['uptime_after']}", flush=True)
    summary = {str(n): statistics.median(r["turns_per_s"] for r in rounds if r["workers"] == n)
               for n in sorted(set(order))}
    print("median judged turns/s by workers:", {k: round(v, 1) for k, v in summary.items()})
    write_result("otelcol_fleet", {"judge_delay_s": JUDGE_DELAY_S, "rounds": rounds, "median_turns_per_s": summary},
                 quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
