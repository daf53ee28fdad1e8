"""``ragaudit review``: the answers worth a human look, sent where people label them; and the labels back.

Select and send (`ragaudit.evaluation.review`, `ragaudit.evaluation.review_destinations`)::

    ragaudit review ragaudit-audit.jsonl --low 0.5 --sample 20 --feedback feedback.jsonl \\
        --trace-url 'http://jaeger:16686/trace/{trace_id}' --csv review.csv --phoenix-dataset review-1

Read the labels back as the labels JSONL ``ragaudit calibrate`` reads::

    ragaudit review --labels labels.jsonl --phoenix-dataset review-1     # or --from review.csv
    ragaudit calibrate labels.jsonl ragaudit-audit.jsonl
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ._numbers import finite_float, whole_number

if TYPE_CHECKING:
    from ..evaluation.review import ReviewItem

__all__ = ["add_review_parser", "review_command"]


def add_review_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``review`` subcommand's arguments."""
    p = sub.add_parser(
        "review", help="select answers worth a human look and send them to be labelled; read labels back",
        description="Select from audit logs the answers with flagged sentences, failed citations, low scores, "
        "thumbs-down feedback or judge disagreements, plus a seeded stratified sample of the rest, and write "
        "them to CSV/JSONL, a Phoenix dataset or a Langfuse annotation queue. With --labels, read the labels "
        "people set (in the Phoenix dataset or the CSV/JSONL file) back as the labels `ragaudit calibrate` reads.")
    p.add_argument("audit_logs", nargs="*", help="JSONL audit logs written by the Auditor (several: their "
                   "judgements of the same turn are compared)")
    p.add_argument("--low", type=finite_float(0, 1), default=0.5, help="select turns with a score below this")
    for name in ("faithfulness", "context_relevance", "answer_relevance"):
        p.add_argument(f"--low-{name.replace('_', '-')}", dest=f"low_{name}", type=finite_float(0, 1), default=None,
                       help=f"the threshold of {name} (default: --low)")
    p.add_argument("--feedback", default=None, help="JSONL of user feedback: turn_id and value (thumbs-down: "
                   "false, a number below 0.5, 'down', 'bad', ...)")
    p.add_argument("--disagree", type=finite_float(0, 1), default=0.5,
                   help="two judgements of a turn this far apart are a disagreement")
    p.add_argument("--sample", type=whole_number(0), default=0, help="also this many of the other turns, "
                   "stratified by score band")
    p.add_argument("--seed", type=whole_number(), default=0, help="the sample's seed")
    p.add_argument("--limit", type=whole_number(0), default=None, help="at most this many flagged turns")
    p.add_argument("--trace-url", default=None, metavar="TEMPLATE",
                   help="link to each trace, e.g. 'http://jaeger:16686/trace/{trace_id}'")
    p.add_argument("--csv", dest="csv_out", default=None, help="write the queue as CSV (label columns to fill)")
    p.add_argument("--jsonl", dest="jsonl_out", default=None, help="write the queue as JSONL")
    p.add_argument("--phoenix-dataset", default=None, metavar="NAME",
                   help="upload to this Phoenix dataset (with --labels: read its labels)")
    p.add_argument("--phoenix-endpoint", default=None,
                   help="Phoenix URL (default: $PHOENIX_COLLECTOR_ENDPOINT or http://localhost:6006)")
    p.add_argument("--langfuse-queue", default=None, metavar="QUEUE_ID",
                   help="add the traces to this Langfuse annotation queue (keys: $LANGFUSE_PUBLIC_KEY, "
                   "$LANGFUSE_SECRET_KEY)")
    p.add_argument("--langfuse-host", default=None, help="Langfuse URL (default: $LANGFUSE_BASE_URL, "
                   "$LANGFUSE_HOST, Langfuse Cloud)")
    p.add_argument("--labels", dest="labels_out", default=None, metavar="LABELS.jsonl",
                   help="read labels back (from --phoenix-dataset or --from) and write them for `ragaudit calibrate`")
    p.add_argument("--from", dest="labels_from", default=None, metavar="FILE",
                   help="with --labels: the review CSV or JSONL people filled in")
    p.add_argument("--show", type=whole_number(0), default=20, help="how many selected turns to print")
    p.set_defaults(handler=("ragaudit.cli.review", "review_command"))


def _labels_command(args: argparse.Namespace) -> int:
    from ..evaluation.review_destinations import labels_from_file, labels_from_phoenix, write_labels

    if args.audit_logs:
        raise ConfigurationError("--labels reads labels back; it takes no audit log (select in a separate run)")
    if bool(args.labels_from) == bool(args.phoenix_dataset):
        raise ConfigurationError("--labels needs exactly one source: --phoenix-dataset NAME or --from FILE")
    if args.labels_from:
        labels = labels_from_file(args.labels_from)
        source = repr(args.labels_from)
    else:
        labels = labels_from_phoenix(args.phoenix_dataset, endpoint=args.phoenix_endpoint)
        source = f"Phoenix dataset {args.phoenix_dataset!r}"
    if not labels:
        raise ConfigurationError(f"no labelled item in {source}: set a label (1 pass, 0 fail, or a score in [0, 1]) "
                                 "on at least one item first")
    count = write_labels(labels, args.labels_out)
    print(f"{count} labelled turns from {source} -> {args.labels_out} "
          f"(next: ragaudit calibrate {args.labels_out} AUDIT.jsonl)")
    return 0


def _print(items: list[ReviewItem], show: int) -> None:
    reasons = Counter(r for item in items for r in item.reasons)
    print(f"{len(items)} turns to review: " + (", ".join(f"{r} {n}" for r, n in reasons.items()) or "none"))
    for item in items[:show]:
        link = f"  {item.trace_url}" if item.trace_url else ""
        detail = " ".join(item.detail.split())
        print(f"  {item.id}  [{', '.join(item.reasons)}] {detail[:160]}{link}")
    if len(items) > show:
        print(f"  ... and {len(items) - show} more")


def review_command(args: argparse.Namespace) -> int:
    """``ragaudit review AUDIT.jsonl... [selection options] [destinations]`` or ``ragaudit review --labels
    OUT (--phoenix-dataset NAME | --from FILE)``."""
    if args.labels_out:
        return _labels_command(args)
    if args.labels_from:
        raise ConfigurationError("--from is read with --labels OUT (it names the filled-in review file)")
    if not args.audit_logs:
        raise ConfigurationError("name at least one audit log (the Auditor writes ./ragaudit-audit.jsonl by default)")
    from ..evaluation.review import select
    from ..evaluation.review_destinations import to_langfuse_queue, to_phoenix, write_csv, write_jsonl

    lows = {name: args.low if getattr(args, f"low_{name}") is None else getattr(args, f"low_{name}")
            for name in ("faithfulness", "context_relevance", "answer_relevance")}
    items = select(args.audit_logs, low=lows, feedback=args.feedback, disagree=args.disagree, sample=args.sample,
                   seed=args.seed, trace_url=args.trace_url, limit=args.limit)
    _print(items, args.show)
    for path, write in ((args.csv_out, write_csv), (args.jsonl_out, write_jsonl)):
        if path:
            try:
                write(items, path)
            except OSError as exc:
                raise ConfigurationError(f"cannot write {path!r}: {exc}") from exc
            print(f"wrote {path}", file=sys.stderr)
    if args.phoenix_dataset and items:
        answer = to_phoenix(items, args.phoenix_dataset, endpoint=args.phoenix_endpoint)
        print(f"uploaded {len(items)} examples to Phoenix dataset {args.phoenix_dataset!r} "
              f"(id {answer.get('dataset_id')})", file=sys.stderr)
    if args.langfuse_queue and items:
        counts = to_langfuse_queue(items, args.langfuse_queue, host=args.langfuse_host)
        print(f"added {counts['sent']} traces to Langfuse annotation queue {args.langfuse_queue!r}"
              + (f" ({counts['skipped']} turns without a trace id skipped)" if counts["skipped"] else ""),
              file=sys.stderr)
    return 0
