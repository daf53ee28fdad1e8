"""The app of issue 50 as a Celery task, run by a real prefork worker in tests/reliability/test_servers.py.

The task ``ragaudit_test.ask`` runs the LCEL RAG chain of ``_serving_app`` (its Auditor made at import,
so in the worker's main process, before billiard forks the pool) with the handler, on the pool child's
main thread. ``SERVE_BROKER_URL`` is the redis-server the test started (broker and result backend);
the other settings are ``_serving_app``'s.
"""

from __future__ import annotations

import os

from celery import Celery

from tests.reliability._serving_app import chain, handler

app = Celery("ragaudit_test", broker=os.environ["SERVE_BROKER_URL"], backend=os.environ["SERVE_BROKER_URL"])
app.conf.update(worker_prefetch_multiplier=1, task_acks_late=False, broker_connection_retry_on_startup=True)


@app.task(name="ragaudit_test.ask")
def ask(q: str) -> dict[str, object]:
    answer = chain.invoke(q, config={"callbacks": [handler]})
    return {"question": q, "answer": answer, "pid": os.getpid()}
