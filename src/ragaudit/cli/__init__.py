"""The ``ragaudit`` command: ``demo``, ``eval``, ``metrics``, ``report``, ``review``, ``calibrate``, ``qrels``,
``worker``.

Each subcommand's work lives in its own module and is imported only when that subcommand runs,
so ``ragaudit --help`` needs no optional extra.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import traceback
from collections.abc import Iterator, Sequence

from .._text import EscapingWriter, escape_controls, exception_text
from .._version import __version__
from ..errors import RagAuditError
from ._numbers import finite_float, whole_number

__all__ = ["build_parser", "main"]


def _add_demo(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run the embedded return-policy demo (offline by default)",
                       description="Run the seed's return-policy knowledge base and its 8 questions "
                       "through a RAG pipeline with ragaudit attached, and print the judged table.")
    p.add_argument("--framework", choices=["langchain", "llamaindex"], default="langchain")
    p.add_argument("--otlp-endpoint", default=None,
                   help="also send spans over OTLP/HTTP (default: $OTEL_EXPORTER_OTLP_ENDPOINT if set)")
    p.add_argument("--traces", default="ragaudit-traces.jsonl", help="JSONL file for spans")
    p.add_argument("--audit-log", default="ragaudit-audit.jsonl", help="JSONL audit log")
    p.add_argument("--offline", action="store_true",
                   help="ignore OPENAI_API_KEY / OPENAI_BASE_URL and use the offline stand-ins")
    p.add_argument("--careless", action="store_true",
                   help="the offline careless generator: scripted mistakes (a wrong number, a citation to the "
                   "wrong document, an unsupported claim) for the audit to catch")
    p.set_defaults(handler=("ragaudit.cli.demo", "demo_command"))


def _add_eval(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="run a dataset through a pipeline, judge and score it",
                       description="Evaluate a JSONL dataset (question, relevant_ids/qrels, "
                       "reference_answer) through a LangChain runnable or LlamaIndex query engine.")
    p.add_argument("dataset", help="JSONL dataset, or 'demo' for the embedded knowledge base")
    p.add_argument("--pipeline", default=None,
                   help="module:attr of a runnable / query engine (or a zero-argument factory); "
                   "default for 'demo': the demo chain")
    p.add_argument("--judge", default=None, help="lexical | chat:<model> | module:attr (default: auto)")
    p.add_argument("-m", "--metric", action="append", dest="metrics", default=None,
                   help="retrieval metric, repeatable (default: recall@5 mrr@10 ndcg@10)")
    p.add_argument("--concurrency", type=whole_number(1), default=8)
    p.add_argument("--json", dest="json_out", default=None, help="write the report as JSON")
    p.add_argument("--markdown", dest="md_out", default=None, help="write the report as Markdown")
    p.add_argument("--html", dest="html_out", default=None, help="write a self-contained HTML report")
    p.add_argument("--fail-under", action="append", default=[], metavar="NAME=VALUE",
                   help="CI gate: exit 1 when the mean of NAME is below VALUE (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="estimate judge calls and tokens, run nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=("ragaudit.cli.eval", "eval_command"))


def _add_metrics(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("metrics", help="retrieval metrics of a run against qrels (trec_eval semantics)",
                       description="trec_eval's short flags work here: -q -c -M N -J -n -lN -m NAME.")
    p.add_argument("--run", required=True, help="TREC run file or JSONL {qid, docid, score}")
    p.add_argument("--qrels", required=True, help="TREC qrels file or JSONL {qid, docid, relevance}")
    p.add_argument("-m", "--metric", action="append", dest="metrics", required=True,
                   help="e.g. ndcg@10, recall@5, mrr@10, map, Rprec, bpref, P_5, ndcg.1=3,2=9 (repeatable)")
    p.add_argument("-q", "--per-query", action="store_true")
    p.add_argument("--format", choices=["table", "json", "trec"], default="table",
                   help="trec: trec_eval's own output layout")
    p.add_argument("-l", "--relevance-level", type=whole_number(1), default=1,
                   help="minimum label that counts as relevant")
    p.add_argument("-c", "--all-queries", action="store_true",
                   help="count qrels queries missing from the run as empty rankings (trec_eval -c)")
    p.add_argument("-M", "--max-docs-per-query", type=whole_number(1), default=None, metavar="N",
                   help="only the top N docs of each ranking count (trec_eval -M)")
    p.add_argument("-J", "--judged-docs-only", action="store_true",
                   help="drop unjudged docs from each ranking first (trec_eval -J)")
    p.add_argument("-n", "--no-summary", action="store_true", help="no summary line (trec_eval -n)")
    p.add_argument("--ties", choices=["trec_eval", "pytrec_eval"], default="trec_eval",
                   help="compare scores as doubles (trec_eval >= 10, default) or 32-bit floats (pytrec_eval)")
    p.add_argument("--keep-duplicates", action="store_true",
                   help="keep the highest score of a doc listed twice for a query (default: refuse, as trec_eval)")
    p.set_defaults(handler=("ragaudit.cli.metrics", "metrics_command"))


def _add_report(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="audit view of logged turns: lowest scores first, with citations")
    # With no argument, the file the default Auditor writes in the working directory: the first thing a
    # newcomer runs after an app judged something.
    p.add_argument("audit_log", nargs="?", default="ragaudit-audit.jsonl",
                   help="JSONL audit log written by the Auditor (default: ./ragaudit-audit.jsonl)")
    p.add_argument("--html", dest="html_out", default=None)
    p.add_argument("--json", dest="json_out", default=None)
    p.add_argument("--limit", type=whole_number(0), default=20, help="how many turns to show")
    p.add_argument("--fail-under", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--judge-config", default=None, metavar="PATH",
                   help="a judge config from `ragaudit calibrate --fit`: the --html report draws its held-out "
                   "agreement before and after the fit")
    p.set_defaults(handler=("ragaudit.cli.report", "report_command"))


def _add_calibrate(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("calibrate", help="agreement of judgements with human labels (kappa, correlations)")
    p.add_argument("labels", help="JSONL human labels: id + per-dimension score or pass/fail; with --grades, "
                   "graded human qrels (TREC or JSONL, 0-3) with the query ids `ragaudit qrels` writes")
    p.add_argument("judgements", help="audit log or JSON report with judgements")
    p.add_argument("more", nargs="*", help="with --grades: more audit logs to pool")
    p.add_argument("--grades", action="store_true",
                   help="compare graded human qrels with the judge's document grades (agreement, weighted kappa, "
                   "confusion table)")
    p.add_argument("--threshold", type=finite_float(0, 1), default=0.5, help="pass threshold on [0, 1] scores")
    p.add_argument("--format", choices=["table", "json"], default="table")
    fit = p.add_argument_group("fit the judge to the labels (--fit)")
    fit.add_argument("--fit", action="store_true",
                     help="choose per-dimension pass thresholds (and few-shot examples) on part of the labels, "
                     "report agreement before/after on the held-out rest, and write a judge config")
    fit.add_argument("--out", default="judge-config.json", help="where --fit writes the judge config "
                     "(default judge-config.json)")
    fit.add_argument("--html", dest="html_out", default=None, metavar="PATH",
                     help="also write a self-contained HTML page drawing the held-out agreement before and after")
    fit.add_argument("--holdout", type=finite_float(0, 1, low_open=True), default=0.3,
                     help="share of the labels held out to measure the fit (default 0.3)")
    fit.add_argument("--seed", type=whole_number(0), default=0, help="seed of the held-out split (default 0)")
    fit.add_argument("--target-precision", type=finite_float(0, 1, low_open=True), default=None,
                     help="choose the lowest threshold whose precision reaches this, instead of the best "
                     "balanced accuracy")
    fit.add_argument("--max-examples", type=whole_number(0), default=4,
                     help="few-shot examples for an LLM judge, from the labelled disagreements (default 4)")
    p.set_defaults(handler=("ragaudit.cli.calibrate", "calibrate_command"))


def _add_qrels(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("qrels", help="pooled judged qrels from the document grades of audit logs",
                       description="Write the judge's document grades (0-3) of many audited turns as TREC "
                       "qrels: one query id per distinct question, disagreeing grades resolved to the lower "
                       "median and counted. Compare retrievers with `ragaudit metrics` against them.")
    p.add_argument("audit_logs", nargs="+", help="JSONL audit logs written with a full-audit judge")
    p.add_argument("-o", "--output", required=True, help="the qrels file to write")
    p.add_argument("--runs", default=None, metavar="DIR",
                   help="also write each audit log as a TREC run DIR/<log name>.run (same query ids)")
    p.set_defaults(handler=("ragaudit.cli.qrels", "qrels_command"))


def _add_review(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .review import add_review_parser  # its arguments live with the command

    add_review_parser(sub)


def _add_worker(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .worker import add_worker_parser  # its arguments live with the command (no extra imported)

    add_worker_parser(sub)


_DEBUG_HELP = "on an error, also print the Python traceback (for a bug report)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ragaudit`` command."""
    parser = argparse.ArgumentParser(prog="ragaudit", description="Make every RAG answer auditable.")
    parser.add_argument("--version", action="version", version=f"ragaudit {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_demo, _add_eval, _add_metrics, _add_report, _add_review, _add_calibrate, _add_qrels,
                _add_worker):
        add(sub)
    for command in sub.choices.values():  # also after the command (SUPPRESS: not reset to False there)
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    return parser


@contextlib.contextmanager
def _warnings_on_stderr(command: str) -> Iterator[None]:
    """ragaudit's own warnings (a skipped cut-off line, a judge that failed) on stderr while a command
    runs, prefixed with the command's name (with this handler the library's own stderr fallback stays quiet)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_CommandFormatter(command))
    log = logging.getLogger("ragaudit")
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


class _CommandFormatter(logging.Formatter):
    def __init__(self, command: str) -> None:
        super().__init__()
        self._prefix = f"ragaudit {command}: "

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().removeprefix("ragaudit: ")
        return escape_controls(self._prefix + message)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 gate failed, 2 usage or input error, said in
    one line on stderr; ``--debug`` adds the traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    module_name, func_name = args.handler
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"ragaudit {args.command}: needs an optional dependency that is not installed ({exc.name}); "
              "try: pip install 'ragaudit[all]'", file=sys.stderr)
        return 2
    try:
        # Every command prints recorded (untrusted) text: answers, documents, reasons, question ids.
        # One choke point shows its control characters instead of letting them drive the terminal.
        with contextlib.redirect_stdout(EscapingWriter(sys.stdout)), _warnings_on_stderr(args.command):
            return int(getattr(module, func_name)(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # One line, never a traceback (unless --debug): a RagAuditError names the file, the line and
        # what was expected; anything else is said as what it is, with the way to see more.
        if args.debug:
            traceback.print_exc()
        if isinstance(exc, RagAuditError):
            message = str(exc)
        else:
            hint = "" if args.debug else " (run with --debug for the traceback)"
            message = f"unexpected error: {exception_text(exc)}{hint}"
        print(f"ragaudit {args.command}: {escape_controls(message)}", file=sys.stderr)
        return 2
