"""Deprecated names keep working for one release, with a `DeprecationWarning` naming the new one."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["deprecated_alias", "renamed_kwargs", "warn_deprecated"]

F = TypeVar("F", bound=Callable[..., Any])


def warn_deprecated(old: str, new: str, *, stacklevel: int = 2) -> None:
    """Warn that *old* is deprecated in favour of *new* (*stacklevel* as for `warnings.warn`,
    counted from the caller of this function)."""
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def renamed_kwargs(**renames: str) -> Callable[[F], F]:
    """Accept keyword arguments under their old names (``@renamed_kwargs(timeout="timeout_s")``).

    An old name is passed on under its new one, with a `DeprecationWarning`; both at once is a
    `TypeError`, as Python reports a duplicate argument. Positional calls are unaffected.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if renames:
                _rename(kwargs, renames, lambda: _called_name(func, args))
            return func(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def _rename(kwargs: dict[str, Any], renames: dict[str, str], called: Callable[[], str]) -> None:
    # Old keyword names passed on under their new ones; warns from the user's call (two frames up).
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise TypeError(f"{called()}() got both {old!r} and {new!r}")
            warn_deprecated(f"{called()}({old}=...)", f"{new}=", stacklevel=3)
            kwargs[new] = kwargs.pop(old)


def _called_name(func: Callable[..., Any], args: tuple[Any, ...]) -> str:
    # A method named by the class the user called it on (Auditor.shutdown), not by the base class
    # that happens to define it (Draining.shutdown).
    owner, _, name = func.__qualname__.rpartition(".")
    if owner and args and owner in {cls.__qualname__ for cls in type(args[0]).__mro__}:
        return f"{type(args[0]).__qualname__}.{name}"
    return func.__qualname__


class deprecated_alias:  # lower case: used where a method would be defined, as property is
    """A method's old name, kept for one release: ``flush = deprecated_alias("force_flush")``.

    Calling the old name warns (naming the class it was called on and the new name) and calls the
    new one with the same arguments; *renames* are old keyword names the alias still accepts, as
    `renamed_kwargs`.
    """

    def __init__(self, new: str, **renames: str) -> None:
        self.new = new
        self.renames = renames
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name
        self.__doc__ = f"Deprecated: `{self.new}`."

    def __get__(self, obj: object, owner: type | None = None) -> Callable[..., Any]:
        if obj is None:
            return cast(Callable[..., Any], self)
        alias = self

        def call(*args: Any, **kwargs: Any) -> Any:
            cls = type(obj).__qualname__
            warn_deprecated(f"{cls}.{alias.old}()", f"{cls}.{alias.new}()")
            _rename(kwargs, alias.renames, lambda: f"{cls}.{alias.old}")
            return getattr(obj, alias.new)(*args, **kwargs)

        call.__doc__ = self.__doc__
        return call

