"""The example alert rules fire: a real Prometheus (Debian's ``prometheus``) scrapes a real
``ragaudit worker`` process whose scripted judge's faithfulness drops, and its own API
(``/api/v1/alerts``) shows ``RagFaithfulnessLow`` and ``RagUnsupportedSentencesUp`` go pending, then
firing; every query of the example Grafana dashboard runs on it. The rules are
examples/prometheus/alerts.yml with the windows (``[15m]`` -> ``[20s]``) and ``for:`` (-> 3s)
shortened, scraped and evaluated every second; every loop is bounded."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port
from tests.worker.conftest import ROOT, wait_for
from tests.worker.scripted_judge import DROP_MARKER
from tests.worker.spans import SpanMaker, encode, rag_trace

pytestmark = [pytest.mark.slow, pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="needs Prometheus (apt-get install prometheus; make system-deps)")]

RULES = ROOT / "examples" / "prometheus" / "alerts.yml"
ALERTS = ("RagFaithfulnessLow", "RagUnsupportedSentencesUp")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _send(worker: str, maker: SpanMaker, question: str) -> None:
    request = urllib.request.Request(worker + "/v1/traces", data=encode(rag_trace(maker, question=question)),
                                     headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=10):
        pass


def _short_rules(text: str) -> str:
    """The example's rules with the windows and ``for:`` a test can wait for (thresholds unchanged)."""
    text = re.sub(r"\[\d+m\]", "[20s]", text)
    return re.sub(r"for: \d+m", "for: 3s", text)


def _start(args: list[str], env: dict[str, str] | None, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _states(prom: str) -> dict[str, str]:
    alerts = _get(prom + "/api/v1/alerts")["data"]["alerts"]
    return {a["labels"]["alertname"]: a["state"] for a in alerts if a["labels"].get("service_name") == "shop-api"}


def _median_faithfulness(prom: str) -> float | None:
    query = "histogram_quantile(0.5, sum by (le) (rate(ragaudit_score_faithfulness_bucket[20s])))"
    result = _get(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": query}))["data"]["result"]
    value = float(result[0]["value"][1]) if result else None
    return value if value is not None and value == value else None  # NaN: no turn in the window yet


def _check_dashboard(prom: str) -> None:
    """Every query of the example Grafana dashboard runs on this Prometheus; the faithfulness,
    claims and turns panels have data."""
    dashboard = json.loads((ROOT / "examples" / "grafana" / "ragaudit-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "20s").replace("$service", ".*").replace("$run", ".*")
            answer = _get(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            assert answer["status"] == "success", (panel["title"], answer)
            if panel["title"].startswith(("Faithfulness p50 by app", "Unsupported", "Turns by outcome")):
                assert answer["data"]["result"], panel["title"]


def test_faithfulness_drop_fires_the_example_alerts(collector: Any, tmp_path: Path) -> None:
    (tmp_path / "alerts.yml").write_text(_short_rules(RULES.read_text()))
    worker_port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "alerts.yml")],
        "scrape_configs": [{"job_name": "ragaudit-worker", "metrics_path": "/metrics",
                            "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    worker = _start([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(worker_port), "--otlp-endpoint",
                     collector.endpoint, "--judge", "tests.worker.scripted_judge:judge", "--quiet", "0.2"],
                    env, tmp_path / "worker.log")
    prometheus = _start([shutil.which("prometheus") or "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                        None, tmp_path / "prometheus.log")
    url, prom = f"http://127.0.0.1:{worker_port}", f"http://127.0.0.1:{prom_port}"
    maker = SpanMaker(service="shop-api")
    try:
        wait_for(lambda: _ok(url + "/healthz") or worker.poll() is not None, timeout=60, what="the worker")
        wait_for(lambda: _ok(prom + "/-/ready") or prometheus.poll() is not None, timeout=60, what="Prometheus")
        assert worker.poll() is None and prometheus.poll() is None, (tmp_path / "worker.log").read_text()[-3000:] \
            + (tmp_path / "prometheus.log").read_text()[-3000:]

        # Good answers until Prometheus sees a median above the threshold: no alert.
        def good_seen() -> bool:
            _send(url, maker, "What about warranty?")
            time.sleep(0.2)
            median = _median_faithfulness(prom)
            return median is not None and median > 0.7

        wait_for(good_seen, timeout=90, what="Prometheus to see the good answers")
        assert not set(_states(prom)) & set(ALERTS)

        # The model changes: faithfulness drops; each alert goes pending, then firing.
        seen: dict[str, list[str]] = {name: [] for name in ALERTS}

        def firing() -> bool:
            _send(url, maker, f"What about warranty {DROP_MARKER}?")
            time.sleep(0.2)
            for name, state in _states(prom).items():
                if name in seen and (not seen[name] or seen[name][-1] != state):
                    seen[name].append(state)
            return all(states and states[-1] == "firing" for states in seen.values())

        try:
            wait_for(firing, timeout=120, what="the alerts to fire")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; states seen: {seen}") from exc
        _check_dashboard(prom)
    finally:
        _stop(prometheus)
        _stop(worker)
    for name in ALERTS:
        assert seen[name] == ["pending", "firing"], (name, seen)
