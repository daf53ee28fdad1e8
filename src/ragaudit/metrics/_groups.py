"""Spread query ids grouped by the C speedups, read where they are: no converted copy of the column.

A run whose queries' rows are spread through it (held-out data, a shuffled DataFrame, rows
appended query after query by several workers) must be grouped before anything is ranked. The
pure path codes the ids with pyarrow's hash table (after converting Python strings to Arrow), then
sorts (code, row) pairs. Both are dominated by cache misses, several after one another per row;
``_speedups.group_*`` codes every row in one pass over the column as it came (Python strings, a
numpy ``S``/``U`` array, Arrow offsets, Polars' string views), with each row's table slot and key
fetched ahead of its lookup. A counting sort by code then puts the row numbers -- and the scores
and doc-id hashes, which would otherwise be gathered through them -- in group order. Ids are
compared byte for byte (never by hash alone), so the groups are exact.

Each function returns None without the speedups or when they decline the column (a value that is
not a string, a missing value): the pure path then groups it, or names the bad value.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _fast

__all__ = ["QidGroups", "arrow_chunks", "arrow_groups", "fixed_groups", "row_groups", "string_groups", "view_groups"]


@dataclass(frozen=True, slots=True)
class QidGroups:
    """A run's rows grouped by query: each row's query as a code (``codes``, uint32; codes in
    order of first appearance), the rows of each query (``lengths``) and its id (``qids``)."""

    codes: np.ndarray
    lengths: np.ndarray
    qids: list[str]

    def order(self) -> np.ndarray:
        """The row numbers grouped by query (queries in order of first appearance, a query's rows
        in their order): the row order a run's columns are read in."""
        return self.grouped([])[0]

    def grouped(self, columns: list[np.ndarray]) -> list[np.ndarray]:
        """`order`, then each of *columns* (one number a row, in the column's order) in that
        order: put in place in one sequential pass, faster than gathering them by the order (a
        cache miss a row)."""
        native = _fast.speedups
        plain = all(c.ndim == 1 and c.itemsize == 8 and c.dtype.kind in "iuf" for c in columns)
        if native is None or not plain:  # turned off since the grouping (a test), or other columns
            order = np.argsort(self.codes, kind="stable")
            return [order, *(c[order] for c in columns)]
        columns = [np.ascontiguousarray(c) for c in columns]
        moved = [_fast.empty(len(self.codes), np.int64), *(_fast.empty(len(c), c.dtype) for c in columns)]
        native.grouped_rows(self.codes, self.lengths, columns, moved)
        return moved


def _groups(found: Any, texts: Callable[[np.ndarray], list[str]]) -> QidGroups | None:
    """``_speedups.group_*``'s (codes, sizes, firsts) as `QidGroups`, the ids read at the
    first rows by *texts*; None when they declined."""
    if found is None:
        return None
    codes, sizes, firsts = found
    return QidGroups(
        np.frombuffer(codes, dtype=np.uint32), np.frombuffer(sizes, dtype=np.int64),
        texts(np.frombuffer(firsts, dtype=np.int64)),
    )


def string_groups(values: Any) -> QidGroups | None:
    """Python strings (a list, or a 1-d numpy object array, as ``_tables.object_values`` gives) grouped."""
    native = _fast.speedups
    if native is None or not isinstance(values, (list, np.ndarray)) or len(values) < 2:
        return None
    if isinstance(values, np.ndarray) and (values.dtype != object or values.ndim != 1):
        return None
    return _groups(native.group_strings(values), lambda firsts: [values[i] for i in firsts.tolist()])


def row_groups(rows: list[Any], field: int) -> QidGroups | None:
    """The ids at position *field* of *rows* (a list of tuples or lists: a run's (qid, docid, score)
    rows) grouped where they are: no list of the ids is built."""
    native = _fast.speedups
    if native is None or len(rows) < 2:
        return None
    return _groups(native.group_strings(rows, field), lambda firsts: [rows[i][field] for i in firsts.tolist()])


def fixed_groups(arr: np.ndarray, texts: Callable[[np.ndarray], list[str]]) -> QidGroups | None:
    """The rows of a 1-d numpy ``S`` or ``U`` array grouped (equal rows are equal ids: trailing
    NULs are padding either way); *texts* reads the ids of an array of them."""
    native = _fast.speedups
    if native is None or arr.dtype.kind not in "SU" or arr.ndim != 1 or arr.itemsize == 0 or len(arr) < 2:
        return None
    arr = np.ascontiguousarray(arr)
    return _groups(native.group_fixed(arr, arr.itemsize), lambda firsts: texts(arr[firsts]))


def view_groups(series: Any, views: tuple[Any, int, int, list[Any]]) -> QidGroups | None:
    """A Polars string Series grouped through its string views (``_tables.polars_views``' arguments)."""
    native = _fast.speedups
    if native is None or len(series) < 2:
        return None
    return _groups(native.group_views(*views), lambda firsts: series.gather(firsts).to_list())


def arrow_chunks(arrow: Any) -> list[tuple[Any, Any, int, int, bool]] | None:
    """The chunks of an Arrow ``string`` or ``large_string`` column (an Array or a ChunkedArray)
    without nulls as the C speedups read them -- (offsets buffer, data buffer, offset, length,
    64-bit offsets) each --, or None for any other column."""
    pa = sys.modules.get("pyarrow")
    if pa is None or not isinstance(arrow, (pa.Array, pa.ChunkedArray)) or arrow.null_count:
        return None
    chunks = []
    for chunk in getattr(arrow, "chunks", [arrow]):
        wide = pa.types.is_large_string(chunk.type)
        if not (wide or pa.types.is_string(chunk.type)):
            return None
        if len(chunk):
            buffers = chunk.buffers()
            chunks.append((buffers[1], buffers[2] if buffers[2] is not None else b"", chunk.offset, len(chunk), wide))
    return chunks


def arrow_groups(arrow: Any) -> QidGroups | None:
    """An Arrow ``string`` or ``large_string`` column (an Array or a ChunkedArray) without nulls
    grouped from its offsets and data, chunk after chunk as one column."""
    native = _fast.speedups
    chunks = None if native is None or len(arrow) < 2 else arrow_chunks(arrow)
    if native is None or chunks is None:
        return None
    return _groups(native.group_offsets(chunks), lambda firsts: arrow.take(firsts).to_pylist())
