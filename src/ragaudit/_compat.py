"""Files written by the previous release, read under today's names.

Audit logs and span files outlive the process that wrote them: ``ragaudit report``, ``ragaudit
qrels``, the HTML report and [`read_audit_log`][ragaudit.tracing.read_audit_log] read a log that an older
ragaudit appended to as they read a new one. Each rename of a recorded key is undone here, in one
place, for one release after it.

- 0.1.0 named the retrieval metrics computed from the judge's document grades ``judged_<metric>``
  (``judged_metrics`` in the audit log, ``ragaudit.retrieval.judged_*`` on spans); they are
  ``graded_<metric>`` now, ``judged`` having kept one meaning: what the Auditor did with a turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["GRADED_PREFIX", "OLD_GRADED_PREFIX", "current_audit_line", "current_name"]

GRADED_PREFIX = "graded_"
"""The prefix of a retrieval metric computed from the judge's grades: ``graded_ndcg@10``."""
OLD_GRADED_PREFIX = "judged_"
"""The same metrics' prefix in files written by 0.1.0: ``judged_ndcg@10``."""

_OLD_KEY = OLD_GRADED_PREFIX + "metrics"
_KEY = GRADED_PREFIX + "metrics"


def current_name(name: str, prefix: str = "") -> str:
    """*name* under today's name: ``[prefix]judged_<metric>`` becomes ``[prefix]graded_<metric>``;
    any other name is returned as it is."""
    old = prefix + OLD_GRADED_PREFIX
    return prefix + GRADED_PREFIX + name[len(old):] if name.startswith(old) else name


def current_audit_line(entry: dict[str, Any]) -> dict[str, Any]:
    """An audit-log line under today's keys (*entry* itself when it has no old key).

    A 0.1.0 line's ``judged_metrics: {"judged_ndcg@10": ...}`` becomes ``graded_metrics:
    {"graded_ndcg@10": ...}`` in the key's place; a value that is not an object is kept as written
    (the readers name it as a bad line). A line with both keys keeps the current one.
    """
    if _OLD_KEY not in entry:
        return entry
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key != _OLD_KEY:
            out[key] = value
        elif _KEY not in entry:
            out[_KEY] = ({current_name(str(k)): v for k, v in value.items()} if isinstance(value, Mapping)
                         else value)
    return out
