"""``ragaudit demo``: the embedded return-policy demo (the run itself is `ragaudit.demo.run`)."""

from __future__ import annotations

import argparse

from ..errors import ConfigurationError

__all__ = ["demo_command"]


def demo_command(args: argparse.Namespace) -> int:
    """The ``ragaudit demo`` subcommand: run the demo and print its report to stdout. Returns 0."""
    from ..demo.run import print_report, run_demo

    try:
        result = run_demo(
            framework=args.framework,
            traces=args.traces,
            audit_log=args.audit_log,
            otlp_endpoint=args.otlp_endpoint,
            offline=args.offline,
            careless=args.careless,
        )
    except ImportError as exc:
        raise ConfigurationError(
            f"the demo needs {exc.name or 'an optional dependency'}, which is not installed: "
            "pip install 'ragaudit[demo]'"
        ) from exc
    print_report(result, traces=args.traces, audit_log=args.audit_log)
    return 0
