"""Chat-endpoint judges made against the loopback server for one test and closed when it ends.

:func:`open_judge` and :func:`closing` register what they return; the autouse fixture in
``tests/conftest.py`` calls :func:`close_all` after every test, so a test that fails half-way still
closes its judges' HTTP clients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tests.support.llm_server import LLMServer

__all__ = ["close_all", "closing", "open_judge"]


class _Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closeable)

_open: list[_Closeable] = []


def closing(judge: C) -> C:
    """Register *judge* to be closed when the current test ends; returns it unchanged."""
    _open.append(judge)
    return judge


def open_judge(cls: Callable[..., C], srv: LLMServer, model: str = "judge-model", **kwargs: Any) -> C:
    """``cls(model, base_url=srv.base_url, **kwargs)``, closed when the test ends.

    Test defaults unless *kwargs* say otherwise: a 5 s timeout and no retries, so a fault the
    server injects shows at once instead of after the SDK's back-off.
    """
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("max_retries", 0)
    return closing(cls(model, base_url=srv.base_url, **kwargs))


def close_all() -> None:
    """Close every registered judge, newest first."""
    while _open:
        _open.pop().close()
