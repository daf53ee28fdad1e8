"""The real OpenTelemetry Collector for tests: ``otelcol-ragaudit``, built from otelcol/builder-config.yaml by
the OpenTelemetry Collector Builder (``make otelcol``, scripts/build_otelcol.sh) into
``~/.cache/ragaudit/otelcol/<sha256 of the manifest>/`` (``$RAGAUDIT_CACHE`` moves the cache;
``$RAGAUDIT_OTELCOL`` names a binary outright).

```python
binary = otelcol_binary_or_skip()               # skips, saying why, where it was not built
done = validate(binary, [EXAMPLES / "tier1-gateway.yaml"])
with start_collector(binary, [example, overlay], env={"GATEWAY_HTTP_ENDPOINT": "127.0.0.1:4318"},
                     ready_port=4318, log=tmp_path / "tier1.log") as tier1:
    ...
```

The examples of examples/collector/ are loaded as they are: their endpoints are ``${env:VAR:-default}``
(the Collector's own syntax), and what a single machine cannot have (a Kubernetes API for the k8s
resolver, one internal-metrics port per Collector) is set by an *overlay*, a second ``--config`` the
Collector merges over the first (:func:`write_overlay`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = ["EXAMPLES", "MANIFEST", "NOT_BUILT", "Collector", "otelcol_binary", "otelcol_binary_or_skip",
           "quiet_telemetry", "start_collector", "static_resolver", "validate", "write_overlay"]

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "otelcol" / "builder-config.yaml"
EXAMPLES = ROOT / "examples" / "collector"
READY = "Everything is ready. Begin running and processing data."
NOT_BUILT = ("the OpenTelemetry Collector (otelcol-ragaudit) is not built: `make otelcol` builds it where Go is "
             "installed (scripts/build_otelcol.sh); {where}")


def otelcol_binary() -> Path | None:
    """The built Collector for the manifest as it is now, or None."""
    named = os.environ.get("RAGAUDIT_OTELCOL")
    if named:
        return Path(named) if os.access(named, os.X_OK) else None
    digest = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
    cache = Path(os.environ.get("RAGAUDIT_CACHE") or Path.home() / ".cache" / "ragaudit")
    binary = cache / "otelcol" / digest / "otelcol-ragaudit"
    return binary if os.access(binary, os.X_OK) else None


def otelcol_binary_or_skip() -> Path:
    binary = otelcol_binary()
    if binary is None:
        where = os.environ.get("RAGAUDIT_OTELCOL") or f"no binary for the manifest's hash in {_cache_dir()}"
        pytest.skip(NOT_BUILT.format(where=where))
    return binary


def _cache_dir() -> Path:
    return Path(os.environ.get("RAGAUDIT_CACHE") or Path.home() / ".cache" / "ragaudit") / "otelcol"


def _env(extra: dict[str, str]) -> dict[str, str]:
    # The ${env:...} of the examples fall back to their defaults unless the test sets them: none leaks
    # in from the environment the tests run in.
    names = {"GATEWAY_GRPC_ENDPOINT", "GATEWAY_HTTP_ENDPOINT", "GATEWAY_JUDGEMENTS_ENDPOINT", "BACKEND_ENDPOINT",
             "SIDECAR_GRPC_ENDPOINT", "WORKER_ENDPOINT", "JUDGE_SAMPLING_PERCENTAGE"}
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("OTEL_")}
    env.update(extra)
    return env


def _args(configs: list[Path]) -> list[str]:
    return [arg for config in configs for arg in ("--config", str(config))]


def validate(binary: Path, configs: list[Path], env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``otelcol-ragaudit validate --config ...``: the configuration resolved, decoded into every
    component's settings, checked, and the pipelines built, without starting anything."""
    return subprocess.run([str(binary), "validate", *_args(configs)], env=_env(env or {}), capture_output=True,
                          text=True, timeout=60)


def quiet_telemetry() -> dict[str, Any]:
    """The overlay part every Collector of a test needs: no internal-metrics endpoint (each Collector
    would take the same default port, 8888)."""
    return {"service": {"telemetry": {"metrics": {"level": "none"}}}}


def static_resolver(hostnames: list[str]) -> dict[str, Any]:
    """The overlay part that replaces a tier-1 example's k8s resolver (no Kubernetes API here) by a
    static resolver over *hostnames* (``host:port``)."""
    return {"exporters": {"loadbalancing": {"resolver": {"k8s": {"enabled": False},
                                                         "static": {"hostnames": hostnames}}}}}


def write_overlay(path: Path, *parts: dict[str, Any]) -> Path:
    """Write the merged *parts* as a YAML file for a second ``--config``; returns *path*."""
    merged: dict[str, Any] = {}
    for part in parts:
        _merge(merged, part)
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    return path


def _merge(into: dict[str, Any], part: dict[str, Any]) -> None:
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


@dataclass
class Collector:
    """A running Collector process; its stdout and stderr are in *log*."""

    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (the Collector drains its pipelines), SIGKILL after *timeout*; returns the exit code.

        The Collector handles SIGTERM once it has logged that everything is ready and installed its
        signal handler, a moment later: one stopped within that moment dies of the signal (-15)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_collector(binary: Path, configs: list[Path], env: dict[str, str], ready_port: int, log: Path,
                    timeout: float = 60.0) -> Collector:
    """Start the Collector with *configs* (merged in order) and *env*; return once *ready_port* (one
    of its receivers: the Collector opens receivers last, after exporters and processors) accepts and
    the Collector has logged that everything is ready."""
    out = log.open("wb")
    process = subprocess.Popen([str(binary), *_args(configs)], env=_env(env), stdout=out, stderr=subprocess.STDOUT)
    out.close()
    collector = Collector(process, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", ready_port), timeout=0.5):
                pass
        except OSError:
            time.sleep(0.05)
            continue
        if READY in collector.tail(1_000_000):
            return collector
        time.sleep(0.05)
    collector.stop()
    raise RuntimeError(f"the Collector did not open port {ready_port} (exit {process.returncode}):\n"
                       f"{collector.tail()}")
