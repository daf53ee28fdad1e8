"""The optional C speedups (``_speedups.c``, built by ``setup.py`` where a C compiler is found).

:data:`speedups` is the extension module, or None: not built (a pure install), or turned off with
``RAGAUDIT_PURE=1`` in the environment. Callers read the attribute at each call, so a test or a
benchmark can set it to None to run the pure path in the same process. Each speedup reads Python
objects in one pass and gives what the pure path gives; it declines (returns None) whatever it
does not take, and the pure path then reads the input and names any bad value.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["speedups"]


def _load() -> ModuleType | None:
    if os.environ.get("RAGAUDIT_PURE", "") == "1":
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


speedups: ModuleType | None = _load()
