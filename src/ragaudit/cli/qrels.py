"""``ragaudit qrels`` (pooled judged qrels) and ``ragaudit calibrate --grades`` (human graded qrels
against the judge's grades). The work is in `ragaudit.evaluation.pooling`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigurationError
from ..evaluation.pooling import grade_agreement, pool_qrels, write_qrels, write_run

__all__ = ["calibrate_grades_command", "qrels_command"]


def qrels_command(args: argparse.Namespace) -> int:
    """``ragaudit qrels AUDIT_LOG... -o judged.qrels [--runs DIR]``."""
    from ..tracing.files import read_audit_log

    names: dict[str, list[Mapping[str, Any]]] = {}
    for path in args.audit_logs:
        if not os.path.exists(path):
            raise ConfigurationError(f"audit log {path!r} not found")
        name = os.path.splitext(os.path.basename(path))[0] or "run"
        while name in names:
            name += "_"
        names[name] = [e for e in read_audit_log(path) if isinstance(e, Mapping)]
    pooled = pool_qrels(names)
    if not pooled.qrels:
        raise ConfigurationError("no document grades in the audit log(s): audit with a full-audit judge "
                                 "(ChatRagJudge(protocol='full-audit') or LexicalJudge)")
    write_qrels(pooled.qrels, args.output)
    print(f"wrote {args.output}: {pooled.summary()}", file=sys.stdout)
    if args.runs:
        os.makedirs(args.runs, exist_ok=True)
        for name, run in pooled.runs.items():
            path = os.path.join(args.runs, f"{name}.run")
            write_run(run, path, name)
            print(f"wrote {path}: {len(run)} questions", file=sys.stdout)
    return 0


def calibrate_grades_command(args: argparse.Namespace) -> int:
    """``ragaudit calibrate --grades HUMAN.qrels AUDIT_LOG...``: human graded qrels vs judged grades."""
    from ..metrics import read_qrels
    from ..tracing.files import read_audit_log

    logs = [args.judgements, *(args.more or [])]
    entries: dict[str, list[Mapping[str, Any]]] = {}
    for i, path in enumerate(logs):
        if not os.path.exists(path):
            raise ConfigurationError(f"audit log {path!r} not found")
        entries[f"{i}"] = [e for e in read_audit_log(path) if isinstance(e, Mapping)]
    result = grade_agreement(read_qrels(args.labels), pool_qrels(entries).qrels)
    if result.n == 0:
        raise ConfigurationError(f"no (question, document) pair is graded in both {args.labels!r} and the audit "
                                 "log(s): the human qrels must use the query ids `ragaudit qrels` writes")
    print(json.dumps(result.to_dict(), indent=2) if args.format == "json" else result.to_table())
    return 0
