"""Turn closing off the host's thread: the queue behind :meth:`Auditor.defer`."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

__all__ = ["Closer"]

_CLOSE_BATCH = 64
_CLOSE_DELAY_S = 0.1


class Closer:
    """A bounded queue of jobs run in batches on one background thread (see :meth:`Auditor.defer`).

    ``put`` never blocks: it appends to a deque and wakes the thread only when the queue was empty or
    holds a full batch, so a busy host wakes it about once per batch, not once per turn. The thread
    then waits up to *delay_s* for a batch to gather (a flush cuts the wait short) and runs the jobs
    in order. ``drain`` waits until every job put so far has run.
    """

    def __init__(self, max_queue: int, on_error: Callable[[BaseException], None],
                 batch: int = _CLOSE_BATCH, delay_s: float = _CLOSE_DELAY_S) -> None:
        self.max_queue = max_queue
        self._batch = batch
        self._delay_s = delay_s
        self._on_error = on_error
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._running = False
        self._urgent = 0
        self._thread: threading.Thread | None = None

    def put(self, job: Callable[[], None]) -> bool:
        jobs = self._jobs
        if len(jobs) >= self.max_queue:
            return False
        jobs.append(job)
        if self._thread is None:
            self._start()
        queued = len(jobs)
        if queued == 1 or queued == self._batch:
            with self._cond:
                self._cond.notify()
        return True

    def drain(self, timeout: float | None) -> bool:
        """Run what is queued now and wait for it; False when *timeout* (seconds) ran out first."""
        if threading.current_thread() is self._thread:
            return True  # a job that flushes must not wait for itself
        thread = self._thread
        if thread is None or not thread.is_alive():
            # No thread to run them (it could not start, or the process was forked): run them here.
            self._run_jobs()
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._urgent += 1
            self._cond.notify_all()
            try:
                while self._jobs or self._running:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._urgent -= 1
        return True

    def __len__(self) -> int:
        return len(self._jobs)

    def _start(self) -> None:
        with self._cond:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="ragaudit-closer", daemon=True)
                thread.start()
                self._thread = thread

    def _loop(self) -> None:
        cond, jobs = self._cond, self._jobs
        while True:
            with cond:
                while not jobs:
                    cond.wait()
                if not self._urgent and len(jobs) < self._batch:
                    cond.wait(self._delay_s)  # let a batch gather; put() or drain() cut this short
                self._running = True
            try:
                self._run_jobs()
            finally:
                with cond:
                    self._running = False
                    cond.notify_all()

    def _run_jobs(self) -> None:
        jobs = self._jobs
        while jobs:
            try:
                job = jobs.popleft()
            except IndexError:
                return
            try:
                job()
            except Exception as exc:
                self._on_error(exc)


