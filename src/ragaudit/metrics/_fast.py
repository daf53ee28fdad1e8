"""The optional C speedups (``_speedups.c``, built by ``setup.py`` where a C compiler is found).

`speedups` is the extension module, or None: not built (a pure install), or turned off with
``RAGAUDIT_PURE=1`` in the environment. Callers read the attribute at each call, so a test or a
benchmark can set it to None to run the pure path in the same process. Each speedup reads Python
objects in one pass and gives what the pure path gives; it declines (returns None) whatever it
does not take, and the pure path then reads the input and names any bad value.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["empty", "speedups"]


def _load() -> ModuleType | None:
    if os.environ.get("RAGAUDIT_PURE", "") == "1":
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


speedups: ModuleType | None = _load()


def empty(n: int, dtype: Any) -> np.ndarray:
    """``np.empty(n, dtype)`` for the large temporaries of an evaluation, in memory numpy does not
    advise the kernel to back with huge pages (it advises it for every array of 4 MiB or more).

    On a virtual machine that hands freed memory back to its host (as this one does), a huge page
    freed and touched again seconds later -- or a process's first huge pages -- costs the host's
    fault as well: 1.5-1.8 ns a byte here for 320 MiB after a 5 s pause, against 0.40 for 4 KiB
    pages, whose cost does not change (``benchmarks/page_faults.py``; back to back, huge pages cost
    0.13). An evaluation is usually the first or only one of its size in its process, and a
    20 M-row run's temporaries never come from memory the allocator kept: with huge pages its
    per-row cost grew with its size. Without the speedups: ``np.empty``.
    """
    native = speedups
    if native is None:
        return np.empty(n, dtype=dtype)
    kind = np.dtype(dtype)
    return np.frombuffer(native.empty(n * kind.itemsize), dtype=kind)
