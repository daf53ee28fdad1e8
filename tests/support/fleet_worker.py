"""One worker of the fleet tests: ``python -m tests.support.fleet_worker ARGS``.

What ``ragaudit worker`` runs (:class:`ragaudit.integrations.otlp.Worker`, served until SIGTERM), made
with the Python API so that every worker of the fleet shares one judge budget in Redis
(``budget_store``): a real ``ChatRagJudge`` against the loopback server at ``--judge-url``. At exit it
prints its ``stats()`` as one JSON line.
"""

from __future__ import annotations

import argparse
import json

from ragaudit import Budget, ChatRagJudge, CostControl, Sessions
from ragaudit.integrations.otlp import Worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--otlp-endpoint", required=True)
    parser.add_argument("--judge-url", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--max-calls", type=int, required=True)
    parser.add_argument("--quiet", type=float, default=0.5)
    parser.add_argument("--max-spans", type=int, default=1_000_000, help="spans buffered before 503")
    parser.add_argument("--max-queue", type=int, default=10_000, help="turns waiting for the judge before 503")
    parser.add_argument("--session-idle", type=float, default=None, help="also judge sessions, idle after this")
    args = parser.parse_args()
    judge = ChatRagJudge("judge-model", base_url=args.judge_url, api_key="sk-test", max_retries=0, timeout_s=30)
    worker = Worker(judge, port=args.port, otlp_endpoint=args.otlp_endpoint, quiet_s=args.quiet, max_wait_s=20,
                    cost=CostControl(budget=Budget(max_calls=args.max_calls), store=args.store), metrics_interval_s=1.0,
                    shutdown_timeout_s=20, max_spans=args.max_spans,
                    max_queue=args.max_queue,
                    sessions=Sessions(session_idle_s=args.session_idle) if args.session_idle else None)
    worker.run()
    print(json.dumps(worker.stats(), default=str), flush=True)


if __name__ == "__main__":
    main()
