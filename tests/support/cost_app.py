"""One app process of the shared-budget tests: ``python -m tests.support.cost_app ARGS``.

It judges *turns* turns with a real ChatRagJudge against the loopback server at ``--judge-url``,
through an Auditor whose budget and rate live in the Redis at ``--store``, waits ``--run-s`` seconds
(or until everything is judged), and prints its ``stats()`` as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from ragaudit import Auditor, Budget, ChatRagJudge, CostControl, Limits, RagTurn, RetrievedDoc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge-url", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--max-calls", type=int, default=None)
    parser.add_argument("--max-rps", type=float, default=None)
    parser.add_argument("--run-s", type=float, default=60.0)
    args = parser.parse_args()
    judge = ChatRagJudge("gpt-4o-mini", base_url=args.judge_url, api_key="sk-test", max_retries=0, timeout_s=30)
    budget = Budget(max_calls=args.max_calls) if args.max_calls else None
    auditor = Auditor(judge, limits=Limits(timeout_s=args.run_s + 30, max_queue=args.turns, exit_timeout_s=2),
                      cost=CostControl(budget=budget, max_rps=args.max_rps, store=args.store), audit_log=None)
    doc = RetrievedDoc(id="returns", content="Items can be returned within 30 days of delivery.", rank=1)
    for i in range(args.turns):
        auditor.submit(RagTurn(turn_id=f"{os.getpid()}-{i}", query="How long do I have to return an item?",
                               answer="Within 30 days of delivery.", documents=(doc,)))
    deadline = time.monotonic() + args.run_s
    while time.monotonic() < deadline and auditor.stats()["pending"]:
        time.sleep(0.1)
    print(json.dumps(auditor.stats()), flush=True)
    os._exit(0)  # what is still waiting for a rate slot is this test's to count, not to judge at exit


if __name__ == "__main__":
    main()
