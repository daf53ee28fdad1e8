"""Lazy exports for a package ``__init__``: each public name listed once, imported on first use.

```python
__getattr__, __dir__ = lazy_exports(__name__, {"Auditor": ".auditor", "metrics": ".metrics:"})
```

A value is ``"module"`` (the attribute of the same name in that module), ``"module:attr"`` (another
attribute), or ``"module:"`` (the module itself); a leading dot is relative to the package. Lazy
imports keep ``import ragaudit`` free of frameworks, the OTel SDK and ``openai``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def _resolve(package: str, name: str, spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    module = importlib.import_module(module_name, package)
    if sep and not attr:
        return module
    return getattr(module, attr or name)


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for *package* serving *exports*."""
    exports = dict(exports)

    def __getattr__(name: str) -> Any:
        spec = exports.get(name)
        if spec is not None:
            value = _resolve(package, name, spec)
            # Cached in the package so the next access is a plain attribute lookup.
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
