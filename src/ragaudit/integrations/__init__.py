"""Framework integrations: translate a framework's run events into :class:`~ragaudit.RagTurn` s.

Each integration lives in its own module and imports its framework only when that module is
imported: ``ragaudit.integrations.langchain`` (``RagAuditCallbackHandler``, ``instrument()``) and
``ragaudit.integrations.llamaindex``. Importing this package loads no framework.
"""

from __future__ import annotations

__all__: list[str] = []
