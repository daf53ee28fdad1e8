"""What every benchmark script shares: the machine description, percentiles, result files, RSS.

Each benchmark prints the machine it ran on (cores, CPU, Python, package versions) and writes one
JSON result file under ``benchmarks/results/`` with that description, the exact command, the date
and its figures, so a table in BENCHMARKS.md can always be traced back to a run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "REPO",
    "RESULTS",
    "command_line",
    "machine_info",
    "percentile",
    "print_machine",
    "rss_bytes",
    "summary_ns",
    "write_result",
]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

# The distributions whose versions a result depends on (those not installed are listed as None).
PACKAGES = (
    "ragaudit", "langchain-core", "llama-index-core", "opentelemetry-api", "opentelemetry-sdk",
    "openinference-instrumentation-langchain", "openinference-instrumentation-llama-index",
    "opentelemetry-instrumentation-langchain", "langfuse", "openai", "httpx", "numpy",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info(extra_packages: Iterable[str] = ()) -> dict[str, Any]:
    """Cores, CPU model, OS, Python and the versions of the packages that matter."""
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(affinity(0)) if affinity is not None else os.cpu_count(),
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": {name: _version(name) for name in (*PACKAGES, *extra_packages)},
    }


def print_machine(info: dict[str, Any]) -> None:
    installed = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v is not None)
    print(f"machine: {info['cores']} cores ({info['cores_usable']} usable), {info['cpu']}, {info['os']}")
    print(f"python:  {info['python_implementation']} {info['python']}")
    print(f"packages: {installed}")


def command_line() -> str:
    """The command that is running, relative to the repository root, for the result file."""
    argv = list(sys.argv)
    try:
        argv[0] = str(Path(argv[0]).resolve().relative_to(REPO))
    except ValueError:
        pass
    return shlex.join(["python", *argv])


def percentile(values: Sequence[float], q: float) -> float:
    """The *q*-th percentile (0-100) with linear interpolation, as numpy's default."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ns(values_ns: Sequence[int]) -> dict[str, float]:
    """Median, p10, p90, p99, mean and count of durations in ns, reported in microseconds."""
    us = [v / 1000.0 for v in values_ns]
    return {
        "n": len(us),
        "median_us": percentile(us, 50),
        "p10_us": percentile(us, 10),
        "p90_us": percentile(us, 90),
        "p99_us": percentile(us, 99),
        "mean_us": sum(us) / len(us),
    }


def write_result(name: str, payload: dict[str, Any], *, quick: bool, out: str | None = None) -> Path:
    """Write *payload* (plus machine, command and date) to ``benchmarks/results/<name>[.quick].json``."""
    path = Path(out) if out else RESULTS / (f"{name}.quick.json" if quick else f"{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "quick": quick,
        **payload,
    }
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    print(f"results: {path}")
    return path


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
