"""Judge throughput and cost: the Auditor with ChatRagJudge against a loopback server that takes 200 ms.

    python benchmarks/judge_throughput.py            # 2,000 turns, concurrency 32, 200 ms per reply
    python benchmarks/judge_throughput.py --quick    # 200 turns, concurrency 16, 50 ms (smoke run)

Method. The loopback chat-completions server of the test suite (``tests/support/llm_server.py``)
runs in a process of its own (so its threads do not share the Auditor's interpreter), answering
every request after a fixed delay. The Auditor (background mode, ``max_concurrency`` C, audit log
to a file, judge spans through an SDK ``BatchSpanProcessor`` to an exporter that discards them)
judges N turns with the real ``ChatRagJudge`` (the real ``openai`` SDK, ``max_retries=0``). A
producer keeps at most 4*C turns waiting (a service under sustained load, not one burst), so a
leak per judgement would show as RSS growth. Throughput = judged turns / time from the first
submit until ``flush()`` returns; the ideal is C / delay. RSS is sampled every 20 ms (peak, and at
25/50/75/100 % of the judgements); the tracemalloc peak comes from a second, identical run with
tracemalloc on (which slows Python down, so that run's throughput is not the headline).

Calls, prompt and completion tokens per judged answer come from the server's own request log
(tokens are the server's count: whitespace-separated words of every message and reply; rough, but
one rule for every judge). Target: >= 90 % of ideal at C=32, RSS flat, exactly one call per answer.

Peers. Where ``.venv-peers`` holds RAGAS, DeepEval and TruLens (``pip install ragas deepeval trulens
trulens-providers-openai`` into a venv of their own, so they cannot break ours), their
faithfulness + answer relevance + context relevance metrics run on the first turns against the
same server (``benchmarks/_peers.py``) and their calls and tokens are counted the same way. The
server answers their structured-output requests with the smallest valid instance of the schema
they ask for (``benchmarks/_replies.py``), so no call is repeated because of the replies. Where a
peer cannot run, its published call count is quoted instead (see ``PUBLISHED``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import REPO, machine_info, percentile, print_machine, rss_bytes, write_result

MODEL = "gpt-4o-mini"
TOP_K = 4
PEERS = ("ragas", "deepeval", "trulens")
PEER_VENV = REPO / ".venv-peers"
TARGET_RATIO = 0.90
TARGET_SDK_RATIO = 0.95
_KEEP_BODIES = 4096

# Published call counts per judged answer, for k retrieved chunks and s answer statements/sentences;
# quoted where a peer cannot run here.
PUBLISHED = {
    "ragas": {"calls": "about 3 + k (faithfulness 2: statements + verdicts; answer relevancy 1 with n=3; "
                       "context relevance 2 judges, or context precision k)",
              "source": "https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/"},
    "deepeval": {"calls": "8 + k (faithfulness 4: truths, claims, verdicts, reason; answer relevancy 3; "
                          "contextual relevancy k + 1)",
                 "source": "https://deepeval.com/docs/metrics-faithfulness (and -answer-relevancy, "
                           "-contextual-relevancy)"},
    "trulens": {"calls": "2 + s + k (groundedness: 1 per answer sentence s (+1 to split); answer relevance 1; "
                         "context relevance 1 per chunk k)",
                "source": "https://www.trulens.org/component_guides/evaluation/feedback_implementations/"},
}

QUESTIONS = [
    "How long is the return window for electronics?",
    "How long does express shipping take?",
    "What does the warranty cover?",
    "Can a lost gift card be replaced?",
    "How do I get a price match?",
    "How many loyalty points do I earn per euro?",
]
ANSWERS = [
    "Electronics can be returned within 30 days of delivery [1]. Refunds take five business days.",
    "Express shipping takes one to two business days and costs 9.99 [1].",
    "The warranty covers defects in materials and workmanship, not accidental damage [1].",
    "A lost gift card can be replaced once with the purchase receipt and the card number [1].",
    "Ask within 14 days of purchase; marketplace sellers are excluded [1].",
    "Loyalty members earn one point per euro spent [1].",
]


def make_turns(n: int) -> list[Any]:
    """*n* distinct turns: a question, its answer with a [1] marker, TOP_K documents (its own first)."""
    from benchmarks.overhead import DOC_TEXTS

    from ragaudit import RagTurn, RetrievedDoc

    order = [1, 0, 2, 3, 4, 5]  # DOC_TEXTS index of each question's own document
    turns = []
    for i in range(n):
        q = i % len(QUESTIONS)
        own = order[q]
        picks = [own, *[j for j in range(len(DOC_TEXTS)) if j != own][: TOP_K - 1]]
        docs = tuple(RetrievedDoc(id=f"doc-{j}", content=DOC_TEXTS[j][1], rank=r, source=DOC_TEXTS[j][0])
                     for r, j in enumerate(picks, 1))
        turns.append(RagTurn(turn_id=f"bench-{i}", query=f"{QUESTIONS[q]} (customer {i})", answer=ANSWERS[q],
                             documents=docs, framework="benchmark"))
    return turns


# --- the server process -------------------------------------------------------------------------------


def serve(delay: float) -> None:
    """Run the loopback server; commands on stdin: ``stats``, ``reset``, ``quit``."""
    from benchmarks._replies import reply_for
    from tests.support.llm_server import LLMServer

    lock = threading.Lock()
    log: list[dict[str, Any]] = []
    bodies: list[dict[str, Any]] = []  # the first requests since the last reset, for the bare-SDK run
    tool_calls: dict[int, tuple[str, str]] = {}

    def words(text: str) -> int:
        return len(text.split())

    def rule(body: dict[str, Any]) -> str:
        reply = reply_for(body)
        content = reply.get("content")
        if content is None:
            name, arguments = reply["tool_call"]
            content = arguments
            with lock:
                tool_calls[id(body)] = (name, arguments)
        messages = body.get("messages") or []
        prompt = 0
        for m in messages:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            prompt += words(c) if isinstance(c, str) else 0
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        with lock:
            if len(bodies) < _KEEP_BODIES:
                bodies.append(body)
            log.append({"prompt": prompt, "completion": words(content) * max(1, n), "n": n,
                        "tools": bool(body.get("tools")), "model": body.get("model")})
        return content

    class Server(LLMServer):
        def _completion(self, body: Any, scripted: Any, seq: int) -> tuple[dict[str, Any], float]:
            payload, wait = super()._completion(body, scripted, seq)
            with lock:
                call = tool_calls.pop(id(body), None)
            if call is not None:  # the peer asked for a tool call (instructor's TOOLS mode)
                for choice in payload["choices"]:
                    choice["message"]["tool_calls"] = [{"id": f"call_{seq}", "type": "function",
                                                        "function": {"name": call[0], "arguments": call[1]}}]
                    choice["message"]["content"] = None
                    choice["finish_reason"] = "tool_calls"
            return payload, wait

    with Server(rule=rule, delay=delay) as srv:
        print(json.dumps({"base_url": srv.base_url}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "stats":
                with lock:
                    entries = list(log)
                print(json.dumps({"requests": srv.request_count, "chat_calls": len(entries),
                                  "prompt_tokens": sum(e["prompt"] for e in entries),
                                  "completion_tokens": sum(e["completion"] for e in entries),
                                  "n_gt_1": sum(1 for e in entries if e["n"] > 1),
                                  "tool_calls": sum(1 for e in entries if e["tools"])}), flush=True)
            elif command == "bodies":
                with lock:
                    kept = list(bodies)
                print(json.dumps({"bodies": kept}), flush=True)
            elif command == "reset":
                with lock:
                    log.clear()
                    bodies.clear()
                srv.reset()
                srv.rule, srv.delay = rule, delay
                print("{}", flush=True)
            elif command == "quit":
                break


class ServerProcess:
    def __init__(self, delay: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(delay)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        self.base_url: str = self._read()["base_url"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"server process exited ({self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def command(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(10)
        except Exception:
            self.proc.kill()


# --- the throughput run -------------------------------------------------------------------------------


class _DiscardingExporter:
    """A span exporter that drops everything (the spans are made and batched, not kept)."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def run_auditor(base_url: str, turns: list[Any], concurrency: int, *, trace_memory: bool,
                workdir: Path) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ragaudit import Auditor, ChatRagJudge, Limits

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_DiscardingExporter()))  # type: ignore[arg-type]
    judge = ChatRagJudge(model=MODEL, base_url=base_url, api_key="dummy", max_retries=0, timeout_s=60)
    done = {"n": 0}
    latencies: list[float] = []
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    lock = threading.Lock()

    def on_judgement(turn: Any, judgement: Any) -> None:
        with lock:
            done["n"] += 1
            if judgement.latency_s is not None:
                latencies.append(judgement.latency_s)
            for key in usage:
                usage[key] += int(judgement.usage.get(key, 0))

    auditor = Auditor(judge, limits=Limits(max_concurrency=concurrency, max_queue=10_000, timeout_s=60),
                      audit_log=workdir / "audit.jsonl",
                      tracer_provider=provider, on_judgement=on_judgement)
    # Warm up (connections, the worker thread, imports), then start counting from zero.
    for turn in turns[:concurrency]:
        auditor.submit(turn)
    auditor.force_flush(60)
    with lock:
        done["n"] = 0
        latencies.clear()
        usage.update(calls=0, prompt_tokens=0, completion_tokens=0)
    warm_stats = auditor.stats()

    samples: list[tuple[float, int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with lock:
                n = done["n"]
            samples.append((time.perf_counter(), rss_bytes(), n))
            stop.wait(0.02)

    if trace_memory:
        tracemalloc.start()
    sampler = threading.Thread(target=sample, daemon=True)
    window = 4 * concurrency
    started, cpu_started = time.perf_counter(), time.process_time()
    sampler.start()
    for turn in turns:
        while auditor.stats()["pending"] >= window:
            time.sleep(0.005)  # a poll every 5 ms: under 1 judgement at 160/s, and little CPU
        auditor.submit(turn)
    flushed = auditor.force_flush(600)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    stop.set()
    sampler.join()
    traced_peak = None
    if trace_memory:
        traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    stats = auditor.stats()
    auditor.shutdown(30)
    judge.close()
    provider.shutdown()

    n = len(turns)
    at: dict[str, float | None] = {}
    for q in (25, 50, 75, 100):
        hit = next((rss for _, rss, k in samples if k >= n * q / 100), samples[-1][1] if samples else None)
        at[f"{q}%"] = hit / 2**20 if hit is not None else None
    rss_values = [rss for _, rss, _ in samples]
    growth = (at["100%"] - at["25%"]) if at["100%"] is not None and at["25%"] is not None else None
    return {
        "turns": n,
        "flushed": flushed,
        "elapsed_s": elapsed,
        "judgements_per_s": stats["judged"] / elapsed if elapsed else None,
        # The process's CPU (every thread: producer, judging loop, export, sampler) per judged turn.
        "cpu_ms_per_judgement": 1000 * cpu / n,
        "stats": {k: stats[k] - warm_stats.get(k, 0) if k in ("submitted", "judged", "failed") else stats[k]
                  for k in stats},
        "latency_s": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)} if latencies else None,
        "usage_reported": dict(usage),
        "rss_mb": {"peak": max(rss_values) / 2**20 if rss_values else None, "at": at,
                   "growth_25_to_100": growth},
        "tracemalloc_peak_mb": traced_peak / 2**20 if traced_peak is not None else None,
    }


def run_bare_sdk(base_url: str, bodies: list[dict[str, Any]], n: int, concurrency: int) -> dict[str, Any]:
    """The bare ``openai`` SDK: the same request bodies, *concurrency* threads of one shared client.

    What a hand-written judging loop would do (a ``ThreadPoolExecutor`` around
    ``client.chat.completions.create`` and ``json.loads`` of the reply): the ceiling the Auditor is
    measured against.
    """
    from concurrent.futures import ThreadPoolExecutor, wait

    import openai

    client = openai.OpenAI(base_url=base_url, api_key="dummy", max_retries=0, timeout=60)
    failures = {"n": 0}

    def call(body: dict[str, Any]) -> None:
        try:
            reply = client.chat.completions.create(**body)
            json.loads(reply.choices[0].message.content or "{}")
        except Exception:
            failures["n"] += 1

    with ThreadPoolExecutor(concurrency) as pool:
        wait([pool.submit(call, bodies[i % len(bodies)]) for i in range(concurrency)])  # warm up
        started, cpu_started = time.perf_counter(), time.process_time()
        futures = [pool.submit(call, bodies[i % len(bodies)]) for i in range(n)]
        wait(futures)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    client.close()
    done = n - failures["n"]
    return {"turns": n, "elapsed_s": elapsed, "per_s": done / elapsed if elapsed else None,
            "cpu_ms_per_request": 1000 * cpu / n,
            "failed": failures["n"]}


def judge_same_turns(base_url: str, turns: list[Any]) -> dict[str, Any]:
    """ragaudit's ChatRagJudge on *turns*, one after the other (for the side-by-side with the peers)."""
    from ragaudit import ChatRagJudge, JudgeRequest

    judge = ChatRagJudge(model=MODEL, base_url=base_url, api_key="dummy", max_retries=0, timeout_s=60)
    results = [judge.judge(JudgeRequest.from_turn(turn)) for turn in turns]
    judge.close()
    return {"scores": [j.scores() for j in results], "errors": sorted({j.error for j in results if j.error})}


def run_peer(peer: str, server: ServerProcess, turns: list[Any], timeout: float) -> dict[str, Any]:
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        return {"ran": False, "why": f"{PEER_VENV} not found", **PUBLISHED[peer]}
    payload = [{"query": t.query, "answer": t.answer, "contexts": [d.content for d in t.documents]} for t in turns]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload, f)
    server.command("reset")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTHONPATH"))}
    try:
        done = subprocess.run([str(python), str(REPO / "benchmarks" / "_peers.py"), peer, f.name,
                               server.base_url], capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": f"timed out after {timeout:.0f} s", **PUBLISHED[peer]}
    finally:
        os.unlink(f.name)
    counts = server.command("stats")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"ran": False, "why": f"exit {done.returncode}: {' | '.join(tail)}"[:400], **PUBLISHED[peer]}
    result = json.loads(lines[-1])
    n = len(turns)
    result.update({"ran": True, "server": counts, "calls_per_answer": counts["chat_calls"] / n,
                   "prompt_tokens_per_answer": counts["prompt_tokens"] / n,
                   "completion_tokens_per_answer": counts["completion_tokens"] / n,
                   "published": PUBLISHED[peer]})
    return result


def _percent(ratio: float | None) -> str:
    """A ratio as a percentage, or "n/a" when there is none (nothing was judged)."""
    return "n/a" if ratio is None else f"{100 * ratio:.1f} %"


def _auditor_round(server: ServerProcess, turns: list[Any], concurrency: int, ideal: float,
                   workdir: Path) -> dict[str, Any]:
    server.command("reset")
    run = run_auditor(server.base_url, turns, concurrency, trace_memory=False, workdir=workdir)
    counts = server.command("stats")
    judged = run["stats"]["judged"]
    # The warm-up's calls are in the log too: count only this run's.
    run_calls = counts["chat_calls"] - concurrency
    run["server"] = counts
    run["calls_per_answer"] = run["usage_reported"]["calls"] / judged if judged else None
    run["server_calls_per_answer"] = run_calls / judged if judged else None
    run["prompt_tokens_per_answer"] = run["usage_reported"]["prompt_tokens"] / judged if judged else None
    run["completion_tokens_per_answer"] = (run["usage_reported"]["completion_tokens"] / judged if judged else None)
    run["ideal_per_s"] = ideal
    run["ratio_to_ideal"] = run["judgements_per_s"] / ideal if run["judgements_per_s"] else None
    return run


def _interleaved(server: ServerProcess, turns: list[Any], concurrency: int, latency: float, rounds: int,
                 workdir: Path) -> dict[str, Any]:
    """Auditor and bare SDK alternately, *rounds* times each; the Auditor's last round is the record,
    the throughputs of every round are kept, the headline ratio is of the medians."""
    ideal = concurrency / latency
    auditor_runs: list[dict[str, Any]] = []
    sdk_runs: list[dict[str, Any]] = []
    bodies: list[dict[str, Any]] = []
    for r in range(rounds):
        order = ("auditor", "sdk") if r % 2 == 0 else ("sdk", "auditor")
        for which in order:
            if which == "auditor":
                auditor_runs.append(_auditor_round(server, turns, concurrency, ideal, workdir))
                bodies = bodies or server.command("bodies")["bodies"][concurrency:]  # after the warm-up
            else:  # round 0 runs the Auditor first: its request bodies are replayed here
                server.command("reset")
                sdk_runs.append(run_bare_sdk(server.base_url, bodies, len(turns), concurrency))
    run = auditor_runs[-1]
    ours = sorted(r["judgements_per_s"] for r in auditor_runs)
    theirs = sorted(r["per_s"] for r in sdk_runs)
    ours_median, theirs_median = percentile(ours, 50), percentile(theirs, 50)
    run["rounds_per_s"] = [r["judgements_per_s"] for r in auditor_runs]
    run["rounds_cpu_ms"] = [r["cpu_ms_per_judgement"] for r in auditor_runs]
    run["judgements_per_s"] = ours_median
    run["ratio_to_ideal"] = ours_median / ideal
    run["bare_sdk"] = {"rounds_per_s": [r["per_s"] for r in sdk_runs], "per_s": theirs_median,
                       "ratio_to_ideal": theirs_median / ideal, "failed": sum(r["failed"] for r in sdk_runs),
                       "requests_replayed": len(bodies), "rounds_cpu_ms": [r["cpu_ms_per_request"] for r in sdk_runs]}
    run["ratio_to_bare_sdk"] = ours_median / theirs_median if theirs_median else None
    return run


def _print_throughput(run: dict[str, Any], sdk: dict[str, Any], ideal: float, concurrency: int,
                      latency: float) -> None:
    judged = run["stats"]["judged"]
    print(f"\nthroughput: {judged} judged in {run['elapsed_s']:.2f} s; median of rounds "
          f"{run['judgements_per_s']:.1f}/s ({', '.join(f'{v:.1f}' for v in run['rounds_per_s'])}), "
          f"ideal {ideal:.0f}/s (C={concurrency} / {latency:g} s): {_percent(run['ratio_to_ideal'])} "
          f"(target >= {100 * TARGET_RATIO:.0f} %)")
    ratio = run["ratio_to_bare_sdk"]
    print(f"bare openai SDK, {concurrency} threads, same request bodies: {sdk['per_s']:.1f}/s "
          f"({', '.join(f'{v:.1f}' for v in sdk['rounds_per_s'])}); Auditor / bare SDK = "
          f"{'n/a' if ratio is None else f'{ratio:.2f}'}x (target >= {TARGET_SDK_RATIO})")
    print("process CPU ms per judgement, each round: Auditor " + ", ".join(f"{v:.2f}" for v in run["rounds_cpu_ms"])
          + "; bare SDK " + ", ".join(f"{v:.2f}" for v in sdk["rounds_cpu_ms"]))
    rss = run["rss_mb"]
    print(f"RSS: peak {rss['peak']:.1f} MB; at 25/50/75/100 %: "
          + " / ".join(f"{v:.1f}" for v in rss["at"].values() if v is not None)
          + f" MB (growth {rss['growth_25_to_100']:+.1f} MB)")
    print(f"calls per judged answer: {run['calls_per_answer']:.3f} (judge usage), "
          f"{run['server_calls_per_answer']:.3f} (server log); tokens per answer: prompt "
          f"{run['prompt_tokens_per_answer']:.0f}, completion {run['completion_tokens_per_answer']:.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 turns, concurrency 16, 50 ms")
    parser.add_argument("-n", type=int, help="turns (default 2000)")
    parser.add_argument("--concurrency", type=int, help="Auditor max_concurrency (default 32)")
    parser.add_argument("--latency", type=float, help="server delay per reply in seconds (default 0.2)")
    parser.add_argument("--peer-turns", type=int, help="turns each peer judges (default 10)")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers")
    parser.add_argument("--rounds", type=int, help="Auditor and bare-SDK runs, alternated (default 3; quick 1)")
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc run")
    parser.add_argument("--out", help="result file (default benchmarks/results/judge_throughput[.quick].json)")
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return 0
    n = args.n or (200 if args.quick else 2000)
    concurrency = args.concurrency or (16 if args.quick else 32)
    latency = args.latency if args.latency is not None else (0.05 if args.quick else 0.2)
    peer_turns = args.peer_turns or (2 if args.quick else 10)
    args.rounds = args.rounds or (1 if args.quick else 3)
    info = machine_info(("ragas", "deepeval", "trulens-core"))
    print_machine(info)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    turns = make_turns(n)
    ideal = concurrency / latency
    server = ServerProcess(latency)
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run = _interleaved(server, turns, concurrency, latency, args.rounds, Path(tmp))
            results["throughput"] = run
            results["bare_sdk"] = run.pop("bare_sdk")
            _print_throughput(run, results["bare_sdk"], ideal, concurrency, latency)
            if not args.no_tracemalloc:
                server.command("reset")
                traced = run_auditor(server.base_url, turns, concurrency, trace_memory=True, workdir=Path(tmp))
                results["tracemalloc_run"] = {k: traced[k] for k in ("turns", "elapsed_s", "judgements_per_s",
                                                                     "tracemalloc_peak_mb", "rss_mb")}
                print(f"tracemalloc run: peak traced {traced['tracemalloc_peak_mb']:.1f} MB "
                      f"({traced['judgements_per_s']:.1f} judgements/s with tracemalloc on)")
        same = turns[:peer_turns]
        server.command("reset")
        ours = judge_same_turns(server.base_url, same)
        counts = server.command("stats")
        cost: dict[str, Any] = {"ragaudit": {"ran": True, "judge": f"ChatRagJudge({MODEL})", "server": counts,
                                             "calls_per_answer": counts["chat_calls"] / len(same),
                                             "prompt_tokens_per_answer": counts["prompt_tokens"] / len(same),
                                             "completion_tokens_per_answer": counts["completion_tokens"] / len(same),
                                             "errors": ours["errors"]}}
        for peer in PEERS:
            if args.no_peers:
                cost[peer] = {"ran": False, "why": "--no-peers", **PUBLISHED[peer]}
                continue
            print(f"peer {peer} ...", flush=True)
            cost[peer] = run_peer(peer, server, same, timeout=900)
        results["cost"] = {"turns": len(same), "top_k": TOP_K, "judges": cost}
    finally:
        server.close()
    print(f"\ncost per judged answer on the same {peer_turns} turns (k={TOP_K} chunks):")
    base = results["cost"]["judges"]["ragaudit"]
    for name, entry in results["cost"]["judges"].items():
        if entry.get("ran"):
            extra = f"  errors: {entry['errors'][:2]}" if entry.get("errors") else ""
            times = entry["calls_per_answer"] / base["calls_per_answer"]
            print(f"  {name:<9} calls {entry['calls_per_answer']:5.2f} (x{times:.1f})"
                  f"  prompt tokens {entry['prompt_tokens_per_answer']:7.0f}"
                  f"  completion tokens {entry['completion_tokens_per_answer']:6.0f}{extra}")
        else:
            print(f"  {name:<9} not run ({entry['why']}); published: {entry['calls']}")
    throughput = results["throughput"]
    targets = {
        "throughput_ratio_ge_0.9": bool(throughput["ratio_to_ideal"] and throughput["ratio_to_ideal"] >= TARGET_RATIO),
        "bare_sdk_ratio_ge_0.95": bool(throughput["ratio_to_bare_sdk"]
                                       and throughput["ratio_to_bare_sdk"] >= TARGET_SDK_RATIO),
        "one_call_per_answer": throughput["server_calls_per_answer"] == 1.0 and throughput["calls_per_answer"] == 1.0,
        "no_failures": throughput["stats"]["failed"] == 0 and throughput["stats"]["dropped"] == 0,
    }
    growth = throughput["rss_mb"]["growth_25_to_100"]
    targets["rss_flat_within_10mb"] = growth is not None and growth < 10.0
    print(f"targets: {targets}")
    write_result("judge_throughput", {
        "machine": info,
        "load_average": {"before": load_before, "after": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "config": {"turns": n, "concurrency": concurrency, "latency_s": latency, "model": MODEL, "top_k": TOP_K,
                   "producer_window": 4 * concurrency, "peer_turns": peer_turns,
                   "rounds": args.rounds},
        "results": results, "targets": targets,
    }, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
