"""The two-tier fleet of examples/collector/ on the real OpenTelemetry Collector, for tests and benchmarks.

:func:`fleet` starts *workers* worker processes (tests/support/fleet_worker.py: ``ragaudit worker``'s
Worker with a ChatRagJudge against a loopback judge and one Redis budget), a tier-2 Collector in front
of each (tier2-worker-sidecar.yaml) and tier 1 (tier1-gateway.yaml, its k8s resolver replaced by a
static one over the tier 2s), and stops them all when the block ends. The example files are used as
they are: endpoints through their ``${env:VAR:-default}``, the sampling share at 100 %.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.llm_server import LLMServer
from tests.support.otelcol import (
    EXAMPLES,
    ROOT,
    Collector,
    otelcol_binary_or_skip,
    start_collector,
    static_resolver,
    write_overlay,
)
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.ports import free_ports
from tests.support.redis_server import RedisServer
from tests.worker.conftest import wait_for

__all__ = ["Fleet", "fleet", "judge_calls", "load_result", "restart_redis", "send_load", "series", "start_load",
           "undecided", "wait_decided", "wait_delivered"]

@dataclass
class Fleet:
    gateway_url: str
    """Tier 1's OTLP/HTTP endpoint (the apps send here)."""
    judgements_url: str
    """Tier 1's ``otlp/judgements`` endpoint (the workers send their judgements here)."""
    worker_urls: list[str]
    logs: Path
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    collectors: list[Collector] = field(default_factory=list)
    """The tier-2 Collectors in worker order, then tier 1 (the last)."""
    metrics_urls: list[str] = field(default_factory=list)
    """Each Collector's own metrics (Prometheus text, ``level: detailed``), in the order of *collectors*."""
    _starts: list[tuple[list[Path], dict[str, str], int, Path]] = field(default_factory=list)
    received_before: list[int] = field(default_factory=list)
    """Per worker: spans it had received when its tier 2 (the running one) started."""

    def restart_worker(self, i: int) -> None:
        """Start worker *i* again (after it was killed), same arguments and port."""
        self.workers[i] = _start_worker(list(self.workers[i].args), self.logs / f"worker-{i}.log")
        wait_for(lambda: _healthy(self.worker_urls[i]) or self.workers[i].poll() is not None, timeout=90,
                 what="the restarted worker")
        assert self.workers[i].poll() is None

    def restart_collector(self, i: int) -> Collector:
        """Stop Collector *i* (SIGTERM: it drains its pipelines) and start it again, same configs and ports."""
        self.collectors[i].stop()
        return self.start_collector(i)

    def start_collector(self, i: int) -> Collector:
        """Start Collector *i* again (after ``collectors[i].stop()``), same configs and ports."""
        configs, env, port, log = self._starts[i]
        if i < len(self.workers):  # a tier 2: what its worker got from the one before is not this one's
            self.received_before[i] = int(self.stats()[i]["spans_received"])
        self.collectors[i] = start_collector(otelcol_binary_or_skip(), configs, env, port, log)
        return self.collectors[i]

    def in_transit(self) -> dict[str, int]:
        """What the Collectors hold now, by where (all 0: everything sent has reached a worker): tier 1's
        spans accepted and not yet sent on to a tier 2 (nor failed), each tier 2's traces not decided yet,
        its queued batches and its spans sent less those its worker received from it."""
        tier1 = self.collector_metrics(len(self.collectors) - 1)
        out = {"tier1": int(series(tier1, "otelcol_receiver_accepted_spans", 'receiver="otlp"')
                            - series(tier1, "otelcol_exporter_sent_spans", 'exporter="loadbalancing"')
                            - series(tier1, "otelcol_exporter_send_failed_spans", 'exporter="loadbalancing"'))}
        stats = self.stats()
        for i in range(len(self.workers)):
            m = self.collector_metrics(i)
            out[f"tier2-{i} undecided"] = int(m.get("otelcol_processor_tail_sampling_new_trace_id_received", 0)
                                              - m.get("otelcol_processor_tail_sampling_global_count_traces_sampled", 0))
            out[f"tier2-{i} queued"] = int(m.get("otelcol_exporter_queue_size", 0))
            out[f"tier2-{i} in flight"] = int(m.get("otelcol_exporter_sent_spans", 0)
                                              - (stats[i]["spans_received"] - self.received_before[i]))
        return out

    def collector_metrics(self, i: int) -> dict[str, float]:
        """Collector *i*'s own metrics: each name (``_total`` dropped) summed over its labels, and each
        labelled series as ``name{labels}``."""
        with urllib.request.urlopen(self.metrics_urls[i] + "/metrics", timeout=10) as response:
            text = response.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                name, brace, labels = series.partition("{")
                name = name.removesuffix("_total")
                out[name] = out.get(name, 0.0) + float(value)
                if brace:
                    out[f"{name}{{{labels}"] = float(value)
        return out

    def stats(self) -> list[dict[str, Any]]:
        out = []
        for url in self.worker_urls:
            with urllib.request.urlopen(url + "/stats", timeout=10) as response:
                out.append(json.loads(response.read()))
        return out


def series(metrics: dict[str, float], name: str, label: str) -> float:
    """The sum of *name*'s series that have *label* (``key="value"``)."""
    return sum(v for k, v in metrics.items() if k.startswith(name + "{") and label in k)


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", OTEL_BSP_SCHEDULE_DELAY="100",
               OTEL_BLRP_SCHEDULE_DELAY="100", OTEL_BSP_MAX_QUEUE_SIZE="100000", OTEL_BLRP_MAX_QUEUE_SIZE="100000")
    return env


def _start_worker(args: list[str], log: Path) -> subprocess.Popen[str]:
    with log.open("a") as out:  # a file, not a pipe: a worker's log never fills a pipe nobody reads
        return subprocess.Popen(args, env=_worker_env(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _worker_args(port: int, judgements_url: str, judge_url: str, store: str, max_calls: int) -> list[str]:
    return [sys.executable, "-m", "tests.support.fleet_worker", "--port", str(port), "--otlp-endpoint", judgements_url,
            "--judge-url", judge_url, "--store", store, "--max-calls", str(max_calls)]


def _start_healthy(args: list[str], url: str, log: Path) -> subprocess.Popen[str] | None:
    """A worker serving at *url*, or None when its port was taken meanwhile (the machine is shared)."""
    proc = _start_worker(args, log)
    wait_for(lambda: _healthy(url) or proc.poll() is not None, timeout=90, what="a worker")
    if proc.poll() is None:
        return proc
    assert "address already in use" in log.read_text(), log.read_text()
    return None


def _own_metrics(port: int) -> dict[str, Any]:
    """The overlay part that serves a Collector's own metrics on *port* of its own (each Collector would
    otherwise take the same default port, 8888)."""
    reader = {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": port}}}}
    return {"service": {"telemetry": {"metrics": {"level": "detailed", "readers": [reader]}}}}


@contextmanager
def fleet(tmp_path: Path, backend: OTLPReceiver, judge: LLMServer, store: str, max_calls: int,
          workers: int = 3, gateway: str = "tier1-gateway.yaml", worker_args: tuple[str, ...] = (),
          per_worker: Mapping[int, Sequence[str]] | None = None) -> Iterator[Fleet]:
    """The fleet, with tier 1 from examples/collector/*gateway*, *worker_args* added to each worker's
    arguments and ``per_worker[i]`` to worker *i*'s (a later flag wins: ``--judge-url`` names another judge)."""
    binary = otelcol_binary_or_skip()
    sidecar_ports = free_ports(workers)
    grpc_port, http_port, judgements_port = free_ports(3)
    metrics_ports = free_ports(workers + 1)
    result = Fleet(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{judgements_port}", [], tmp_path)
    result.metrics_urls = [f"http://127.0.0.1:{p}" for p in metrics_ports]
    worker_ports: list[int] = []
    with ExitStack() as stack:
        stack.callback(lambda: [p.kill() for p in result.workers if p.poll() is None])
        stack.callback(lambda: [c.stop() for c in reversed(result.collectors)])  # tier 1 first, as it was started last
        for i in range(workers):
            for _attempt in range(3):
                port = free_ports(1)[0]
                url = f"http://127.0.0.1:{port}"
                args = [*_worker_args(port, result.judgements_url, judge.base_url, store, max_calls), *worker_args,
                        *(per_worker or {}).get(i, ())]
                proc = _start_healthy(args, url, tmp_path / f"worker-{i}.log")
                if proc is not None:
                    result.workers.append(proc)
                    result.received_before.append(0)
                    result.worker_urls.append(url)
                    worker_ports.append(port)
                    break
            else:
                raise RuntimeError("no free port for a worker in 3 attempts")
        for i, (sidecar, worker) in enumerate(zip(sidecar_ports, worker_ports)):
            env = {"SIDECAR_GRPC_ENDPOINT": f"127.0.0.1:{sidecar}", "WORKER_ENDPOINT": f"http://127.0.0.1:{worker}",
                   "JUDGE_SAMPLING_PERCENTAGE": "100"}
            overlay = write_overlay(tmp_path / f"tier2-{i}-overlay.yaml", _own_metrics(metrics_ports[i]))
            result._starts.append(([EXAMPLES / "tier2-worker-sidecar.yaml", overlay], env, sidecar,
                                   tmp_path / f"tier2-{i}.log"))
            result.collectors.append(start_collector(binary, *result._starts[-1]))
        static = static_resolver([f"127.0.0.1:{p}" for p in sidecar_ports])
        overlay = write_overlay(tmp_path / "tier1-overlay.yaml", static, _own_metrics(metrics_ports[-1]))
        env = {"GATEWAY_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}", "GATEWAY_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
               "GATEWAY_JUDGEMENTS_ENDPOINT": f"127.0.0.1:{judgements_port}", "BACKEND_ENDPOINT": backend.endpoint}
        result._starts.append(([EXAMPLES / gateway, overlay], env, http_port, tmp_path / "tier1.log"))
        result.collectors.append(start_collector(binary, *result._starts[-1]))
        yield result


_ITEM = re.compile(r"policy for item (\S+)\?")


def judge_calls(judge: LLMServer) -> Counter[str]:
    """Judge calls per sender turn (its question names the turn)."""
    counts: Counter[str] = Counter()
    for request in judge.requests:
        counts.update(set(_ITEM.findall(request.prompt_text)))
    return counts


def undecided(stats: dict[str, Any]) -> int:
    """Turns a worker holds that are not decided yet: traces still buffered, turns waiting for the judge,
    and judgements the auditor has but the worker has not counted yet (its callback runs a moment later)."""
    auditor = stats["auditor"]
    counted = auditor.get("judged", 0) + auditor.get("failed", 0) - stats["turns_judged"] - stats["turns_judge_failed"]
    return int(stats["traces_in_flight"] + auditor.get("pending", 0) + counted)


def wait_decided(f: Fleet, found: int | None = None, timeout: float = 300) -> list[dict[str, Any]]:
    """Wait until the workers found *found* turns in all (None: any number) and every one is decided
    (judged, failed, or counted not sent): the counters read before that race the judge (commit b4ee5dc).
    Returns the workers' stats then."""
    def done() -> bool:
        stats = f.stats()
        return (found is None or sum(s["turns_found"] for s in stats) == found) and not any(map(undecided, stats))

    wait_for(done, timeout=timeout, what=f"every turn at a worker ({found}) decided")
    return f.stats()


def wait_delivered(f: Fleet, timeout: float = 300) -> list[dict[str, Any]]:
    """Wait until nothing is in transit in the Collectors (`Fleet.in_transit`) and every turn at a worker
    is decided, in that order; returns the workers' stats then. Call it once the senders are done."""
    wait_for(lambda: not any(f.in_transit().values()), timeout=timeout, what="nothing held by a Collector")
    return wait_decided(f, timeout=timeout)


def restart_redis(server: RedisServer, stopped: bool = False) -> RedisServer:
    """*server* stopped (unless *stopped* already) and started again on its port, empty (no persistence, as
    tests/support/redis_server.py runs it): what a Redis restarted without ``appendonly`` is."""
    if not stopped:
        server.stop()
    process = subprocess.Popen(list(server.process.args), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    restarted = RedisServer(process, server.port, server.password)

    def up() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    wait_for(lambda: up() or process.poll() is not None, timeout=20, what="redis-server restarted")
    assert process.poll() is None, "redis-server did not start again on its port"
    return restarted


def settled(url: str) -> dict[str, Any]:
    """The worker's stats once two reads in a row agree on what it received (no request in progress)."""
    last: dict[str, Any] = {}
    while True:
        with urllib.request.urlopen(url + "/stats", timeout=10) as response:
            now = json.loads(response.read())
        if last and now["spans_received"] == last["spans_received"]:
            return dict(now)
        last = now


def start_load(gateway_url: str, turns: int, name: str) -> subprocess.Popen[str]:
    """The load sender (tests/worker/apps/sender.py) to tier 1, started; :func:`load_result` waits for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(ROOT), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=gateway_url + "/v1/traces")
    return subprocess.Popen([sys.executable, "-m", "tests.worker.apps.sender", "--turns", str(turns), "--name", name],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def load_result(sender: subprocess.Popen[str]) -> dict[str, Any]:
    """A started sender's JSON output, once it is done."""
    out, err = sender.communicate(timeout=600)
    assert sender.returncode == 0, err[-3000:]
    return dict(json.loads(out))


def send_load(gateway_url: str, turns: int, name: str) -> dict[str, Any]:
    """The load sender (tests/worker/apps/sender.py) to tier 1; its JSON output."""
    return load_result(start_load(gateway_url, turns, name))
