"""Where one turn's background time goes: CPU per turn off the host's thread, and its breakdown.

    python benchmarks/profile_background.py                  # instant, LexicalJudge and ChatRagJudge, 600 turns
    python benchmarks/profile_background.py --judges instant --turns 200

The pipeline is the LangChain LCEL chain of ``overhead.py`` in its default configuration (the audit
log written, judging in the background, spans through ``tracing.configure()``'s
``BatchSpanProcessor`` and OTLP/HTTP exporter to a loopback sink). Three judges: an instant
``FakeJudge``, ``LexicalJudge`` (offline, the default without an API key) and ``ChatRagJudge`` over
the loopback chat-completions server (``judge_throughput.py``'s, in a process of its own, no delay).

Each judge runs in a fresh process, twice:

* *measured* (no profiler): the same chain without ragaudit, then with it, N turns each, and the
  flush; background CPU per turn = (process CPU - the calling thread's CPU) / N, ragaudit's minus
  the bare chain's (LangChain runs a ``RunnableParallel`` branch on its executor thread).
* *profiled*: cProfile in every thread started after the start (``threading.setprofile``), the
  calling thread left out; each function's own time goes to one area of the background path (a
  built-in's, or a standard-library helper's such as JSON encoding, to the area of the function that
  called it most). Absolute times are inflated by the profiler; the shares are what matter, and the
  *measured* figure is the headline. ``--stats-dir DIR`` also writes each judge's merged profile
  (pstats), every function in it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import REPO, machine_info, print_machine, write_result

JUDGES = ("instant", "lexical", "chat")
FRAMEWORK = "framework (LangChain's executor thread)"

# (area, substrings of a function's file path), first match wins.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FRAMEWORK, ("langchain", "pydantic")),
    ("closing the turn (handler, assembler, citations)", ("ragaudit/integrations", "ragaudit/citations")),
    ("ragaudit span recording", ("ragaudit/tracing/spans", "ragaudit/tracing/_audit_spans",
                                 "ragaudit/tracing/conventions", "ragaudit/tracing/_span_base",
                                 "ragaudit/tracing/_judge_spans", "ragaudit/tracing/_session_spans",
                                 "ragaudit/tracing/evaluation_logs", "ragaudit/tracing/score_metrics")),
    ("OTLP encoding and export", ("opentelemetry/exporter", "google/protobuf", "opentelemetry/proto",
                                  "requests/", "urllib3/", "http/client")),
    ("OTel SDK (spans, processor)", ("opentelemetry/",)),
    ("audit log line", ("ragaudit/tracing/files", "json/", "orjson")),
    ("derived metrics", ("ragaudit/_turn_metrics", "ragaudit/metrics", "ragaudit/turn_audit")),
    ("judge", ("ragaudit/judges", "openai/")),
    ("HTTP client (httpx)", ("httpx/", "httpcore/", "h11/", "anyio/", "ssl.py", "socket.py", "selectors.py")),
    ("records and content policy", ("ragaudit/records", "ragaudit/content", "ragaudit/_text", "dataclasses")),
    ("auditor and worker bookkeeping", ("ragaudit/auditor", "ragaudit/_worker", "ragaudit/_export",
                                        "ragaudit/_sampling", "ragaudit/_log")),
    ("event loop and thread hand-offs", ("asyncio/", "threading.py", "concurrent/", "queue.py", "weakref")),
)


# Helpers whose own time is their caller's work: built-ins ("~") and the standard library's small helpers
# (JSON encoding, uuid, dataclasses.replace, ABC checks). Their time goes to the area of their heaviest
# caller, followed up to a few levels (json.dumps -> encode -> iterencode), so that a JSON text a span
# writes counts as span recording and one the audit log writes as the audit log line.
HELPERS = ("~", "/json/", "/uuid.py", "/dataclasses.py", "/copy.py", "<frozen abc>", "<frozen _collections_abc>",
           "/abc.py", "/typing.py", "/enum.py", "/functools.py")

# Built-ins that block (their "own time" is waiting): left out of the breakdown.
BLOCKING = ("acquire", "poll", "select", "recv_into", "recv", "sleep", "wait", "accept", "sendall", "send")


def area_of(filename: str) -> str:
    for area, needles in AREAS:
        if any(needle in filename for needle in needles):
            return area
    return "other"


def _is_helper(filename: str) -> bool:
    return filename == "~" or any(needle in filename for needle in HELPERS[1:])


def breakdown(stats: pstats.Stats) -> dict[str, float]:
    """Own time (s) per area; a helper's (`HELPERS`) own time goes to the area of its heaviest caller."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    areas: dict[str, float] = {}
    for func, (_cc, _nc, tottime, _ct, callers) in raw.items():
        filename = func[0]
        if filename == "~" and any(f"'{name}'" in func[2] for name in BLOCKING):
            continue  # a wait, not work (the per-thread CPU clock is not trusted across it)
        for _ in range(6):  # up the heaviest callers, past the helpers
            if not _is_helper(filename) or not callers:
                break
            heaviest = max(callers.items(), key=lambda item: item[1][2] if isinstance(item[1], tuple) else 0)[0]
            filename = heaviest[0]
            callers = raw.get(heaviest, (0, 0, 0, 0, {}))[4]
        area = area_of(filename)
        areas[area] = areas.get(area, 0.0) + tottime
    return areas


# --- one judge in a child process ---------------------------------------------------------------------


def _build(judge_kind: str, sink: str, llm_url: str | None) -> tuple[Any, Any, Any]:
    from benchmarks import overhead

    from ragaudit import tracing
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    if judge_kind == "chat":
        from ragaudit import ChatRagJudge

        judge: Any = ChatRagJudge(model="gpt-4o-mini", base_url=llm_url, api_key="dummy", max_retries=0)
    elif judge_kind == "lexical":
        from ragaudit import LexicalJudge

        judge = LexicalJudge()
    else:
        judge = overhead._fake_judge()
    import tempfile

    from ragaudit import Auditor, Limits

    provider = tracing.configure(endpoint=sink)
    log = Path(tempfile.mkdtemp(prefix="ragaudit-profile-")) / "ragaudit-audit.jsonl"
    # Every turn closed and judged: this measures what one turn costs in the background, so the CPU share cap
    # (which sheds turns of a saturated process, and this loop saturates it) is off.
    auditor = Auditor(judge, audit_log=log, tracer_provider=provider,
                      limits=Limits(max_concurrency=16, max_cpu_share=None))
    handler = RagAuditCallbackHandler(auditor=auditor)
    return overhead._langchain_chain(), handler, (auditor, provider, log)


def _run(chain: Any, config: dict[str, Any], turns: int, flush: Any) -> tuple[int, int]:
    from benchmarks.overhead import QUESTION

    cpu0, host0 = time.process_time_ns(), time.thread_time_ns()
    for _ in range(turns):
        chain.invoke(QUESTION, config=config)
    flush()
    return time.process_time_ns() - cpu0, time.thread_time_ns() - host0


def _top_ragaudit(stats: pstats.Stats, turns: int, count: int = 80) -> list[dict[str, Any]]:
    """ragaudit's functions by cumulative profiled time per turn (with their own time): where a stage's time goes."""
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "ragaudit/" in path:
            where = f"{path.split('ragaudit/', 1)[1]}:{line}({name})"
            rows.append({"function": where, "calls_per_turn": calls / turns, "cum_us": 1e6 * cumulative / turns,
                         "own_us": 1e6 * own / turns})
    rows.sort(key=lambda row: -row["cum_us"])
    return rows[:count]


def child(judge_kind: str, turns: int, sink: str, llm_url: str | None, profile: bool,
          stats_out: str | None = None) -> dict[str, Any]:
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_profile(*_: Any) -> None:
        # The first profile event of a new thread: replace this hook by a cProfile of that thread.
        sys.setprofile(None)
        prof = cProfile.Profile(time.thread_time)  # CPU, not the waits
        with lock:
            profiles.append(prof)
        prof.enable()

    if profile:  # every thread ragaudit, the SDK and LangChain start from here on
        threading.setprofile(start_profile)
    chain, handler, (auditor, provider, log) = _build(judge_kind, sink, llm_url)

    def flush() -> None:
        handler.force_flush(60)
        provider.force_flush()

    bare: dict[str, Any] = {}
    with_ra: dict[str, Any] = {"callbacks": [handler]}
    _run(chain, with_ra, 30, flush)  # warm up: threads, clients, imports
    _run(chain, bare, 30, lambda: None)
    if profile:
        with lock:
            for prof in profiles:
                prof.clear()  # the warm-up's first-time work is not the steady state
        _run(chain, with_ra, turns, flush)
        threading.setprofile(None)  # type: ignore[arg-type]
        for prof in profiles:
            prof.disable()
        stats: pstats.Stats | None = None
        for prof in profiles:
            prof.create_stats()
            if not prof.stats:  # type: ignore[attr-defined]
                continue  # a thread that did nothing after the warm-up
            if stats is None:
                stats = pstats.Stats(prof)
            else:
                stats.add(prof)
        if stats is not None and stats_out:
            stats.dump_stats(stats_out)  # for pstats / snakeviz: every function, not only ragaudit's
        areas = breakdown(stats) if stats is not None else {}
        areas.pop(FRAMEWORK, None)  # the bare chain's own work, not the background path's
        return {"judge": judge_kind, "turns": turns, "profiled_s_per_area": areas, "threads": len(profiles),
                "top_ragaudit": _top_ragaudit(stats, turns) if stats is not None else [], "stats": auditor.stats()}
    cpu_bare, host_bare = _run(chain, bare, turns, lambda: None)
    cpu_ra, host_ra = _run(chain, with_ra, turns, flush)
    background_bare = (cpu_bare - host_bare) / turns / 1000.0
    background_ra = (cpu_ra - host_ra) / turns / 1000.0
    with open(log, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return {"judge": judge_kind, "turns": turns, "background_cpu_us": background_ra - background_bare,
            "background_cpu_us_raw": background_ra, "background_cpu_us_bare_chain": background_bare,
            "host_cpu_us": (host_ra - host_bare) / turns / 1000.0, "audit_lines": len(records),
            "json": json_encoders(records), "stats": auditor.stats()}


def json_encoders(records: list[dict[str, Any]], rounds: int = 7) -> dict[str, Any]:
    """CPU per audit line: the standard library's encoder (as the audit log calls it) against orjson,
    on this run's own lines, alternated *rounds* times (median)."""
    try:
        import orjson
    except ImportError:
        return {"orjson": None}

    def stdlib() -> None:
        for record in records:
            json.dumps(record, ensure_ascii=False, default=str)

    def fast() -> None:
        for record in records:
            orjson.dumps(record, default=str).decode()

    times: dict[str, list[float]] = {"stdlib": [], "orjson": []}
    for _ in range(rounds):
        for name, encode in (("stdlib", stdlib), ("orjson", fast)):
            start = time.thread_time_ns()
            encode()
            times[name].append((time.thread_time_ns() - start) / len(records) / 1000.0)
    out: dict[str, Any] = {f"{name}_us_per_line": sorted(v)[len(v) // 2] for name, v in times.items()}
    out["bytes_per_line"] = sum(len(json.dumps(r, ensure_ascii=False)) for r in records) / len(records)
    out["orjson_version"] = orjson.__version__ if hasattr(orjson, "__version__") else None
    return out


# --- the parent ---------------------------------------------------------------------------------------


def _spawn(judge: str, turns: int, sink: str, llm_url: str | None, profile: bool,
           stats_dir: str | None = None) -> dict[str, Any]:
    args = [sys.executable, __file__, "--child", judge, "--turns", str(turns), "--sink", sink]
    if profile and stats_dir:
        args += ["--stats-out", str(Path(stats_dir) / f"profile_background.{judge}.pstats")]
    if llm_url:
        args += ["--llm-url", llm_url]
    if profile:
        args.append("--profile")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    done = subprocess.run(args, capture_output=True, text=True, cwd=str(REPO), env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{judge} child failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def print_report(results: dict[str, Any]) -> None:
    print("\n| judge | background CPU µs per turn | host-thread CPU µs per turn | audit lines |")
    print("|---|--:|--:|--:|")
    for judge, entry in results.items():
        m = entry["measured"]
        print(f"| {judge} | {m['background_cpu_us']:,.0f} | {m['host_cpu_us']:,.0f} | {m['audit_lines']} |")
    for judge, entry in results.items():
        j = entry["measured"]["json"]
        if j.get("orjson_us_per_line") is not None:
            print(f"audit line JSON ({judge}, {j['bytes_per_line']:,.0f} bytes): stdlib "
                  f"{j['stdlib_us_per_line']:.1f} us, orjson {j['orjson_us_per_line']:.1f} us per line")
    areas = sorted({a for e in results.values() for a in e["profile"]["profiled_s_per_area"]})
    print("\nshare of the profiled background time per area (cProfile; the host's thread left out):\n")
    print("| area | " + " | ".join(results) + " |")
    print("|---|" + "--:|" * len(results))
    totals = {j: sum(e["profile"]["profiled_s_per_area"].values()) or 1.0 for j, e in results.items()}
    order = sorted(areas, key=lambda a: -max(e["profile"]["profiled_s_per_area"].get(a, 0.0) / totals[j]
                                             for j, e in results.items()))
    for area in order:
        cells = []
        for judge, entry in results.items():
            share = entry["profile"]["profiled_s_per_area"].get(area, 0.0) / totals[judge]
            cells.append(f"{100 * share:.0f} %")
        print(f"| {area} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--judges", nargs="*", choices=JUDGES, default=list(JUDGES))
    parser.add_argument("--quick", action="store_true", help="smoke run: 40 turns")
    parser.add_argument("--out", help="result file (default benchmarks/results/profile_background[.quick].json)")
    parser.add_argument("--stats-dir", help="also write each judge's merged cProfile stats (pstats) here")
    parser.add_argument("--child", choices=JUDGES, help=argparse.SUPPRESS)
    parser.add_argument("--stats-out", help=argparse.SUPPRESS)
    parser.add_argument("--sink", help=argparse.SUPPRESS)
    parser.add_argument("--llm-url", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.turns, args.sink, args.llm_url, args.profile, args.stats_out)))
        return 0
    turns = 40 if args.quick else args.turns
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg()
    from benchmarks.judge_throughput import ServerProcess
    from tests.support.http_recorder import HttpRecorder

    server = ServerProcess(0.0) if "chat" in args.judges else None
    results: dict[str, Any] = {}
    try:
        with HttpRecorder() as sink:
            for judge in args.judges:
                url = server.base_url if server is not None and judge == "chat" else None
                results[judge] = {"measured": _spawn(judge, turns, sink.url, url, profile=False),
                                  "profile": _spawn(judge, turns, sink.url, url, profile=True,
                                                    stats_dir=args.stats_dir)}
                print(f"  {judge}: {results[judge]['measured']['background_cpu_us']:,.0f} us background CPU "
                      "per turn", flush=True)
    finally:
        if server is not None:
            server.close()
    print_report(results)
    write_result("profile_background", {"machine": info, "load_average": {"before": load_before,
                                                                          "after": os.getloadavg()},
                                        "turns": turns, "results": results}, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
