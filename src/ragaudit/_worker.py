"""The one background worker: every job ragaudit runs off the host's threads runs on a BatchWorker.

Judging (the Auditor), turn closing, the exporters' deliveries, closing abandoned LlamaIndex streams, the
sync-to-async bridge of judges and the calls that must not outlive a deadline (exporter flushes at
exit, SIGTERM) all go through this one class, in the style of OpenTelemetry's
``BatchSpanProcessor``:

- `BatchWorker.put` never blocks and never raises; past *max_queue* unfinished items it drops
  the item and counts it (``stats()["dropped"]``).
- Daemon threads take items in batches of up to *max_batch* (a batch gathers for up to *delay_s*,
  cut short by a flush) and hand them to *handle*; or, in asyncio mode (*ahandle*), one thread runs
  an event loop with up to *concurrency* items in flight.
- `BatchWorker.force_flush` returns within its deadline and says truthfully whether every item put
  before it was handled; `BatchWorker.shutdown` never raises, and what it could not finish is
  counted as ``abandoned`` (a handler that returns later is not counted twice).
- Threads start with the first item, never at construction; after ``os.fork()`` the child starts
  with an empty queue (the parent handles what it queued) and its own threads
  (``os.register_at_fork``, `ragaudit._fork`).

Floor 1 (no ragaudit imports), so tracing, judges, the auditor and the integrations may all use it.
This is the only module of ragaudit that creates a thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures

# Imported now, not on first use: its import registers an exit hook, which is refused once the
# interpreter is shutting down, and exit is exactly when the first judgement may run (an event
# loop's default executor, used for getaddrinfo, is a ThreadPoolExecutor).
import concurrent.futures.thread
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from . import _fork
from ._fork import on_fork_in_child
from .content import log_exception

__all__ = ["BatchWorker", "HostFirst", "call_later", "call_on", "call_with_deadline", "exit_deadline",
           "on_fork_in_child", "own_cpu", "run_coroutine", "run_jobs"]

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger("ragaudit")

_COUNTS = ("accepted", "handled", "failed", "dropped", "abandoned")


class BatchWorker(Generic[T]):
    """A bounded queue worked off by daemon threads (see the module docstring).

    Give *handle* (``handle(batch) -> int | None``: how many items of the batch were delivered,
    None for all; a raise fails the whole batch) or *ahandle* (``async ahandle(item)``, run on the
    worker's event loop, up to *concurrency* at once). *threads* threads share the queue in the
    synchronous mode. *on_error* is told about every exception a handler raised. *max_queue*
    bounds the items queued plus those being handled. *paced*: the host comes first (see
    `HostFirst`; in the synchronous mode a batch is then handled in slices of *pace_batch*
    items). *yield_idle* False: while the host is idle the worker keeps the interpreter instead of
    yielding it after every item (for the judging loop, whose judgements wait on it).
    """

    def __init__(
        self,
        name: str,
        handle: Callable[[list[T]], int | None] | None = None,
        *,
        ahandle: Callable[[T], Awaitable[object]] | None = None,
        max_queue: int = 2048,
        max_batch: int = 512,
        delay_s: float = 0.0,
        threads: int = 1,
        concurrency: int = 1,
        on_error: Callable[[BaseException], None] | None = None,
        paced: bool = False,
        pace_batch: int = 1,
        yield_idle: bool = True,
    ) -> None:
        if handle is not None and ahandle is not None:
            raise ValueError("give BatchWorker handle or ahandle, not both (neither: a plain event loop thread)")
        if max_queue < 1 or max_batch < 1 or threads < 1 or concurrency < 1 or delay_s < 0:
            raise ValueError("max_queue, max_batch, threads and concurrency must be >= 1, delay_s >= 0")
        self.name = name
        self.max_queue = max_queue
        self._handle = handle
        self._ahandle = ahandle
        self._max_batch = max_batch
        self._delay_s = delay_s
        self._threads_wanted = 1 if handle is None else threads
        self._concurrency = concurrency
        self._on_error = on_error
        self._paced = paced
        self._pace_batch = max(1, pace_batch)
        self._yield_idle = yield_idle
        self._reset()
        with _registry_lock:
            _registry.add(self)

    def _reset(self) -> None:
        # Everything that a fork must not carry over into the child (locks, threads, the loop).
        # Re-entrant: a finalizer (an abandoned stream's __del__) may put() on a thread that is
        # inside put() already, when the garbage collector runs there.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[int, T]] = collections.deque()
        self._inflight: set[int] = set()
        self._seq = itertools.count(1)
        self._last_seq = 0
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._threads: list[threading.Thread] = []
        self._urgent = 0
        self._stopping = threading.Event()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._asleep = False
        self._hurry = threading.Event()  # set while a flush waits: no pauses (see HostFirst)
        self._pacer = HostFirst(yield_idle=self._yield_idle)

    # -- the host's side ----------------------------------------------------------------------

    def put(self, item: T) -> bool:
        """Queue *item*; False when it was dropped (queue full, or shut down) and counted. Never blocks."""
        wake_loop = False
        with self._lock:
            if not self._threads and not self._closed:
                self._start()
            if self._closed or not self._threads or len(self._queue) + len(self._inflight) >= self.max_queue:
                # (No thread: none could be started, which only happens at interpreter shutdown.)
                self._counts["dropped"] += 1
                return False
            seq = next(self._seq)
            self._last_seq = seq
            self._queue.append((seq, item))
            self._counts["accepted"] += 1
            queued = len(self._queue)
            if self._ahandle is not None:
                if self._asleep:
                    self._asleep = False
                    wake_loop = True
            elif queued == 1 or queued == self._max_batch:
                # Woken once per batch, not once per item: a busy host costs one notify per batch.
                self._cond.notify()
        if wake_loop:
            self._wake_loop()
        return True

    def start(self) -> None:
        """Start the threads now instead of with the first item (for an owner whose first put()
        may come from a finalizer, where starting a thread is not safe)."""
        with self._lock:
            if not self._threads and not self._closed:
                self._start()

    def force_flush(self, timeout_s: float | None = 30.0) -> bool:
        """Wait until every item put before this call was handled (or dropped at shutdown).

        Returns within *timeout_s* (None: no limit); False when that ran out first, or when an item
        put before this call could not be handled at all (the worker was shut down).
        """
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        if self._on_own_thread():
            return False  # a handler that flushes its own worker would wait for itself
        with self._cond:
            target = self._last_seq
            abandoned = self._counts["abandoned"]
            self._urgent += 1
            self._hurry.set()
            self._cond.notify_all()
        try:
            with self._cond:
                while not self._done_up_to(target):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    if not self._live_threads():
                        return False
                    self._cond.wait(remaining if remaining is None else min(remaining, 0.5))
                return self._counts["abandoned"] == abandoned
        finally:
            with self._cond:
                self._urgent -= 1
                if not self._urgent:
                    self._hurry.clear()

    def shutdown(self, timeout_s: float | None = 30.0) -> bool:
        """Flush within *timeout_s*, then stop. Never raises; idempotent.

        Items not handled by then are removed and counted as ``abandoned`` (items being handled at
        that moment too: a handler that returns later is not counted again). Items put afterwards
        are dropped. Returns True when nothing was abandoned.
        """
        try:
            with self._lock:
                if self._closed:
                    return not self._queue and not self._inflight
            ok = self.force_flush(timeout_s)
            with self._cond:
                self._closed = True
                self._stopping.set()
                self._hurry.set()
                lost = len(self._queue) + len(self._inflight)
                self._counts["abandoned"] += lost
                self._queue.clear()
                self._inflight.clear()
                self._cond.notify_all()
            self._wake_loop()
            loop = self._loop
            if loop is not None and self._ahandle is None and self._handle is None:
                loop.call_soon_threadsafe(loop.stop)
            return ok and not lost
        except Exception as exc:  # never into the host
            logger.debug("ragaudit: shutting down worker %s failed: %s", self.name, log_exception(exc))
            return False

    def stats(self) -> dict[str, int]:
        """Counts under one lock: accepted, handled, failed, dropped, abandoned, queued, in_flight.

        ``accepted == handled + failed + abandoned + queued + in_flight`` always holds.
        """
        with self._lock:
            return {**self._counts, "queued": len(self._queue), "in_flight": len(self._inflight)}

    def __len__(self) -> int:
        return len(self._queue) + len(self._inflight)

    @property
    def stopping(self) -> threading.Event:
        """Set at shutdown: handlers waiting between retries wait on this to give up early."""
        return self._stopping

    @property
    def closed(self) -> bool:
        """True after `shutdown`."""
        return self._closed

    @property
    def started(self) -> bool:
        """True once a thread of this worker runs (threads start with the first item)."""
        return self._live_threads()

    def run_coroutine(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        """Run *coro* on this worker's event loop (asyncio mode, or a worker made with neither
        handler: a plain loop thread). Not bounded by *max_queue*: for control calls."""
        with self._lock:
            if not self._threads and not self._closed:
                self._start()
            loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError(f"worker {self.name} has no running event loop")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    # -- internals ----------------------------------------------------------------------------

    def _on_own_thread(self) -> bool:
        current = threading.current_thread()
        return any(thread is current for thread in self._threads)

    def _live_threads(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _done_up_to(self, target: int) -> bool:
        # FIFO queue: its head is the oldest item still waiting.
        oldest = self._queue[0][0] if self._queue else None
        if self._inflight:
            low = min(self._inflight)
            oldest = low if oldest is None else min(oldest, low)
        return oldest is None or oldest > target

    def _start(self) -> None:
        # Called with the lock held.
        if self._ahandle is not None or self._handle is None:
            ready = threading.Event()
            loop = asyncio.new_event_loop()
            target: Callable[[], None] = lambda: self._run_loop(loop, ready)  # noqa: E731
            count = 1
        else:
            ready = None
            loop = None
            target = self._run
            count = self._threads_wanted
        try:
            for index in range(count):
                thread = threading.Thread(target=target, name=f"ragaudit-{self.name}" + (f"-{index}" if index else ""),
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
        except RuntimeError as exc:  # "can't create new thread at interpreter shutdown"
            logger.debug("ragaudit: worker %s could not start a thread: %s", self.name, log_exception(exc))
            if loop is not None and not self._threads:
                loop.close()
            return
        if ready is not None:
            ready.wait(5.0)

    def _take(self) -> list[tuple[int, T]]:
        # Called with the lock held.
        batch: list[tuple[int, T]] = []
        while self._queue and len(batch) < self._max_batch:
            entry = self._queue.popleft()
            self._inflight.add(entry[0])
            batch.append(entry)
        return batch

    def _finish(self, batch: list[tuple[int, T]], delivered: int | None, error: BaseException | None) -> None:
        with self._cond:
            live = [seq for seq, _ in batch if seq in self._inflight]
            for seq in live:
                self._inflight.discard(seq)
            if live:  # not already counted as abandoned by shutdown
                if error is not None:
                    self._counts["failed"] += len(live)
                else:
                    ok = len(live) if delivered is None else max(0, min(int(delivered), len(live)))
                    self._counts["handled"] += ok
                    self._counts["failed"] += len(live) - ok
            self._cond.notify_all()
        if error is not None and self._on_error is not None:
            try:
                self._on_error(error)
            except Exception as exc:  # pragma: no cover - a reporting hook must not stop the worker
                logger.debug("ragaudit: worker %s on_error failed: %s", self.name, log_exception(exc))

    def _run(self) -> None:
        _register_own_thread()
        cond = self._cond
        while True:
            with cond:
                while not self._queue and not self._stopping.is_set():
                    cond.wait()
                if self._stopping.is_set():
                    return
                if self._delay_s and not self._urgent and len(self._queue) < self._max_batch:
                    cond.wait(self._delay_s)  # let a batch gather; a full batch or force_flush() cuts this short
                batch = self._take()
            if batch and self._paced:
                step = self._pace_batch
                for start in range(0, len(batch), step):  # in slices, the host let in between (HostFirst)
                    self._handle_batch(batch[start:start + step])
                    self._pace()
            elif batch:
                self._handle_batch(batch)
            # Not kept while waiting for the next batch: a job may be what keeps its owner alive.
            del batch

    def _handle_batch(self, batch: list[tuple[int, T]]) -> None:
        assert self._handle is not None
        try:
            delivered = self._handle([item for _, item in batch])
        except BaseException as exc:  # a handler must never end the worker
            self._finish(batch, None, exc)
            if not isinstance(exc, Exception):
                logger.debug("ragaudit: worker %s: handler raised %s", self.name, log_exception(exc))
            return
        self._finish(batch, delivered, None)

    async def _ahandle_one(self, entry: tuple[int, T]) -> None:
        assert self._ahandle is not None
        try:
            await self._ahandle(entry[1])
        except BaseException as exc:  # a handler must never end the worker
            if isinstance(exc, asyncio.CancelledError) and self._stopping.is_set():
                raise
            self._finish([entry], None, exc)
        else:
            self._finish([entry], None, None)
        if self._paced:
            self._pace()  # on the loop's thread: a pause holds every task of the loop, as it should

    def _pace(self) -> None:
        backlog = (len(self._queue) + len(self._inflight)) / self.max_queue
        self._pacer.pace(backlog, self._hurry)

    def _wake_loop(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop is closed
            pass

    def _run_loop(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        _register_own_thread()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._wake = asyncio.Event()
        ready.set()
        try:
            if self._ahandle is None:
                loop.run_forever()
            else:
                loop.run_until_complete(self._consume())
                # Shut down: what is still in flight was counted as abandoned; cancel it.
                pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
                loop.close()
        except BaseException as exc:
            logger.debug("ragaudit: worker %s loop ended: %s", self.name, log_exception(exc))

    async def _consume(self) -> None:
        semaphore = asyncio.Semaphore(self._concurrency)
        tasks: set[asyncio.Task[None]] = set()
        wake = self._wake
        assert wake is not None
        while not self._stopping.is_set():
            await semaphore.acquire()
            with self._lock:
                entry = self._queue.popleft() if self._queue else None
                if entry is None:
                    wake.clear()
                    self._asleep = True
                else:
                    self._inflight.add(entry[0])
            if entry is None:
                semaphore.release()
                await wake.wait()
                continue
            task = asyncio.ensure_future(self._ahandle_one(entry))
            del entry  # not kept while waiting for the next one
            tasks.add(task)

            def done(finished: asyncio.Task[None]) -> None:
                tasks.discard(finished)
                semaphore.release()

            task.add_done_callback(done)
            del task


class HostFirst:
    """Keeps the host first: how much interpreter time one background thread takes while the host is busy.

    ragaudit's background threads share the GIL with the host's. A thread that ran a CPU-bound job
    for a while keeps the host's threads waiting for up to the switch interval (5 ms) each time they
    want to run, and a host request that hands work between threads (LangChain's executor) waits
    once per hand-off: that is the host's tail. The host is *busy* when its threads -- every thread
    of the process but ragaudit's, whose CPU clocks are known -- used more than ``BUSY_SHARE`` of a
    core over the last ``PROBE_S`` or more, or ran during a yield that took more than ``BUSY_S``;
    it stays busy for ``BUSY_FOR_S``. While it is, a paced worker, after every item, yields the
    interpreter (``time.sleep(0)``: a host thread waiting for it runs at once), and every item (or
    ``SLICE_S`` of this thread's CPU) is followed by a pause that holds this thread's
    share to ``SHARE``: the background work then waits, and its cost shows up as judging latency
    instead of the host's latency. Past a quarter of its queue the share grows (full speed at half
    full), so a host that is busy all the time still gets its turns recorded, not dropped. A flush
    or shutdown pauses nothing (*hurry* is set). With *yield_idle* False the yield is left out while
    the host is idle: it would only hand the interpreter to another of ragaudit's threads, and cost
    this one up to a switch interval (the judging loop, which ragaudit's other workers may wait
    for, never the other way round). Where threads' CPU clocks cannot be read
    (``time.pthread_getcpuclockid``), nothing is paused; the yield stays.
    """

    SHARE = 0.02
    SLICE_S = 0.0005
    BUSY_SHARE = 0.1
    BUSY_S = 0.0005
    PROBE_S = 0.005
    BUSY_FOR_S = 0.05
    MAX_PAUSE_S = 0.1

    __slots__ = ("_busy_until", "_cpu", "_probe", "_yield_idle")

    def __init__(self, *, yield_idle: bool = True) -> None:
        self._yield_idle = yield_idle
        self._cpu: float | None = None  # this thread's CPU clock at the last pause (set on first use)
        self._busy_until = 0.0
        self._probe: tuple[float, float] | None = None  # (wall, host CPU) at the last probe

    def pace(self, backlog: float, hurry: threading.Event | None, max_pause_s: float = MAX_PAUSE_S) -> None:
        """After an item, on the worker's thread: yield, and pause (at most *max_pause_s*) while the
        host is busy. *backlog*: how full the worker's queue is (0 to 1); *hurry*: set, no pause
        (None: a pause is never cut short)."""
        if (hurry is not None and hurry.is_set()) or self._cpu is None:
            if self._cpu is None:
                _register_own_thread()
            self._cpu = time.thread_time()
            return
        if not self._yield_idle:
            now = time.perf_counter()
            if self._look(now) and now >= self._busy_until:
                # The host is idle: a yield would hand the interpreter to another of ragaudit's
                # threads only, and this one would wait up to a switch interval to get it back. On
                # the judging loop that held every judgement in flight: 1.2 ms per item, 15 % of
                # the loop's time in benchmarks/judge_throughput.py.
                self._cpu = time.thread_time()
                return
        before, host_before = time.perf_counter(), _host_cpu()
        time.sleep(0)
        now = time.perf_counter()
        if host_before is not None and now - before > self.BUSY_S:
            # The yield took a while: busy if the host's threads ran meanwhile (not another of ours).
            host = _host_cpu()
            if host is not None and host - host_before > 0.5 * (now - before):
                self._busy_until = now + self.BUSY_FOR_S
        self._look(now)
        spent = time.thread_time() - self._cpu
        if spent < self.SLICE_S:
            return
        self._cpu += spent
        if now >= self._busy_until or backlog >= 0.5:
            return
        share = self.SHARE if backlog < 0.25 else self.SHARE + (1.0 - self.SHARE) * (backlog - 0.25) * 4
        pause = min(max_pause_s, spent * (1.0 - share) / share)
        if hurry is None:
            time.sleep(pause)
        else:
            hurry.wait(pause)
        self._cpu = time.thread_time()

    def _look(self, now: float) -> bool:
        """Probe the host's CPU (at most every ``PROBE_S``); False when it cannot be read."""
        if self._probe is not None and now - self._probe[0] < self.PROBE_S:
            return True
        host = _host_cpu()
        if host is None:
            return False
        if self._probe is not None and host - self._probe[1] > self.BUSY_SHARE * (now - self._probe[0]):
            self._busy_until = now + self.BUSY_FOR_S
        self._probe = (now, host)
        return True


# thread ident -> CPU clock id of every thread of ragaudit's (the BatchWorkers' and the paced exporters').
_own_clocks: dict[int, int] = {}
_own_last: dict[int, float] = {}  # thread ident -> its CPU clock when own_cpu() last read it
_ended_cpu = [0.0]  # the CPU of ragaudit's threads that ended, as last read (own_cpu)


def _register_own_thread() -> None:
    getclock = getattr(time, "pthread_getcpuclockid", None)
    if getclock is not None:
        try:
            _own_clocks[threading.get_ident()] = getclock(threading.get_ident())
        except (OSError, OverflowError):
            pass


def own_cpu() -> float | None:
    """CPU seconds spent so far by ragaudit's own threads (every BatchWorker's and paced thread's: each registers
    its CPU clock when it starts), or None where threads' CPU clocks cannot be read (``time.pthread_getcpuclockid``
    is missing: Windows). A thread that ended counts with its last reading. A few ``clock_gettime`` calls: read it
    at intervals, never per turn."""
    if getattr(time, "pthread_getcpuclockid", None) is None:
        return None
    total = _ended_cpu[0]
    for ident, clock in list(_own_clocks.items()):
        try:
            spent = time.clock_gettime(clock)
        except OSError:  # the thread ended: keep what it was last seen to have spent
            if _own_clocks.pop(ident, None) is not None:
                ended = _own_last.pop(ident, 0.0)
                _ended_cpu[0] += ended
                total += ended
            continue
        _own_last[ident] = spent
        total += spent
    return total


def _host_cpu() -> float | None:
    """CPU seconds the process spent outside ragaudit's threads (in the host's threads), or None."""
    if not _own_clocks:
        return None
    total = time.process_time()
    for ident, clock in list(_own_clocks.items()):
        try:
            total -= time.clock_gettime(clock)
        except OSError:  # the thread ended
            _own_clocks.pop(ident, None)
    return total


_registry_lock = _fork.lock()
_registry: weakref.WeakSet[BatchWorker[Any]] = weakref.WeakSet()


def _restart_workers_in_child() -> None:
    # The child has one thread (this one): the parent's worker threads and loops are gone. Each
    # worker starts over empty; its threads start again with its next item.
    _own_clocks.clear()  # the parent's threads are gone
    _own_last.clear()
    _ended_cpu[0] = 0.0
    for worker in list(_registry):
        closed = worker._closed
        worker._reset()
        worker._closed = closed


# Registered first (at import), so every other owner's hook finds the workers ready.
on_fork_in_child(_restart_workers_in_child)


# -- calls bounded by a deadline ------------------------------------------------------------------

_exit_deadline: float | None = None


def exit_deadline(budget_s: float) -> float:
    """The process's exit deadline (``time.monotonic()``): set by the first exit hook that asks,
    *budget_s* from then; every later exit step shares it, so exit takes one budget, not a sum."""
    global _exit_deadline
    with _singletons_lock:
        if _exit_deadline is None:
            _exit_deadline = time.monotonic() + max(0.0, budget_s)
        return _exit_deadline


_CALL_THREADS = 4
_singletons_lock = _fork.lock()
_calls: BatchWorker[Callable[[], None]] | None = None
_bridge: BatchWorker[object] | None = None


def _calls_worker() -> BatchWorker[Callable[[], None]]:
    global _calls
    with _singletons_lock:
        if _calls is None:
            _calls = BatchWorker("calls", run_jobs, max_queue=256, max_batch=1, threads=_CALL_THREADS)
        return _calls


def run_jobs(jobs: list[Callable[[], None]]) -> None:
    """A BatchWorker handler for workers whose items are jobs: run each in order."""
    for job in jobs:
        job()


def call_on(worker: BatchWorker[Callable[[], None]], fn: Callable[[], R]) -> concurrent.futures.Future[R] | None:
    """Queue *fn* on *worker* (a `run_jobs` worker); its future, or None when it was dropped."""
    future: concurrent.futures.Future[R] = concurrent.futures.Future()

    def job() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    return future if worker.put(job) else None


def call_later(job: Callable[[], None]) -> bool:
    """Run *job* on one of ragaudit's threads, not waiting for it: False when it was not queued (the
    workers are shutting down, or the queue is full). For work the host's thread must not do itself."""
    return _calls_worker().put(job)


def call_with_deadline(fn: Callable[[], R], timeout_s: float) -> tuple[bool, R | None]:
    """Run *fn* on a worker thread and wait at most *timeout_s* for it: ``(finished, result)``.

    For calls into code we do not control that may block on the network (an exporter's flush, an
    exporter's shutdown): the caller's deadline holds whatever they do; a call still running then is
    left to finish on its daemon thread. An exception from *fn* is re-raised here.
    """
    future = call_on(_calls_worker(), fn)
    if future is None:
        return False, None
    try:
        return True, future.result(max(0.0, timeout_s))
    except concurrent.futures.TimeoutError:
        future.cancel()
        return False, None


def _bridge_worker() -> BatchWorker[object]:
    global _bridge
    with _singletons_lock:
        if _bridge is None:
            _bridge = BatchWorker("sync-bridge")
        return _bridge


def run_coroutine(coro: Coroutine[Any, Any, R]) -> R:
    """Run *coro* to completion from synchronous code, even inside a running event loop.

    One private event loop for the process (a fresh ``asyncio.run`` per call would break async
    clients bound to their first loop), on a BatchWorker thread, so it is there again after fork.
    """
    return _bridge_worker().run_coroutine(coro).result()
