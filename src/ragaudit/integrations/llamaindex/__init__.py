"""LlamaIndex integration: one call makes every query, chat and retrieval an audited, traced turn.

>>> from ragaudit.integrations import llamaindex
>>> llamaindex.instrument()        # every query engine, chat engine and retriever in the process

[`instrument`][ragaudit.integrations.llamaindex.instrument] attaches a span handler and an event handler to LlamaIndex's
root instrumentation dispatcher. Each root call (``*QueryEngine.query``/``aquery``,
``*ChatEngine.chat``/``achat``/``stream_chat``/``astream_chat``, a workflow agent's ``run``, or a
retriever's ``retrieve``/``aretrieve`` called on its own) becomes one [`RagTurn`][ragaudit.RagTurn], correlated
through the dispatcher's span tree so concurrent calls (threads, ``asyncio.gather``) never mix.
A streamed answer is followed to its end: the turn closes when the stream is consumed, or when
its consumer drops it half way (with the text received so far, ``metadata["ragaudit.stream"] ==
"abandoned"``). Turns with an answer are judged in the background by an [`Auditor`][ragaudit.Auditor];
a retriever called on its own, and a failed call, are traced but not judged.

Code that still configures ``Settings.callback_manager`` can use the legacy
[`RagAuditLlamaIndexHandler`][ragaudit.integrations.llamaindex.RagAuditLlamaIndexHandler] instead. Use one of the two,
not both, or each turn is recorded twice.

Ground truth for retrieval metrics goes in LlamaIndex's instrument tags::

    from llama_index.core.instrumentation.dispatcher import instrument_tags
    with instrument_tags({"ragaudit_relevant_ids": ["doc-1", "doc-7"]}):
        query_engine.query("...")
"""

from __future__ import annotations

from ._instrument import LlamaIndexInstrumentation, instrument, instrumented, uninstrument
from ._legacy import RagAuditLlamaIndexHandler
from ._values import JUDGE_CONTEXT_KEY, STREAM_KEY

__all__ = [
    "JUDGE_CONTEXT_KEY",
    "STREAM_KEY",
    "LlamaIndexInstrumentation",
    "RagAuditLlamaIndexHandler",
    "instrument",
    "instrumented",
    "uninstrument",
]
