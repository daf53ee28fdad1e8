"""The Auditor's deprecated names, kept for one release (each warns and says what replaces it)."""

from __future__ import annotations

from collections.abc import Callable

from .._deprecation import warn_deprecated
from ..content import ContentPolicy
from ._closing import TurnCloser, TurnSource

__all__ = ["AuditorAliases"]


class AuditorAliases:
    """Deprecated members of :class:`~ragaudit.Auditor` (a base class of it)."""

    _content_policy: ContentPolicy
    _closer: TurnCloser

    @property
    def content(self) -> ContentPolicy:
        """Deprecated: :attr:`content_policy` (``content`` also names a document's text)."""
        warn_deprecated("Auditor.content", "Auditor.content_policy")
        return self._content_policy

    def attach_source(self, source: TurnSource) -> None:
        """Deprecated: ``auditor.closer.attach(source)``."""
        warn_deprecated("Auditor.attach_source()", "Auditor.closer.attach()")
        self._closer.attach(source)

    def defer(self, job: Callable[[], None]) -> bool:
        """Deprecated: ``auditor.closer.defer(job)``."""
        warn_deprecated("Auditor.defer()", "Auditor.closer.defer()")
        return self._closer.defer(job)
