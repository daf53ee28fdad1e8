"""The ``ragaudit eval`` subcommand (arguments are defined in ``ragaudit.cli``).

Exit codes: 0 all good, 1 a ``--fail-under`` threshold was missed (the failures are printed,
naming each metric), 2 bad usage or input (raised as [`RagAuditError`][ragaudit.RagAuditError], printed by
``ragaudit.cli.main``).
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import sys
from typing import Any, TextIO

from .._text import exception_text
from ..errors import ConfigurationError, MetricError
from ..evaluation.report import EvaluationReport
from ..evaluation.runner import DEFAULT_METRICS, DatasetRow, is_pipeline, load_dataset
from ..judges.base import RagJudge
from ..records import SCORE_NAMES
from ._shared import gate, parse_fail_under, write_outputs

__all__ = [
    "eval_command",
    "load_object",
    "parse_fail_under",
    "resolve_judge",
    "resolve_pipeline",
]

_MAX_PRINTED_ROWS = 50  # a bigger report prints its summary only; the files have every row


def load_object(spec: str, what: str) -> Any:
    """Import ``module:attr`` (attr may be dotted). The current directory is importable, as for uvicorn."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{what} must be given as module:attr, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return pkgutil.resolve_name(spec)  # the standard library's "module:attr.path" resolver
    except SyntaxError as exc:  # the user's module does not compile: where, and what Python says
        raise ConfigurationError(f"{what} {spec!r}: {exc.filename} line {exc.lineno}: {exc.msg}") from exc
    except ImportError as exc:
        raise ConfigurationError(f"{what} {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    except (AttributeError, ValueError):
        raise ConfigurationError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    except Exception as exc:  # the module's own code raised while it was imported
        raise ConfigurationError(f"{what} {spec!r}: importing {module_name!r} raised {exception_text(exc)}") from exc


def resolve_pipeline(spec: str) -> Any:
    """The pipeline named by *spec*: a runnable or query engine, or a zero-argument factory of one."""
    obj = load_object(spec, "--pipeline")
    if is_pipeline(obj):
        return obj
    if callable(obj):
        try:
            built = obj()
        except TypeError as exc:
            raise ConfigurationError(f"--pipeline {spec!r} is callable but not a zero-argument factory: "
                                     f"{exc}") from exc
        except Exception as exc:
            raise ConfigurationError(f"--pipeline {spec!r}: the factory raised {exception_text(exc)}") from exc
        if is_pipeline(built):
            return built
        raise ConfigurationError(f"--pipeline {spec!r}: the factory returned {type(built).__name__}, not a "
                                 "LangChain runnable or LlamaIndex query engine")
    raise ConfigurationError(f"--pipeline {spec!r} is a {type(obj).__name__}, not a LangChain runnable, "
                             "a LlamaIndex query engine or a factory of one")


def resolve_judge(spec: str | None, *, dry_run: bool = False) -> RagJudge:
    """``None`` -> the default judge; ``lexical``; ``chat:<model>``; ``module:attr`` (judge or factory).

    With *dry_run*, a ``chat:`` judge is built even without an API key (it is never called).
    """
    if spec is None:
        from ..judges import default_judge

        return default_judge()
    if spec == "lexical":
        from ..judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec.startswith("chat:"):
        model = spec[len("chat:"):].strip()
        if not model:
            raise ConfigurationError("--judge chat:<model> needs a model name, e.g. chat:gpt-4o-mini")
        from ..judges.chat import ChatRagJudge

        if dry_run and not os.environ.get("OPENAI_API_KEY"):
            return ChatRagJudge(model=model, api_key="dry-run")
        return ChatRagJudge(model=model)
    obj = load_object(spec, "--judge")
    if isinstance(obj, type) or not callable(getattr(obj, "judge", None)):
        if not callable(obj):
            raise ConfigurationError(f"--judge {spec!r} is not a judge (no judge()/ajudge() methods)")
        obj = obj()
    if not isinstance(obj, RagJudge):
        raise ConfigurationError(f"--judge {spec!r} did not give a RagJudge (derive it from ragaudit.BaseRagJudge)")
    return obj


def _demo_dataset_path() -> str:
    from ..demo.kb import dataset_path

    return str(dataset_path())


def _print_summary(report: EvaluationReport) -> None:
    print(report.to_markdown(rows=len(report.rows) <= _MAX_PRINTED_ROWS), end="")
    if len(report.rows) > _MAX_PRINTED_ROWS:
        print(f"\n({len(report.rows)} rows: see --markdown, --html or --json for each row)")


def _dry_run(dataset: list[DatasetRow], judge_spec: str | None, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    from ..judges.cost import estimate_cost

    rows = load_dataset(dataset)
    judge = resolve_judge(judge_spec, dry_run=True)
    name = judge.name
    estimate = estimate_cost(judge, rows)
    print(f"dry run: {estimate.rows} rows, judge {name}", file=out)
    print(f"  judge calls: {estimate.calls}"
          + (f" ({estimate.cached_rows} rows already cached)" if estimate.cached_rows else ""), file=out)
    print(f"  tokens (estimated): {estimate.prompt_tokens} prompt + {estimate.completion_tokens} completion "
          f"= {estimate.total_tokens}", file=out)
    for assumption in estimate.assumptions:
        print(f"  assumed: {assumption}", file=out)
    print("  nothing was run", file=out)


def eval_command(args: argparse.Namespace) -> int:
    """``ragaudit eval DATASET [--pipeline module:attr] [--judge ...] [--html ...] [--fail-under ...]``."""
    thresholds = parse_fail_under(args.fail_under or [])
    metrics = list(args.metrics or DEFAULT_METRICS)
    from ..metrics import parse_measure

    for metric in metrics:
        try:
            parse_measure(metric)
        except MetricError as exc:
            raise ConfigurationError(f"-m {metric!r}: {exc}") from exc
    for name in thresholds:  # a gated metric is computed even when -m did not name it
        if name not in SCORE_NAMES and name not in metrics:
            metrics.append(name)

    dataset = args.dataset
    pipeline_spec = args.pipeline
    if dataset == "demo":
        dataset = _demo_dataset_path()
    elif not os.path.exists(dataset):
        raise ConfigurationError(f"dataset {dataset!r} not found (give a JSONL file, or 'demo')")
    rows = load_dataset(dataset)  # a bad line is named before the pipeline module is imported
    if args.dry_run:
        _dry_run(rows, args.judge)
        return 0
    judge = resolve_judge(args.judge)

    if pipeline_spec is None:
        if args.dataset != "demo":
            raise ConfigurationError("--pipeline module:attr is required (except for the 'demo' dataset)")
        from ..demo.pipelines import build_langchain_chain

        pipeline = build_langchain_chain()
    else:
        pipeline = resolve_pipeline(pipeline_spec)

    from ..evaluation.runner import evaluate_pipeline

    report = evaluate_pipeline(rows, pipeline, judge=judge, metrics=metrics, concurrency=args.concurrency,
                               progress=not args.no_progress)
    _print_summary(report)
    write_outputs(report, args)
    return gate(report, thresholds)


