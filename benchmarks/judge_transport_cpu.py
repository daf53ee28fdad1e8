"""CPU per request of the judge's HTTP client against the openai SDK's default one (issue 44).

    python benchmarks/judge_transport_cpu.py          # 6 alternated rounds of 1,500 requests each
    python benchmarks/judge_transport_cpu.py --quick  # 2 rounds of 300

Method. The loopback chat-completions server runs in a process of its own (``judge_throughput.py``'s
``ServerProcess``, no delay). In this process an ``openai.AsyncOpenAI`` client sends the same body
(a 400-word message) through ``client.post()``, 32 at a time: once with the SDK's default HTTP client,
once with the one a ``ChatRagJudge`` makes (``ragaudit.judges.llm._http``: the deadline transport on
``httpcore``'s pool), alternated, each round in a fresh client after 32 warm-up requests. The figure
is this process's CPU time per request (``time.process_time``): the cost of the deadline on every
socket operation, isolated from the Auditor's own work. Run it in a venv per openai major.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import machine_info, print_machine, write_result
from benchmarks.judge_throughput import ServerProcess

CONCURRENCY = 32
BODY = {"model": "judge-model", "messages": [{"role": "user", "content": "word " * 400}]}


async def _round(openai: Any, url: str, http_client: Any, n: int) -> float:
    client = openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0,
                                **({"http_client": http_client} if http_client is not None else {}))
    gate = asyncio.Semaphore(CONCURRENCY)
    completion = openai.types.chat.ChatCompletion

    async def one() -> None:
        async with gate:
            await client.post("/chat/completions", body=BODY, cast_to=completion)

    try:
        await asyncio.gather(*(one() for _ in range(CONCURRENCY)))  # warm up: connections open
        started = time.process_time()
        await asyncio.gather(*(one() for _ in range(n)))
        return 1000 * (time.process_time() - started) / n
    finally:
        await client.close()


async def _rounds(url: str, rounds: int, n: int) -> dict[str, list[float]]:
    import openai

    from ragaudit.judges.llm._http import http_clients

    _, make_async = http_clients(openai, 30.0)
    out: dict[str, list[float]] = {"sdk_default": [], "ragaudit": []}
    for r in range(rounds):
        for which in (("sdk_default", "ragaudit") if r % 2 == 0 else ("ragaudit", "sdk_default")):
            client = make_async() if which == "ragaudit" else None
            out[which].append(await _round(openai, url, client, n))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 300 requests")
    parser.add_argument("--out", help="result file (default benchmarks/results/judge_transport_cpu[.quick].json)")
    args = parser.parse_args(argv)
    rounds, n = (2, 300) if args.quick else (6, 1500)
    info = machine_info(("httpx", "httpx2", "httpcore", "httpcore2"))
    print_machine(info)
    server = ServerProcess(0.0)
    try:
        cpu = asyncio.run(_rounds(server.base_url, rounds, n))
    finally:
        server.close()
    medians = {k: statistics.median(v) for k, v in cpu.items()}
    ratio = medians["ragaudit"] / medians["sdk_default"]
    for which, values in cpu.items():
        print(f"{which:<12} CPU ms per request, each round: {', '.join(f'{v:.2f}' for v in values)}; "
              f"median {medians[which]:.2f}")
    print(f"ragaudit / SDK default = {ratio:.2f}x CPU per request")
    write_result("judge_transport_cpu", {"machine": info, "config": {"rounds": rounds, "requests": n,
                                                                     "concurrency": CONCURRENCY},
                                         "results": {"cpu_ms_per_request": cpu, "median": medians,
                                                     "ratio": ratio}},
                 quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
