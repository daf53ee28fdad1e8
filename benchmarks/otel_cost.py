"""The OpenTelemetry side of one answer, stage by stage (issue 50): its spans and their OTLP encoding.

    python benchmarks/otel_cost.py                                  # this checkout, 5 rounds
    python benchmarks/otel_cost.py --before /path/to/other/checkout # and that one's, alternated
    python benchmarks/otel_cost.py --profile                        # where the span writing's time goes

One answer of ``overhead.py``'s LCEL chain in its default configuration: the chain runs a few times
through ``RagAuditCallbackHandler`` (instant ``FakeJudge``), and an exporter of the Auditor keeps the
last ``AuditRecord``. Its turn and record are then written again and again, as the background writes
them, by a ``SpanRecorder`` on an SDK ``TracerProvider`` whose span processor keeps the ended spans
(the batch processor's queue, without its thread):

* *turn spans*: ``start_turn``, ``start_children`` (the retrieval span), ``end_turn`` (the turn span,
  the chat span): 3 spans, ~75 attributes;
* *judge span*: ``JudgeSpanExporter.export`` of the record: 1 span, 18 attributes, 3 events;
* *OTLP encoding*: those 4 spans encoded as the OTLP exporter encodes a batch (``encode_spans``, then
  ``SerializeToString``), per answer, in batches of 512 spans.

Two policies, each in processes of its own: *default* (what the chain's Auditor has: no redact hook,
no secrets in this environment) and *redact+key*: a ``redact`` hook masking e-mail addresses (a
regular expression, as a PII hook would) and an API key in the environment, as a deployment has
(``OPENAI_API_KEY``: four forms to scrub from every text).

Each is timed with the thread's CPU clock (``time.thread_time_ns``: other processes' load does not
count) over blocks of 400 answers; a process's figure is its best block (the least disturbed). With
``--before ROOT`` each round runs ROOT's ``src/ragaudit`` too, in a process of its own, alternated with
this checkout's; the figure is the median over rounds. The spans' attributes and events must be the
same in both checkouts (ids and times left out), or the run says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._bench import best_us, child_ragaudit, machine_info, print_machine, run_child, write_result  # noqa: E402

BLOCK = 400
BLOCKS = 6
POLICIES = ("default", "redact+key")
STAGES = ("turn_spans_us", "judge_span_us", "encoding_us")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
# Left out of the comparison: they differ from run to run.
_VARYING = ("ragaudit.turn.id", "ragaudit.judgement.id", "ragaudit.score.id", "ragaudit.judge.latency_s")


def _captured(policy_name: str) -> Any:
    """The last record of a few answers of overhead.py's chain, through the handler."""
    from benchmarks import overhead
    from benchmarks.overhead import QUESTION
    from tests.support.http_recorder import HttpRecorder

    from ragaudit import Auditor, ContentPolicy, Limits, tracing
    from ragaudit._export import BaseExporter, ExportResult
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    class Keep(BaseExporter):  # type: ignore[misc]
        def __init__(self) -> None:
            self.records: list[Any] = []

        def export(self, records: Any) -> Any:
            self.records.extend(records)
            return ExportResult.SUCCESS

    keep = Keep()
    content = None
    if policy_name == "redact+key":
        content = ContentPolicy(redact=lambda text: _EMAIL.sub("<email>", text))
    with HttpRecorder() as sink:
        provider = tracing.configure(endpoint=sink.url)
        log = Path(tempfile.mkdtemp(prefix="ragaudit-otel-cost-")) / "ragaudit-audit.jsonl"
        kwargs: dict[str, Any] = {"content": content} if content is not None else {}
        auditor = Auditor(
            overhead._fake_judge(),
            audit_log=log,
            tracer_provider=provider,
            exporters=[keep],
            limits=Limits(max_concurrency=16),
            **kwargs,
        )
        handler = RagAuditCallbackHandler(auditor=auditor)
        chain = overhead._langchain_chain()
        for _ in range(3):
            chain.invoke(QUESTION, config={"callbacks": [handler]})
        handler.force_flush(60)
        provider.force_flush()
        auditor.shutdown(30)
    return keep.records[-1]


def _attributes(spans: Any, turn_id: str) -> str:
    def clean(attrs: Any) -> dict[str, Any]:
        return {k: v for k, v in dict(attrs or {}).items() if k not in _VARYING}

    return repr(
        [
            (
                s.name,
                s.kind.name,
                s.status.status_code.name,
                clean(s.attributes),
                [(e.name, clean(e.attributes)) for e in s.events],
                [clean(link.attributes) for link in s.links],
            )
            for s in spans
        ]
    ).replace(turn_id, "<turn id>")


def child(policy_name: str) -> dict[str, Any]:
    if policy_name == "redact+key":
        os.environ["OPENAI_API_KEY"] = "sk-bench-" + "Q7x" * 12
    # the given checkout's ragaudit, imported before overhead.py puts this checkout's src first on the path
    ragaudit = child_ragaudit()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from ragaudit.tracing import SpanRecorder
    from ragaudit.tracing._judge_spans import JudgeSpanExporter

    record = _captured(policy_name)
    turn = record.turn

    class Queue(SpanProcessor):  # type: ignore[misc]
        def __init__(self) -> None:
            self.spans: deque[Any] = deque(maxlen=2048)

        def on_end(self, span: Any) -> None:
            self.spans.append(span)

    queue = Queue()
    provider = TracerProvider()
    provider.add_span_processor(queue)
    recorder = SpanRecorder(provider, content=record.content_policy)
    judge_spans = JudgeSpanExporter(recorder)
    record = type(record)(
        **{**{f: getattr(record, f) for f in record.__dataclass_fields__}, "tracer_provider": provider}
    )

    def turn_spans() -> None:
        handle = recorder.start_turn(start_ns=turn.started_at)
        traced = recorder.start_children(handle, turn)
        recorder.end_turn(handle, traced, judge_status="queued")

    def judge_span() -> None:
        judge_spans.export([record])

    if os.environ.get("OTEL_COST_PROFILE"):  # cProfile of 1,000 answers' spans, by own time (stderr)
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(lambda: [(turn_spans(), judge_span()) for _ in range(1000)])
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    queue.spans.clear()
    turn_spans()
    judge_span()
    out: dict[str, Any] = {
        "ragaudit": ragaudit.__file__,
        "policy": policy_name,
        "spans": len(queue.spans),
        "attributes": _attributes(queue.spans, turn.turn_id),
    }
    for name, fn in (("turn_spans_us", turn_spans), ("judge_span_us", judge_span)):
        out[name] = best_us(fn, blocks=BLOCKS, block=BLOCK)
    # A batch as the batch processor hands it over: 512 spans, 128 answers' worth.
    queue.spans.clear()
    for _ in range(128):
        turn_spans()
        judge_span()
    batch = list(queue.spans)[-512:]
    out["encoding_us"] = best_us(lambda: encode_spans(batch).SerializeToString(), blocks=BLOCKS, block=1, per=128)
    return out


def _spawn(root: Path, policy_name: str, **env: str | None) -> dict[str, Any]:
    return run_child(__file__, root, policy_name, env={"OTEL_PYTHON_TRACER_PROVIDER": None, **env}, timeout=600,
                     capture_stderr="OTEL_COST_PROFILE" not in env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="ROOT", help="also run ROOT's src/ragaudit, alternated")
    parser.add_argument("--policies", nargs="*", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--out", help="result file (default benchmarks/results/otel_cost.json)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of this checkout's span writing")
    parser.add_argument("--child", choices=POLICIES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if args.profile:
        _spawn(Path(args.before) if args.before else ROOT, args.policies[0], OTEL_COST_PROFILE="1")
        return 0
    info = machine_info()
    print_machine(info)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    roots = {"after": ROOT, **({"before": Path(args.before).resolve()} if args.before else {})}
    runs: dict[str, list[dict[str, Any]]] = {f"{name} {policy}": [] for policy in args.policies for name in roots}
    for round_ in range(args.rounds):
        for policy in args.policies:
            order = list(roots.items()) if round_ % 2 == 0 else list(reversed(roots.items()))
            for name, root in order:
                run = _spawn(root, policy)
                runs[f"{name} {policy}"].append(run)
                print(
                    f"round {round_} {name:<6} {policy:<10} turn spans {run['turn_spans_us']:6.1f} us  "
                    f"judge span {run['judge_span_us']:6.1f} us  encoding {run['encoding_us']:6.1f} us",
                    flush=True,
                )
    for policy in args.policies:
        seen = {r["attributes"] for name in roots for r in runs[f"{name} {policy}"]}
        if len(seen) != 1:
            print(f"warning: the checkouts' spans differ ({policy})", flush=True)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    summary = {key: {stage: statistics.median(r[stage] for r in rs) for stage in STAGES} for key, rs in runs.items()}
    for key, figures in summary.items():
        print(
            f"{key:<18} median: turn spans {figures['turn_spans_us']:.1f} us, judge span "
            f"{figures['judge_span_us']:.1f} us, encoding {figures['encoding_us']:.1f} us"
        )
    print(f"load average: {' '.join(load_before)} -> {' '.join(load_after)}")
    for rs in runs.values():
        for r in rs:
            r.pop("attributes")
    write_result(
        "otel_cost",
        {
            "machine": info,
            "load_before": load_before,
            "load_after": load_after,
            "block": BLOCK,
            "blocks": BLOCKS,
            "summary": summary,
            "runs": runs,
        },
        quick=False,
        out=args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
