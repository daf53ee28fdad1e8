"""Deprecated names keep working for one release, with a :class:`DeprecationWarning` naming the new one."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["renamed_kwargs", "warn_deprecated"]

F = TypeVar("F", bound=Callable[..., Any])


def warn_deprecated(old: str, new: str, *, stacklevel: int = 2) -> None:
    """Warn that *old* is deprecated in favour of *new* (*stacklevel* as for :func:`warnings.warn`,
    counted from the caller of this function)."""
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def renamed_kwargs(**renames: str) -> Callable[[F], F]:
    """Accept keyword arguments under their old names (``@renamed_kwargs(timeout="timeout_s")``).

    An old name is passed on under its new one, with a :class:`DeprecationWarning`; both at once is a
    :class:`TypeError`, as Python reports a duplicate argument. Positional calls are unaffected.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{func.__qualname__}() got both {old!r} and {new!r}")
                    warn_deprecated(f"{_called_name(func, args)}({old}=...)", f"{new}=", stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def _called_name(func: Callable[..., Any], args: tuple[Any, ...]) -> str:
    # A method named by the class the user called it on (Auditor.flush), not by the base class
    # that happens to define it (Draining.flush).
    owner, _, name = func.__qualname__.rpartition(".")
    if owner and args and owner in {cls.__qualname__ for cls in type(args[0]).__mro__}:
        return f"{type(args[0]).__qualname__}.{name}"
    return func.__qualname__
