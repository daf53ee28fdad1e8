"""Every Collector configuration of examples/collector/ is loaded by the real OpenTelemetry Collector
(otelcol-ragaudit, built from otelcol/builder-config.yaml by ``make otelcol``): ``otelcol validate``
resolves it, decodes every component's settings and checks them; and the Collector starts on it (some
settings, such as a ``tail_sampling`` policy's type, are checked only when the pipelines start).
Skipped, with the reason, where the Collector could not be built (no Go)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.otelcol import (
    EXAMPLES,
    otelcol_binary_or_skip,
    quiet_telemetry,
    start_collector,
    static_resolver,
    validate,
    write_overlay,
)
from tests.support.ports import free_port


def _collector_configs() -> list[Path]:
    # Every YAML file of the folder but the Kubernetes manifests (documents with an apiVersion).
    return [path for path in sorted(EXAMPLES.glob("*.yaml"))
            if not any(isinstance(doc, dict) and "apiVersion" in doc for doc in yaml.safe_load_all(path.read_text()))]


def test_the_examples_folder_holds_the_three_collector_configs() -> None:
    # A new Collector config is validated below as soon as it is added; one renamed or turned into
    # something else shows here.
    assert [p.name for p in _collector_configs()] == [
        "tier1-gateway-sessions.yaml", "tier1-gateway.yaml", "tier2-worker-sidecar.yaml"]


@pytest.mark.parametrize("config", _collector_configs(), ids=lambda p: p.name)
def test_the_collector_validates_the_example(config: Path) -> None:
    done = validate(otelcol_binary_or_skip(), [config])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_collector_validates_the_example_with_the_test_endpoints() -> None:
    done = validate(otelcol_binary_or_skip(), [EXAMPLES / "tier2-worker-sidecar.yaml"],
                    env={"SIDECAR_GRPC_ENDPOINT": "127.0.0.1:14317", "WORKER_ENDPOINT": "http://127.0.0.1:14319",
                         "JUDGE_SAMPLING_PERCENTAGE": "100"})
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("config", _collector_configs(), ids=lambda p: p.name)
def test_the_collector_starts_on_the_example_and_stops_cleanly(config: Path, tmp_path: Path) -> None:
    # The test endpoints through the examples' ${env:...}; a static resolver in place of k8s (tier 1).
    ports = {name: free_port() for name in ("GATEWAY_GRPC_ENDPOINT", "GATEWAY_HTTP_ENDPOINT",
                                            "GATEWAY_JUDGEMENTS_ENDPOINT", "SIDECAR_GRPC_ENDPOINT")}
    env = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    env.update(BACKEND_ENDPOINT=f"http://127.0.0.1:{free_port()}", WORKER_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    tier1 = config.name.startswith("tier1")
    overlay = write_overlay(tmp_path / "overlay.yaml", quiet_telemetry(),
                            static_resolver([f"127.0.0.1:{free_port()}"]) if tier1 else {})
    ready = ports["GATEWAY_HTTP_ENDPOINT" if tier1 else "SIDECAR_GRPC_ENDPOINT"]
    with start_collector(otelcol_binary_or_skip(), [config, overlay], env, ready, tmp_path / "otelcol.log") as col:
        _export_nothing(ready, tier1)  # it serves (and, by then, handles SIGTERM)
    assert col.process.returncode == 0, col.tail()
    assert "Everything is ready" in col.tail(100_000), col.tail()


def _export_nothing(port: int, http: bool) -> None:
    """An empty OTLP trace export to the receiver on *port*, answered with success."""
    request = ExportTraceServiceRequest()
    if http:
        post = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=request.SerializeToString(),
                                      headers={"Content-Type": "application/x-protobuf"}, method="POST")
        with urllib.request.urlopen(post, timeout=10) as response:
            assert response.status == 200
        return
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)


def test_validate_names_what_is_wrong(tmp_path: Path) -> None:
    # The check above can fail: the same file with a setting tail_sampling does not have.
    broken = tmp_path / "tier2-broken.yaml"
    broken.write_text((EXAMPLES / "tier2-worker-sidecar.yaml").read_text().replace("decision_wait:", "decision_wiat:"))
    done = validate(otelcol_binary_or_skip(), [broken])
    assert done.returncode != 0
    assert "decision_wiat" in done.stdout + done.stderr


def test_a_policy_type_is_checked_when_the_collector_starts(tmp_path: Path) -> None:
    # What validate lets through and only a start finds: why every example is also started above.
    broken = tmp_path / "tier2-broken.yaml"
    broken.write_text((EXAMPLES / "tier2-worker-sidecar.yaml").read_text().replace(
        "type: rate_limiting", "type: rate_limitting"))
    binary = otelcol_binary_or_skip()
    assert validate(binary, [broken]).returncode == 0
    port = free_port()
    with pytest.raises(RuntimeError, match="unknown sampling policy type rate_limitting"):
        start_collector(binary, [broken, write_overlay(tmp_path / "quiet.yaml", quiet_telemetry())],
                        {"SIDECAR_GRPC_ENDPOINT": f"127.0.0.1:{port}"}, port, tmp_path / "otelcol.log")
