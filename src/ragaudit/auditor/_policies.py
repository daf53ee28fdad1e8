"""Which content policy a turn submitted to an Auditor is recorded with.

A handler with settings of its own shares its Auditor with others (one set of threads, one file);
none of them may have its texts recorded more loosely than it asked. When the Auditor was given
content settings itself, the stricter of both applies to each text.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from .. import _fork
from ..content import ContentPolicy

__all__ = ["PolicyBook", "chained"]


def chained(first: Callable[[str], str] | None, then: Callable[[str], str] | None) -> Callable[[str], str] | None:
    """*first* and then *then* as one redact hook (either may be None; the same hook only once)."""
    if first is None or first is then:
        return then
    if then is None:
        return first
    return _Chained(first, then)


class _Chained:
    """Two redact hooks in a row: a handler's, then its auditor's (a failure withholds the text)."""

    __slots__ = ("first", "then")

    def __init__(self, first: Callable[[str], str], then: Callable[[str], str]) -> None:
        self.first = first
        self.then = then

    def __call__(self, text: str) -> str:
        out = self.first(text)
        return self.then(out if isinstance(out, str) else str(out))


class PolicyBook:
    """The Auditor's policy (*own*), the policies made for handlers (`for_handler`), and the
    policy a turn submitted with some policy is recorded under (`resolve`)."""

    def __init__(self, own: ContentPolicy, given: bool) -> None:
        self.own = own
        # Settings given on purpose bind every turn submitted here; the defaults (the environment's
        # capture setting, no hook) leave each handler's own settings in charge.
        self.given = given
        self._lock = _fork.lock()
        self._made: weakref.WeakSet[ContentPolicy] = weakref.WeakSet()
        self._foreign: weakref.WeakKeyDictionary[ContentPolicy, ContentPolicy] = weakref.WeakKeyDictionary()

    def for_handler(self, capture_content: bool | None, redact: Callable[[str], str] | None) -> ContentPolicy:
        """The policy of a handler with these settings (the Auditor's own when none is given)."""
        own = self.own
        if capture_content is None and redact is None:
            return own
        if self.given:
            handler = True if capture_content is None else bool(capture_content)
            policy = ContentPolicy(capture_content=own.capture_content and handler,
                                   capture_reason=own.capture_reason and handler,
                                   redact=chained(redact, own.redact))
        else:
            policy = ContentPolicy(capture_content=capture_content, redact=redact)
        with self._lock:
            self._made.add(policy)
        return policy

    def resolve(self, policy: ContentPolicy | None) -> ContentPolicy:
        """The policy a turn submitted with *policy* is recorded under: the Auditor's for None, a
        policy made here as it is, any other under the same rule as a handler's."""
        if policy is None or policy is self.own:
            return self.own
        with self._lock:
            if policy in self._made:
                return policy
            found = self._foreign.get(policy)
        if found is None:
            found = self.for_handler(policy.capture_content, policy.redact)
            with self._lock:
                self._foreign[policy] = found
        return found

    def after_fork(self) -> None:
        self._lock = _fork.lock()
