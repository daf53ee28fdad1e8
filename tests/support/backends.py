"""How Langfuse and Jaeger read an OTLP span, re-stated in Python from their source, for conformance tests.

Neither backend can run here, so these functions restate (not copy) the reading rules of the
versions below, for the attributes ragaudit can write. Each rule names the function it restates;
when a backend changes, re-read it there and update both the rule and the version.

* **Langfuse v4.16.0** (langfuse/langfuse @ 62751446, 2026-08-22):
  ``packages/shared/src/server/otel/OtelIngestionProcessor.ts`` (``processSpan``,
  ``createTraceEvent``, ``createObservationEvent``, ``extractInputAndOutput``, ``extractMetadata``,
  ``extractUserId``, ``extractSessionId``, ``extractEnvironment``, ``extractModelName``,
  ``extractUsageDetails``, ``extractName``, ``parseObservationLevel``, ``hasTraceUpdates``),
  ``ObservationTypeMapper.ts``, ``packages/shared/src/server/ingestion/types.ts``
  (``PublicEnvironmentName``) and ``web/src/pages/api/public/scores/index.ts`` (``id: body.id ||
  randomUUID()``: a score sent with an id replaces the score of that id).
* **Jaeger v2.20.0** (jaegertracing/jaeger @ 8498073f): ``internal/storage/v2/v1adapter`` over
  opentelemetry-collector-contrib ``pkg/translator/jaeger`` (``makeJaegerProtoReferences``,
  ``attributeToJaegerProtoTag``, ``spanEventsToJaegerProtoLogs``, ``getJaegerProtoSpanTags``) and
  ``cmd/jaeger/internal/extension/jaegerquery/internal/adjuster/clockskew.go``.

Spans are the dicts of :mod:`tests.support.otlp_receiver` (what really went over OTLP).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "JAEGER_VERSION",
    "LANGFUSE_READS",
    "LANGFUSE_VERSION",
    "jaeger_clock_skew_warnings",
    "jaeger_span",
    "langfuse_environment",
    "langfuse_observation",
    "langfuse_trace",
]

LANGFUSE_VERSION = "langfuse v4.16.0 (62751446)"
JAEGER_VERSION = "jaeger v2.20.0 (8498073f)"

# Which attributes Langfuse reads for each field, first match wins (observation level unless noted).
LANGFUSE_READS: dict[str, tuple[str, ...]] = {
    "type": ("langfuse.observation.type", "openinference.span.kind", "gen_ai.operation.name"),
    "name": ("gen_ai.tool.name", "<span name>"),
    # Once either Langfuse key is set, the others are never looked at.
    "input": ("langfuse.observation.input", "input.value", "gen_ai.input.messages",
              "gen_ai.tool.call.arguments", "llm.input_messages.*"),
    "output": ("langfuse.observation.output", "output.value", "gen_ai.output.messages",
               "gen_ai.tool.call.result", "llm.output_messages.*"),
    "model": ("langfuse.observation.model.name", "gen_ai.response.model", "gen_ai.request.model",
              "llm.response.model", "llm.model_name", "model"),
    "usage": ("langfuse.observation.usage_details", "gen_ai.usage.*", "llm.token_count.*"),
    "metadata": ("langfuse.observation.metadata", "langfuse.metadata", "langfuse.observation.metadata.*",
                 "langfuse.metadata.*"),
    "level": ("langfuse.observation.level", "<status code ERROR>"),
    "status_message": ("langfuse.observation.status_message", "<status message>"),
    "environment": ("langfuse.environment", "deployment.environment.name", "deployment.environment"),
    # trace level, read only from a root span or a span with trace updates (hasTraceUpdates)
    "trace.session": ("langfuse.session.id", "session.id", "gen_ai.conversation.id",
                      "langfuse.observation.metadata.langfuse_session_id",
                      "langfuse.trace.metadata.langfuse_session_id"),
    "trace.user": ("langfuse.user.id", "user.id", "langfuse.observation.metadata.langfuse_user_id",
                   "langfuse.trace.metadata.langfuse_user_id"),
    "trace.input": ("langfuse.trace.input", "<observation input>"),
    "trace.output": ("langfuse.trace.output", "<observation output>"),
    "trace.name": ("langfuse.trace.name", "<observation name>"),
    "trace.metadata": ("langfuse.trace.metadata", "langfuse.trace.metadata.*", "<observation metadata>"),
}

_TYPE_DIRECT = {"span": "SPAN", "generation": "GENERATION", "event": "EVENT", "embedding": "EMBEDDING",
                "agent": "AGENT", "tool": "TOOL", "chain": "CHAIN", "retriever": "RETRIEVER",
                "guardrail": "GUARDRAIL", "evaluator": "EVALUATOR"}
_TYPE_OPENINFERENCE = {"CHAIN": "CHAIN", "RETRIEVER": "RETRIEVER", "LLM": "GENERATION", "EMBEDDING": "EMBEDDING",
                       "AGENT": "AGENT", "TOOL": "TOOL", "GUARDRAIL": "GUARDRAIL", "EVALUATOR": "EVALUATOR"}
_LEVELS = {"DEBUG": "DEBUG", "TRACE": "DEBUG", "VERBOSE": "DEBUG", "DEFAULT": "DEFAULT", "INFO": "DEFAULT",
           "WARNING": "WARNING", "WARN": "WARNING", "ERROR": "ERROR", "FATAL": "ERROR", "CRITICAL": "ERROR"}
_STATUS_ERROR = 2


def _nested(attributes: dict[str, Any], prefix: str) -> Any:
    """``llm.input_messages.0.message.role`` ... as Langfuse rebuilds them: a list of dicts."""
    items: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix + "."):
            index, _, rest = key[len(prefix) + 1:].partition(".")
            items.setdefault(int(index), {})[rest.removeprefix("message.")] = value
    return [items[i] for i in sorted(items)] or None


def _input_output(attributes: dict[str, Any]) -> tuple[Any, Any]:
    """``extractInputAndOutput`` for a span of an instrumentation scope that is neither Genkit nor
    the Vercel AI SDK, without span events that Langfuse maps to messages (ragaudit writes none)."""
    lf_in, lf_out = attributes.get("langfuse.observation.input"), attributes.get("langfuse.observation.output")
    if lf_in is not None or lf_out is not None:
        return lf_in, lf_out
    for in_key, out_key in (("input.value", "output.value"), ("gen_ai.input.messages", "gen_ai.output.messages"),
                            ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")):
        if attributes.get(in_key) or attributes.get(out_key):
            return attributes.get(in_key), attributes.get(out_key)
    return _nested(attributes, "llm.input_messages"), _nested(attributes, "llm.output_messages")


def _metadata(attributes: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``extractMetadata``: the JSON object under *prefix* (or ``langfuse.metadata``), then every
    ``<prefix>.<key>`` / ``langfuse.metadata.<key>`` attribute as key."""
    out: dict[str, Any] = {}
    top = attributes.get(prefix) or attributes.get("langfuse.metadata")
    if isinstance(top, str):
        try:
            parsed = json.loads(top)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out.update(parsed)
    for key, value in attributes.items():
        for p in (prefix, "langfuse.metadata"):
            if key.startswith(p + ".") and len(key) > len(p) + 1:
                out[key[len(p) + 1:]] = value
    return out


def langfuse_environment(value: Any) -> str:
    """``PublicEnvironmentName``: lower case, leading "langfuse" prefixes stripped, 40 chars of
    ``[a-z0-9-_]``, else ``default``."""
    if not isinstance(value, str):
        return "default"
    text = re.sub(r"^(?:langfuse[-_]?)+", "", value.lower())[:40]
    return text if text and re.fullmatch(r"[a-z0-9\-_]+", text) else "default"


def _environment(attributes: dict[str, Any], resource: dict[str, Any]) -> str:
    for key in LANGFUSE_READS["environment"]:
        for source in (attributes, resource):
            if source.get(key):
                return langfuse_environment(source[key])
    return "default"


def _first(attributes: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if attributes.get(key):
            value = attributes[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


def _usage(attributes: dict[str, Any]) -> dict[str, Any]:
    raw = attributes.get("langfuse.observation.usage_details")
    if isinstance(raw, str):
        parsed = json.loads(raw)
        if isinstance(parsed, dict):
            return parsed
    usage: dict[str, Any] = {}
    for key, value in attributes.items():
        if (key.startswith("gen_ai.usage.") and key != "gen_ai.usage.cost") or key.startswith("llm.token_count."):
            usage[key.removeprefix("gen_ai.usage.").removeprefix("llm.token_count.")] = value
    out: dict[str, Any] = {}
    for name, keys in (("input", ("prompt_tokens", "input_tokens", "prompt")),
                       ("output", ("completion_tokens", "output_tokens", "completion")),
                       ("total", ("total_tokens", "total"))):
        found = next((usage[k] for k in keys if k in usage), None)
        if found is not None:
            out[name] = found
    return out


def _type(attributes: dict[str, Any]) -> str:
    direct = _TYPE_DIRECT.get(str(attributes.get("langfuse.observation.type")))
    if direct:
        return direct
    kind = _TYPE_OPENINFERENCE.get(str(attributes.get("openinference.span.kind")))
    return kind or "SPAN"


def langfuse_observation(span: dict[str, Any]) -> dict[str, Any]:
    """The observation Langfuse makes of one span (``createObservationEvent``)."""
    a, resource = span["attributes"], span["resource"]
    level = _LEVELS.get(str(a.get("langfuse.observation.level", "")).strip().upper())
    if level is None:
        level = "ERROR" if span["status"]["code"] == _STATUS_ERROR else "DEFAULT"
    name = a.get("gen_ai.tool.name") or span["name"]
    observation_input, observation_output = _input_output(a)
    return {
        "id": span["span_id"],
        "trace_id": span["trace_id"],
        "parent_observation_id": span["parent_span_id"],
        "type": _type(a),
        "name": name,
        "input": observation_input,
        "output": observation_output,
        "model": _first(a, LANGFUSE_READS["model"]),
        "usage": _usage(a),
        "metadata": {**_metadata(resource, "langfuse.trace.metadata"), **_metadata(a, "langfuse.observation.metadata")},
        "level": level,
        "status_message": a.get("langfuse.observation.status_message") or span["status"]["message"] or None,
        "environment": _environment(a, resource),
    }


def _has_trace_updates(a: dict[str, Any]) -> bool:
    keys = ("langfuse.trace.name", "langfuse.trace.input", "langfuse.trace.output", "langfuse.trace.metadata",
            "user.id", "session.id", "langfuse.trace.public", "langfuse.trace.tags", "langfuse.user.id",
            "langfuse.session.id", "langfuse.observation.metadata.langfuse_user_id",
            "langfuse.observation.metadata.langfuse_session_id", "langfuse.trace.metadata.langfuse_session_id",
            "langfuse.trace.metadata.langfuse_user_id")
    return any(a.get(k) for k in keys) or any(k.startswith("langfuse.trace.metadata") for k in a)


def langfuse_trace(spans: list[dict[str, Any]], trace_id: str) -> dict[str, Any]:
    """The trace Langfuse makes of the spans of *trace_id*: a root span fills every field, a span
    with trace updates (``hasTraceUpdates``) only those it has (``createTraceEvent``)."""
    trace: dict[str, Any] = {"id": trace_id, "session": None, "user": None, "input": None, "output": None,
                             "name": None, "metadata": {}, "environment": "default"}
    for span in spans:
        if span["trace_id"] != trace_id:
            continue
        a = span["attributes"]
        root = span["parent_span_id"] is None
        if not (root or _has_trace_updates(a)):
            continue
        trace["environment"] = _environment(a, span["resource"])
        session = _first(a, LANGFUSE_READS["trace.session"])
        user = _first(a, LANGFUSE_READS["trace.user"])
        trace["session"] = session or trace["session"]
        trace["user"] = user or trace["user"]
        trace_metadata = _metadata(a, "langfuse.trace.metadata")
        if root:
            observation = langfuse_observation(span)
            trace["name"] = a.get("langfuse.trace.name") or observation["name"]
            trace["input"] = a.get("langfuse.trace.input") or observation["input"]
            trace["output"] = a.get("langfuse.trace.output") or observation["output"]
            trace["metadata"].update({**trace_metadata, **observation["metadata"]})
        else:
            trace["name"] = a.get("langfuse.trace.name") or trace["name"]
            trace["input"] = a.get("langfuse.trace.input") or trace["input"]
            trace["output"] = a.get("langfuse.trace.output") or trace["output"]
            trace["metadata"].update(trace_metadata)
    return trace


# --- Jaeger ------------------------------------------------------------------------------------
_SPAN_KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _jaeger_value(value: Any) -> Any:
    """``attributeToJaegerProtoTag``: strings, ints, floats and bools as themselves; arrays and
    maps as their JSON text (pdata ``AsString``), so a tag search matches only the whole text."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return value


def jaeger_span(span: dict[str, Any]) -> dict[str, Any]:
    """The Jaeger (v1 model, what jaeger-ui shows) span of one OTLP span: references, tags, logs."""
    references: list[dict[str, str]] = []
    if span["parent_span_id"]:
        references.append({"type": "CHILD_OF", "trace_id": span["trace_id"], "span_id": span["parent_span_id"]})
    for link in span["links"]:
        ref_type = "CHILD_OF" if link["attributes"].get("opentracing.ref_type") == "child_of" else "FOLLOWS_FROM"
        if span["parent_span_id"] and (link["trace_id"], link["span_id"]) == (span["trace_id"],
                                                                             span["parent_span_id"]):
            references[0]["type"] = ref_type  # the link overrides the parent reference's type
            continue
        references.append({"type": ref_type, "trace_id": link["trace_id"], "span_id": link["span_id"]})
    tags = {key: _jaeger_value(value) for key, value in span["attributes"].items()}
    tags["otel.scope.name"] = span["scope"]
    if span["kind"] in _SPAN_KINDS:
        tags["span.kind"] = _SPAN_KINDS[span["kind"]]
    if span["status"]["code"] == _STATUS_ERROR:
        tags["otel.status_code"] = "ERROR"
        tags["error"] = True
    elif span["status"]["code"] == 1:
        tags["otel.status_code"] = "OK"
    if span["status"]["message"]:
        tags["otel.status_description"] = span["status"]["message"]
    logs = [{"event": event["name"], **{k: _jaeger_value(v) for k, v in event["attributes"].items()}}
            for event in span["events"]]
    return {"operation": span["name"], "trace_id": span["trace_id"], "span_id": span["span_id"],
            "references": references, "tags": tags, "logs": logs,
            "service": span["resource"].get("service.name")}


def _host_key(resource: dict[str, Any]) -> str:
    for key in ("host.id", "host.ip", "host.name"):
        value = resource.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value:
            return str(value)
    return ""


def jaeger_clock_skew_warnings(spans: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``CorrectClockSkew`` with Jaeger's default ``max-clock-skew-adjustment`` of 0: the warnings
    it adds, by span id. A child whose host differs from its parent's (or is unknown: no
    host.id/ip/name resource attribute) and that does not fit inside the parent gets one."""
    by_id = {s["span_id"]: s for s in spans}
    warnings: dict[str, list[str]] = {}

    def skew(child: dict[str, Any], parent: dict[str, Any]) -> int:
        p_start, p_end = parent["start_time_ns"], parent["end_time_ns"]
        c_start, c_end = child["start_time_ns"], child["end_time_ns"]
        if c_end - c_start > p_end - p_start:
            return p_start - c_start if c_start < p_start else 0
        if c_start >= p_start and c_end <= p_end:
            return 0
        return p_start + ((p_end - p_start) - (c_end - c_start)) // 2 - c_start

    def visit(node: dict[str, Any], parent: dict[str, Any] | None, host: str, delta: int) -> None:
        key = _host_key(node["resource"])
        if parent is not None and (key != host or key == ""):
            host, delta = key, skew(node, parent)
        if delta:
            warnings.setdefault(node["span_id"], []).append(
                f"clock skew adjustment disabled; not applying calculated delta of {delta}ns")
        for child in spans:
            if child["parent_span_id"] == node["span_id"]:
                visit(child, node, host, delta)

    for span in spans:
        if span["parent_span_id"] is None or span["parent_span_id"] not in by_id:
            visit(span, None, _host_key(span["resource"]), 0)
    return warnings
