"""What every benchmark script shares: the machine description, percentiles, result files, RSS.

Each benchmark prints the machine it ran on (cores, CPU, Python, package versions) and writes one
JSON result file under ``benchmarks/results/`` with that description, the exact command, the date
and its figures, so a table in BENCHMARKS.md can always be traced back to a run.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "REPO",
    "RESULTS",
    "best_us",
    "child_ragaudit",
    "command_line",
    "machine_info",
    "percentile",
    "print_machine",
    "rss_bytes",
    "run_child",
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


# -- one checkout against another: a child process per run -----------------------------------------------------------

CHILD_SRC = "RAGAUDIT_BENCH_SRC"  # the src/ directory whose ragaudit a child imports


def run_child(script: str, root: Path, *args: str, env: Mapping[str, str | None] | None = None,
              timeout: float = 900.0, capture_stderr: bool = True) -> dict[str, Any]:
    """Run ``script --child *args`` in a fresh interpreter whose ``ragaudit`` is the one of the checkout at *root*
    (its ``src/`` first on ``PYTHONPATH``, this repository after it, for ``benchmarks`` and ``tests``), with
    ``PYTHONHASHSEED=0`` and *env* on top of this process's environment (a None value: that variable unset): the
    child's last line on stdout, as JSON. A child that fails raises, with the end of its stderr. A script's child
    calls `child_ragaudit`."""
    src = Path(root).resolve() / "src"
    environ = {**os.environ, "PYTHONHASHSEED": "0", CHILD_SRC: str(src)}
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    environ["PYTHONPATH"] = os.pathsep.join([str(src), str(REPO)])
    proc = subprocess.run([sys.executable, script, "--child", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if capture_stderr else None, text=True, env=environ, cwd=REPO,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(script).name} --child {' '.join(args)} failed ({proc.returncode}): "
                           f"{(proc.stderr or '')[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def child_ragaudit() -> ModuleType:
    """In a `run_child` child: ``ragaudit``, imported from the checkout it was given (checked: an installed
    ragaudit found first would measure the wrong code)."""
    src = os.environ[CHILD_SRC]
    sys.path.insert(0, src)
    ragaudit = importlib.import_module("ragaudit")
    if not str(Path(ragaudit.__file__ or "").resolve()).startswith(str(Path(src).resolve())):
        raise SystemExit(f"ragaudit came from {ragaudit.__file__}, not from {src}")
    return ragaudit


def best_us(fn: Callable[[], object], *, blocks: int, block: int, per: int | None = None) -> float:
    """The least of *blocks* blocks of *block* calls of *fn*, in µs of this thread's CPU per call (per *per*
    units of work when given): the least, because load on a shared machine only ever adds time."""
    best = float("inf")
    for _ in range(blocks):
        start = time.thread_time_ns()
        for _ in range(block):
            fn()
        best = min(best, (time.thread_time_ns() - start) / (per or block) / 1000)
    return best
