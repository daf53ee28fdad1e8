"""A judgement cache, so re-running an evaluation does not pay for the same judgement twice.

[`CachedJudge`][ragaudit.CachedJudge] wraps any judge. The key is a SHA-256 of the judge's configuration
(``config_key()``: model, endpoint, prompt protocol, rubric, ...) and of the request's question,
answer, context and reference, so a changed prompt, model or input is a miss. Judgements with an
error are never stored. [`MemoryCache`][ragaudit.MemoryCache] keeps entries in the process (LRU);
[`SqliteCache`][ragaudit.SqliteCache] keeps them in a file that survives restarts and can be shared by threads and
processes::

    judge = CachedJudge(ChatRagJudge("gpt-4o-mini"), SqliteCache(".ragaudit/judgements.sqlite"))
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import os
import sqlite3
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, TypeVar, runtime_checkable

from ... import _fork
from ..._worker import BatchWorker, call_on, run_jobs
from ...errors import ConfigurationError, RagAuditError
from ...records import DocumentGrade, JudgeIdentity, Judgement, JudgeRequest, SentenceVerdict
from ..base import BaseRagJudge, RagJudge
from ..cost import CostEstimate, estimate_request

__all__ = ["CACHE_KEY_VERSION", "CachedJudge", "JudgementCache", "MemoryCache", "SqliteCache", "cache_key"]

_log = logging.getLogger("ragaudit")

CACHE_KEY_VERSION = "ragaudit-cache/1"
"""Part of every key: changes when the key's recipe changes, so old entries are simply not found."""

T = TypeVar("T")

_JUDGEMENT_FIELDS = tuple(f.name for f in dataclasses.fields(Judgement))


@runtime_checkable
class JudgementCache(Protocol):
    """Where a [`CachedJudge`][ragaudit.CachedJudge] keeps judgements. Implementations must be thread-safe.

    ``get`` returns None for a key it does not hold; both may raise [`RagAuditError`][ragaudit.RagAuditError]
    (the CachedJudge counts that and carries on as on a miss).
    """

    def get(self, key: str) -> Judgement | None: ...

    def put(self, key: str, judgement: Judgement) -> None: ...

    def close(self) -> None: ...


def cache_key(judge: RagJudge, request: JudgeRequest) -> str:
    """The cache key of *request* judged by *judge* (hex SHA-256).

    Made of `CACHE_KEY_VERSION`, ``judge.config_key()`` and the request's query, answer,
    context and reference (and history and standalone question,
    when set). Metadata and documents are not
    part of it: the context is what the judge sees.
    """
    parts: list[Any] = [CACHE_KEY_VERSION, judge.config_key(), request.query, request.answer, request.context,
                        request.reference]
    if request.history or request.standalone_query is not None:
        # The judge sees them too; only added when set, so the keys of single questions stay as they were.
        parts.append([list(request.history), request.standalone_query])
    material = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


class MemoryCache:
    """An in-process LRU cache of at most *max_entries* judgements (thread-safe)."""

    def __init__(self, max_entries: int = 10_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigurationError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Judgement] = OrderedDict()
        self._lock = _fork.lock()

    def get(self, key: str) -> Judgement | None:
        """The judgement stored under *key*, or None (a hit makes it the most recently used)."""
        with self._lock:
            judgement = self._entries.get(key)
            if judgement is not None:
                self._entries.move_to_end(key)
            return judgement

    def put(self, key: str, judgement: Judgement) -> None:
        """Store *judgement*, evicting the least recently used entry when full."""
        with self._lock:
            self._entries[key] = judgement
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def close(self) -> None:
        """Nothing to release (present for the `JudgementCache` protocol)."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"MemoryCache(entries={len(self)}, max_entries={self.max_entries})"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS ragaudit_judgements (
    key TEXT PRIMARY KEY,
    judge TEXT NOT NULL,
    created_ns INTEGER NOT NULL,
    judgement TEXT NOT NULL
) WITHOUT ROWID
"""


class SqliteCache:
    """Judgements in a SQLite file: kept across restarts, shared by threads and processes.

    One connection guarded by a lock serves all threads of a process; the database is in WAL mode
    with a *timeout_s* (seconds) for locks held by other processes. The parent directory is created
    when missing; ``":memory:"`` gives a private in-memory database. A stored judgement is its
    [`to_dict`][ragaudit.Judgement.to_dict] as JSON, so tuples in ``details`` come back as lists and
    values JSON cannot hold come back as strings.

    Raises ConfigurationError when the file cannot be opened as a cache.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 5.0) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ConfigurationError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.path = os.fspath(path)
        self._lock = _fork.lock()
        try:
            if self.path != ":memory:":
                parent = os.path.dirname(os.path.abspath(self.path))
                os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=timeout_s, check_same_thread=False, isolation_level=None)
            try:
                if self.path != ":memory:":
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
            except sqlite3.Error:
                conn.close()
                raise
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError(f"cannot open the judgement cache {self.path!r}: {exc}") from exc
        self._conn: sqlite3.Connection | None = conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RagAuditError(f"the judgement cache {self.path!r} is closed")
        return self._conn

    def get(self, key: str) -> Judgement | None:
        """The judgement stored under *key*, or None (also for an entry that no longer reads back)."""
        try:
            with self._lock:
                row = self._connection().execute(
                    "SELECT judgement FROM ragaudit_judgements WHERE key = ?", (key,)
                ).fetchone()
        except sqlite3.Error as exc:
            raise RagAuditError(f"judgement cache {self.path!r}: lookup failed: {exc}") from exc
        if row is None:
            return None
        try:
            return _load(row[0])
        except (ValueError, TypeError, RagAuditError) as exc:
            _log.warning("judgement cache %s: entry %s does not read back (%s); ignored", self.path, key[:12], exc)
            return None

    def put(self, key: str, judgement: Judgement) -> None:
        """Store *judgement* under *key* (replacing any entry), committed at once."""
        # ASCII escapes: a lone surrogate (text decoded with surrogateescape) is valid JSON as
        # "\udXXX" but cannot be bound as UTF-8 text.
        payload = json.dumps(_plain(judgement.to_dict()))
        try:
            with self._lock:
                self._connection().execute(
                    "INSERT OR REPLACE INTO ragaudit_judgements (key, judge, created_ns, judgement) "
                    "VALUES (?, ?, ?, ?)",
                    (key, judgement.judge, time.time_ns(), payload),
                )
        except sqlite3.Error as exc:
            raise RagAuditError(f"judgement cache {self.path!r}: store failed: {exc}") from exc

    def clear(self) -> None:
        """Delete every entry."""
        with self._lock:
            self._connection().execute("DELETE FROM ragaudit_judgements")

    def close(self) -> None:
        """Close the connection. Safe to call twice."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __len__(self) -> int:
        with self._lock:
            row = self._connection().execute("SELECT COUNT(*) FROM ragaudit_judgements").fetchone()
        return int(row[0])

    def __repr__(self) -> str:
        return f"SqliteCache(path={self.path!r})"


def _plain(value: Any) -> Any:
    """*value* with mappings as dicts, sequences as lists and anything else JSON cannot hold as text."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def _load(payload: str) -> Judgement:
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("stored judgement is not an object")
    try:
        fields = {name: data[name] for name in _JUDGEMENT_FIELDS if name in data}
        fields["identity"] = JudgeIdentity.from_dict(fields.get("identity"))
        fields["sentences"] = tuple(SentenceVerdict.from_dict(s) for s in data.get("sentences") or ())
        fields["document_grades"] = tuple(DocumentGrade.from_dict(g) for g in data.get("document_grades") or ())
        return Judgement(**fields)
    except (ConfigurationError, AttributeError) as exc:
        raise ValueError(str(exc)) from exc


def _cache_worker() -> BatchWorker[Callable[[], None]]:
    """One cache's worker: its calls in order on one daemon thread, never on an event loop.

    Its thread starts on first use, and again in a forked child (the BatchWorker re-initialises
    after fork). A daemon, so a cache stuck on a lock never holds up interpreter exit. In order: a
    lookup submitted after a store sees what was stored.
    """
    return BatchWorker("judgement-cache", run_jobs, max_batch=1, threads=1)


def _stop_cache_worker(worker: BatchWorker[Callable[[], None]]) -> None:
    # After the calls already submitted, without waiting for them (this may run in a finalizer):
    # a last job shuts the worker down from its own thread.
    def stop() -> None:
        worker.shutdown(0.0)

    if not worker.started or not worker.put(stop):
        stop()


_DEFAULT_WAIT_S = 5.0


class CachedJudge(BaseRagJudge):
    """*judge* behind a cache: a request judged before with the same configuration is not judged again.

    A hit returns the stored judgement with ``details["cached"] = True``, ``usage`` zeroed (nothing
    was spent; the original usage is in ``details["cached_usage"]``) and ``latency_s`` the lookup's
    (the original in ``details["cached_latency_s"]``). A judgement with ``error`` set is not
    stored, so failures are retried next time. A cache that fails (disk full, a broken file) is
    counted in [`stats`][ragaudit.CachedJudge.stats] (``cache_errors``) and judging carries on uncached; nothing is
    raised.

    Lookups and stores of any cache but a [`MemoryCache`][ragaudit.MemoryCache] (a dict, nothing to wait for) run on a
    thread of this judge's own, in order, never on the event loop of [`ajudge`][ragaudit.CachedJudge.ajudge]. A
    judgement waits for a lookup at most *timeout_s* (default: the wrapped judge's own deadline,
    [`timeout_s`][ragaudit.RagJudge.timeout_s], else 5 s); a lookup that takes longer, such as one on a
    sqlite file another process holds locked, is a miss, counted as ``cache_timeouts``.
    [`judge`][ragaudit.CachedJudge.judge] waits for the store as long; [`ajudge`][ragaudit.CachedJudge.ajudge] does not
    wait for it at all.

    *cache* defaults to a new [`MemoryCache`][ragaudit.MemoryCache]; [`close`][ragaudit.CachedJudge.close] closes the
    wrapped judge, and the cache only when this judge created it (a cache passed in may be shared). Requests judged at
    the same moment with the same key are both judged (there is no in-flight deduplication).
    """

    def __init__(self, judge: RagJudge, cache: JudgementCache | None = None, *,
                 timeout_s: float | None = None) -> None:
        if not isinstance(judge, RagJudge):
            raise ConfigurationError(
                f"judge must be a RagJudge (derive it from BaseRagJudge), got {type(judge).__name__}")
        if cache is not None and not (callable(getattr(cache, "get", None)) and callable(getattr(cache, "put", None))):
            raise ConfigurationError(f"cache must have get(key) and put(key, judgement), got {type(cache).__name__}")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                      or not 0 < timeout_s < math.inf):
            raise ConfigurationError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        self.inner = judge
        self.cache: JudgementCache = cache if cache is not None else MemoryCache()
        self._owns_cache = cache is None
        self.name = judge.name
        self._wait_s = timeout_s
        self._lock = _fork.lock()
        self._counts = {"hits": 0, "misses": 0, "stores": 0, "cache_errors": 0, "cache_timeouts": 0}
        self._worker = None if isinstance(self.cache, MemoryCache) else _cache_worker()
        if self._worker is not None:
            weakref.finalize(self, _stop_cache_worker, self._worker)

    def key(self, request: JudgeRequest) -> str:
        """The cache key of *request* (see `cache_key`)."""
        return cache_key(self.inner, request)

    @property
    def blocking(self) -> bool:
        """The wrapped judge's (lookups and stores never block an event loop)."""
        return self.inner.blocking

    @property
    def timeout_s(self) -> float:  # type: ignore[override]
        """How long a judgement waits for a lookup (or [`judge`][ragaudit.CachedJudge.judge] for a store)."""
        if self._wait_s is not None:
            return float(self._wait_s)
        return float(self.inner.timeout_s) if self.inner.timeout_s is not None else _DEFAULT_WAIT_S

    @property
    def calls_per_judgement(self) -> int:  # type: ignore[override]
        """The wrapped judge's."""
        return self.inner.calls_per_judgement

    def judge(self, request: JudgeRequest) -> Judgement:
        """The cached judgement of *request*, or the wrapped judge's (then stored)."""
        started = time.perf_counter()
        key = self.key(request)
        stored, future = self._lookup(key)
        if future is not None:
            try:
                stored = future.result(timeout=self.timeout_s)
            except FutureTimeout:
                self._timed_out(future, "lookup")
        hit = self._hit(stored, started)
        if hit is not None:
            return hit
        judgement = self.inner.judge(request)
        if judgement.error is None:
            if self._worker is None:
                self._put(key, judgement)
            elif (stored_future := self._submit("store", lambda: self._put(key, judgement))) is not None:
                try:
                    stored_future.result(timeout=self.timeout_s)
                except FutureTimeout:
                    self._timed_out(stored_future, "store")
        return judgement

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        """Like [`judge`][ragaudit.CachedJudge.judge], awaiting the wrapped judge's ``ajudge``; the store is not waited
        for."""
        started = time.perf_counter()
        key = self.key(request)
        stored, future = self._lookup(key)
        if future is not None:
            try:
                stored = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
            except asyncio.TimeoutError:
                self._timed_out(future, "lookup")
        hit = self._hit(stored, started)
        if hit is not None:
            return hit
        judgement = await self.inner.ajudge(request)
        if judgement.error is None:
            if self._worker is None:
                self._put(key, judgement)
            else:
                self._submit("store", lambda: self._put(key, judgement))  # counted when it ends
        return judgement

    def _lookup(self, key: str) -> tuple[Judgement | None, Future[Judgement | None] | None]:
        """The lookup of *key* started: (the stored judgement, None) without a worker, else (None, the
        lookup's future to wait for; None too when the worker refused it: a miss)."""
        if self._worker is None:
            return self._get(key), None
        return None, self._submit("lookup", lambda: self._get(key))

    def _get(self, key: str) -> Judgement | None:
        """The stored judgement; None for a miss and for a cache that fails (counted)."""
        try:
            return self.cache.get(key)
        except Exception as exc:  # any cache failure degrades to a miss, never to a failed judgement
            self._count("cache_errors")
            self._warn("lookup", exc)
            return None

    def _put(self, key: str, judgement: Judgement) -> None:
        try:
            self.cache.put(key, judgement)
        except Exception as exc:
            self._count("cache_errors")
            self._warn("store", exc)
            return
        self._count("stores")

    def _submit(self, what: str, fn: Callable[[], T]) -> Future[T] | None:
        """*fn* on this judge's cache worker; None (counted as a cache error) when the worker
        refused it (its queue full, or the judge closed): the lookup is a miss, the store skipped."""
        assert self._worker is not None
        future = call_on(self._worker, fn)
        if future is None:
            self._count("cache_errors")
            self._warn(what, RuntimeError("the cache worker's queue is full or closed"))
        return future

    def _timed_out(self, future: Future[Any], what: str) -> None:
        future.cancel()  # not run at all if it is still queued behind the one that holds the thread
        self._count("cache_timeouts")
        self._warn(what, TimeoutError(f"no answer within {self.timeout_s:g} s (the cache file locked?)"))

    def _hit(self, stored: Judgement | None, started: float) -> Judgement | None:
        if stored is None:
            self._count("misses")
            return None
        self._count("hits")
        return dataclasses.replace(
            stored,
            usage={key: 0 for key in {"calls", *stored.usage}},
            latency_s=time.perf_counter() - started,
            details={**stored.details, "cached": True, "cached_usage": dict(stored.usage),
                     "cached_latency_s": stored.latency_s},
        )

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _warn(self, what: str, exc: Exception) -> None:
        with self._lock:
            first = self._counts["cache_errors"] + self._counts["cache_timeouts"] == 1
        _log.log(logging.WARNING if first else logging.DEBUG, "judgement cache %s failed (%s: %s); judging uncached",
                 what, type(exc).__name__, exc)

    def stats(self) -> dict[str, int]:
        """``hits``, ``misses``, ``stores``, ``cache_errors`` and ``cache_timeouts`` since this judge was made."""
        with self._lock:
            return dict(self._counts)

    def config_key(self) -> str:
        """The wrapped judge's (a cache does not change what is judged)."""
        return self.inner.config_key()

    def estimate_request_cost(
        self, request: JudgeRequest, *, chars_per_token: float, exact: bool = True
    ) -> CostEstimate:
        """Nothing for a request the cache holds (only when *exact*), else the wrapped judge's cost."""
        if exact:
            try:
                held = self.cache.get(self.key(request)) is not None
            except Exception:  # an unreadable cache just cannot vouch for the row
                held = False
            if held:
                return CostEstimate(cached_rows=1)
        return estimate_request(self.inner, request, chars_per_token=chars_per_token, exact=exact)

    def close(self) -> None:
        """Close the wrapped judge, and the cache when this judge created it; end the cache worker."""
        self.inner.close()
        if self._worker is not None:
            _stop_cache_worker(self._worker)
        if self._owns_cache:
            self.cache.close()

    def __repr__(self) -> str:
        return f"CachedJudge({self.inner!r}, cache={self.cache!r})"
