"""What ``ragaudit eval`` and ``ragaudit report`` share: the ``--fail-under`` gate and the report files."""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, MetricError
from ..evaluation.report import EvaluationReport
from ..records import SCORE_NAMES

if TYPE_CHECKING:
    from ..judges.fitted import JudgeConfig

__all__ = ["gate", "parse_fail_under", "write_outputs"]


def parse_fail_under(items: Sequence[str]) -> dict[str, float]:
    """Parse ``--fail-under NAME=VALUE`` items into ``{NAME: VALUE}``.

    NAME is a judge score (faithfulness, context_relevance, answer_relevance) or a retrieval
    metric (recall@5, ndcg@10, ...); VALUE a number in [0, 1]. Raises ConfigurationError naming
    the malformed item.
    """
    out: dict[str, float] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise ConfigurationError(f"--fail-under expects NAME=VALUE (e.g. faithfulness=0.8), got {item!r}")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigurationError(f"--fail-under {item!r}: {raw!r} is not a number") from None
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ConfigurationError(f"--fail-under {item!r}: the threshold must be in [0, 1]")
        normalised = name.lower().replace("-", "_")
        if normalised in SCORE_NAMES:
            name = normalised
        else:
            from ..metrics import parse_measure

            try:
                parse_measure(name)
            except MetricError as exc:
                raise ConfigurationError(
                    f"--fail-under {item!r}: unknown name {name!r}; use one of {', '.join(SCORE_NAMES)} "
                    f"or a retrieval metric such as recall@5 ({exc})") from exc
        out[name] = value
    return out


def gate(report: EvaluationReport, thresholds: Mapping[str, float]) -> int:
    """Print the ``--fail-under`` verdict on stderr; 1 when a threshold was missed, else 0."""
    failures = report.gate(thresholds)
    if failures:
        print("ragaudit: quality gate FAILED:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    if thresholds:
        passed = ", ".join(f"{k}>={v:g}" for k, v in thresholds.items())
        print(f"ragaudit: quality gate passed ({passed})", file=sys.stderr)
    return 0


def write_outputs(report: EvaluationReport, args: argparse.Namespace,
                  judge_config: JudgeConfig | None = None) -> None:
    """Write the report files the arguments ask for (``--json``, ``--markdown``, ``--html``; the HTML with a
    "Fitted judge" section when *judge_config* is given)."""
    html = functools.partial(report.to_html, judge_config=judge_config)
    for attr, method in (("json_out", report.to_json), ("md_out", report.to_markdown), ("html_out", html)):
        path = getattr(args, attr, None)
        if path:
            try:
                method(path)
            except OSError as exc:
                raise ConfigurationError(f"cannot write {path!r}: {exc}") from exc
            print(f"wrote {path}", file=sys.stderr)
