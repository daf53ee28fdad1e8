"""Gunicorn server hooks: ``from ragaudit.gunicorn import post_worker_init, worker_exit`` in ``gunicorn.conf.py``.

Without them ragaudit already flushes at a worker's shutdown in most setups (the exit hook; its SIGTERM
handler, put back in front of the server's at the worker's first turn; see ``docs/guides/serving.md``).
These two make it certain where ragaudit's code does not run on a worker's main thread before shutdown
(a FastAPI ``def`` endpoint runs the chain in a thread pool) or where a worker ends without exit hooks:

- `post_worker_init` installs ragaudit's SIGTERM handler in each worker, after gunicorn set the
  worker's signals and before its server starts (uvicorn's worker then restores ragaudit's handler at
  the end and re-raises SIGTERM into it);
- `worker_exit` shuts every Auditor down (each turn handed down, judged and exported, within
  ``exit_timeout_s``; a shortfall said on stderr) as the worker exits.

Nothing here imports gunicorn: the functions take gunicorn's arguments and use none of them.
"""

from __future__ import annotations

from typing import Any

from ._lifecycle import install_sigterm_handler, shut_down_all

__all__ = ["post_worker_init", "worker_exit"]


def post_worker_init(worker: Any) -> None:
    """Gunicorn's ``post_worker_init`` hook: ragaudit's SIGTERM handler in front of the worker's."""
    install_sigterm_handler()


def worker_exit(server: Any, worker: Any) -> None:
    """Gunicorn's ``worker_exit`` hook: every Auditor shut down before the worker process ends."""
    shut_down_all()
