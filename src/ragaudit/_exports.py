"""Lazy exports for a package ``__init__``: each public name listed once, imported on first use.

```python
__getattr__, __dir__ = lazy_exports(__name__, {"Auditor": ".auditor", "metrics": ".metrics:"},
                                    deprecated={"evaluate": (".evaluation.runner:evaluate_pipeline",
                                                             "ragaudit.evaluate_pipeline")})
```

A value is ``"module"`` (the attribute of the same name in that module), ``"module:attr"`` (another
attribute), or ``"module:"`` (the module itself); a leading dot is relative to the package. Lazy
imports keep ``import ragaudit`` free of frameworks, the OTel SDK and ``openai``. A deprecated name
resolves to its replacement and warns with a `DeprecationWarning` that names it; it is left out
of ``dir()`` and ``__all__`` so that ``from ragaudit import *`` does not warn.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ._deprecation import warn_deprecated

__all__ = ["lazy_exports"]


def _resolve(package: str, name: str, spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    module = importlib.import_module(module_name, package)
    if sep and not attr:
        return module
    return getattr(module, attr or name)


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    *,
    deprecated: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for *package* serving *exports* and the *deprecated* aliases.

    *deprecated* maps an old name to ``(spec, replacement)``: where its value now lives and the public
    name to use instead (shown in the warning).
    """
    exports = dict(exports)
    deprecated = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        spec = exports.get(name)
        if spec is not None:
            value = _resolve(package, name, spec)
            # Cached in the package so the next access is a plain attribute lookup.
            setattr(sys.modules[package], name, value)
            return value
        if name in deprecated:
            spec, replacement = deprecated[name]
            warn_deprecated(f"{package}.{name}", replacement, stacklevel=2)
            return _resolve(package, name, spec)  # not cached: every use warns (once per call site)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
