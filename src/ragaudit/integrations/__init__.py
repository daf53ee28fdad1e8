"""Framework integrations: translate a framework's run events into [`RagTurn`][ragaudit.RagTurn]s.

Each integration lives in its own module and imports its framework only when that module is
imported: ``ragaudit.integrations.langchain`` (``RagAuditCallbackHandler``, ``instrument()``) and
``ragaudit.integrations.llamaindex``. Importing this package loads no framework.

For contributors adding a source of turns (a framework, a span convention): translate its events
into the steps of [`ragaudit.integrations.steps`][ragaudit.integrations.steps] and hand them to a
[`TurnAssembler`][ragaudit.integrations.TurnAssembler] through [`dispatch`][ragaudit.integrations.steps.dispatch];
[`retrieved_doc`][ragaudit.integrations.retrieved_doc] makes a framework's document into evidence with the ids the rules
expect, [`evicted_error`][ragaudit.integrations.evicted_error] is the error of a turn cut off before its root ended.
[`closer_for`][ragaudit.integrations.closer_for] is where a source hands a finished run over to be closed into a turn
off the host's thread (``defer``), registers its half-finished turns for shutdown (``attach``), and where flushing and
shutting down go down the flow: the closer's ``force_flush()`` / ``shutdown()`` hand its turns to the Auditor, then call
the Auditor's own. That is the whole contract.
"""

from __future__ import annotations

from ._assembler import TurnAssembler, evicted_error
from ._closing import TurnCloser, closer_for
from ._common import retrieved_doc

__all__ = ["TurnAssembler", "TurnCloser", "closer_for", "evicted_error", "retrieved_doc"]
