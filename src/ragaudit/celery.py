"""Celery worker signals: ``import ragaudit.celery`` in the module that makes your Celery app.

A prefork pool child (billiard's) ends with ``os._exit`` right after Celery's
``worker_process_shutdown`` signal: no exit hook runs there, so the judgements still pending in the
child at a warm shutdown would be lost, and nothing would say so. Importing this module connects
two receivers (once, held strongly, whatever the number of imports):

- `worker_process_init`: ragaudit's SIGTERM handler installed in each pool child, after Celery reset
  the child's signals (a child terminated with SIGTERM flushes before it dies);
- `worker_process_shutdown`: every Auditor shut down as the child exits (each turn judged and
  exported within ``exit_timeout_s``; a shortfall said on stderr).

Celery is imported here only, when this module is imported: ``import ragaudit`` never imports it.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from ._lifecycle import install_sigterm_handler, shut_down_all

__all__ = ["worker_process_init", "worker_process_shutdown"]


def worker_process_init(**kwargs: Any) -> None:
    """Receiver of Celery's ``worker_process_init``: ragaudit's SIGTERM handler in the pool child."""
    install_sigterm_handler()


def worker_process_shutdown(**kwargs: Any) -> None:
    """Receiver of Celery's ``worker_process_shutdown``: every Auditor shut down before the child ends."""
    shut_down_all()


signals.worker_process_init.connect(worker_process_init, weak=False, dispatch_uid="ragaudit.worker_process_init")
signals.worker_process_shutdown.connect(worker_process_shutdown, weak=False,
                                        dispatch_uid="ragaudit.worker_process_shutdown")
