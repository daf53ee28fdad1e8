"""examples/collector: the settings the README promises are in the files (the real Collector loads them in
test_otelcol_examples.py and runs them in test_otelcol_fleet.py). Values the Collector reads from the
environment (``${env:VAR:-default}``) are checked at their defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ENV_DEFAULT = re.compile(r"^\$\{env:[A-Z_]+:-(.*)\}$")
HERE = Path(__file__).resolve().parents[2] / "examples" / "collector"


def _default(value: Any) -> Any:
    """What the Collector resolves ``${env:VAR:-default}`` to when VAR is unset (a plain value as is)."""
    match = ENV_DEFAULT.match(value) if isinstance(value, str) else None
    return yaml.safe_load(match.group(1)) if match else value


def test_tier1_routes_whole_traces_by_trace_id_and_keeps_the_backend() -> None:
    conf = yaml.safe_load((HERE / "tier1-gateway.yaml").read_text())
    lb = conf["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    # The workers' judgements come in on a receiver of their own and go to the backend only.
    assert conf["service"]["pipelines"]["traces/judgements"] == {
        "receivers": ["otlp/judgements"], "processors": ["batch"], "exporters": ["otlphttp/backend"]}
    assert lb["resolver"]["k8s"]["service"].startswith("ragaudit-workers")
    assert conf["service"]["pipelines"]["traces"]["exporters"] == ["otlphttp/backend", "loadbalancing"]


def test_tier2_tail_sampling_policies() -> None:
    conf = yaml.safe_load((HERE / "tier2-worker-sidecar.yaml").read_text())
    sampling = conf["processors"]["tail_sampling"]
    assert sampling["decision_wait"] == "10s"
    policies = {p["name"]: p for p in sampling["policies"]}
    drop = policies["not-the-worker"]["drop"]["drop_sub_policy"][0]["string_attribute"]
    assert drop == {"key": "service.name", "values": ["ragaudit-worker"]}
    kinds = [p["type"] for p in policies["rag-turns"]["and"]["and_sub_policy"]]
    assert kinds == ["ottl_condition", "probabilistic", "rate_limiting"]
    assert _default(conf["exporters"]["otlphttp/worker"]["endpoint"]) == "http://127.0.0.1:4319"
    share = policies["rag-turns"]["and"]["and_sub_policy"][1]["probabilistic"]["sampling_percentage"]
    assert _default(share) == 25
    assert sampling["decision_wait_after_root_received"] == "2s"


def test_kubernetes_service_is_headless_and_probes_the_worker() -> None:
    service, deployment = yaml.safe_load_all((HERE / "k8s-workers.yaml").read_text())
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert containers["worker"]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--port" in (HERE / "Dockerfile").read_text() and "4319" in (HERE / "Dockerfile").read_text()


def test_tier1_for_sessions_routes_by_the_session_attribute() -> None:
    conf = yaml.safe_load((HERE / "tier1-gateway-sessions.yaml").read_text())
    lb = conf["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "attributes" and lb["routing_attributes"] == ["session.id"]
    assert lb["resolver"]["k8s"]["service"].startswith("ragaudit-workers")
    assert conf["service"]["pipelines"]["traces"]["exporters"] == ["otlphttp/backend", "loadbalancing"]


def test_every_hop_to_a_worker_carries_the_bearer_token() -> None:
    # The worker listens on 0.0.0.0 in the image: every sender in the examples sends the token, the worker
    # checks it, and the token comes from a secret, never a literal.
    bearer = "Bearer ${env:RAGAUDIT_WORKER_TOKEN}"
    for name in ("tier1-gateway.yaml", "tier1-gateway-sessions.yaml"):
        otlp = yaml.safe_load((HERE / name).read_text())["exporters"]["loadbalancing"]["protocol"]["otlp"]
        assert otlp["headers"] == {"authorization": bearer}
    tier2 = yaml.safe_load((HERE / "tier2-worker-sidecar.yaml").read_text())
    assert tier2["exporters"]["otlphttp/worker"]["headers"] == {"authorization": bearer}
    _, deployment = yaml.safe_load_all((HERE / "k8s-workers.yaml").read_text())
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        env = {e["name"]: e for e in container["env"]}
        assert env["RAGAUDIT_WORKER_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "ragaudit-worker", "key": "token"}
    dockerfile = (HERE / "Dockerfile").read_text()
    assert "0.0.0.0" in dockerfile and "RAGAUDIT_WORKER_TOKEN" in dockerfile
