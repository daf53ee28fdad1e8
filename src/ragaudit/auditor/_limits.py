"""The bounds of an [`Auditor`][ragaudit.Auditor]'s work, as one value: [`Limits`][ragaudit.Limits]."""

from __future__ import annotations

from dataclasses import dataclass

from .._numbers import check_number
from ..errors import ConfigurationError

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """How much an [`Auditor`][ragaudit.Auditor] holds and how long it waits: ``Auditor(limits=Limits(max_queue=500))``.

    Args:
        max_queue: turns waiting or being judged; past that a turn is dropped and counted (``dropped``), and at
            hand-off the backlog is also bounded by what the judge finishes within half of *exit_timeout_s*.
        max_concurrency: judgements running at once.
        max_closing: finished turns waiting in the integrations' closer to be recorded; a burst past that
            drops whole turns, spans included, counted ``close_dropped`` (apart from *max_queue*, so that a
            small judging queue never costs traces).
        timeout_s: the longest one judgement may take.
        max_context_chars: the retrieved documents given to the judge, cut to this many characters.
        exit_timeout_s: how long pending judgements are flushed at interpreter exit or SIGTERM.
        max_cpu_share: the share of the process's CPU that ragaudit's own threads (closing turns, spans, the
            judging loop, export) may take while the process is CPU-saturated (it used, or waited in the run
            queue for, at least 0.85 of a core over the last second: a CPython process, with its GIL, is
            saturated near one core). Past it, finished turns are shed at hand-off, before any closing work --
            an adaptive share of them, so that the judged share is what the CPU allows -- each counted
            ``dropped`` and ``shed_cpu`` in ``stats()``, and said once a minute. ragaudit's threads stay within the
            share (the callbacks on the host's own thread come on top); a process that is not saturated (an idle
            server) sheds nothing for CPU. Default 0.01.
            ``None`` turns the cap off (every turn is closed and judged, at the host's expense); to judge every
            answer of a CPU-saturated server, move judging out of the process (``mode="worker"`` and ``ragaudit
            worker``); see the serving guide. Applies to background judging only (not ``mode="inline"`` or
            ``"worker"``), and only where threads' CPU clocks can be read (Python's
            ``time.pthread_getcpuclockid``: Linux and Unixes that have it; where it is missing -- Windows -- the
            cap is off).

    Validated when made: a bad value is a [`ConfigurationError`][ragaudit.ConfigurationError] naming the field.
    """

    max_queue: int = 10_000
    max_concurrency: int = 16
    max_closing: int = 10_000
    timeout_s: float = 60.0
    max_context_chars: int = 24_000
    exit_timeout_s: float = 30.0
    max_cpu_share: float | None = 0.01

    def __post_init__(self) -> None:
        for name in ("max_queue", "max_concurrency", "max_closing", "max_context_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"Limits.{name} must be an int >= 1, got {value!r}")
        check_number("Limits.timeout_s", self.timeout_s, 0, low_open=True)
        check_number("Limits.exit_timeout_s", self.exit_timeout_s, 0)
        if self.max_cpu_share is not None:
            check_number("Limits.max_cpu_share", self.max_cpu_share, 0, 1, low_open=True)
