"""BatchWorker, the one background worker: bounded, batched, truthful flush, counted shutdown, fork-safe."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from ragaudit._worker import BatchWorker, call_on, call_with_deadline, run_coroutine, run_jobs


def test_items_are_handled_in_batches_and_counted() -> None:
    batches: list[list[int]] = []
    gate = threading.Event()

    def handle(batch: list[int]) -> None:
        gate.wait(10)
        batches.append(batch)

    worker: BatchWorker[int] = BatchWorker("t-batches", handle, max_batch=4)
    try:
        assert worker.put(0)  # taken at once by the thread, which then waits at the gate
        for n in range(1, 9):
            assert worker.put(n)
        gate.set()
        assert worker.force_flush(10)
        assert [n for batch in batches for n in batch] == list(range(9))  # in order, none twice
        assert max(len(b) for b in batches) <= 4
        stats = worker.stats()
        assert stats["accepted"] == stats["handled"] == 9 and stats["queued"] == stats["in_flight"] == 0
    finally:
        worker.shutdown(1)


def test_put_past_max_queue_drops_and_counts_without_blocking() -> None:
    gate = threading.Event()
    worker: BatchWorker[int] = BatchWorker("t-full", lambda batch: gate.wait(10) and None, max_queue=2, max_batch=1)
    try:
        results = [worker.put(n) for n in range(5)]
        assert results.count(False) >= 3 and worker.stats()["dropped"] == results.count(False)
    finally:
        gate.set()
        worker.shutdown(1)


def test_a_handler_that_delivers_part_of_a_batch_is_counted_as_such() -> None:
    worker: BatchWorker[int] = BatchWorker("t-part", lambda batch: len(batch) - 1, max_batch=10)
    try:
        worker.put(1)
        assert worker.force_flush(10)
        stats = worker.stats()
        assert stats["handled"] + stats["failed"] == 1 and stats["failed"] == 1
    finally:
        worker.shutdown(1)


def test_a_raising_handler_fails_its_batch_reports_it_and_the_worker_goes_on() -> None:
    errors: list[BaseException] = []

    def handle(batch: list[int]) -> None:
        if 0 in batch:
            raise ValueError("boom")

    worker: BatchWorker[int] = BatchWorker("t-raise", handle, max_batch=1, on_error=errors.append)
    try:
        worker.put(0)
        worker.put(1)
        assert worker.force_flush(10)
        assert [type(e) for e in errors] == [ValueError]
        assert worker.stats()["failed"] == 1 and worker.stats()["handled"] == 1
    finally:
        worker.shutdown(1)


def test_flush_returns_false_when_its_deadline_passes_and_shutdown_counts_what_was_abandoned() -> None:
    gate = threading.Event()
    worker: BatchWorker[int] = BatchWorker("t-abandon", lambda batch: gate.wait(10) and None, max_batch=1)
    worker.put(1)
    worker.put(2)
    assert worker.force_flush(0.05) is False
    assert worker.shutdown(0.05) is False
    stats = worker.stats()
    assert stats["abandoned"] == 2 and stats["accepted"] == stats["handled"] + stats["failed"] + stats["abandoned"]
    gate.set()
    assert worker.put(3) is False  # after shutdown: dropped
    assert worker.shutdown(0) is True or worker.closed  # idempotent, never raises


def test_threads_start_with_the_first_item_not_at_construction() -> None:
    worker: BatchWorker[int] = BatchWorker("t-lazy", lambda batch: None)
    try:
        assert not worker.started
        worker.put(1)
        assert worker.force_flush(10) and worker.started
    finally:
        worker.shutdown(1)


def test_asyncio_mode_runs_up_to_concurrency_items_at_once() -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    async def handle(item: int) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        await asyncio.sleep(0.01)
        with lock:
            running -= 1

    worker: BatchWorker[int] = BatchWorker("t-async", ahandle=handle, concurrency=3)
    try:
        for n in range(12):
            worker.put(n)
        assert worker.force_flush(10)
        assert 1 <= peak <= 3 and worker.stats()["handled"] == 12
    finally:
        worker.shutdown(1)


def test_jobs_call_on_and_call_with_deadline() -> None:
    jobs: BatchWorker = BatchWorker("t-jobs", run_jobs, max_batch=1)
    try:
        future = call_on(jobs, lambda: 6 * 7)
        assert future is not None and future.result(10) == 42
    finally:
        jobs.shutdown(1)
    gate = threading.Event()
    assert call_with_deadline(lambda: gate.wait(10), 0.05) == (False, None)  # the caller's deadline holds
    gate.set()
    assert call_with_deadline(lambda: "done", 10) == (True, "done")
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 10)


def test_run_coroutine_works_inside_a_running_loop() -> None:
    async def inner() -> int:
        return 7

    async def outer() -> int:
        return run_coroutine(inner())  # from sync code called inside an event loop

    assert asyncio.run(outer()) == 7


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        BatchWorker("t-bad", lambda batch: None, max_queue=0)
    with pytest.raises(ValueError):
        BatchWorker("t-both", lambda batch: None, ahandle=lambda item: asyncio.sleep(0))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_after_fork_the_child_starts_empty_with_threads_of_its_own() -> None:
    gate = threading.Event()
    handled: list[int] = []
    worker: BatchWorker[int] = BatchWorker("t-fork", lambda batch: (gate.wait(10) and handled.extend(batch)) or None)
    worker.put(1)  # the parent's thread holds it at the gate while we fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's item is not its own; its next item runs on a new thread
        try:
            gate.set()  # the child's own copy of the gate
            stats = worker.stats()
            ok = stats["queued"] == stats["in_flight"] == stats["accepted"] == 0
            ok = ok and worker.put(2) and worker.force_flush(5) and handled == [2]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
        gate.set()
        worker.shutdown(1)
