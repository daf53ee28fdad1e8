"""Framework integrations: translate a framework's run events into [`RagTurn`][ragaudit.RagTurn]s.

Each integration lives in its own module and imports its framework only when that module is
imported: ``ragaudit.integrations.langchain`` (``RagAuditCallbackHandler``, ``instrument()``) and
``ragaudit.integrations.llamaindex``. Importing this package loads no framework.

For contributors adding a source of turns (a framework, a span convention), the whole contract:

* subclass [`TurnSource`][ragaudit.integrations.TurnSource] (LangChain's handler, LlamaIndex's collector and the
  OTLP worker do): it registers the source with the Auditor's closer for flush and shutdown, and gives it
  ``force_flush``, ``close_ended_turns`` and ``stats``;
* read the framework's events into the steps of [`ragaudit.integrations.steps`][ragaudit.integrations.steps]
  (a [`StepConsumer`][ragaudit.integrations.steps.StepConsumer] takes them through
  [`dispatch`][ragaudit.integrations.steps.dispatch]); [`retrieved_doc`][ragaudit.integrations.retrieved_doc]
  makes a framework's document into evidence with the ids the rules expect,
  [`evicted_error`][ragaudit.integrations.evicted_error] is the error of a turn cut off before its root ended;
* when a turn finishes, call [`hand_off`][ragaudit.integrations.TurnSource.hand_off] on the host's thread with a
  function that reads its steps: the closing thread above the Auditor ([`closer_for`][ragaudit.integrations.closer_for],
  a [`TurnCloser`][ragaudit.integrations.TurnCloser]) runs them through a
  [`TurnAssembler`][ragaudit.integrations.TurnAssembler] into the Auditor
  ([`close_turn`][ragaudit.integrations.TurnSource.close_turn]), judged or recorded unjudged with its reason
  ([`ClosedTurn`][ragaudit.integrations.ClosedTurn]), so every finished turn ends as an `AuditRecord`.

Flushing and shutting down go down the flow: the Auditor's ``force_flush()`` / ``shutdown()`` have the closer close
its sources' ended turns and run the close jobs handed over so far, then flush judging and export.
"""

from __future__ import annotations

from ._assembler import ClosedTurn, TurnAssembler, evicted_error
from ._closing import TurnCloser, closer_for
from ._common import retrieved_doc
from ._source import TurnSource

__all__ = ["ClosedTurn", "TurnAssembler", "TurnCloser", "TurnSource", "closer_for", "evicted_error", "retrieved_doc"]
