"""``ragaudit worker`` as a process: starts, takes OTLP, and on SIGTERM / SIGINT judges what is in
flight within its deadline and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from tests.support.ports import free_port
from tests.worker.conftest import ROOT, wait_for
from tests.worker.spans import SpanMaker, encode, rag_trace


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_judges_in_flight_and_exits_cleanly(sig: int, collector: Any) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port), "--otlp-endpoint",
                             collector.endpoint, "--quiet", "60", "--max-wait", "120"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url) or proc.poll() is not None, timeout=60, what="the worker to listen")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        request = urllib.request.Request(url + "/v1/traces", data=encode(rag_trace(SpanMaker())), method="POST",
                                         headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        proc.send_signal(sig)  # long before quiet_s: the trace is in flight
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "1 judged" in err and "Traceback" not in err
    collector.wait_for_spans(1, predicate=lambda s: s["name"] == "ragaudit.judge")
    collector.wait_for_logs(3)


def test_exporter_option_adds_an_exporter(collector: Any, tmp_path: Any) -> None:
    out = tmp_path / "exported.txt"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", RAGAUDIT_TEST_EXPORT_FILE=str(out))
    proc = subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port), "--otlp-endpoint",
                             collector.endpoint, "--exporter", "tests.worker.file_exporter:FileExporter"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url) or proc.poll() is not None, timeout=60, what="the worker to listen")
        request = urllib.request.Request(url + "/v1/traces", data=encode(rag_trace(SpanMaker())), method="POST",
                                         headers={"Content-Type": "application/x-protobuf"})
        urllib.request.urlopen(request, timeout=10).close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    [line] = out.read_text().splitlines()
    assert line.startswith("otlp-") and line.endswith(" judged")


def test_no_output_endpoint_is_a_clear_error() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run([sys.executable, "-m", "ragaudit.cli", "worker", "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "OTEL_EXPORTER_OTLP_ENDPOINT" in done.stderr and "Traceback" not in done.stderr


def test_python_dash_m_ragaudit_worker_says_where_it_listens_and_what_it_does(collector: Any, tmp_path: Any) -> None:
    # Issue 44: `python -m ragaudit` is the command, and the worker says one line at start, on stderr
    # (with no logging configured): where it listens, the judge and its model, where judgements go,
    # sampling and budget. The judge is a chat judge on a URL with a credential, which never shows.
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT / "src"), OPENAI_API_KEY="sk-secret-key-5678",
               OPENAI_BASE_URL="http://judge-user:judge-pass@127.0.0.1:9/v1")
    proc = subprocess.Popen([sys.executable, "-m", "ragaudit", "worker", "--port", str(port), "--otlp-endpoint",
                             collector.endpoint, "--sample-rate", "0.25", "--audit-log", "audit.jsonl"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: _healthy(f"http://127.0.0.1:{port}") or proc.poll() is not None, timeout=60,
                 what="the worker to listen")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    [start] = [line for line in err.splitlines() if "listening on" in line]
    assert start.startswith("ragaudit worker: listening on ")
    assert f"OTLP/HTTP http://127.0.0.1:{port}/v1/traces" in start
    assert "ChatRagJudge" in start and "model='gpt-4o-mini'" in start and "127.0.0.1:9/v1" in start
    assert f"judgements to OTLP {collector.endpoint}" in start and f"audit log {tmp_path / 'audit.jsonl'}" in start
    assert "sample rate 0.25" in start and "budget none" in start
    assert "judge-pass" not in err and "sk-secret" not in err
    assert err.index("listening on") < err.index("stopped")
