"""OTLP/HTTP trace requests decoded into `SpanData`: protobuf or JSON, as the spec defines them.

Decoding is ``opentelemetry-proto``'s generated messages (upb underneath); this module only turns
them into plain slotted records the readers use. OTLP/JSON differs from protobuf's canonical JSON
mapping in one place: trace and span ids are hex strings, not base64 (OTLP spec, "JSON Protobuf
Encoding"), so they are re-encoded before ``json_format`` parses the request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import RagAuditError

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["ATTRIBUTE_OVERHEAD", "DecodeError", "SpanData", "decode_traces", "encode_response", "spans_of"]

STATUS_ERROR = 2
"""``Status.STATUS_CODE_ERROR``."""


class DecodeError(RagAuditError):
    """A request body that is not an OTLP ``ExportTraceServiceRequest`` (answered 400)."""


@dataclass(slots=True)
class SpanData:
    """One received span: hex ids, attributes as Python values, the resource's ``service.name``.

    ``events`` keeps each span event as ``(name, attributes)`` (exceptions, GenAI content events).
    ``size``: what holding it costs, in bytes, as the worker's in-flight budget counts it
    (`spans_of`).
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int = 0
    status_message: str = ""
    service: str | None = None
    scope: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    size: int = 0

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR


ATTRIBUTE_OVERHEAD = 160
"""Bytes a decoded attribute costs besides its encoded ones: its key and value as Python objects and
its dict slot. With it, spans of 40,000 tiny attributes (~10 bytes each on the wire) count about what
they weigh in the worker (tests/worker/test_receiver_hostile.py; RELIABILITY.md)."""


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attrs(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        # Scalars inline: most attributes are strings and this loop is the ingest hot path.
        v = kv.value
        kind = v.WhichOneof("value")
        if kind == "string_value":
            out[kv.key] = v.string_value
        elif kind is None:
            out[kv.key] = None
        elif kind in ("array_value", "kvlist_value"):
            out[kv.key] = _value(v)
        else:
            out[kv.key] = getattr(v, kind)
    return out


def _hex_to_b64(value: object) -> object:
    if isinstance(value, str) and value and len(value) % 2 == 0:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            return value  # not hex: left for json_format to judge (it may be base64 already)
    return value


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _fix_json_ids(doc: Any) -> None:
    for rs in doc.get("resourceSpans") or doc.get("resource_spans") or ():
        for ss in rs.get("scopeSpans") or rs.get("scope_spans") or ():
            for span in ss.get("spans") or ():
                for key in _ID_KEYS:
                    if key in span:
                        span[key] = _hex_to_b64(span[key])
                for link in span.get("links") or ():
                    for key in _ID_KEYS:
                        if key in link:
                            link[key] = _hex_to_b64(link[key])


def parse_request(body: bytes | bytearray, json_body: bool) -> ExportTraceServiceRequest:
    """The ``ExportTraceServiceRequest`` in *body* (protobuf, or OTLP/JSON when *json_body*)."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError as ProtoDecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        if json_body:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise DecodeError("an OTLP/JSON body must be an object with resourceSpans")
            _fix_json_ids(doc)
            json_format.ParseDict(doc, request, ignore_unknown_fields=True)
        else:
            request.ParseFromString(body)
    except DecodeError:
        raise
    except (ProtoDecodeError, json_format.ParseError, ValueError, TypeError) as exc:
        kind = "OTLP/JSON" if json_body else "OTLP protobuf"
        raise DecodeError(f"not an {kind} ExportTraceServiceRequest: {exc}") from exc
    except RecursionError:  # JSON nested deeper than json or json_format recurse (400 deep is enough)
        kind = "OTLP/JSON" if json_body else "OTLP protobuf"
        raise DecodeError(f"not an {kind} ExportTraceServiceRequest: nested too deep") from None
    return request


def iter_spans(request: ExportTraceServiceRequest) -> Iterator[SpanData | None]:
    """Every span of *request* as `SpanData`; None for a span with invalid ids (rejected)."""
    for rs in request.resource_spans:
        service = None
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                service = kv.value.string_value
                break
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for s in ss.spans:
                if len(s.trace_id) != 16 or len(s.span_id) != 8 or s.trace_id == bytes(16) \
                        or s.span_id == bytes(8):
                    yield None
                    continue
                parent = s.parent_span_id
                yield SpanData(
                    trace_id=s.trace_id.hex(),
                    span_id=s.span_id.hex(),
                    parent_id=parent.hex() if len(parent) == 8 else None,
                    name=s.name,
                    kind=s.kind,
                    start_ns=s.start_time_unix_nano,
                    end_ns=s.end_time_unix_nano,
                    attributes=_attrs(s.attributes),
                    status_code=s.status.code,
                    status_message=s.status.message,
                    service=service,
                    scope=scope,
                    events=[(e.name, _attrs(e.attributes)) for e in s.events],
                )


def decode_traces(body: bytes | bytearray, json_body: bool) -> tuple[list[SpanData], int]:
    """``(spans, rejected)``: the valid spans of an OTLP request body and how many were not."""
    return spans_of(parse_request(body, json_body), len(body))


def spans_of(request: ExportTraceServiceRequest, size: int | None = None) -> tuple[list[SpanData], int]:
    """``(spans, rejected)`` of a decoded ``ExportTraceServiceRequest`` (OTLP/gRPC hands one over).

    Each span's ``size`` is its share of the request's *size* in bytes (None: its encoded size) plus
    `ATTRIBUTE_OVERHEAD` per attribute, its own and its events': many small attributes count
    as much as they weigh in memory, not only as their bytes. One size per request, not a
    ``ByteSize()`` per span: the sum is what the budget needs, and the ingest path pays nothing for it."""
    spans: list[SpanData] = []
    rejected = 0
    for span in iter_spans(request):
        if span is None:
            rejected += 1
        else:
            spans.append(span)
    if spans:
        share = (int(request.ByteSize()) if size is None else size) // (len(spans) + rejected)
        for span in spans:
            attributes = len(span.attributes) + sum(len(attrs) for _, attrs in span.events)
            span.size = share + ATTRIBUTE_OVERHEAD * (attributes + 1)
    return spans, rejected


def encode_response(json_body: bool, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse`` (with ``partial_success`` when spans were *rejected*)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if json_body:
        return json_format.MessageToJson(response, indent=None).encode()
    return bytes(response.SerializeToString())
