"""Doc ids: one array of them per run, and a 63-bit hash under which equal ids always agree.

A string hashes alike whatever the width of the numpy array holding it (padding adds nothing) and
whether its units are read one at a time or eight bytes at a time, so a run's ids and the qrels'
ids pair up by hash. A hash is only ever a shortcut: every match found by hash is confirmed by
comparing the ids themselves, so a collision costs time, never a wrong number.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np

from ..errors import MetricError
from . import _fast
from ._groups import arrow_chunks
from ._tables import arrow_strings, as_arrow, ascii_bytes, object_values, padded_strings, polars_views, qid_text, take

__all__ = [
    "WEIGHTS",
    "DocIds",
    "HashedDocIds",
    "SeriesDocIds",
    "docids_from_array",
    "hash_fixed",
    "hashed_docids",
    "id_codes",
    "plain_polars_strings",
    "string_hashes",
]

_HASH_MASK = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
# Rows hashed per step: the block's words stay in cache across the per-word passes.
_HASH_ROWS = 1 << 14


def _weights(width: int) -> np.ndarray:
    z = (np.arange(1, width + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xD1B54A32D192ED03)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


# The weights of the first 64 words (ids of up to 512 bytes), as the C speedups read them.
WEIGHTS = _weights(64).tobytes()


def _str_len(arr: np.ndarray) -> np.ndarray:
    strings = getattr(np, "strings", None)
    return strings.str_len(arr) if strings is not None else np.char.str_len(arr)


def hash_fixed(arr: np.ndarray) -> np.ndarray:
    """Hash a 'U' or 'S' array: a weighted sum (mod 2**64) of its code units.

    The hash of a string does not depend on the array's width (padding adds nothing) nor on
    whether the units are read one by one or eight bytes at a time (the weights of single units
    are those of 64-bit words shifted into place), so a run and its qrels always hash alike.
    An 'S' array is hashed by the C speedups when they are built (one pass, no temporaries).
    """
    native = _fast.speedups
    if native is not None and arr.dtype.kind == "S" and arr.ndim == 1 and 0 < arr.itemsize <= 512:
        arr = np.ascontiguousarray(arr)
        return np.frombuffer(native.hash_rows(arr, arr.itemsize, WEIGHTS), dtype=np.uint64)
    n = len(arr)
    out = np.zeros(n, dtype=np.uint64)
    if n == 0 or arr.itemsize == 0:
        return out
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    arr = np.ascontiguousarray(arr)
    unit = 4 if arr.dtype.kind == "U" else 1
    width = arr.itemsize
    # Wide dtypes (ids cast from ints are U21) are mostly padding: skip the bytes no id uses.
    used = int(_str_len(arr).max()) * unit if width > 64 else width
    if used == 0:
        return out
    if sys.byteorder == "little" and used >= 8:
        _hash_words(arr, used, out)
    else:
        _hash_units(arr, used, unit, out)
    out &= _HASH_MASK
    return out


def _hash_words(arr: np.ndarray, used: int, out: np.ndarray) -> None:
    """The hash read eight bytes at a time, straight from the array's buffer (no copy).

    Rows of any width are read as unaligned 64-bit words; the last, partial word is read as the
    word ending at byte *used* and shifted down, which equals the zero-padded word. Row blocks
    of _HASH_ROWS keep every pass over a block in cache.
    """
    n, width = len(arr), arr.itemsize
    full, rest = divmod(used, 8)
    words = np.ndarray(shape=(n, full), dtype=np.uint64, buffer=arr, strides=(width, 8))
    tail = np.ndarray(shape=(n,), dtype=np.uint64, buffer=arr, offset=used - 8, strides=(width,)) if rest else None
    weights = _weights(full + (1 if rest else 0))
    shift = np.uint64(8 * (8 - rest))
    scratch = np.empty(min(n, _HASH_ROWS), dtype=np.uint64)
    for start in range(0, n, _HASH_ROWS):
        h = out[start : start + _HASH_ROWS]
        tmp = scratch[: len(h)]
        np.multiply(words[start : start + _HASH_ROWS, 0], weights[0], out=h)
        for k in range(1, full):
            np.multiply(words[start : start + _HASH_ROWS, k], weights[k], out=tmp)
            h += tmp
        if tail is not None:
            np.right_shift(tail[start : start + _HASH_ROWS], shift, out=tmp)
            tmp *= weights[full]
            h += tmp


def _hash_units(arr: np.ndarray, used: int, unit: int, out: np.ndarray) -> None:
    """The same hash read one code unit at a time (ids shorter than 8 bytes, big-endian hosts)."""
    n = len(arr)
    view = arr.view(np.uint32 if unit == 4 else np.uint8).reshape(n, -1)[:, : used // unit]
    per_word = 8 // unit
    j = np.arange(view.shape[1], dtype=np.uint64)
    weights = _weights(-(-view.shape[1] // per_word))[j // np.uint64(per_word)] << (
        np.uint64(8 * unit) * (j % np.uint64(per_word))
    )
    for start in range(0, n, _HASH_ROWS):
        block = view[start : start + _HASH_ROWS]
        h = out[start : start + _HASH_ROWS]
        np.multiply(block[:, 0], weights[0], out=h, casting="unsafe")
        for k in range(1, block.shape[1]):
            h += block[:, k] * weights[k]


def string_hashes(values: Any) -> np.ndarray | None:
    """`hash_fixed`'s hash of each of *values* (a list, tuple or numpy object array of ASCII
    strings, as their bytes), computed by the C speedups straight from the string objects; None
    without the speedups, or when a value is not an ASCII ``str`` without NUL of at most 512
    characters."""
    native = _fast.speedups
    if native is None:
        return None
    hashes = native.hash_strings(values, WEIGHTS)
    return None if hashes is None else np.frombuffer(hashes, dtype=np.uint64)


def _hash_objects(values: Iterable[Any], n: int) -> np.ndarray:
    return np.fromiter(map(hash, values), dtype=np.int64, count=n).view(np.uint64) & _HASH_MASK


def _ascii_fixed(texts: list[str]) -> np.ndarray | None:
    """*texts* as a NUL-padded ``S`` array when all are ASCII (their bytes are then their UTF-8),
    else None (and for ids holding a NUL, which an ``S`` array cannot keep apart).

    One join in C does it all: the joined text is ASCII exactly when every string is (CPython
    knows it without a scan), and its NUL separators give every string's length -- several
    times faster than numpy's conversion or a ``len`` per string, which cost a call each.
    """
    if not texts:
        return np.zeros(0, dtype="S1")
    joined = "\x00".join(texts)
    if not joined.isascii():
        return None
    data = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    ends = np.flatnonzero(data == 0)
    if len(ends) != len(texts) - 1:
        return None
    starts = np.concatenate(([0], ends + 1))
    lengths = np.append(ends, len(data)) - starts
    width = max(int(lengths.max()), 1)
    if bool((lengths == width).all()):  # one width: drop the separators
        rows = np.ndarray(shape=(len(texts), width), dtype=np.uint8, buffer=data, strides=(width + 1, 1))
        return np.array(rows).view(f"S{width}").ravel()  # a copy: the joined bytes are read-only
    return padded_strings(data, starts, lengths, width)


@dataclass(frozen=True, slots=True)
class DocIds:
    """Doc ids of the run (for exact checks and tie-breaks) and how to hash them and others alike.

    ``rows`` maps a run row (in the query-grouped order the kernel reads) to its id in ``ids``, the
    caller's column as it came (None: the same order). Grouping spread-out rows, or dropping the
    rows of queries without qrels, then moves 8-byte row numbers instead of the ids themselves
    (a doc id column is 13-60 bytes a row, and gathering strings is the slowest gather numpy has).
    """

    ids: np.ndarray
    rows: np.ndarray | None = None
    # The hash of every run row's id in run order, when put in that order with the rows (spread
    # query ids grouped: QidGroups.grouped), so row_hashes need not gather them through ``rows``.
    grouped_hashes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids) if self.rows is None else len(self.rows)

    def _where(self, index: Any) -> Any:
        return index if self.rows is None else self.rows[index]

    def encode(self, docids: list[str]) -> np.ndarray:
        """*docids* (strings) as an array comparable with `ids`."""
        kind = self.ids.dtype.kind
        if kind in "US":
            if kind == "S":
                ascii = _ascii_fixed(docids)  # nearly always: their bytes found in C, no call per id
                if ascii is not None:
                    return ascii
            width = max(map(len, docids), default=1) or 1
            if kind == "U":
                return np.fromiter(docids, dtype=f"U{width}", count=len(docids))
            pa = sys.modules.get("pyarrow")
            if pa is not None:
                fixed = arrow_strings(pa.array(docids, pa.string()), "doc ids")
                if fixed is not None:
                    return fixed
            encoded = [d.encode("utf-8") for d in docids]
            width = max(map(len, encoded), default=1) or 1
            return np.fromiter(encoded, dtype=f"S{width}", count=len(encoded))
        out = np.empty(len(docids), dtype=object)
        out[:] = docids
        return out

    def hash(self, encoded: np.ndarray) -> np.ndarray:
        if self.ids.dtype.kind in "US":
            return hash_fixed(encoded)
        return _hash_objects(encoded, len(encoded))

    def column_hashes(self) -> np.ndarray:
        """The hash of every id of the caller's column, in its order."""
        return self.hash(self.ids)

    def row_hashes(self) -> np.ndarray:
        """The hash of every run row's id, in run order: hashed in the column's own order
        (sequential reads), then gathered as 8-byte numbers -- or put in order already."""
        if self.grouped_hashes is not None:
            return self.grouped_hashes
        hashes = self.column_hashes()
        return hashes if self.rows is None else hashes[self.rows]

    def in_order(self, rows: np.ndarray, hashes: np.ndarray) -> DocIds:
        """These ids (in the column's order: no ``rows`` yet) in run order *rows*, with their
        `column_hashes` already put in that order (*hashes*: QidGroups.grouped)."""
        assert self.rows is None
        return replace(self, rows=rows, grouped_hashes=hashes)

    def text(self, index: int) -> str:
        value = self.ids[self._where(index)]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def at(self, index: Any) -> np.ndarray:
        """The ids at *index* (an integer array), comparable with each other and with `encode`'s."""
        return take(self.ids, self._where(index))

    def take(self, index: np.ndarray) -> DocIds:
        """The run rows *index* of these (every field kept, of a subclass too)."""
        grouped = None if self.grouped_hashes is None else self.grouped_hashes[index]
        return replace(self, rows=self._where(index), grouped_hashes=grouped)


@dataclass(frozen=True, slots=True)
class SeriesDocIds(DocIds):
    """Doc ids kept in the caller's Polars string Series (``series``): hashed by Polars in one pass
    over its own string views, and gathered from it only where ids are compared (matches found by
    hash, tied scores) -- the column is never copied whole into Arrow's layout, nor hashed again
    by numpy. ``ids`` is an empty byte-string array: the kind `at` and `encode` give.
    """

    series: Any = None

    def __len__(self) -> int:
        return len(self.series) if self.rows is None else len(self.rows)

    def hash(self, encoded: np.ndarray) -> np.ndarray:
        # The same bytes as a Polars string Series hash as the run's ids do (numpy's trailing NULs
        # are padding, dropped in the conversion; no qrels id ends in one: see plain_polars_strings).
        pl = sys.modules["polars"]
        return _masked(pl.Series(encoded).cast(pl.String).hash())

    def column_hashes(self) -> np.ndarray:
        return _masked(self.series.hash())

    def text(self, index: int) -> str:
        return str(self.series[int(self._where(index))])

    def at(self, index: Any) -> np.ndarray:
        where = self._where(index)
        if isinstance(where, slice):
            where = np.arange(len(self))[where]
        gathered = self.series.gather(np.atleast_1d(np.asarray(where, dtype=np.int64)))
        fixed = arrow_strings(gathered.to_arrow(), "doc ids")
        assert fixed is not None  # a Polars string Series exports Arrow strings
        return fixed if np.ndim(where) else fixed[0]


@dataclass(frozen=True, slots=True)
class HashedDocIds(DocIds):
    """Doc ids kept in the caller's own column, hashed once by the C speedups (``hashes``, in the
    column's order) and gathered only where ids are compared (matches found by hash, tied
    scores). ``column``: Python strings (a list, a tuple, a numpy object array), a numpy ``U``
    array, a Polars string Series (read through ``views``, its Arrow string views: no copy), an
    Arrow string column (pyarrow's, pandas' Arrow-backed strings: read through ``chunks``, its
    offsets and data, no copy), or -- with ``field`` 1 -- the caller's list of (qid, docid, score)
    rows.

    The column is never copied whole into fixed-width bytes: on a 5 M-row run that copy's fresh
    memory costs more than reading the ids does. Every id is ASCII (the speedups decline anything
    else), so its bytes are the ones the qrels' ids are encoded to. ``ids`` is an empty
    byte-string array: the kind `at` and `encode` give.
    """

    column: Any = None
    field: int | None = None
    hashes: np.ndarray | None = None
    # A Polars Series' string views: the arguments the speedups read them by (see polars_views).
    views: tuple[Any, int, int, list[Any]] | None = None
    # An Arrow column's chunks, as the speedups read them (see arrow_chunks).
    chunks: list[tuple[Any, Any, int, int, bool]] | None = None

    def __len__(self) -> int:
        assert self.hashes is not None
        return len(self.hashes) if self.rows is None else len(self.rows)

    def column_hashes(self) -> np.ndarray:
        assert self.hashes is not None
        return self.hashes

    def _values(self, where: np.ndarray) -> list[str]:
        if self.views is not None:  # a Polars Series
            return self.column.gather(where).to_list()  # type: ignore[no-any-return]
        if self.chunks is not None:  # an Arrow column (a message's few ids: take joins a ChunkedArray's chunks)
            return self.column.take(where).to_pylist()  # type: ignore[no-any-return]
        index = where.tolist()
        if self.field is not None:
            return list(map(itemgetter(self.field), map(self.column.__getitem__, index)))
        if isinstance(self.column, np.ndarray):
            return self.column[where].tolist()  # type: ignore[no-any-return]
        return list(map(self.column.__getitem__, index))

    def _index(self, index: Any) -> np.ndarray:
        where = self._where(index)
        if isinstance(where, slice):
            where = np.arange(len(self))[where]
        return np.ascontiguousarray(where, dtype=np.intp).reshape(-1)  # C reads it as one buffer

    def text(self, index: int) -> str:
        return self._values(self._index(index))[0]

    def at(self, index: Any) -> np.ndarray:
        where = self._index(index)
        if isinstance(self.column, np.ndarray) and self.column.dtype.kind == "U":
            fixed = ascii_bytes(take(self.column, where))
            return fixed if np.ndim(self._where(index)) else fixed[0]
        native = _fast.speedups
        field = -1 if self.field is None else self.field
        if native is None:
            gathered = None
        elif self.views is not None:
            gathered = native.gather_views(*self.views, where)
        elif self.chunks is not None:
            gathered = native.gather_offsets(self.chunks, where)
        else:
            gathered = native.gather_ascii(self.column, where, field)
        if gathered is not None:
            fixed = np.frombuffer(gathered[0], dtype=f"S{gathered[1]}")
        else:  # the speedups turned off since (a test): the same bytes, by a join
            joined = _ascii_fixed(self._values(where))
            assert joined is not None  # ASCII without NUL: checked by the speedups
            fixed = joined
        return fixed if np.ndim(self._where(index)) else fixed[0]


def hashed_docids(column: Any, field: int | None = None, hashes: np.ndarray | None = None) -> HashedDocIds | None:
    """`HashedDocIds` of *column* (Python strings, a numpy ``U`` array, a Polars string
    Series or an Arrow string column; hashed here unless *hashes* are given); None without the
    speedups, for any other column, or when they decline it."""
    views = None
    chunks = None
    if hashes is None:
        values = object_values(column)
        views = None if values is not None else polars_views(column)
        if views is not None:
            native = _fast.speedups
            found = None if native is None else native.hash_views(*views, WEIGHTS)
            hashes = None if found is None else np.frombuffer(found, dtype=np.uint64)
        elif values is not None:
            column, hashes = values, string_hashes(values)
        elif isinstance(column, np.ndarray) and column.ndim == 1 and column.dtype.kind == "U":
            column = np.ascontiguousarray(column)
            hashes = _ucs4_hashes(column)
        else:  # Arrow strings, read where Arrow keeps them
            column = as_arrow(column)
            chunks = None if column is None else arrow_chunks(column)
            native = _fast.speedups
            found = None if chunks is None or native is None else native.hash_offsets(chunks, WEIGHTS)
            hashes = None if found is None else np.frombuffer(found, dtype=np.uint64)
        if hashes is None:
            return None
    return HashedDocIds(np.zeros(0, dtype="S1"), column=column, field=field, hashes=hashes, views=views,
                        chunks=chunks)


def _ucs4_hashes(arr: np.ndarray) -> np.ndarray | None:
    """`hash_fixed`'s hash of a contiguous ``U`` array's ASCII ids (as their bytes), by the C
    speedups straight from its code units; None without them, or for ids that are not ASCII."""
    native = _fast.speedups
    if native is None or arr.itemsize == 0 or not arr.dtype.isnative:
        return None
    hashes = native.hash_ucs4(arr, arr.itemsize // 4, WEIGHTS)
    return None if hashes is None else np.frombuffer(hashes, dtype=np.uint64)


def _masked(hashes: Any) -> np.ndarray:
    return hashes.to_numpy().astype(np.uint64, copy=False) & _HASH_MASK


def plain_polars_strings(column: Any, qrels_docids: list[str]) -> bool:
    """Whether `SeriesDocIds` can keep *column*: a Polars string Series without nulls (the
    array path names them), judged against doc ids none of which ends in a NUL -- numpy's byte
    strings, as which the qrels' ids are encoded, drop trailing NULs as padding, so such an id
    would no longer hash as the run's equal id does (one join and one search in C tell)."""
    pl = sys.modules.get("polars")
    if pl is None or type(column).__module__.split(".", 1)[0] != "polars" or not hasattr(column, "str"):
        return False
    if column.dtype != pl.String or column.null_count():
        return False
    return "\x00\x01" not in "\x01".join(qrels_docids) + "\x01"


def docids_from_array(arr: np.ndarray, rows: np.ndarray | None = None) -> DocIds:
    """The run's doc ids; *rows*: run row -> index into *arr* (see `DocIds`)."""
    kind = arr.dtype.kind
    if kind in "iu":
        arr = arr.astype(str)
        kind = "U"
    if kind in "US":
        return DocIds(arr, rows)
    if kind == "O":
        types = set(map(type, arr))
        if not types <= {str}:
            for i, value in enumerate(arr):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    raise MetricError(f"doc id at row {i} is missing ({value!r})")
                if not isinstance(value, (str, bytes, int, np.integer)):
                    raise MetricError(f"doc id at row {i} must be a string, got {value!r}")
            arr = np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr], dtype=object)
        return DocIds(arr, rows)
    raise MetricError(f"doc ids must be strings (or integers), got an array of {arr.dtype}")


def id_codes(ids: np.ndarray) -> np.ndarray:
    """Integer codes equal for equal ids (as strings); different ids may rarely share one (a hash)."""
    kind = ids.dtype.kind
    if kind in "iu":
        return ids.astype(np.int64)
    if kind in "US":
        return hash_fixed(ids)
    return _hash_objects((qid_text(v) for v in ids), len(ids))
