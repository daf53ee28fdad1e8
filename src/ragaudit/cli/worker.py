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
    p.add_argument("--port", type=int, default=4318, help="port to listen on (default 4318)")
    p.add_argument("--grpc-port", type=int, default=None,
                   help="also receive OTLP/gRPC on this port (e.g. 4317; needs the worker-grpc extra)")
    p.add_argument("--otlp-endpoint", default=None,
                   help="base URL to send judgements to (default: $OTEL_EXPORTER_OTLP_ENDPOINT and its "
                   "_TRACES_/_LOGS_ variants)")
    p.add_argument("--judge", default=None, help="lexical | chat:<model> | module:object (default: ChatRagJudge "
                   "when OPENAI_API_KEY or OPENAI_BASE_URL is set, else LexicalJudge)")
    p.add_argument("--quiet", dest="quiet_s", type=float, default=2.0,
                   help="seconds without a new span after the root span before a trace is judged (default 2)")
    p.add_argument("--max-wait", dest="max_wait_s", type=float, default=30.0,
                   help="seconds after a trace's first span when it is judged whatever else (default 30)")
    p.add_argument("--max-traces", type=int, default=10_000, help="traces in flight; the oldest is dropped and "
                   "counted past this (default 10000)")
    p.add_argument("--max-spans", type=int, default=1_000_000,
                   help="spans buffered; requests past this get 503 + Retry-After (default 1000000)")
    p.add_argument("--sample-rate", type=float, default=1.0, help="share of turns judged (default 1)")
    p.add_argument("--audit-log", default=None, help="also write a JSONL audit log here (default: none)")
    p.add_argument("--sink", dest="sinks", action="append", default=[], metavar="MODULE:OBJECT",
                   help="an exporter of audit records (or a zero-argument factory of one), e.g. "
                   "ragaudit.tracing:PhoenixSink or ragaudit.tracing:LangfuseSink; repeatable")
    p.add_argument("--sessions", action="store_true",
                   help="also judge each conversation as a whole, once idle (route by session in the Collector: "
                   "see the scale guide)")
    p.add_argument("--session-idle", dest="session_idle_s", type=float, default=300.0,
                   help="seconds without a new turn after which a session is judged (default 300)")
    p.add_argument("--max-sessions", type=int, default=1_000,
                   help="sessions held in memory; the oldest is dropped and counted past this (default 1000)")
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout_s", type=float, default=30.0,
                   help="seconds to judge what is in flight at SIGTERM (default 30)")
    p.set_defaults(handler=("ragaudit.cli.worker", "worker_command"))


def _sink(spec: str) -> Any:
    """The exporter named by *spec* (``module:object``): an instance, or a class / factory called once."""
    from .._export import Exporter
    from .eval import load_object

    obj = load_object(spec, "--sink")
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Exporter)):
        try:
            obj = obj()
        except TypeError as exc:
            raise ConfigurationError(f"--sink {spec!r} cannot be made without arguments: {exc}") from exc
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
    out.extend(f"sink {spec}" for spec in args.sinks)
    # The judge's repr: an LLM judge's names its model and (scrubbed) base URL.
    return (f"ragaudit worker: listening on {', '.join(listen)}; judge {scrub(repr(worker.auditor.judge))[:300]}; "
            f"judgements to {', '.join(out)}; "
            f"sample rate {args.sample_rate:g}; budget none (judge cost is not capped); "
            f"sessions {'on' if args.sessions else 'off'}; stop with SIGTERM or Ctrl-C")


def worker_command(args: argparse.Namespace) -> int:
    """``ragaudit worker [--host H] [--port P] [--otlp-endpoint URL] [--judge SPEC] ...``."""
    try:
        from ..integrations.otlp import Worker
    except ImportError as exc:
        raise ConfigurationError(f"ragaudit worker needs its extra ({exc.name} is missing): "
                                 "pip install 'ragaudit[worker]'") from exc
    from .eval import resolve_judge

    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port must be in [0, 65535], got {args.port}")
    judge: Any = resolve_judge(args.judge)
    sinks = [_sink(spec) for spec in args.sinks]
    sessions = None
    if args.sessions:
        from ..auditor import SessionTracking

        sessions = SessionTracking(session_idle_s=args.session_idle_s, max_sessions=args.max_sessions)
    worker = Worker(judge, host=args.host, port=args.port, otlp_endpoint=args.otlp_endpoint,
                    quiet_s=args.quiet_s, max_wait_s=args.max_wait_s, max_traces=args.max_traces,
                    max_spans=args.max_spans, sample_rate=args.sample_rate, audit_log=args.audit_log, sinks=sinks,
                    shutdown_timeout_s=args.shutdown_timeout_s, grpc_port=args.grpc_port, sessions=sessions)
    log = logging.getLogger("ragaudit")
    if not any(not isinstance(h, (StderrFallback, logging.NullHandler)) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        # The start line goes to stderr itself, not through logging: whatever a --sink module did to
        # the logging configuration, the operator sees where the worker listens and what it does.
        worker.run(ready=lambda: print(start_line(worker, args), file=sys.stderr, flush=True))
    except OSError as exc:  # the port is taken, the address is not ours
        raise ConfigurationError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    stats = worker.stats()
    print(f"ragaudit worker: stopped; {stats['spans_received']} spans, {stats['turns_found']} turns, "
          f"{stats['turns_judged']} judged, {stats['judge_dropped']} dropped, "
          f"{stats['dropped_evicted_traces']} traces evicted", file=sys.stderr)
    return 0
