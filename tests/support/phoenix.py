"""Start and stop a real Phoenix server on loopback for end-to-end tests.

Phoenix runs from its own virtualenv (``.venv-phoenix``, made by ``make test``) so its many
dependencies never mix with the project's. The server gets free ports and a temporary working
directory, and is stopped (and its process group killed) when the test session ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
PHOENIX_BIN = Path(os.environ.get("RAGAUDIT_PHOENIX_BIN", ROOT / ".venv-phoenix" / "bin" / "phoenix"))


@dataclass
class PhoenixServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    @property
    def otlp_http_endpoint(self) -> str:
        return f"{self.base_url}/v1/traces"

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=10) as response:
            return json.loads(response.read())

    def post_json(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def spans(self, project: str, limit: int = 1000) -> list[dict[str, Any]]:
        try:
            return list(self.get_json(f"/v1/projects/{project}/spans?limit={limit}")["data"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # project not created yet: no span arrived
                return []
            raise

    def wait_for_spans(self, project: str, predicate: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        spans: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            spans = self.spans(project)
            if predicate(spans):
                return spans
            time.sleep(0.3)
        return spans

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def start_phoenix(workdir: Path, timeout: float = 120.0) -> PhoenixServer:
    """Start ``phoenix serve`` on free loopback ports; raise RuntimeError with its log if it fails."""
    if not PHOENIX_BIN.exists():
        raise FileNotFoundError(f"{PHOENIX_BIN} not found: run `make test` (it creates .venv-phoenix)")
    port, grpc_port = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env.update({
        "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_WORKING_DIR": str(workdir), "PHOENIX_TELEMETRY_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    })
    log_path = workdir / "phoenix.log"
    log = open(log_path, "wb")  # noqa: SIM115 - kept open for the server's lifetime
    process = subprocess.Popen([str(PHOENIX_BIN), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                               cwd=workdir, start_new_session=True)
    server = PhoenixServer(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(server.base_url + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"Phoenix did not start within {timeout:.0f}s:\n{log_path.read_text()[-3000:]}")
