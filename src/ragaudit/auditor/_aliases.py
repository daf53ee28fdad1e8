"""The Auditor's deprecated names, kept for one release (each warns and says what replaces it)."""

from __future__ import annotations

from collections.abc import Callable

from .._deprecation import warn_deprecated
from ..content import ContentPolicy

__all__ = ["AuditorAliases"]


class AuditorAliases:
    """Deprecated members of [`Auditor`][ragaudit.Auditor] (a base class of it)."""

    _content_policy: ContentPolicy

    def _job_failed(self, exc: BaseException) -> None:
        raise NotImplementedError

    @property
    def content(self) -> ContentPolicy:
        """Deprecated: `content_policy` (``content`` also names a document's text)."""
        warn_deprecated("Auditor.content", "Auditor.content_policy")
        return self._content_policy

    def attach_source(self, source: object) -> None:
        """Deprecated, and without effect: the Auditor calls no source. Attach *source* to its closer,
        ``ragaudit.integrations.closer_for(auditor).attach(source)``, whose shutdown (and the exit
        hook) closes its ended turns before this Auditor's."""
        warn_deprecated("Auditor.attach_source()", "ragaudit.integrations.closer_for(auditor).attach()")

    def defer(self, job: Callable[[], None]) -> bool:
        """Deprecated: ``ragaudit.integrations.closer_for(auditor).defer(job)`` closes a turn off the
        host's thread. The Auditor runs no source's code on its threads: *job* runs now, on the
        caller's thread. Never raises; False when *job* raised (logged)."""
        warn_deprecated("Auditor.defer()", "ragaudit.integrations.closer_for(auditor).defer()")
        try:
            job()
            return True
        except Exception as exc:
            self._job_failed(exc)
            return False
