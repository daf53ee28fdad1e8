"""The serving benchmark of issue 50: a FastAPI RAG app under gunicorn with 2 uvicorn workers, 64 clients.

    python benchmarks/serving.py                      # 4 arms x (with, without --preload), 20 s each, 2 rounds
    python benchmarks/serving.py --duration 60        # the issue's 60 s per arm
    python benchmarks/serving.py --arms baseline ragaudit --no-preload-variants

The app (``benchmarks/_serving_app.py``): ``/ask`` runs an LCEL RAG chain with
``await chain.ainvoke(q, config={"callbacks": [handler]})``; its model is a loopback chat-completions server
answering in 30 ms, ragaudit's judge another answering in 20 ms, and OpenLLMetry's spans go to a loopback OTLP
collector that accepts and discards them -- all three in a process of their own. The arms: ``baseline`` (no
handler), ``noop`` (a LangChain handler that does nothing), ``ragaudit`` (``RagAuditCallbackHandler``, default
Auditor, the documented ``gunicorn.conf.py`` line) and ``openllmetry`` (``opentelemetry-instrumentation-langchain``,
BatchSpanProcessor, OTLP/HTTP). Each arm runs as a fresh ``gunicorn -k uvicorn_worker.UvicornWorker -w 2`` start,
with and without ``--preload``; arms are interleaved, round by round, so that the machine's load (shared: see
``uptime`` in the result) falls on every arm alike. An arm's window starts once every worker has answered a
request (the master accepts connections before its workers have imported the app). The load generator is a
process of its own: 64 clients on keep-alive connections spread evenly over the workers (as a load balancer
would; left to the shared listening socket, one worker often took most of them for a whole segment), each
sending its next request when the last answer came.

Per arm: requests/s and latency p50/p99 (over the measured window, after a warm-up), RSS per worker at the start
of the window and at its end, CPU per request (the workers' user+system time over the window / requests), the
event loop's lag p99 (each worker wakes every 10 ms and notes how late), exit time (SIGTERM to the master's
exit), and for ragaudit, audited vs served: every answer served must end as an audit-log line or a counted
reason (``sampled_out``, ``dropped``, ``close_dropped``), else it is reported as lost; the shed turns by reason
(``shed_cpu``: ``Limits.max_cpu_share``; ``shed_backlog``), and so the judged share, are in the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import REPO, machine_info, percentile, print_machine, write_result

ARMS = ("baseline", "noop", "ragaudit", "openllmetry")
ANSWER = "Returns are accepted within 30 days of delivery."
MODEL_DELAY_S = 0.03
JUDGE_DELAY_S = 0.02
GUNICORN_CONF = """from ragaudit.gunicorn import post_worker_init, worker_exit as _ragaudit_worker_exit  # noqa: F401


def worker_exit(server, worker):
    _ragaudit_worker_exit(server, worker)  # the documented hook: every Auditor shut down
    import sys

    app = sys.modules.get("benchmarks._serving_app")
    if app is not None and app.auditor is not None:
        app.write_stats(app.auditor.stats())
"""


# --- the loopback servers (a process of their own) --------------------------------------------------------------


class _Collector(BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP collector that reads each export and answers 200 (the spans are not decoded)."""

    protocol_version = "HTTP/1.1"
    requests = 0
    received = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).requests += 1
        type(self).received += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class _CollectorServer(ThreadingHTTPServer):
    request_queue_size = 256  # socketserver's default backlog is 5 (the model and judge servers' is 256 too)


def run_servers() -> int:
    """``--role servers``: the model, the judge and the collector; prints their URLs, runs until stdin closes,
    then prints how many requests each got."""
    from tests.support.llm_server import LLMServer

    with LLMServer(default=ANSWER, delay=MODEL_DELAY_S) as model, LLMServer(delay=JUDGE_DELAY_S) as judge:
        collector = _CollectorServer(("127.0.0.1", 0), _Collector)
        collector.daemon_threads = True
        threading.Thread(target=collector.serve_forever, daemon=True).start()
        print(
            json.dumps(
                {
                    "model": model.base_url,
                    "judge": judge.base_url,
                    "otlp": f"http://127.0.0.1:{collector.server_address[1]}/v1/traces",
                }
            ),
            flush=True,
        )
        sys.stdin.read()
        print(
            json.dumps(
                {
                    "model_requests": len(model.requests),
                    "judge_requests": len(judge.requests),
                    "otlp_requests": _Collector.requests,
                    "otlp_bytes": _Collector.received,
                }
            ),
            flush=True,
        )
        collector.shutdown()
    return 0


# --- the load generator (a process of its own) ------------------------------------------------------------------


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, q: str) -> tuple[bool, bytes]:
    writer.write(f"GET /ask?q={q} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
    status = (await reader.readline()).split(b" ", 2)[1]
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status == b"200", await reader.readexactly(length)


async def _connect_balanced(
    port: int, quota: int, conns: dict[int, int], counts: dict[str, int]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A keep-alive connection to a worker that has fewer than *quota* of the clients' connections.

    gunicorn's workers share one listening socket and the first to wake accepts: left alone, one worker often
    takes most of the 64 connections at once and keeps them for the whole segment (the other idles), which made
    whole segments of every arm collapse to half their throughput at random. A load balancer in front of the
    workers spreads the clients; so does this: a connection that landed on a full worker is closed and opened
    again (at most 400 tries, each one request, all in the warm-up), and the answer's ``pid`` tells the worker."""
    for _ in range(400):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ok, body = await _ask(reader, writer, "balance")
        pid = int(json.loads(body)["pid"]) if ok else -1
        if ok and conns.get(pid, 0) < quota:
            conns[pid] = conns.get(pid, 0) + 1
            return reader, writer
        writer.close()
        await asyncio.sleep(0.005)
    counts["unbalanced"] = counts.get("unbalanced", 0) + 1
    return await asyncio.open_connection("127.0.0.1", port)


async def _client(
    port: int,
    index: int,
    stop_at: float,
    window: tuple[float, float],
    quota: int,
    conns: dict[int, int],
    latencies: list[float],
    counts: dict[str, int],
) -> None:
    reader, writer = await _connect_balanced(port, quota, conns, counts)
    i = 0
    try:
        while time.monotonic() < stop_at:
            q = f"How%20do%20returns%20work%3F%20{index}-{i}"
            i += 1
            start = time.monotonic()
            ok, body = await _ask(reader, writer, q)
            end = time.monotonic()
            counts["ok" if ok else "errors"] += 1
            if ok and window[0] <= start and end <= window[1]:
                latencies.append(end - start)
                pid = f"served_by:{json.loads(body)['pid']}"
                counts[pid] = counts.get(pid, 0) + 1
    except (ConnectionError, asyncio.IncompleteReadError, IndexError) as exc:
        counts["broken"] += 1
        counts[f"broken:{type(exc).__name__}"] = counts.get(f"broken:{type(exc).__name__}", 0) + 1
    finally:
        writer.close()


def run_load(port: int, clients: int, workers: int, warmup_s: float, duration_s: float) -> int:
    """``--role load``: *clients* keep-alive clients, spread evenly over the *workers*, for warm-up + duration;
    prints one JSON line of figures (``served_by:<pid>``: answers in the window per worker)."""

    async def main() -> dict[str, Any]:
        now = time.monotonic()
        window = (now + warmup_s, now + warmup_s + duration_s)
        latencies: list[float] = []
        counts = {"ok": 0, "errors": 0, "broken": 0}
        quota, conns = -(-clients // workers), {}
        await asyncio.gather(
            *(_client(port, k, window[1], window, quota, conns, latencies, counts) for k in range(clients))
        )
        return {"latencies_ms": [round(v * 1000, 3) for v in latencies], "window_s": duration_s, **counts}

    print(json.dumps(asyncio.run(main())), flush=True)
    return 0


# --- one arm: a gunicorn start, the load, SIGTERM ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _wait_ready(port: int, proc: subprocess.Popen[bytes], workers: int, timeout_s: float = 120.0) -> list[int]:
    """The worker pids once every worker has answered a request: the master's socket accepts connections before
    the workers have imported the app (seconds on a loaded machine), so a connection alone proves nothing."""
    import http.client

    deadline = time.monotonic() + timeout_s
    answered: set[int] = set()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited at start (code {proc.returncode})")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/ask?q=ready")
            answered.add(int(json.loads(conn.getresponse().read())["pid"]))
            conn.close()
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            time.sleep(0.2)
        if answered >= set(_children(proc.pid)) and len(answered) >= workers:
            return _children(proc.pid)
    proc.kill()
    raise RuntimeError("gunicorn's workers did not all answer in time")


def run_arm(arm: str, preload: bool, urls: dict[str, str], args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    port = _free_port()
    stats_dir = Path(tempfile.mkdtemp(prefix=f"{arm}-", dir=workdir))
    audit_log = stats_dir / "audit.jsonl"
    conf = stats_dir / "gunicorn.conf.py"
    conf.write_text(GUNICORN_CONF)
    env = {
        **os.environ,
        "SERVE_ARM": arm,
        "SERVE_MODEL_URL": urls["model"],
        "SERVE_JUDGE_URL": urls["judge"],
        "SERVE_OTLP_URL": urls["otlp"],
        "SERVE_AUDIT_LOG": str(audit_log),
        "SERVE_STATS_DIR": str(stats_dir),
        "PYTHONPATH": f"{REPO}:{REPO / 'src'}",
        "OTEL_SDK_DISABLED": "false",
    }
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        "benchmarks._serving_app:app",
        "-k",
        "uvicorn_worker.UvicornWorker",
        "-w",
        str(args.workers),
        "-b",
        f"127.0.0.1:{port}",
        "-c",
        str(conf),
        "--graceful-timeout",
        "60",
        "--timeout",
        "120",
        "--log-level",
        "warning",
        *(["--preload"] if preload else []),
    ]
    err = (stats_dir / "stderr.txt").open("wb")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        workers = _wait_ready(port, proc, args.workers)
        load = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--role",
                "load",
                "--port",
                str(port),
                "--clients",
                str(args.clients),
                "--workers",
                str(args.workers),
                "--warmup",
                str(args.warmup),
                "--duration",
                str(args.segment),
            ],
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        time.sleep(args.warmup)
        rss_start = {pid: _rss_mb(pid) for pid in workers}
        cpu_start = sum(_cpu_s(pid) for pid in workers)
        time.sleep(args.segment)
        cpu_end = sum(_cpu_s(pid) for pid in workers)
        rss_end = {pid: _rss_mb(pid) for pid in workers}
        out, _ = load.communicate(timeout=120)
        figures = json.loads(out.decode().strip().splitlines()[-1])
        sigterm_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        exit_s = time.monotonic() - sigterm_at
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    latencies = figures.pop("latencies_ms")
    done = len(latencies)
    files = [json.loads(p.read_text()) for p in stats_dir.glob("worker-*.json")]
    lags = [v for f in files for v in f["lags_ms"]]
    result: dict[str, Any] = {
        "arm": arm,
        "preload": preload,
        "requests": done,
        "rps": done / args.segment,
        "p50_ms": percentile(latencies, 50) if latencies else None,
        "p99_ms": percentile(latencies, 99) if latencies else None,
        "rss_mb": [[round(rss_start[p] or 0, 1), round(rss_end[p] or 0, 1)] for p in workers],
        "cpu_ms_per_request": 1000 * (cpu_end - cpu_start) / max(done, 1),
        "loop_lag_p99_ms": percentile(lags, 99) if lags else None,
        "exit_s": exit_s,
        "exit_code": proc.returncode,
        "load": figures,
        "served": sum(f["served"] for f in files),
        "worker_files": len(files),
    }
    if arm == "ragaudit":
        result["audit"] = _audited(files, audit_log, result["served"])
    result["stderr_ragaudit"] = [
        line
        for line in (stats_dir / "stderr.txt").read_text(errors="replace").splitlines()
        if line.startswith("ragaudit")
    ][:10]
    return result


def _audited(files: list[dict[str, Any]], audit_log: Path, served: int) -> dict[str, Any]:
    """Every served answer: an audit-log line, or a counted reason without a line."""
    lines = sum(1 for _ in audit_log.open()) if audit_log.exists() else 0
    counted = {
        key: sum(f.get("auditor", {}).get(key, 0) for f in files)
        for key in (
            "sampled_out",
            "dropped",
            "shed_cpu",
            "shed_backlog",
            "close_dropped",
            "judged",
            "failed",
            "pending",
            "submitted",
        )
    }
    accounted = lines + counted["sampled_out"] + counted["dropped"] + counted["close_dropped"]
    return {
        "lines": lines,
        **counted,
        "accounted": accounted,
        "lost": served - accounted,
        "workers_reporting": sum("auditor" in f for f in files),
    }


# --- the whole run -----------------------------------------------------------------------------------------------


def _summary(runs: list[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    rows = []
    for preload in sorted({r["preload"] for r in runs}):
        runs_ok = [r for r in runs if r["p99_ms"] is not None]
        base = [r for r in runs_ok if r["arm"] == "baseline" and r["preload"] == preload]
        base_rps = sum(r["rps"] for r in base) / len(base) if base else None
        base_p99 = sum(r["p99_ms"] for r in base) / len(base) if base else None
        for arm in arms:
            mine = [r for r in runs_ok if r["arm"] == arm and r["preload"] == preload]
            if not mine:
                continue
            rps = sum(r["rps"] for r in mine) / len(mine)
            p99 = sum(r["p99_ms"] for r in mine) / len(mine)
            rows.append(
                {
                    "arm": arm,
                    "preload": preload,
                    "segments": len(mine),
                    "rps": rps,
                    "p50_ms": sum(r["p50_ms"] for r in mine) / len(mine),
                    "p99_ms": p99,
                    "rps_ratio": rps / base_rps if base_rps else None,
                    "p99_ratio": p99 / base_p99 if base_p99 else None,
                    "cpu_ms_per_request": sum(r["cpu_ms_per_request"] for r in mine) / len(mine),
                    "loop_lag_p99_ms": max(r["loop_lag_p99_ms"] or 0 for r in mine),
                    "rss_mb": [w for r in mine for w in r["rss_mb"]],
                    "exit_s": max(r["exit_s"] for r in mine),
                    "lost": sum(r.get("audit", {}).get("lost", 0) for r in mine),
                    "served": sum(r["served"] for r in mine),
                    **{
                        key: sum(r.get("audit", {}).get(key, 0) for r in mine)
                        for key in ("lines", "shed_cpu", "shed_backlog")
                    },
                }
            )
    return rows


def _print(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'arm':<12} {'preload':<7} {'req/s':>7} {'x':>5} {'p50':>7} {'p99':>7} {'x':>5} {'CPU/req':>8} "
        f"{'lag p99':>8} {'exit':>6}  RSS per worker"
    )
    for r in rows:
        rss = ", ".join(f"{a:.0f}->{b:.0f}" for a, b in r["rss_mb"])
        print(
            f"{r['arm']:<12} {r['preload']!s:<7} {r['rps']:7.1f} {r['rps_ratio'] or 0:5.2f} {r['p50_ms']:7.1f} "
            f"{r['p99_ms']:7.1f} {r['p99_ratio'] or 0:5.2f} {r['cpu_ms_per_request']:8.2f} "
            f"{r['loop_lag_p99_ms']:8.1f} {r['exit_s']:6.1f}  {rss}"
        )
        if r["arm"] == "ragaudit":
            print(
                f"{'':<12} audited: {r['lines']} lines of {r['served']} served; shed for CPU {r['shed_cpu']}, "
                f"for the backlog {r['shed_backlog']}; lost {r['lost']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("main", "servers", "load"), default="main", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--segment", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per arm (the issue: 60)")
    parser.add_argument("--rounds", type=int, default=2, help="the duration is split over this many interleaved starts")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before each measured window")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--preload", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--out", default=None, help="result file (default benchmarks/results/serving.json)")
    args = parser.parse_args(argv)
    if args.role == "servers":
        return run_servers()
    if args.role == "load":
        return run_load(args.port, args.clients, args.workers, args.warmup, args.segment or args.duration)
    args.segment = args.duration / args.rounds
    info = machine_info(("gunicorn", "uvicorn", "uvicorn-worker", "fastapi", "langchain-openai"))
    print_machine(info)
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load before: {uptime_before}")
    servers = subprocess.Popen(
        [sys.executable, __file__, "--role", "servers"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    assert servers.stdin is not None and servers.stdout is not None
    urls = json.loads(servers.stdout.readline())
    preloads = {"both": [False, True], "yes": [True], "no": [False]}[args.preload]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragaudit-serving-") as tmp:
        try:
            for round_ in range(args.rounds):
                for preload in preloads:
                    for arm in args.arms:
                        run = run_arm(arm, preload, urls, args, Path(tmp))
                        run["round"] = round_
                        runs.append(run)
                        print(
                            f"round {round_} {arm:<12} preload={preload!s:<5} {run['rps']:7.1f} req/s "
                            f"p99 {run['p99_ms'] or 0:.1f} ms  load {run['load']}  exit {run['exit_s']:.1f} s"
                            + (f"  audit {run['audit']}" if "audit" in run else ""),
                            flush=True,
                        )
        finally:
            servers.stdin.close()
            counts = json.loads(servers.stdout.readline() or "{}")
            servers.wait(timeout=30)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load after:  {uptime_after}")
    rows = _summary(runs, args.arms)
    _print(rows)
    write_result(
        "serving",
        {
            "machine": info,
            "uptime_before": uptime_before,
            "uptime_after": uptime_after,
            "settings": {
                "duration_s": args.duration,
                "rounds": args.rounds,
                "warmup_s": args.warmup,
                "clients": args.clients,
                "workers": args.workers,
                "model_delay_s": MODEL_DELAY_S,
                "judge_delay_s": JUDGE_DELAY_S,
            },
            "summary": rows,
            "runs": runs,
            "loopback_servers": counts,
        },
        quick=args.duration < 60,
        out=args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
