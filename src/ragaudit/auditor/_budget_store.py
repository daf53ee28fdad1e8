"""Where the Governor's windows are counted: in this process, or in Redis shared by every replica (private).

A budget is held in two steps so that it holds under concurrency: before a judge call, `apply`
in ``"reserve"`` mode checks every budget's counters and, only when all of them have room, adds the
call and an estimate of its tokens and money in one atomic step (a Lua script in Redis); after the
call, ``"settle"`` mode adds what the call really cost minus what was reserved. Sixteen calls
admitted at once therefore see each other's reservations, not a budget that looks untouched until
the first of them ends. Rate slots use the plain `incr`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from .. import _fork
from ..content import scrub
from ..errors import ConfigurationError

__all__ = ["Counters", "Item", "LocalCounters", "Mode", "RedisCounters", "redis_counters"]

Mode = Literal["reserve", "settle"]

Item = tuple[str, int, int, int]
"""One counter of one `Counters.apply`: (key, expiry seconds, cap (0: none), amount)."""


class Counters(Protocol):
    """What a store must do, each atomically: add to a counter that expires *expiry* seconds after its
    first increment, read one (0 when absent or expired), and reserve or settle several at once."""

    def incr(self, key: str, expiry: int, amount: int = 1) -> int: ...

    def get(self, key: str) -> int: ...

    def apply(self, mode: Mode, items: Sequence[Item]) -> bool:
        """``reserve``: when no counter with a cap is at or past it, add every amount and return True;
        else change nothing and return False. ``settle``: add every amount (negative ones release a
        reservation; a counter never goes below 0, and an expired one is not brought back to release
        it) and return True. A counter made here expires *expiry* seconds later."""
        ...


class LocalCounters:
    """In-process counters with expiry: a dict under a lock, expired entries dropped as they are read."""

    def __init__(self) -> None:
        self._lock = _fork.lock()
        self._values: dict[str, tuple[int, float]] = {}

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        with self._lock:
            return self._add(key, expiry, amount, time.time())

    def get(self, key: str) -> int:
        with self._lock:
            value, until = self._values.get(key, (0, 0.0))
        return value if until > time.time() else 0

    def apply(self, mode: Mode, items: Sequence[Item]) -> bool:
        now = time.time()
        with self._lock:
            if mode == "reserve":
                for key, _, cap, _ in items:
                    value, until = self._values.get(key, (0, 0.0))
                    if cap and until > now and value >= cap:
                        return False
            for key, expiry, _, amount in items:
                if amount > 0 or (amount < 0 and self._values.get(key, (0, 0.0))[1] > now):
                    self._add(key, expiry, amount, now)
            return True

    def _add(self, key: str, expiry: int, amount: int, now: float) -> int:
        value, until = self._values.get(key, (0, 0.0))
        if until <= now:
            value, until = 0, now + expiry
        value = max(0, value + amount)
        self._values[key] = (value, until)
        if len(self._values) > 4096:  # one entry per window and key: drop the expired ones
            self._values = {k: v for k, v in self._values.items() if v[1] > now}
        return value


# One script, two modes, so a reservation is checked and taken in one step whatever else runs on the
# server. KEYS: the counters; ARGV[1]: the mode; then for counter i: ARGV[3i-1] expiry, ARGV[3i] cap
# (0: none), ARGV[3i+1] amount. INCRBY keeps a key's expiry, so a settle never extends a window.
_APPLY_LUA = """
local mode = ARGV[1]
if mode == "reserve" then
  for i, key in ipairs(KEYS) do
    local cap = tonumber(ARGV[3 * i])
    if cap > 0 and (tonumber(redis.call("GET", key)) or 0) >= cap then
      return 0
    end
  end
end
for i, key in ipairs(KEYS) do
  local expiry, amount = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i + 1])
  local value = tonumber(redis.call("GET", key))
  if amount > 0 then
    redis.call("INCRBY", key, amount)
    if value == nil then
      redis.call("EXPIRE", key, expiry)
    end
  elseif amount < 0 and value ~= nil then
    redis.call("INCRBY", key, math.max(amount, -value))
  end
end
return 1
"""


class RedisCounters:
    """The counters in Redis, through the ``limits`` library's storage (its URL forms: ``redis://``,
    ``rediss://``, ``redis+sentinel://``, ...) and its atomic increment-with-expiry; reservations
    through `_APPLY_LUA` on the same connection and keys."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self._apply = storage.get_connection().register_script(_APPLY_LUA)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return int(self._storage.incr(key, expiry, amount))

    def get(self, key: str) -> int:
        return int(self._storage.get(key))

    def apply(self, mode: Mode, items: Sequence[Item]) -> bool:
        keys = [self._storage.prefixed_key(key) for key, _, _, _ in items]
        args: list[Any] = [mode]
        for _, expiry, cap, amount in items:
            args += [expiry, cap, amount]
        return bool(self._apply(keys=keys, args=args))


def redis_counters(url: str, said: str) -> RedisCounters:
    """Counters in the Redis at *url* (*said*: the URL as it may be shown, its password masked)."""
    try:
        from limits.storage import storage_from_string
    except ImportError as exc:
        raise ConfigurationError("CostControl(store='redis://...') needs the redis extra: "
                                 "pip install 'ragaudit[redis]'") from exc
    # Short socket timeouts: a store that does not answer costs a judgement a quarter of a second,
    # never the host anything (the governor runs on the Auditor's worker, off its event loop).
    try:
        storage = storage_from_string(url, socket_timeout=0.25, socket_connect_timeout=0.25,
                                      key_prefix="ragaudit")
        return RedisCounters(storage)
    except Exception as exc:
        # limits quotes the URL, password and all, and a chained cause would print it in any traceback.
        raise ConfigurationError(f"CostControl.store {said!r} cannot be used: "
                                 f"{scrub(str(exc).replace(url, said))}") from None
