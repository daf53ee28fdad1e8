"""Numbers from flags and constructors: NaN, infinities and out-of-range values are refused where they are
given, with one line naming the argument (issue 46 item 12).

``float("nan")`` passes every ``value < 0`` check, so ``--shutdown-timeout nan`` used to start a worker
that then judged nothing at SIGTERM, and ``--quiet nan`` ended in "unexpected error: ValueError".
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragaudit import Auditor, ConfigurationError, LexicalJudge, Limits
from ragaudit.auditor import Sessions
from ragaudit.auditor._governor import Governor
from ragaudit.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]

# Every numeric flag of every command, with the arguments its command needs to get that far.
FLAGS = [
    (["eval", "demo"], "--concurrency"),
    (["metrics", "--run", "r", "--qrels", "q", "-m", "map"], "--relevance-level"),
    (["metrics", "--run", "r", "--qrels", "q", "-m", "map"], "--max-docs-per-query"),
    (["report"], "--limit"),
    (["calibrate", "labels.jsonl", "audit.jsonl"], "--threshold"),
    *((["worker"], flag) for flag in ("--port", "--grpc-port", "--quiet", "--max-wait", "--max-traces",
                                      "--max-spans", "--sample-rate", "--session-idle", "--max-sessions",
                                      "--shutdown-timeout")),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize("prefix, flag", FLAGS, ids=[flag for _, flag in FLAGS])
def test_every_numeric_flag_refuses_nan_infinity_and_out_of_range(
        prefix: list[str], flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([*prefix, f"{flag}={value}"])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert f"{flag}: must be a" in errors[0] and "argument " in errors[0] and repr(value) in errors[0]


def test_no_numeric_flag_is_left_on_a_bare_float_or_int() -> None:
    # A flag added later with type=float would take "nan" again: every typed flag uses the checked types.
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    typed = [(name, action.option_strings) for name, command in sub.choices.items() for action in command._actions
             if action.type is not None]
    assert typed
    for name, options in typed:
        action = next(a for a in sub.choices[name]._actions if a.option_strings == options)
        assert action.type not in (int, float), (name, options)
        assert getattr(action.type, "__name__", "") in ("number", "whole number"), (name, options)


def test_worker_with_a_nan_shutdown_timeout_exits_2_before_listening() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "ragaudit.cli", "worker", "--port", "0", "--judge", "lexical",
                           "--shutdown-timeout", "nan"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "argument --shutdown-timeout: must be a finite number >= 0, got 'nan'" in done.stderr
    assert "Traceback" not in done.stderr and "unexpected error" not in done.stderr


@pytest.mark.parametrize("make, name", [
    (lambda v: Auditor(LexicalJudge(), audit_log=None, limits=Limits(timeout_s=v)), "timeout_s"),
    (lambda v: Auditor(LexicalJudge(), audit_log=None, sample_rate=v), "sample_rate"),
    (lambda v: Sessions(session_idle_s=v), "session_idle_s"),
    (lambda v: Governor(pause_s=v), "pause_s"),
])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_constructor_numbers_refuse_nan_and_infinity(make: object, name: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=f"{name} must be a finite number"):
        make(value)  # type: ignore[operator]


@pytest.mark.parametrize("name", ["shutdown_timeout_s", "quiet_s", "max_wait_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_worker_constructor_refuses_nan_and_infinity(name: str, value: float) -> None:
    pytest.importorskip("aiohttp")
    from ragaudit.integrations.otlp import Worker

    with pytest.raises(ConfigurationError, match=f"{name} must be a finite number"):
        Worker(LexicalJudge(), port=0, **{name: value})
