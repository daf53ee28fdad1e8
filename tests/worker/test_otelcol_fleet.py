"""The two-tier deployment of examples/collector/, end to end, on the real OpenTelemetry Collector.

apps (real LangChain apps, OpenInference and OpenLLMetry, OTLP/HTTP) -> tier 1 (tier1-gateway.yaml:
``loadbalancing`` by trace id over 3 workers) -> each worker's tier 2 (tier2-worker-sidecar.yaml:
``tail_sampling``) -> 3 worker processes sharing one judge budget in a real redis-server -> judge spans
and evaluation log records back through tier 1 -> a real OTLP receiver (the backend).

The Collector configs are the example files as they are: their endpoints come from the environment
(``${env:VAR:-default}``), the sampling share is set to 100 % the same way, and one overlay (a second
``--config``, merged by the Collector) replaces what one machine has not got: the k8s resolver (no
Kubernetes API here) by a static resolver over the 3 tier-2 Collectors, and the internal-metrics port
each Collector would otherwise share. Skipped, with the reason, where the Collector is not built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_server import LLMServer
from tests.support.otelcol import (
    EXAMPLES,
    Collector,
    otelcol_binary_or_skip,
    quiet_telemetry,
    start_collector,
    static_resolver,
    write_overlay,
)
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.phoenix import free_port
from tests.support.redis_server import RedisServer
from tests.support.topics import QUESTIONS
from tests.worker.conftest import ROOT, check_judged_once, run_app, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKERS = 3


@dataclass
class Fleet:
    gateway_url: str
    """Tier 1's OTLP/HTTP endpoint (the apps send here)."""
    judgements_url: str
    """Tier 1's ``otlp/judgements`` endpoint (the workers send their judgements here)."""
    worker_urls: list[str]
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    collectors: list[Collector] = field(default_factory=list)

    def stats(self) -> list[dict[str, Any]]:
        out = []
        for url in self.worker_urls:
            with urllib.request.urlopen(url + "/stats", timeout=10) as response:
                out.append(json.loads(response.read()))
        return out


def _start_worker(port: int, gateway_url: str, judge_url: str, store: str, max_calls: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", OTEL_BSP_SCHEDULE_DELAY="100",
               OTEL_BLRP_SCHEDULE_DELAY="100")
    return subprocess.Popen([sys.executable, "-m", "tests.support.fleet_worker", "--port", str(port),
                             "--otlp-endpoint", gateway_url, "--judge-url", judge_url, "--store", store,
                             "--max-calls", str(max_calls)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def fleet(tmp_path: Path, backend: OTLPReceiver, judge: LLMServer, store: str, max_calls: int,
          gateway: str = "tier1-gateway.yaml") -> Iterator[Fleet]:
    binary = otelcol_binary_or_skip()
    worker_ports = [free_port() for _ in range(WORKERS)]
    sidecar_ports = [free_port() for _ in range(WORKERS)]
    grpc_port, http_port, judgements_port = free_port(), free_port(), free_port()
    result = Fleet(f"http://127.0.0.1:{http_port}", f"http://127.0.0.1:{judgements_port}",
                   [f"http://127.0.0.1:{p}" for p in worker_ports])
    quiet = write_overlay(tmp_path / "quiet.yaml", quiet_telemetry())
    with ExitStack() as stack:
        for port in worker_ports:
            proc = _start_worker(port, result.judgements_url, judge.base_url, store, max_calls)
            result.workers.append(proc)
            stack.callback(lambda p=proc: p.poll() is None and p.kill())
        for url, proc in zip(result.worker_urls, result.workers):
            wait_for(lambda u=url, p=proc: _healthy(u) or p.poll() is not None, timeout=90, what="a worker")
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
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


def _apps(rag_llm: LLMServer, gateway_url: str, questions: list[str]) -> list[dict[str, Any]]:
    """The LangChain app twice, as OpenInference and as OpenLLMetry instrument it, through tier 1."""
    env = {"OPENAI_BASE_URL": rag_llm.base_url, "OPENAI_API_KEY": "test",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": gateway_url + "/v1/traces"}
    half = len(questions) // 2
    return [*run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openinference", *questions[:half]], env),
            *run_app("tests.worker.apps.langchain_rag", ["--instrumentation", "openllmetry", *questions[half:]], env)]


def _judged_questions(judge: LLMServer, questions: list[str]) -> Counter[str]:
    """How many judge calls named each question (the loopback judge's own request log)."""
    counts: Counter[str] = Counter()
    for request in judge.requests:
        counts.update(q for q in questions if q in request.prompt_text)
    return counts


@pytest.mark.timeout(600)
def test_each_turn_judged_once_through_both_tiers(tmp_path: Path, rag_llm: LLMServer, redis: RedisServer) -> None:
    questions = QUESTIONS[:12]
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=1000) as f:
            expected = _apps(rag_llm, f.gateway_url, questions)
            assert [t["question"] for t in expected] == questions
            judges = check_judged_once(backend, expected)
            wait_for(lambda: sum(s["turns_judged"] for s in f.stats()) == len(questions), timeout=30,
                     what="the workers' counts")
            stats = f.stats()
        # Counted at the judge: one call per turn, each turn's question in exactly one call.
        assert judge.request_count == len(questions)
        assert _judged_questions(judge, questions) == Counter(questions)
    assert len(judges) == len(questions)
    # Tier 1 spread the traces (12 trace ids over 3 workers: all on one is a 1-in-177,147 chance).
    assert sum(1 for s in stats if s["turns_judged"]) >= 2, [s["turns_judged"] for s in stats]
    # Every turn reached exactly one worker whole, and no span after it was judged: the judge spans go
    # from tier 1's otlp/judgements to the backend only, never back to a worker.
    assert sum(s["turns_found"] for s in stats) == len(questions)
    assert all(s["spans_own"] == 0 and s["late_spans"] == 0 for s in stats), [
        {k: s[k] for k in ("spans_own", "late_spans", "spans_received", "turns_found")} for s in stats]
    assert all(s["auditor"]["budget_store_errors"] == 0 for s in stats)


@pytest.mark.timeout(600)
def test_the_fleet_shares_one_budget_in_redis(tmp_path: Path, rag_llm: LLMServer, redis: RedisServer) -> None:
    questions = QUESTIONS[:12]
    budget = 5
    with OTLPReceiver() as backend, LLMServer() as judge:
        with fleet(tmp_path, backend, judge, redis.url, max_calls=budget) as f:
            _apps(rag_llm, f.gateway_url, questions)
            wait_for(lambda: sum(s["turns_found"] for s in f.stats()) == len(questions), timeout=60,
                     what="every turn at a worker")
            backend.wait_for_spans(budget, timeout=30, predicate=lambda s: s["name"] == "ragaudit.judge")
            stats = f.stats()
        calls = judge.request_count
    # Each worker alone would have judged up to 5 of its own turns (up to 12 in all); together they
    # judged 5, and said of every other turn that it was over the budget.
    assert calls == budget
    assert sum(s["turns_judged"] for s in stats) == budget
    assert sum(s["auditor"]["over_budget"] for s in stats) == len(questions) - budget
    assert sum(1 for s in stats if s["turns_found"]) >= 2
    assert len(backend.spans_named("ragaudit.judge")) == budget
