"""The ``ragaudit worker`` subcommand (arguments are defined in ``ragaudit.cli``).

Serves OTLP/HTTP on ``--host``:``--port`` until SIGTERM or SIGINT, then stops accepting, judges or
counts what is in flight within ``--shutdown-timeout`` and exits 0. Judgements go to
``--otlp-endpoint`` or the standard ``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from .._last_resort import StderrFallback
from ..content import scrub, scrub_url
from ..errors import ConfigurationError
from ._numbers import finite_float, whole_number

__all__ = ["add_worker_parser", "start_line", "worker_command"]

# Where judgements go when --otlp-endpoint is not given (the exporters read them; see the OTLP spec).
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")


def add_worker_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="judge any app that sends OTLP traces (behind the OpenTelemetry Collector)",
                       description="Receive OTLP/HTTP traces (protobuf or JSON, gzip), read OpenInference, "
                       "OpenLLMetry and OTel GenAI spans into turns, judge them, and send each judgement as a "
                       "ragaudit.judge span and gen_ai.evaluation.result log records over OTLP.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 in a "
                   "container)")
    p.add_argument("--port", type=whole_number(0, 65535), default=4318, help="port to listen on (default 4318)")
    p.add_argument("--grpc-port", type=whole_number(0, 65535), default=None,
                   help="also receive OTLP/gRPC on this port (e.g. 4317; needs the worker-grpc extra)")
    p.add_argument("--otlp-endpoint", default=None,
                   help="base URL to send judgements to (default: $OTEL_EXPORTER_OTLP_ENDPOINT and its "
                   "_TRACES_/_LOGS_ variants)")
    p.add_argument("--judge", default=None, help="lexical | chat:<model> | module:object (default: ChatRagJudge "
                   "when OPENAI_API_KEY or OPENAI_BASE_URL is set, else LexicalJudge)")
    p.add_argument("--judge-config", default=None, metavar="PATH",
                   help="a judge config written by `ragaudit calibrate --fit`: the judge's fitted pass thresholds "
                   "and few-shot examples (FittedJudge)")
    p.add_argument("--quiet", dest="quiet_s", type=finite_float(0), default=2.0,
                   help="seconds without a new span after the root span before a trace is judged (default 2)")
    p.add_argument("--max-wait", dest="max_wait_s", type=finite_float(0), default=30.0,
                   help="seconds after a trace's first span when it is judged whatever else (default 30)")
    p.add_argument("--max-traces", type=whole_number(1), default=10_000,
                   help="traces in flight; the oldest is dropped and counted past this (default 10000)")
    p.add_argument("--max-spans", type=whole_number(1), default=1_000_000,
                   help="spans buffered; requests past this get 503 + Retry-After (default 1000000)")
    p.add_argument("--sample-rate", type=finite_float(0, 1), default=1.0, help="share of turns judged (default 1)")
    p.add_argument("--audit-log", default=None, help="also write a JSONL audit log here (default: none)")
    p.add_argument("--exporter", dest="exporters", action="append", default=[], metavar="MODULE:OBJECT",
                   help="an exporter of audit records (or a zero-argument factory of one), e.g. "
                   "ragaudit.tracing:PhoenixExporter or ragaudit.tracing:LangfuseExporter; repeatable")
    p.add_argument("--sessions", action="store_true",
                   help="also judge each conversation as a whole, once idle (route by session in the Collector: "
                   "see the scale guide)")
    p.add_argument("--session-idle", dest="session_idle_s", type=finite_float(0, low_open=True), default=300.0,
                   help="seconds without a new turn after which a session is judged (default 300)")
    p.add_argument("--max-sessions", type=whole_number(1), default=1_000,
                   help="sessions held in memory; the oldest is dropped and counted past this (default 1000)")
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout_s", type=finite_float(0), default=30.0,
                   help="seconds to judge what is in flight at SIGTERM (default 30)")
    _add_service_arguments(p)
    p.set_defaults(handler=("ragaudit.cli.worker", "worker_command"))


# -- the worker as a network service: auth, TLS, request and connection limits (issue 46) -----------

def _add_service_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("network service", "who may send, over what, and within which limits")
    g.add_argument("--auth-token-file", default=None, metavar="PATH",
                   help="require 'Authorization: Bearer <token>' (HTTP and gRPC; /healthz and /readyz stay open) "
                   "with the token in this file (default: $RAGAUDIT_WORKER_TOKEN when set, else no token)")
    g.add_argument("--tls-cert", default=None, metavar="PEM", help="serve HTTPS and gRPC over TLS with this "
                   "certificate chain (with --tls-key)")
    g.add_argument("--tls-key", default=None, metavar="PEM", help="the private key of --tls-cert")
    g.add_argument("--max-request-bytes", type=whole_number(1), default=32 * 1024 * 1024, metavar="BYTES",
                   help="largest request body once decompressed; past it 413 (default 33554432, 32 MiB)")
    g.add_argument("--max-inflight-bytes", type=whole_number(1), default=256 * 1024 * 1024, metavar="BYTES",
                   help="memory held by spans waiting and bodies being read; past it 503 + Retry-After "
                   "(default 268435456, 256 MiB; give the worker about twice this)")
    g.add_argument("--header-timeout", dest="header_timeout_s", type=finite_float(0, low_open=True), default=10.0,
                   metavar="S", help="seconds to send a request's headers (and the TLS handshake) before the "
                   "connection is closed (default 10)")
    g.add_argument("--body-timeout", dest="body_timeout_s", type=finite_float(0, low_open=True), default=60.0,
                   metavar="S",
                   help="seconds to send a request's body; past it 408 (default 60)")
    g.add_argument("--keepalive-timeout", dest="keepalive_timeout_s", type=finite_float(0, low_open=True), default=60.0,
                   metavar="S", help="seconds an idle connection stays open (default 60)")
    g.add_argument("--max-connections", type=whole_number(1), default=None, metavar="N",
                   help="open OTLP/HTTP connections; past it the oldest idle one is closed (default 1000, lower "
                   "when the open-file limit is)")


def _service_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Worker's keywords for the flags above (the token from the file or the environment)."""
    from ..integrations.otlp import BearerToken, ConnectionLimits, ServerTLS

    token = BearerToken.from_file(args.auth_token_file) if args.auth_token_file else BearerToken.from_env()
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigurationError("--tls-cert and --tls-key go together")
    tls = ServerTLS(args.tls_cert, args.tls_key) if args.tls_cert else None
    limits = ConnectionLimits(header_timeout_s=args.header_timeout_s, body_timeout_s=args.body_timeout_s,
                              keepalive_timeout_s=args.keepalive_timeout_s, max_connections=args.max_connections)
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("ragaudit").warning(
            "ragaudit worker: listening on %s with no bearer token: anyone who can reach the port can send "
            "traces and spend the judge's budget (set RAGAUDIT_WORKER_TOKEN or --auth-token-file)", args.host)
    return {"auth_token": token, "tls": tls, "limits": limits, "max_request_bytes": args.max_request_bytes,
            "max_inflight_bytes": args.max_inflight_bytes}


def _exporter(spec: str) -> Any:
    """The exporter named by *spec* (``module:object``): an instance, or a class / factory called once."""
    from .._export import Exporter
    from .eval import load_object

    obj = load_object(spec, "--exporter")
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Exporter)):
        try:
            obj = obj()
        except TypeError as exc:
            raise ConfigurationError(f"--exporter {spec!r} cannot be made without arguments: {exc}") from exc
    return obj


def start_line(worker: Any, args: argparse.Namespace) -> str:
    """The one line ``ragaudit worker`` prints once listening: addresses, judge and model, where
    judgements go, sampling and budget (scrubbed: no key, no credential in a URL)."""
    listen = [f"OTLP/HTTP {worker.url}/v1/traces"]
    if worker.grpc_port is not None:
        listen.append(f"OTLP/gRPC {worker.host}:{worker.grpc_port}")
    if args.otlp_endpoint is not None:
        out = [f"OTLP {scrub_url(args.otlp_endpoint)}"]
    else:
        out = [f"OTLP {name}={scrub_url(os.environ[name].strip())}" for name in _ENDPOINT_VARS
               if os.environ.get(name, "").strip()]
    if args.audit_log is not None:
        out.append(f"audit log {os.path.abspath(args.audit_log)}")
    out.extend(f"exporter {spec}" for spec in args.exporters)
    # The judge's repr: an LLM judge's names its model and (scrubbed) base URL.
    return (f"ragaudit worker: listening on {', '.join(listen)}; judge {scrub(repr(worker.auditor.judge))[:300]}; "
            f"judgements to {', '.join(out)}; "
            f"sample rate {args.sample_rate:g}; budget none (judge cost is not capped); "
            f"sessions {'on' if args.sessions else 'off'}; "
            f"bearer token {'required' if worker.auth_token is not None else 'off'}; stop with SIGTERM or Ctrl-C")


def worker_command(args: argparse.Namespace) -> int:
    """``ragaudit worker [--host H] [--port P] [--otlp-endpoint URL] [--judge SPEC] ...``."""
    try:
        from ..integrations.otlp import Worker
    except ImportError as exc:
        raise ConfigurationError(f"ragaudit worker needs its extra ({exc.name} is missing): "
                                 "pip install 'ragaudit[worker]'") from exc
    from .eval import resolve_judge

    judge: Any = resolve_judge(args.judge)
    if args.judge_config is not None:
        from ..judges.fitted import FittedJudge

        judge = FittedJudge.load(args.judge_config, judge=judge)
    exporters = [_exporter(spec) for spec in args.exporters]
    sessions = None
    if args.sessions:
        from ..auditor import Sessions

        sessions = Sessions(session_idle_s=args.session_idle_s, max_sessions=args.max_sessions)
    log = logging.getLogger("ragaudit")
    if not any(not isinstance(h, (StderrFallback, logging.NullHandler)) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    worker = Worker(judge, host=args.host, port=args.port, otlp_endpoint=args.otlp_endpoint,
                    quiet_s=args.quiet_s, max_wait_s=args.max_wait_s, max_traces=args.max_traces,
                    max_spans=args.max_spans, sample_rate=args.sample_rate, audit_log=args.audit_log,
                    exporters=exporters,
                    shutdown_timeout_s=args.shutdown_timeout_s, grpc_port=args.grpc_port, sessions=sessions,
                    **_service_options(args))
    try:
        # The start line goes to stderr itself, not through logging: whatever an --exporter module did to
        # the logging configuration, the operator sees where the worker listens and what it does.
        worker.run(ready=lambda: print(start_line(worker, args), file=sys.stderr, flush=True))
    except OSError as exc:  # the port is taken, the address is not ours
        raise ConfigurationError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    stats = worker.stats()
    print(f"ragaudit worker: stopped; {stats['spans_received']} spans, {stats['turns_found']} turns, "
          f"{stats['turns_judged']} judged, {stats['judge_dropped']} dropped, "
          f"{stats['dropped_evicted_traces']} traces evicted", file=sys.stderr)
    return 0
