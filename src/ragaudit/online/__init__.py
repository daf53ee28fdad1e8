"""Deprecated alias of [`ragaudit.auditor`][ragaudit.auditor] (kept for one release).

``ragaudit.online`` became the ``ragaudit.auditor`` package; import ``Auditor`` from ``ragaudit`` or
``ragaudit.auditor`` instead. (A package rather than a module so that git follows the old file's
history to ``auditor/_auditor.py``.)
"""

from __future__ import annotations

import warnings

from .. import auditor as _auditor
from ..auditor import *  # noqa: F403 (every public name of ragaudit.auditor, as they are)

__all__ = list(_auditor.__all__)

warnings.warn("ragaudit.online is deprecated and will be removed in the next release; import from "
              "ragaudit.auditor (or ragaudit) instead", DeprecationWarning, stacklevel=2)
