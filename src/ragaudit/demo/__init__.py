"""The embedded demo: a return-policy knowledge base, an offline embedding and an offline generator.

``ragaudit demo`` runs it (`ragaudit.demo.run`). The pieces are reusable on their own:

* `ragaudit.demo.kb` — the five documents, the eight questions, their qrels and the packaged
  ``ragaudit eval`` dataset;
* `ragaudit.demo.embedding` — a deterministic hashed embedding with Chroma, LangChain and
  LlamaIndex adapters (no model download);
* `ragaudit.demo.generator` — the extractive stand-in generator (answers only with retrieved
  sentences, and says so) and a thin client for a real OpenAI-compatible model;
* `ragaudit.demo.pipelines` — the demo's LCEL chain and LlamaIndex query engine over Chroma.

Importing this package loads no framework.
"""

from __future__ import annotations

from .kb import DOCUMENTS, QRELS, QUESTIONS, DemoQuestion, KBDocument

__all__ = ["DOCUMENTS", "QRELS", "QUESTIONS", "DemoQuestion", "KBDocument"]
