"""Vector-store searches as retrievals: what LangChain's current RAG tutorials call instead of a retriever.

``vector_store.similarity_search(...)`` inside a ``@dynamic_prompt`` middleware, a ``before_model``
hook, a LangGraph node or a tool fires no callback, so the handler would never see the documents.
`patch_vector_stores` wraps the searches of ``VectorStore`` and of every subclass (those
defined later too): a search that runs inside a LangChain run whose callbacks hold a
`SearchObserver` (the ragaudit handler) is reported to that observer only, as a retrieval
under the current run, with the documents and their ids as the store returned them. Other
callback handlers see nothing new. Outside a run, or with no observer, the wrapper only checks one
context variable and calls the store.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.vectorstores import VectorStore

from .. import _fork
from ._common import report_failure

__all__ = ["SEARCH_METHODS", "SearchObserver", "outside_searches", "patch_vector_stores"]

SEARCH_METHODS: tuple[str, ...] = (
    "similarity_search", "similarity_search_with_score", "similarity_search_with_relevance_scores",
    "similarity_search_by_vector", "max_marginal_relevance_search", "max_marginal_relevance_search_by_vector",
)
"""The searches reported, each with its async form (``a`` + name)."""

_wrappers: set[Callable[..., Any]] = set()  # the search wrappers made here (never wrapped twice)
# Set while a search runs: the searches it calls itself (a store's similarity_search calling its
# similarity_search_with_score, an async form running the sync one) are the same search, not reported again.
_in_search: ContextVar[bool] = ContextVar("ragaudit_vector_store_search", default=False)
_lock = _fork.lock()
_patched = False


class _Outside:
    """How many searches ran outside any LangChain run (a plain thread pool, a script): the
    no-evidence warning then says the retrieval ran outside the callback tree."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_outside = _Outside()


def outside_searches() -> int:
    """How many vector-store searches ran outside any LangChain run so far."""
    return _outside.count


class SearchObserver:
    """What a search reports to (the ragaudit callback handler implements it)."""

    def search_started(self, parent_run_id: UUID, name: str, query: str | None) -> UUID | None:
        """A search started under *parent_run_id*; returns the run id to report its end with, or
        None to leave it unreported (it is a retriever's own search)."""
        raise NotImplementedError

    def search_ended(self, run_id: UUID, documents: Sequence[object] | None, error: BaseException | None) -> None:
        """The search *run_id* returned *documents* (LangChain ``Document`` s) or raised *error*."""
        raise NotImplementedError


def _observers() -> tuple[list[SearchObserver], UUID | None]:
    config = var_child_runnable_config.get()
    if not config:
        _outside.count += 1  # an int add under the GIL: a lost count at worst names the wrong case
        return [], None
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        return [h for h in callbacks.handlers if isinstance(h, SearchObserver)], callbacks.parent_run_id
    return [], None


def _documents(result: Any) -> list[Any]:
    """The documents of a search result: a list of documents, or of ``(document, score)`` pairs
    (the score goes into a copy of the metadata, where the handler reads it)."""
    out = []
    for item in result or ():
        if isinstance(item, tuple) and len(item) == 2:
            doc, score = item
            if isinstance(score, (int, float)) and hasattr(doc, "metadata"):
                doc = doc.model_copy(update={"metadata": {**(doc.metadata or {}), "score": float(score)}})
            out.append(doc)
        else:
            out.append(item)
    return out


def _start(store: object, args: tuple[object, ...], kwargs: Mapping[str, object]) -> list[tuple[SearchObserver, UUID]]:
    observers, parent = _observers()
    if not observers or parent is None:
        return []
    query = args[0] if args and isinstance(args[0], str) else kwargs.get("query")
    name = type(store).__name__
    started = []
    for observer in observers:
        run_id = observer.search_started(parent, name, query if isinstance(query, str) else None)
        if run_id is not None:
            started.append((observer, run_id))
    return started


def _end(started: list[tuple[SearchObserver, UUID]], result: object, error: BaseException | None) -> None:
    if not started:
        return
    documents = _documents(result) if error is None else None
    for observer, run_id in started:
        observer.search_ended(run_id, documents, error)


def _guarded_start(store: object, args: tuple[object, ...],
                   kwargs: Mapping[str, object]) -> list[tuple[SearchObserver, UUID]]:
    try:
        return _start(store, args, kwargs)
    except Exception as exc:  # never let our bookkeeping break the app's search
        report_failure("reporting a vector-store search", exc)
        return []


def _guarded_end(started: list[tuple[SearchObserver, UUID]], result: object, error: BaseException | None) -> None:
    try:
        _end(started, result, error)
    except Exception as exc:
        report_failure("reporting a vector-store search's end", exc)


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def asearch(self: object, *args: Any, **kwargs: Any) -> Any:
            if _in_search.get():
                return await method(self, *args, **kwargs)
            token = _in_search.set(True)
            try:
                started = _guarded_start(self, args, kwargs)
                try:
                    result = await method(self, *args, **kwargs)
                except BaseException as exc:
                    _guarded_end(started, None, exc)
                    raise
            finally:
                _in_search.reset(token)
            _guarded_end(started, result, None)
            return result

        _wrappers.add(asearch)
        return asearch

    @functools.wraps(method)
    def search(self: object, *args: Any, **kwargs: Any) -> Any:
        if _in_search.get():
            return method(self, *args, **kwargs)
        token = _in_search.set(True)
        try:
            started = _guarded_start(self, args, kwargs)
            try:
                result = method(self, *args, **kwargs)
            except BaseException as exc:
                _guarded_end(started, None, exc)
                raise
        finally:
            _in_search.reset(token)
        _guarded_end(started, result, None)
        return result

    _wrappers.add(search)
    return search


def _patch_class(cls: type) -> None:
    for base_name in SEARCH_METHODS:
        for name in (base_name, "a" + base_name):
            method = cls.__dict__.get(name)
            if callable(method) and method not in _wrappers:
                setattr(cls, name, _wrap(method))


def _all_subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(current.__subclasses__())
    return out


def patch_vector_stores() -> None:
    """Wrap the searches of ``VectorStore`` and every subclass, now and defined later. Idempotent."""
    global _patched
    with _lock:
        if _patched:
            return
        for cls in _all_subclasses(VectorStore):
            _patch_class(cls)
        original = VectorStore.__dict__.get("__init_subclass__")

        def init_subclass(cls: type, **kwargs: Any) -> None:
            if original is not None:
                original.__func__(cls, **kwargs)
            else:
                super(VectorStore, cls).__init_subclass__(**kwargs)  # type: ignore[misc]
            _patch_class(cls)

        VectorStore.__init_subclass__ = classmethod(init_subclass)  # type: ignore[assignment,method-assign]
        _patched = True
