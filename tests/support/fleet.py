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
from collections.abc import Iterator
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
    quiet_telemetry,
    start_collector,
    static_resolver,
    write_overlay,
)
from tests.support.otlp_receiver import OTLPReceiver
from tests.worker.conftest import wait_for

__all__ = ["Fleet", "fleet", "judge_calls", "send_load"]

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

    def restart_worker(self, i: int) -> None:
        self.workers[i] = _start_worker(list(self.workers[i].args), self.logs / f"worker-{i}.log")
        wait_for(lambda: _healthy(self.worker_urls[i]) or self.workers[i].poll() is not None, timeout=90,
                 what="the restarted worker")
        assert self.workers[i].poll() is None

    def stats(self) -> list[dict[str, Any]]:
        out = []
        for url in self.worker_urls:
            with urllib.request.urlopen(url + "/stats", timeout=10) as response:
                out.append(json.loads(response.read()))
        return out


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


def _ports(n: int) -> list[int]:
    """*n* distinct free ports (held open together while chosen, so none is picked twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


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


@contextmanager
def fleet(tmp_path: Path, backend: OTLPReceiver, judge: LLMServer, store: str, max_calls: int,
          workers: int = 3, gateway: str = "tier1-gateway.yaml", worker_args: tuple[str, ...] = ()) -> Iterator[Fleet]:
    """The fleet, with tier 1 from examples/collector/*gateway* and *worker_args* added to each worker's."""
    binary = otelcol_binary_or_skip()
    sidecar_ports = _ports(workers)
    grpc_port, http_port, judgements_port = _ports(3)
    result = Fleet(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{judgements_port}", [], tmp_path)
    quiet = write_overlay(tmp_path / "quiet.yaml", quiet_telemetry())
    worker_ports: list[int] = []
    with ExitStack() as stack:
        stack.callback(lambda: [p.kill() for p in result.workers if p.poll() is None])
        for i in range(workers):
            for _attempt in range(3):
                port = _ports(1)[0]
                url = f"http://127.0.0.1:{port}"
                args = [*_worker_args(port, result.judgements_url, judge.base_url, store, max_calls), *worker_args]
                proc = _start_healthy(args, url, tmp_path / f"worker-{i}.log")
                if proc is not None:
                    result.workers.append(proc)
                    result.worker_urls.append(url)
                    worker_ports.append(port)
                    break
            else:
                raise RuntimeError("no free port for a worker in 3 attempts")
        for i, (sidecar, worker) in enumerate(zip(sidecar_ports, worker_ports)):
            env = {"SIDECAR_GRPC_ENDPOINT": f"127.0.0.1:{sidecar}", "WORKER_ENDPOINT": f"http://127.0.0.1:{worker}",
                   "JUDGE_SAMPLING_PERCENTAGE": "100"}
            result.collectors.append(stack.enter_context(start_collector(
                binary, [EXAMPLES / "tier2-worker-sidecar.yaml", quiet], env, sidecar, tmp_path / f"tier2-{i}.log")))
        static = static_resolver([f"127.0.0.1:{p}" for p in sidecar_ports])
        overlay = write_overlay(tmp_path / "tier1-overlay.yaml", quiet_telemetry(), static)
        env = {"GATEWAY_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}", "GATEWAY_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
               "GATEWAY_JUDGEMENTS_ENDPOINT": f"127.0.0.1:{judgements_port}", "BACKEND_ENDPOINT": backend.endpoint}
        result.collectors.append(stack.enter_context(start_collector(
            binary, [EXAMPLES / gateway, overlay], env, http_port, tmp_path / "tier1.log")))
        yield result


_ITEM = re.compile(r"policy for item (\S+)\?")


def judge_calls(judge: LLMServer) -> Counter[str]:
    """Judge calls per sender turn (its question names the turn)."""
    counts: Counter[str] = Counter()
    for request in judge.requests:
        counts.update(set(_ITEM.findall(request.prompt_text)))
    return counts


def settled(url: str) -> dict[str, Any]:
    """The worker's stats once two reads in a row agree on what it received (no request in progress)."""
    last: dict[str, Any] = {}
    while True:
        with urllib.request.urlopen(url + "/stats", timeout=10) as response:
            now = json.loads(response.read())
        if last and now["spans_received"] == last["spans_received"]:
            return dict(now)
        last = now


def send_load(gateway_url: str, turns: int, name: str) -> dict[str, Any]:
    """The load sender (tests/worker/apps/sender.py) to tier 1; its JSON output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(ROOT), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=gateway_url + "/v1/traces")
    done = subprocess.run([sys.executable, "-m", "tests.worker.apps.sender", "--turns", str(turns), "--name", name],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))
