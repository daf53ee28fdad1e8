"""Cost control at run time: budgets, rate limits and pauses, checked before each judge call (private).

The Auditor asks `Governor.admit` before it sends a turn to the judge and tells
`Governor.settle` what the call cost and how it ended. Three mechanisms, one place:

* **Budgets** ([`ragaudit.Budget`][ragaudit.Budget]): calls, tokens and money per window (``per_s``) or for the
  process's life. A call is admitted while every budget's spent-plus-reserved is below its cap, and
  then reserves, atomically across every budget (so N calls or processes admitted together see each
  other): the call, and its estimated tokens and money (`Need`: the judge's exact prompt and a
  typical reply, raised to the largest call settled so far). `Governor.settle` replaces the
  reservation with the real usage. A window thus ends at most one call's worth over a cap, however
  many calls run at once. A money cap that cannot price the judge's model fails closed (refused at
  construction when the model is known, else closed at the first unpriced reply). A turn turned
  away is counted ``over_budget``, never queued.
* **Rate** (``max_rps``, per judge endpoint): fixed one-second windows aligned to the wall clock, so
  every process sharing a store counts the same second. A call waits for a free slot within its
  deadline. An HTTP 429 halves this process's share of the rate (down to a tenth) and a
  ``Retry-After`` holds calls back until it has passed, for at most `RETRY_AFTER_CEILING_S`
  (120 s, the ``openai`` SDK's own ceiling: one ``Retry-After: 86400`` must not stop judging for a
  day); each success wins a tenth back.
* **Pause**: what retrying cannot fix (401, 403, a model that does not exist) pauses the judge: turns
  are counted ``paused`` and not sent, one WARNING names the cause; after ``pause_s`` one probe call
  is let through, and its success resumes judging.

Windows live in a counter store (``_budget_store``): in-process by default (each process its own
budget), or Redis (``CostControl(store="redis://host:port/db")``, one Lua script reserving and settling),
shared by every app replica and worker. The in-process store is ours because ``limits``' memory
storage starts a timer thread for its expiries, and this package starts none per call. A store
that fails (Redis down) is skipped for a few seconds and counted (``budget_store_errors``); the
call is then admitted (``CostControl(fail="open")``, the default) or turned away and counted
``budget_unavailable`` (``"closed"``). Nothing here runs on the host's thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Literal

from .. import _fork
from .._log import RateLimitedLog
from .._numbers import check_number
from ..content import scrub, scrub_url
from ..errors import ConfigurationError
from ..records import Judgement, JudgeRequest
from ..tracing import conventions as c
from ._budget_store import Counters, Item, LocalCounters, Mode, redis_counters
from ._feedback import FEEDBACK, FeedbackRetention, is_negative

if TYPE_CHECKING:
    from genai_prices.types import PriceCalculation, Usage

    from ..content import ContentPolicy
    from ..judges.base import RagJudge
    from ..records import RagTurn
    from ._submitting import Job

__all__ = ["NOT_SENT", "Budget", "CostControl", "CostGate", "Governor", "Verdict", "price_of"]

logger = logging.getLogger("ragaudit")

Verdict = Literal["ok", "over_budget", "paused", "budget_unavailable", "rate_limited"]
"""What `Governor.admit` decided: send the call, or the counted reason not to."""

NOT_SENT = ("filtered_out", "over_budget", "paused", "budget_unavailable", "rate_limited")
"""The ``stats()`` counters of turns that were not sent to the judge, each with its reason:
``judge_if`` said no, a budget was spent, the judge is paused, the budget store was down (with
``CostControl(fail="closed")``), or no rate slot came free within the judge's deadline."""

_FOREVER_S = 100 * 365 * 86_400  # "no window": the process's (or the store's) whole life
_STORE_BACKOFF_S = 5.0  # after a store error, the store is not asked again for this long
_PAUSING_STATUSES = frozenset({401, 403})
RETRY_AFTER_CEILING_S = 120.0
"""The longest a ``Retry-After`` holds calls back; a longer one holds them back this long."""
_USD_UNIT = 1_000_000  # money is counted in micro-dollars: the stores count integers


@dataclass(frozen=True, slots=True)
class Budget:
    """A ceiling on judge spend: ``Auditor(cost=CostControl(budget=Budget(max_calls=1000, per_s=86_400)))``.

    Any of *max_calls*, *max_tokens* (prompt + completion) and *max_usd* (from the judge's reported
    usage and a price table: ``genai-prices``, or ``CostControl(prices=...)``); *per_s* is the window in
    whole seconds (60: per minute, 86400: per day), None for no window. Pass a list for several at
    once (per minute and per day). A turn that would go over any of them is not judged and is
    counted in ``stats()["over_budget"]``.
    """

    max_calls: int | None = None
    max_tokens: int | None = None
    max_usd: float | None = None
    per_s: int | None = None

    def __post_init__(self) -> None:
        if self.max_calls is None and self.max_tokens is None and self.max_usd is None:
            raise ConfigurationError("Budget needs at least one of max_calls, max_tokens, max_usd")
        for name in ("max_calls", "max_tokens", "per_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"Budget.{name} must be a whole number >= 1 or None, got {value!r}")
        if self.max_usd is not None and (isinstance(self.max_usd, bool) or not isinstance(self.max_usd, (int, float))
                                         or not math.isfinite(self.max_usd) or self.max_usd <= 0):
            raise ConfigurationError(f"Budget.max_usd must be a number > 0 or None, got {self.max_usd!r}")

    @property
    def window_s(self) -> int:
        return self.per_s if self.per_s is not None else _FOREVER_S

    def key(self) -> str:
        """This budget's name in a store: budgets with equal limits and window share their counters."""
        return f"{self.max_calls}:{self.max_tokens}:{self.max_usd}:{self.per_s}"


@dataclass(frozen=True, slots=True)
class Need:
    """What one judge call is expected to cost, before it is made: tokens of its prompt and of a typical
    reply (``judges.cost.estimate_request``), and the model that prices them (None: not known)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """What an admitted call holds of the token and money budgets until it settles. ``taken`` is False
    when the store took nothing (no budget, or the store was down and the call admitted anyway)."""

    tokens: int = 0
    usd_units: int = 0  # micro-dollars
    taken: bool = False


@dataclass(frozen=True, slots=True)
class Ticket:
    """`Governor.admit`'s answer: the verdict, and what the call holds until `Governor.settle`."""

    verdict: Verdict
    hold: Hold = Hold()


def _masked(text: str, url: str) -> str:
    """*text* (a store's error) with *url* in it masked and every known secret scrubbed."""
    return scrub(text.replace(url, scrub_url(url) or ""))


def price_of(model: str | None, usage: Mapping[str, object], prices: Mapping[str, tuple[float, float]]) -> float | None:
    """Dollars of one call of *model* with *usage*, or None when the price is not known.

    *prices* (``{model: (usd per million input tokens, usd per million output tokens)}``) win over the
    ``genai-prices`` table."""
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not model or not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    if model in prices:
        per_in, per_out = prices[model]
        return (prompt * per_in + completion * per_out) / 1_000_000
    table = _genai_prices()
    if table is None:
        return None
    usage_type, calc_price = table
    try:
        return float(calc_price(usage_type(input_tokens=prompt, output_tokens=completion), model_ref=model).total_price)
    except Exception:  # a model the table does not know
        return None


@cache
def _genai_prices() -> tuple[type[Usage], Callable[..., PriceCalculation]] | None:
    """genai-prices' ``Usage`` and ``calc_price``, or None without the ``prices`` extra. Looked up once: a
    failed import is not remembered by Python and cost about 0.1 ms on every judgement."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    return Usage, calc_price


def _check_governing(budgets: Sequence[object], max_rps: object, fail: object, pause_s: float, owner: str) -> None:
    """The checks of the governor's settings; a ConfigurationError names the field (``owner`` + its name)."""
    if max_rps is not None and (isinstance(max_rps, bool) or not isinstance(max_rps, (int, float))
                                or not math.isfinite(max_rps) or max_rps <= 0):
        raise ConfigurationError(f"{owner}max_rps must be a number > 0 or None, got {max_rps!r}")
    if fail not in ("open", "closed"):
        raise ConfigurationError(f"{owner}fail must be 'open' or 'closed', got {fail!r}")
    check_number(f"{owner}pause_s", pause_s, 0, low_open=True)
    for budget in budgets:
        if not isinstance(budget, Budget):
            raise ConfigurationError(f"{owner}budget must be a ragaudit.Budget or a list of them, got {budget!r}")


class Governor:
    """Budgets, rate and pause for one Auditor's judge (see the module docstring)."""

    def __init__(
        self,
        budgets: Sequence[Budget] = (),
        *,
        max_rps: float | None = None,
        store: str | None = None,
        fail: Literal["open", "closed"] = "open",
        pause_s: float = 60.0,
        prices: Mapping[str, tuple[float, float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_governing(budgets, max_rps, fail, pause_s, "")
        self.budgets = tuple(budgets)
        self.max_rps = float(max_rps) if max_rps is not None else None
        self.fail = fail
        self.pause_s = float(pause_s)
        self.prices = dict(prices or {})
        # The store's password never shows: registered with the scrubber, and masked wherever the URL is said.
        self.store_url = scrub_url(store)
        self._store_raw = store
        self._clock = clock
        self._counters: Counters = redis_counters(store, self.store_url or "") if store else LocalCounters()
        self._lock = _fork.lock()
        self._store_down_until = 0.0
        self._share = 1.0  # this process's share of max_rps: halved on a 429, won back on success
        self._not_before = 0.0  # a Retry-After holds calls back until then
        self._paused_until: float | None = None
        self._probing = False
        self._unpriced: set[str] = set()  # judge models with no known price: money budgets are closed
        self._money_budgeted = any(b.max_usd is not None for b in self.budgets)
        self._holding = any(b.max_tokens is not None or b.max_usd is not None for b in self.budgets)
        self._largest = Hold()  # the largest call settled: a floor under every estimate
        self._log = RateLimitedLog()
        self.counts: dict[str, float] = dict.fromkeys(
            ("over_budget", "paused", "budget_unavailable", "rate_limited", "budget_store_errors", "rate_waits",
             "judge_tokens", "judge_usd"), 0)

    @property
    def active(self) -> bool:
        """Whether there is anything to check (no budget, no rate: admit is a no-op apart from pauses)."""
        return bool(self.budgets) or self.max_rps is not None

    def after_fork(self) -> None:
        """In a forked child: fresh locks and counts (an in-process store starts empty, a shared one is shared)."""
        self._lock = _fork.lock()
        if isinstance(self._counters, LocalCounters):
            self._counters = LocalCounters()
        self.counts = dict.fromkeys(self.counts, 0)

    # -- the decision ------------------------------------------------------------------------

    async def admit(self, endpoint: str, deadline: float, need: Callable[[], Need] | None = None) -> Ticket:
        """May a judge call to *endpoint* go now? Reserves the call and what *need* says it will cost
        (evaluated only with a token or money budget) in every budget, and waits (asleep) for a rate
        slot until *deadline* (``time.monotonic()``). Never raises."""
        verdict = self._pause_verdict()
        if verdict != "ok":
            return Ticket(self._count(verdict))
        hold = Hold()
        if self.budgets:
            verdict, hold = await asyncio.to_thread(self._take_budget, need)
            if verdict != "ok":
                self._end_probe()
                return Ticket(self._count(verdict))
        if self.max_rps is not None:
            verdict = await self._take_slot(endpoint, deadline)
            if verdict != "ok":  # no call is made: what it reserved goes back
                if hold.taken:
                    await asyncio.to_thread(self._apply, "settle", self._items(-1, -hold.tokens, -hold.usd_units))
                self._end_probe()
                return Ticket(self._count(verdict))
        return Ticket("ok", hold)

    def settle(self, judgement: Judgement, model: str | None, hold: Hold = Hold()) -> None:
        """Account one finished call: its tokens and money in place of what it *hold* s, a 429 or
        Retry-After, a pause or a resume."""
        usage = judgement.usage
        tokens = sum(v for k, v in usage.items() if k in ("prompt_tokens", "completion_tokens") and isinstance(v, int))
        usd = price_of(model, usage, self.prices) if tokens else None
        if tokens and usd is None and model:
            self._unpriced_model(model)
        units = max(1, round(usd * _USD_UNIT)) if usd else 0
        with self._lock:
            self.counts["judge_tokens"] += tokens
            if usd is not None:
                self.counts["judge_usd"] += usd
            self._largest = Hold(max(self._largest.tokens, tokens), max(self._largest.usd_units, units))
        _meter().record(tokens, usd, model)
        if self.budgets and (hold.taken or tokens or units):
            # Without a reservation (the store was down at admit) the whole cost is added.
            self._apply("settle", self._items(0, tokens - hold.tokens, units - hold.usd_units))
        status = judgement.details.get("status_code") if judgement.error else None
        self._after_status(status if isinstance(status, int) else None, judgement)

    def check_priced(self, model: str) -> None:
        """Refuse, at construction, a money budget for a judge *model* with no known price: it could cap
        nothing (ConfigurationError naming the model and how to give its price)."""
        if self._money_budgeted and price_of(model, {"prompt_tokens": 1, "completion_tokens": 1}, self.prices) is None:
            raise ConfigurationError(
                f"Budget(max_usd=...) cannot be kept: no price is known for judge model {model!r}. Give it: "
                f"CostControl(prices={{{model!r}: (usd_per_million_input_tokens, usd_per_million_output_tokens)}}), "
                "or pip install 'ragaudit[prices]' for the genai-prices table")

    def _unpriced_model(self, model: str) -> None:
        """A judge model with no known price: money budgets fail closed from now on, said once."""
        if not self._money_budgeted or model in self._unpriced:
            return
        with self._lock:
            self._unpriced.add(model)
        logger.warning("ragaudit: no price is known for judge model %r, so the money budget (Budget(max_usd=...)) "
                       "cannot be kept: it is closed, and every later turn is counted in stats()['over_budget'] "
                       "and not judged. Give CostControl(prices={%r: (usd_per_mtok_in, usd_per_mtok_out)}), or "
                       "pip install 'ragaudit[prices]' for the genai-prices table.", model, model)

    # -- pause ----------------------------------------------------------------------------------

    def _pause_verdict(self) -> Verdict:
        with self._lock:
            if self._paused_until is None:
                return "ok"
            if self._probing or self._clock() < self._paused_until:
                return "paused"
            self._probing = True  # this call is the probe; the others stay paused until it settles
            return "ok"

    def _end_probe(self) -> None:
        with self._lock:
            self._probing = False

    def _after_status(self, status: int | None, judgement: Judgement) -> None:
        error = judgement.error or ""
        fatal = status in _PAUSING_STATUSES or (status == 404 and "model" in error.lower())
        with self._lock:
            was_paused = self._paused_until is not None
            self._probing = False
            if fatal:
                self._paused_until = self._clock() + self.pause_s
            elif was_paused:  # this was the probe: it resumes judging, or the pause starts again
                self._paused_until = None if judgement.error is None else self._clock() + self.pause_s
            if status == 429:
                self._share = max(0.1, self._share / 2)
                retry = judgement.details.get("retry_after_s")
                if isinstance(retry, (int, float)) and retry > 0:
                    hold = min(float(retry), RETRY_AFTER_CEILING_S)
                    self._not_before = max(self._not_before, self._clock() + hold)
            elif judgement.error is None:
                self._share = min(1.0, round(self._share + 0.1, 6))
            resumed = was_paused and self._paused_until is None
        if fatal and not was_paused:
            logger.warning(
                "ragaudit: judging is paused: the judge endpoint answered %s (%s), which retrying cannot fix. "
                "Turns are counted in stats()['paused'] and not sent; one probe call after pause_s=%gs resumes "
                "judging once the cause is gone (check the API key, its permissions and the model name).",
                f"HTTP {status}", error[:200], self.pause_s)
        elif resumed:
            logger.warning("ragaudit: judging resumed: the probe call after the pause succeeded")

    # -- budgets --------------------------------------------------------------------------------

    def _store(self, work: Callable[[], Verdict]) -> Verdict:
        """Run *work* against the store, or decide by ``fail`` while the store is down."""
        if self._clock() < self._store_down_until:
            self._tally("budget_store_errors")
            return "ok" if self.fail == "open" else "budget_unavailable"
        try:
            return work()
        except Exception as exc:  # Redis down or refusing: counted, never raised, never waited on
            self._store_down_until = self._clock() + _STORE_BACKOFF_S
            self._tally("budget_store_errors")
            self._log.warning("budget-store", "ragaudit: the budget store %s failed (%s: %s); calls are %s while "
                              "it is down (counted in stats()['budget_store_errors'])", self.store_url or "memory",
                              type(exc).__name__, _masked(str(exc), self._store_raw or ""),
                              "admitted" if self.fail == "open" else "turned away")
            return "ok" if self.fail == "open" else "budget_unavailable"

    def _take_budget(self, need: Callable[[], Need] | None) -> tuple[Verdict, Hold]:
        """Reserve one call and its estimated cost in every budget, all or nothing (run off the loop:
        the estimate builds the judge's prompt, the store may be Redis)."""
        hold = self._estimate(need) if self._holding else Hold()
        if self._money_budgeted and self._unpriced:  # fail closed: a money cap that cannot price caps nothing
            return "over_budget", hold
        reserved = False

        def reserve() -> Verdict:
            nonlocal reserved
            reserved = self._counters.apply("reserve", self._items(1, hold.tokens, hold.usd_units))
            return "ok" if reserved else "over_budget"

        # "ok" from a store that is down (fail="open") reserved nothing: settle adds the whole cost.
        return self._store(reserve), Hold(hold.tokens, hold.usd_units, reserved)

    def _estimate(self, need: Callable[[], Need] | None) -> Hold:
        """What a call is expected to cost: *need* (None: a call of no known request, a session's),
        raised to the largest call settled so far (an estimate that falls short is corrected after
        one call, so it cannot fall short twice)."""
        try:
            wanted = need() if need is not None else Need()
        except Exception as exc:  # an estimate that fails: the largest call so far stands in
            # Its type only: the text of an error from building a prompt may quote the turn.
            self._log.warning("estimate", "ragaudit: estimating a judge call's cost failed (%s); the largest "
                              "call so far is reserved", type(exc).__name__)
            wanted = Need()
        tokens = wanted.prompt_tokens + wanted.completion_tokens
        usd = price_of(wanted.model, {"prompt_tokens": wanted.prompt_tokens,
                                      "completion_tokens": wanted.completion_tokens}, self.prices) if tokens else None
        if tokens and usd is None and wanted.model:
            self._unpriced_model(wanted.model)
        units = max(1, round(usd * _USD_UNIT)) if usd else 0
        return Hold(max(tokens, self._largest.tokens), max(units, self._largest.usd_units))

    def _items(self, calls: int, tokens: int, units: int) -> list[Item]:
        """The counters of every budget with *calls*, *tokens* and micro-dollar *units* to add."""
        items: list[Item] = []
        for budget in self.budgets:
            key, window = budget.key(), budget.window_s
            if budget.max_calls is not None:
                items.append((f"calls:{key}", window, budget.max_calls, calls))
            if budget.max_tokens is not None:
                items.append((f"tok:{key}", window, budget.max_tokens, tokens))
            if budget.max_usd is not None:
                items.append((f"usd:{key}", window, max(1, round(budget.max_usd * _USD_UNIT)), units))
        return items

    def _apply(self, mode: Mode, items: Sequence[Item]) -> None:
        if any(amount for _, _, _, amount in items):
            self._store(lambda: "ok" if self._counters.apply(mode, items) else "over_budget")

    # -- rate -----------------------------------------------------------------------------------

    def _window(self) -> tuple[int, int]:
        """(window seconds, calls per window) for this process's current share of ``max_rps``."""
        assert self.max_rps is not None  # only called with a rate
        rps = self.max_rps * self._share
        window = 1 if rps >= 1 else math.ceil(1 / rps)
        return window, max(1, math.floor(rps * window))

    async def _take_slot(self, endpoint: str, deadline: float) -> Verdict:
        while True:
            now = self._clock()
            wait = self._not_before - now
            if wait <= 0:
                window, cap = self._window()
                start = int(now // window) * window
                verdict = await asyncio.to_thread(self._store, partial(self._slot, endpoint, start, window, cap))
                if verdict != "rate_limited":
                    return verdict
                wait = start + window - now
            self._tally("rate_waits")
            if time.monotonic() + wait >= deadline:
                return "rate_limited"
            await asyncio.sleep(wait + 0.001)

    def _slot(self, endpoint: str, start: int, window: int, cap: int) -> Verdict:
        taken = self._counters.incr(f"rps:{endpoint}:{window}:{start}", window + 1, 1)
        return "ok" if taken <= cap else "rate_limited"

    def _tally(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _count(self, what: Verdict) -> Verdict:
        with self._lock:
            self.counts[what] += 1
        _meter().not_sent(what)
        return what


class _Meter:
    """The cost figures as OpenTelemetry metrics (no-ops until the application sets a MeterProvider):
    ``ragaudit.judge.tokens`` and ``ragaudit.judge.cost`` (USD, where a price is known) per judge
    model, ``ragaudit.judge.not_sent`` per reason (over_budget, paused, rate_limited, ...)."""

    def __init__(self) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter(c.METER_NAME)
        specs = {spec.name: spec for spec in c.METRICS}
        self._tokens, self._cost, self._not_sent = (
            meter.create_counter(name, unit=specs[name].unit, description=specs[name].description)
            for name in (c.METRIC_JUDGE_TOKENS, c.METRIC_JUDGE_COST, c.METRIC_JUDGE_NOT_SENT))

    def record(self, tokens: int, usd: float | None, model: str | None) -> None:
        attributes = {c.GEN_AI_REQUEST_MODEL: model or "unknown"}
        try:
            if tokens:
                self._tokens.add(tokens, attributes)
            if usd:
                self._cost.add(usd, attributes)
        except Exception:  # a broken metrics pipeline must not cost the judgement
            pass

    def not_sent(self, reason: str) -> None:
        try:
            self._not_sent.add(1, {c.ATTR_UNJUDGED_REASON: reason})
        except Exception:
            pass


_METER: _Meter | None = None


def _meter() -> _Meter:
    # Made on first use, so that a MeterProvider the application sets after importing us is used
    # (the API's proxy instruments forward to a provider set later, too).
    global _METER
    if _METER is None:
        _METER = _Meter()
    return _METER


@dataclass(frozen=True, slots=True)
class CostControl:
    """What an [`Auditor`][ragaudit.Auditor]'s judging may cost: ``Auditor(cost=CostControl(budget=..., max_rps=5))``.

    Args:
        budget: a [`Budget`][ragaudit.Budget] or a list of them (per minute and per day); a turn that would
            go over one is not judged, counted ``over_budget``. None: no budget.
        max_rps: judge calls per second to the judge's endpoint (None: no limit); a call waits for a free
            slot within its deadline, else it is counted ``rate_limited``. A 429 lowers this process's share.
        store: where budgets and rates are counted: None, in this process; ``"redis://host:port/db"``,
            shared by every replica and worker that names the same store.
        fail: what a turn gets while the store is down: ``"open"`` (judged) or ``"closed"`` (counted
            ``budget_unavailable``).
        pause_s: after an error retrying cannot fix (401, 403, unknown model) the judge is paused this long,
            then one probe call is let through.
        prices: ``{model: (usd per 1M prompt tokens, usd per 1M completion tokens)}`` for money budgets, over
            ``genai-prices``.
        judge_if: ``turn -> bool``; a turn it says no to is not judged, counted ``filtered_out``.
        retain_s: keep each sampled-out turn this many seconds so that a thumbs-down
            ([`feedback`][ragaudit.Auditor.feedback]) can still get it judged (None: off, keeping costs memory).
        max_retained: at most this many such turns (the oldest go first, counted ``retained_evicted``).

    Validated when made: a bad value is a [`ConfigurationError`][ragaudit.ConfigurationError] naming the field.
    """

    budget: Budget | Sequence[Budget] | None = None
    max_rps: float | None = None
    store: str | None = None
    fail: Literal["open", "closed"] = "open"
    pause_s: float = 60.0
    prices: Mapping[str, tuple[float, float]] | None = None
    judge_if: Callable[[RagTurn], bool] | None = None
    retain_s: float | None = None
    max_retained: int = 1_000

    def __post_init__(self) -> None:
        if self.budget is not None and not isinstance(self.budget, (Budget, list, tuple)):
            raise ConfigurationError(f"CostControl.budget must be a ragaudit.Budget or a list of them, "
                                     f"got {self.budget!r}")
        if isinstance(self.budget, list):
            object.__setattr__(self, "budget", tuple(self.budget))
        _check_governing(self.budgets, self.max_rps, self.fail, self.pause_s, "CostControl.")
        if self.store is not None and not isinstance(self.store, str):
            raise ConfigurationError(f"CostControl.store must be a redis:// URL or None, "
                                     f"got {type(self.store).__name__}")
        if self.prices is not None and not isinstance(self.prices, Mapping):
            raise ConfigurationError("CostControl.prices must be a mapping {model: (usd_per_1m_prompt, "
                                     f"usd_per_1m_completion)}}, got {type(self.prices).__name__}")
        if self.judge_if is not None and not callable(self.judge_if):
            raise ConfigurationError("CostControl.judge_if must be callable(turn) -> bool")
        if self.retain_s is not None and (isinstance(self.retain_s, bool) or not isinstance(self.retain_s, (int, float))
                                          or not math.isfinite(self.retain_s) or self.retain_s <= 0):
            raise ConfigurationError(f"CostControl.retain_s must be a number of seconds > 0 or None, "
                                     f"got {self.retain_s!r}")
        if isinstance(self.max_retained, bool) or not isinstance(self.max_retained, int) or self.max_retained < 1:
            raise ConfigurationError(f"CostControl.max_retained must be an int >= 1, got {self.max_retained!r}")

    def __repr__(self) -> str:  # the store's password never shows
        fields = {"budget": self.budget, "max_rps": self.max_rps, "store": scrub_url(self.store), "fail": self.fail,
                  "pause_s": self.pause_s, "prices": self.prices, "judge_if": self.judge_if,
                  "retain_s": self.retain_s, "max_retained": self.max_retained}
        return f"CostControl({', '.join(f'{name}={value!r}' for name, value in fields.items())})"

    @property
    def budgets(self) -> tuple[Budget, ...]:
        """The budgets, as a tuple (empty: none)."""
        return (self.budget,) if isinstance(self.budget, Budget) else tuple(self.budget or ())


class CostGate:
    """A [`CostControl`][ragaudit.CostControl] at run time, for one Auditor: the `Governor` of its judge's
    endpoint, the ``judge_if`` predicate and the retention of sampled-out turns for feedback (``_feedback``)."""

    def __init__(self, judge: RagJudge, cost: CostControl) -> None:
        from ..judges.llm.endpoint import EndpointJudge, endpoint_host

        self.governor = Governor(cost.budgets, max_rps=cost.max_rps, store=cost.store, fail=cost.fail,
                                 pause_s=cost.pause_s, prices=cost.prices)
        self.judge_if = cost.judge_if
        self.retained = FeedbackRetention(cost.retain_s, cost.max_retained)
        # The rate limit is per judge endpoint: replicas judging through one endpoint share its rate.
        self.endpoint = (endpoint_host(judge.base_url) or judge.base_url) if isinstance(judge, EndpointJudge) \
            else str(judge.name)
        self._judge = judge
        self._model = judge.model if isinstance(judge, EndpointJudge) and isinstance(judge.model, str) else None
        if self._model is not None:
            self.governor.check_priced(self._model)
        self._log = RateLimitedLog()
        self._lock = _fork.lock()
        self.counts = dict.fromkeys(FEEDBACK, 0)

    def retain(self, turn: RagTurn, job: Job) -> None:
        """Keep a sampled-out *turn* (its submission *job*) for feedback, when retention is on."""
        evicted = self.retained.keep(turn, job)
        if evicted:
            with self._lock:
                self.counts["retained_evicted"] += evicted

    def feedback(self, turn_id: str, value: object, resubmit: Callable[[Job], str]) -> str:
        """A user's feedback on *turn_id*. A thumbs-down (False, a number below 0.5, ``"down"``,
        ``"bad"``, ...) on a turn the sampler left out and that is still kept (``CostControl(retain_s=...)``)
        is *resubmit* ted for judging, past the sampler and ``judge_if`` (counted ``feedback_judged``;
        the status is *resubmit*'s, ``"queued"``); ``"unmatched"`` when no such turn is kept (counted
        ``feedback_unmatched``), ``"ignored"`` for feedback that is not negative. Never raises."""
        try:
            if not is_negative(value):
                return "ignored"
            kept = self.retained.take(str(turn_id))
            with self._lock:
                self.counts["feedback_unmatched" if kept is None else "feedback_judged"] += 1
            return "unmatched" if kept is None else resubmit(kept[1])
        except Exception as exc:  # the host must never see our failure
            logger.error("ragaudit: feedback failed: %s: %s", type(exc).__name__, exc)
            return "unmatched"

    def selected(self, turn: RagTurn, content: ContentPolicy) -> bool:
        """``judge_if``'s answer for *turn*; a predicate that raises selects the turn (and is logged)."""
        if self.judge_if is None:
            return True
        try:
            return bool(self.judge_if(turn))
        except Exception as exc:
            self._log.warning("judge_if", "ragaudit: judge_if raised; the turn is judged: %s", content.exception(exc))
            return True

    async def admit(self, timeout_s: float, request: Callable[[], JudgeRequest] | None = None) -> Ticket:
        """The governor's ticket for one judge call of *request* (made only when a token or money
        budget needs its estimate; None: a call of no known request, e.g. a session's)."""
        need = partial(self._need, request) if request is not None else None
        return await self.governor.admit(self.endpoint, time.monotonic() + timeout_s, need)

    def _need(self, request: Callable[[], JudgeRequest]) -> Need:
        from ..judges.cost import estimate_request

        estimate = estimate_request(self._judge, request())
        return Need(estimate.prompt_tokens, estimate.completion_tokens, self._model)

    def settle(self, judgement: Judgement, ticket: Ticket | None = None) -> None:
        self.governor.settle(judgement, judgement.identity.model if judgement.identity else None,
                             ticket.hold if ticket is not None else Hold())

    def stats(self) -> dict[str, Any]:  # counts and judge_usd (a float) under Auditor.stats' dict[str, int]
        counts = self.governor.counts
        with self._lock:
            feedback = dict(self.counts)
        return {**{key: int(counts[key]) for key in ("budget_store_errors", "rate_waits", "judge_tokens")},
                "judge_usd": round(float(counts["judge_usd"]), 6), **feedback}

    def after_fork(self) -> None:
        self._lock = _fork.lock()
        self.counts = dict.fromkeys(FEEDBACK, 0)
        self.governor.after_fork()
        self.retained.clear()
