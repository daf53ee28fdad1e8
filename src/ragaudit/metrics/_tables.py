"""Table adapters: pandas and pyarrow columns read as numpy arrays, without a Python object per row.

Arrow string columns (pyarrow, and pandas 3's Arrow-backed strings) are read straight from their
buffers as fixed-width bytes; pandas categoricals and Arrow dictionaries give their codes; query
ids that come in contiguous runs are run-end encoded in C (Polars' by Polars, Python strings by
comparing neighbours); Polars columns are Arrow data too. pyarrow is never imported here unless
the caller already did (``sys.modules``) -- but for `python_strings` and
`fixed_strings`, which import it (when installed) to convert a large column of Python
strings -- so ``import ragaudit.metrics`` loads numpy only."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MetricError
from . import _fast
from ._groups import QidGroups, arrow_groups, view_groups

__all__ = [
    "DOCID_NAMES",
    "LABEL_NAMES",
    "QID_NAMES",
    "RANK_NAMES",
    "SCORE_NAMES",
    "QidRuns",
    "array_runs",
    "arrow_strings",
    "as_arrow",
    "ascii_bytes",
    "changes",
    "coded_ids",
    "encoded_runs",
    "find_column",
    "fixed_strings",
    "fixed_width_codes",
    "is_table",
    "joined_runs",
    "object_runs",
    "object_values",
    "padded_strings",
    "placed",
    "polars_views",
    "python_strings",
    "qid_text",
    "same_rows",
    "spread_from_start",
    "table_column",
    "take",
    "to_numpy",
    "with_room",
]

QID_NAMES = ("qid", "query_id", "query", "q")
DOCID_NAMES = ("docid", "doc_id", "docno", "document_id", "id")
SCORE_NAMES = ("score", "sim", "similarity")
RANK_NAMES = ("rank", "position")
LABEL_NAMES = ("relevance", "rel", "label", "grade", "judgment", "judgement")


def take(arr: np.ndarray, index: Any) -> np.ndarray:
    """``arr[index]`` -- for fixed-width strings gathered as raw bytes (a void view), which numpy
    copies several times faster than string items (4x for 'U')."""
    if arr.dtype.kind in "US" and arr.itemsize and not isinstance(index, slice):
        return arr.view(f"V{arr.itemsize}")[index].view(arr.dtype)
    return arr[index]


# Bytes of 'U' items narrowed per step: a block stays in a core's L2 cache (1-2 MiB on current
# x86) between the check and the copy, which then reads it from cache, not memory.
_NARROW_BYTES = 1 << 19


def ascii_bytes(arr: np.ndarray) -> np.ndarray:
    """A 'U' array of ASCII strings as the equal 'S' array (its UTF-8 bytes); else *arr* itself.

    numpy stores 4 bytes per character; every later pass over the ids (hashing, grouping, gathers,
    comparisons) reads a quarter of the bytes once they are narrowed, which pays the one copy back
    several times over. ASCII only, so the bytes are the UTF-8 the qrels' ids are encoded to.
    """
    if arr.dtype.kind != "U" or arr.itemsize == 0 or arr.ndim != 1:
        return arr
    n, width = len(arr), arr.itemsize // 4
    units = np.ascontiguousarray(arr).view(np.dtype(np.uint32).newbyteorder(arr.dtype.byteorder))
    units = units.reshape(n, width)
    out = np.empty((n, width), dtype=np.uint8)
    step = max(1, _NARROW_BYTES // arr.itemsize)
    for start in range(0, n, step):
        block = units[start : start + step]
        if block.size and int(block.max()) >= 0x80:
            return arr
        np.copyto(out[start : start + step], block, casting="unsafe")
    return out.view(f"S{width}").reshape(n)


def changes(arr: np.ndarray) -> np.ndarray:
    """``arr[1:] != arr[:-1]``; for byte strings compared eight bytes at a time from the buffer.

    numpy compares 'S' items as strings, one call per pair; equal bytes are equal ids (trailing
    NULs are padding either way), so comparing 64-bit words of the rows is exact and several times
    faster. Rows of 8 bytes or more are read as unaligned words (the last one overlapping the one
    before it); shorter rows are copied into zero-padded words first.
    """
    width, n = arr.itemsize, len(arr)
    if arr.dtype.kind != "S" or width == 0 or n < 2:
        return np.asarray(arr[1:] != arr[:-1], dtype=bool)
    arr = np.ascontiguousarray(arr)
    if width < 8:
        padded = np.zeros(n, dtype=np.uint64)
        padded.view(np.uint8).reshape(n, 8)[:, :width] = arr.view(np.uint8).reshape(n, width)
        return padded[1:] != padded[:-1]
    out = np.zeros(n - 1, dtype=bool)
    for words in _words(arr):
        out |= words[1:] != words[:-1]
    return out


def _words(arr: np.ndarray) -> list[np.ndarray]:
    """The rows of a contiguous 'S' array of width >= 8 as overlapping unaligned 64-bit words (views)."""
    width, n = arr.itemsize, len(arr)
    return [
        np.ndarray(shape=(n,), dtype=np.uint64, buffer=arr, offset=offset, strides=(width,))
        for offset in sorted({*range(0, width - 7, 8), width - 8})
    ]


def same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a == b`` row by row; 'S' arrays of one width (>= 8) compared eight bytes at a time."""
    if a.dtype.kind != "S" or a.dtype != b.dtype or a.itemsize < 8:
        return np.asarray(a == b, dtype=bool)
    out = np.ones(len(a), dtype=bool)
    for x, y in zip(_words(np.ascontiguousarray(a)), _words(np.ascontiguousarray(b))):
        out &= x == y
    return out


def _is_polars(obj: object) -> bool:
    return type(obj).__module__.split(".", 1)[0] == "polars" and hasattr(obj, "to_arrow")


def is_table(obj: object) -> bool:
    """A pyarrow Table, a pandas DataFrame or a Polars DataFrame."""
    return hasattr(obj, "column_names") or (hasattr(obj, "columns") and hasattr(obj, "iloc")) or (
        _is_polars(obj) and hasattr(obj, "columns")
    )


def _columns(table: Any) -> list[Any]:
    return list(table.column_names) if hasattr(table, "column_names") else list(table.columns)


def find_column(table: Any, names: Sequence[str]) -> Any | None:
    """The first column of *table* named one of *names* (case-insensitive), or None."""
    lowered = {str(c).lower(): c for c in _columns(table)}
    for name in names:
        if name in lowered:
            col = lowered[name]
            return table.column(col) if hasattr(table, "column_names") else table[col]
    return None


def table_column(table: Any, names: Sequence[str], what: str) -> Any:
    """The column of *table* named one of *names*; a [`MetricError`][ragaudit.MetricError] listing the columns if
    none."""
    found = find_column(table, names)
    if found is None:
        raise MetricError(f"table has no {what} column (looked for {', '.join(names)}); columns: {_columns(table)}")
    return found


def to_numpy(column: Any, what: str) -> np.ndarray:
    categories = getattr(getattr(column, "cat", None), "categories", None)
    if categories is not None and hasattr(column, "iloc"):
        codes = np.asarray(column.cat.codes.to_numpy(), dtype=np.intp)
        if len(codes) and int(codes.min()) < 0:
            raise MetricError(f"{what} has {int((codes < 0).sum())} missing values")
        values = to_numpy(categories, what)
        return take(values, codes) if len(values) else values[:0]
    arrow = as_arrow(column)
    if arrow is not None:
        fixed = arrow_strings(arrow, what)
        if fixed is not None:
            return fixed
        column = arrow  # chunks combined once, not again by to_numpy
    if isinstance(column, np.ndarray):
        arr = column
    elif hasattr(column, "to_numpy"):
        try:
            arr = column.to_numpy(zero_copy_only=False)
        except TypeError:
            arr = column.to_numpy()
        arr = np.asarray(arr)
    else:
        arr = np.asarray(list(column) if not isinstance(column, Sequence) else column)
    if arr.ndim != 1:
        raise MetricError(f"{what} must be one-dimensional, got shape {arr.shape}")
    return arr


def as_arrow(column: Any) -> Any:
    """*column* as a pyarrow Array or ChunkedArray (its chunks kept) when it is Arrow data
    (pyarrow, Polars, or pandas' pyarrow-backed strings), else None. pyarrow is never imported
    here unless the caller already did."""
    if _is_polars(column):
        column = column.to_arrow()  # Polars keeps its columns in Arrow memory
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return None
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        dtype = getattr(column, "dtype", None)
        # pandas' pyarrow-backed strings: the 'str' and 'string[pyarrow]' dtypes, and ArrowDtype.
        arrow_backed = getattr(dtype, "storage", None) in ("pyarrow", "pyarrow_numpy")
        if not (arrow_backed or getattr(dtype, "pyarrow_dtype", None) is not None):
            return None
        try:
            column = pa.array(column)
        except (TypeError, ValueError, pa.ArrowException):
            return None
    return column


def arrow_strings(column: Any, what: str) -> np.ndarray | None:
    """An Arrow string column (pyarrow, or pandas' pyarrow-backed strings) as a fixed-width bytes array.

    Read straight from Arrow's buffers, so no Python string is made per row. Returns None for
    anything else.
    """
    column = as_arrow(column)
    if column is None:
        return None
    pa = sys.modules["pyarrow"]
    column = _without_views(pa, column)
    kind = column.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)):
        return None
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            # Chunk by chunk: combining the chunks first would copy every string once more.
            parts = [arrow_strings(chunk, what) for chunk in column.chunks]
            fixed = [part for part in parts if part is not None]
            if not parts or len(fixed) != len(parts):
                return arrow_strings(column.combine_chunks(), what)
            # Joined as raw bytes: numpy copies string items one by one, far slower.
            width = max(part.itemsize for part in fixed)
            same = [part if part.itemsize == width else part.astype(f"S{width}") for part in fixed]
            return np.concatenate([part.view(np.uint8) for part in same]).view(f"S{width}")
        column = column.chunk(0)
    if pa.types.is_dictionary(column.type):
        if column.null_count:
            raise MetricError(f"{what} has {column.null_count} missing values")
        values = arrow_strings(column.dictionary, what)
        if values is None:
            return None
        return take(values, column.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False))
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    if column.null_count:
        raise MetricError(f"{what} has {column.null_count} missing values")
    n = len(column)
    offsets = _arrow_offsets(column)
    lengths = np.diff(offsets)
    width = max(int(lengths.max()) if n else 0, 1)
    data_buffer = column.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    start = int(offsets[0]) if n else 0
    if n and int(lengths.min()) == width:
        return data[start : start + n * width].view(f"S{width}")  # equal lengths: the bytes as they are
    pc = _arrow_compute()
    if pc is not None:
        # Padding with NULs in C is fastest (numpy's S strips them again). ascii_rpad counts bytes,
        # so UTF-8 ids pad right too; the length check guards against any other behaviour.
        padded = pc.ascii_rpad(column, width=width, padding="\x00")
        extremes = pc.min_max(pc.binary_length(padded))
        if extremes["min"].as_py() == extremes["max"].as_py() == width:
            start = int(_arrow_offsets(padded)[0])
            return np.frombuffer(padded.buffers()[2], dtype=np.uint8)[start : start + n * width].view(f"S{width}")
    return padded_strings(data, offsets[:-1], lengths, width)


def with_room(data: np.ndarray) -> np.ndarray:
    """*data* (bytes) copied with 8 zero bytes after its end, as `padded_strings` reads it."""
    room = np.zeros(len(data) + 8, dtype=np.uint8)
    room[: len(data)] = data
    return room


def padded_strings(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, *, room: np.ndarray | None = None
) -> np.ndarray:
    """The byte strings ``data[starts[i] : starts[i] + lengths[i]]`` NUL-padded into an ``S{width}`` array.

    Eight bytes per gather: each string is read as 64-bit words (from a copy of *data* with
    room past its end -- *room*, `with_room`'s, when the caller has one) and the bytes past
    its length are masked off.
    """
    n = len(starts)
    words = -(-width // 8)
    if room is None:
        room = with_room(data)
    if sys.byteorder == "little":
        unaligned = np.ndarray(shape=(len(room) - 7,), dtype=np.uint64, buffer=room, strides=(1,))
        masks = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
        out = np.empty((n, words), dtype=np.uint64)
        index = starts.astype(np.int64)
        left = lengths.astype(np.int64)
        for j in range(words):
            np.bitwise_and(unaligned[index], masks[np.clip(left, 0, 8)], out=out[:, j])
            index += 8
            np.minimum(index, len(unaligned) - 1, out=index)
            left -= 8
        fixed = out.view(np.uint8)
    else:
        fixed = np.zeros((n, words * 8), dtype=np.uint8)
        index = starts.astype(np.int64)
        for j in range(width):
            byte = room[np.minimum(index + j, len(room) - 1)]
            byte[lengths <= j] = 0
            fixed[:, j] = byte
    if words * 8 != width:
        fixed = np.ascontiguousarray(fixed[:, :width])
    return fixed.view(f"S{width}").ravel()


def _without_views(pa: Any, column: Any) -> Any:
    """A ``string_view`` column (Polars' own layout, newer Arrow producers) as ``large_string``:
    one cast in C, so the buffers have the offsets layout read here."""
    is_view = getattr(pa.types, "is_string_view", None)
    if is_view is not None and is_view(column.type):
        return column.cast(pa.large_string())
    return column


# Python strings converted through pyarrow from this many rows: below it, importing pyarrow would
# cost more than it saves.
_ARROW_MIN_ROWS = 1 << 14
# Python strings converted per pyarrow call: a chunk's Arrow buffers stay small (a whole column at
# once grows its builder by doubling, ~1.7x the data at the peak) and are reused chunk after chunk.
_CHUNK_ROWS = 1 << 16


def object_values(column: Any) -> np.ndarray | list[Any] | None:
    """A column of Python objects -- a numpy object array, a pandas object Series, a list, a tuple --
    as a 1-d object array or a list (no copy of the objects); None for anything else."""
    values = column
    if hasattr(column, "iloc") and str(getattr(column, "dtype", "")) == "object":
        values = column.to_numpy()
    if isinstance(values, np.ndarray):
        return values if values.dtype == object and values.ndim == 1 else None
    if isinstance(values, tuple):
        return list(values)  # pyarrow reads a list several times faster than a tuple
    return values if isinstance(values, list) else None


def _to_arrow_strings(values: Any) -> Any:
    """Python strings as a pyarrow string array, converted in C; None if pyarrow is not installed
    or a value is not a string (or is missing): the generic path then reads or names it."""
    try:
        import pyarrow as pa
    except ImportError:
        return None
    try:
        converted = pa.array(values, pa.string(), from_pandas=False)
    except (TypeError, ValueError, pa.ArrowException):
        return None
    return None if converted.null_count else converted


def python_strings(column: Any) -> Any:
    """A column of Python strings -- a list, a tuple, a numpy object array, a pandas object Series --
    as a pyarrow string array (chunked past `_CHUNK_ROWS` rows), converted in C in one pass
    over the objects (numpy's own conversion to fixed-width strings, or hashing each object, is
    several times slower); *column* itself when it is anything else, is short, holds a value that
    is not a string, or pyarrow is not installed. The generic path then reads it and names any
    bad value."""
    values = object_values(column)
    if values is None or len(values) < _ARROW_MIN_ROWS:
        return column
    chunks = []
    for start in range(0, len(values), _CHUNK_ROWS):  # chunks: see _CHUNK_ROWS
        chunk = _to_arrow_strings(values[start : start + _CHUNK_ROWS])
        if chunk is None:
            return column
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else sys.modules["pyarrow"].chunked_array(chunks)


def fixed_strings(column: Any, what: str) -> np.ndarray | None:
    """A column of Python strings (as `python_strings` takes) as one NUL-padded ``S`` array of
    their UTF-8 bytes, converted by pyarrow in chunks of `_CHUNK_ROWS` rows written into the
    result as they come; None where `python_strings` would keep the column.

    Chunks keep the peak memory at the result plus one chunk: converting the whole column first
    would hold its Arrow copy (with the builder's spare room) and the result at once.
    """
    values = object_values(column)
    if values is None or len(values) < _ARROW_MIN_ROWS:
        return None
    out: np.ndarray | None = None
    for start in range(0, len(values), _CHUNK_ROWS):
        chunk = _to_arrow_strings(values[start : start + _CHUNK_ROWS])
        fixed = None if chunk is None else arrow_strings(chunk, what)
        if fixed is None:
            return None
        out = placed(out, fixed, start, len(values))
    return out


def placed(out: np.ndarray | None, part: np.ndarray, start: int, n: int) -> np.ndarray:
    """*part* (an ``S`` array) written into rows ``start:`` of *out*, an ``S`` array of *n* rows made
    -- or widened, when *part* is wider -- as needed. Copied as raw bytes (numpy copies string
    items one by one); a wider part moves the rows so far once (rare: the first part nearly
    always holds ids of the widest length seen)."""
    width = part.itemsize
    if out is None or width > out.itemsize:
        wider = np.zeros(n, dtype=f"S{width}")
        if out is not None:
            _byte_rows(wider)[:start, : out.itemsize] = _byte_rows(out)[:start]
        out = wider
    _byte_rows(out)[start : start + len(part), :width] = _byte_rows(part)
    return out


def _byte_rows(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint8).reshape(len(arr), arr.itemsize)


def object_runs(column: Any) -> QidRuns | None:
    """Query ids held as Python strings whose rows come in contiguous runs (a query's rows
    together, as nearly always), found by comparing each id with the next in C: one pass over
    the objects, none of them converted. None when the ids are not all strings (the generic path
    names a missing one or compares others as strings), a query's rows are spread out, or runs
    average fewer than 4 rows.

    A row equal to its run's first id is that string: a value of another type never equals a
    ``str`` (``1 != "1"``, ``None != "q"``), so only the first ids need their type checked. With the
    C speedups the comparison is theirs (one pass, a pointer or ``memcmp`` per row).
    """
    values = object_values(column)
    if values is None or len(values) < 2:
        return None
    native = _fast.speedups
    found = None if native is None else native.string_runs(values)
    if found is not None:  # else declined (a value that is not a str): compared below as objects
        heads, lengths = found
        if heads is None or len(heads) - 1 >= len(values) // 4 or len(set(heads)) != len(heads):
            return None  # spread: runs averaging fewer than 4 rows, or a query's rows in two places
        return QidRuns(np.frombuffer(lengths, dtype=np.int64), heads)
    if isinstance(values, list):
        array = np.empty(len(values), dtype=object)
        try:
            array[:] = values
        except (TypeError, ValueError):  # items that numpy reads as sequences
            return None
        values = array
    try:
        new_run = np.not_equal(values[1:], values[:-1])
    except (TypeError, ValueError):  # a value whose comparison raises or is not one boolean
        return None
    if new_run.dtype != bool:
        return None
    starts = np.flatnonzero(new_run)
    if len(starts) >= len(values) // 4:
        return None
    starts = np.concatenate(([0], starts + 1))
    heads = values[starts].tolist()
    if set(map(type, heads)) != {str} or len(set(heads)) != len(heads):
        return None
    return QidRuns(np.diff(starts, append=len(values)).astype(np.int64), heads)


def array_runs(column: Any) -> QidRuns | None:
    """Query ids in a numpy ``U`` or ``S`` array whose rows come in contiguous runs, found by the
    C speedups comparing each row's bytes with the previous row's (no narrowed copy of the column,
    no temporary a row); None without the speedups, for any other column, or when the ids are
    spread out (runs averaging fewer than 4 rows, or a query's rows in two places). Byte-string
    ids are their UTF-8 (``read_run``'s)."""
    native = _fast.speedups
    if native is None or not isinstance(column, np.ndarray) or column.dtype.kind not in "US" or column.ndim != 1:
        return None
    if len(column) < 2 or column.itemsize == 0:
        return None
    arr = np.ascontiguousarray(column)
    found = native.fixed_runs(arr, arr.itemsize)
    if found is None:
        return None
    starts = np.frombuffer(found, dtype=np.int64)
    if len(starts) - 1 >= len(arr) // 4:
        return None
    firsts = arr[starts]
    try:
        heads: list[str] = firsts.tolist() if arr.dtype.kind == "U" else firsts.astype(f"U{arr.itemsize}").tolist()
    except UnicodeDecodeError:  # bytes that are not ASCII: decoded one by one
        heads = [qid_text(v) for v in firsts.tolist()]
    if len(set(heads)) != len(heads):
        return None
    return QidRuns(np.diff(starts, append=len(arr)), heads)


def _arrow_offsets(column: Any) -> np.ndarray:
    pa = sys.modules["pyarrow"]
    offset_type = np.int64 if pa.types.is_large_string(column.type) else np.int32
    return np.frombuffer(
        column.buffers()[1],
        dtype=offset_type,
        count=len(column) + 1,
        offset=column.offset * np.dtype(offset_type).itemsize,
    )


def _arrow_compute() -> Any:
    try:
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - part of every pyarrow
        return None
    return pc


@dataclass(frozen=True, slots=True)
class QidRuns:
    """Query ids whose rows are contiguous, each id once: the number of rows and the id of each run."""

    lengths: np.ndarray
    qids: list[str]


def coded_ids(column: Any, what: str, sample: int) -> QidRuns | QidGroups | tuple[np.ndarray, list[str]] | None:
    """Query ids as integer codes and the distinct ids (as strings) they index, without a
    Python object per row: Arrow string columns are dictionary-encoded in C, pandas categoricals
    give their codes. None for any other column (numpy arrays take the generic path).

    Contiguous runs are looked for first, unless the ids are `spread_from_start`; spread
    Arrow and Polars strings are then grouped by the C speedups where they can (``_groups``).
    """
    categories = getattr(getattr(column, "cat", None), "categories", None)
    if categories is not None and hasattr(column, "iloc"):
        codes = np.asarray(column.cat.codes.to_numpy(), dtype=np.int64)
        if len(codes) and int(codes.min()) < 0:
            raise MetricError(f"{what} has {int((codes < 0).sum())} missing values")
        names = [qid_text(v) for v in categories.tolist()]
        if len(set(names)) != len(names):
            return None  # two categories print alike: compare them as strings the slow way
        return codes, names
    if _is_polars(column):
        runs = _polars_runs(column, what, sample)
        if runs is not None:
            return runs
        views = polars_views(column)
        groups = None if views is None else view_groups(column, views)
        if groups is not None:
            return groups
    arrow = as_arrow(column)
    if arrow is None:
        return None
    pa = sys.modules["pyarrow"]
    arrow = _without_views(pa, arrow)
    if pa.types.is_dictionary(arrow.type):
        if isinstance(arrow, pa.ChunkedArray):
            arrow = arrow.combine_chunks()
        arrow = arrow.dictionary_decode()
    if not (pa.types.is_string(arrow.type) or pa.types.is_large_string(arrow.type)):
        return None
    if arrow.null_count:
        raise MetricError(f"{what} has {arrow.null_count} missing values")
    pc = _arrow_compute()
    if pc is None:
        return None
    runs = _arrow_runs(pc, arrow, sample)
    if runs is not None:
        return runs
    groups = arrow_groups(arrow)
    if groups is not None:
        return groups
    encoded = pc.dictionary_encode(arrow)
    if isinstance(encoded, pa.ChunkedArray):
        # Arrow's encoder keeps one table across the chunks, so their codes share one dictionary:
        # read chunk by chunk, with no combined copy of the ids (checked, else combined).
        chunks = encoded.chunks
        if not chunks:
            return np.zeros(0, dtype=np.int64), []
        dictionary = chunks[-1].dictionary
        if not all(chunk.dictionary.equals(dictionary) for chunk in chunks):
            encoded = pc.dictionary_encode(arrow.combine_chunks())
        else:
            codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks]).astype(np.int64)
            return codes, dictionary.to_pylist()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def fixed_width_codes(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact integer codes of an 'S' array's ids and the distinct ids, codes in order of first
    appearance: pyarrow's hash table over the array's own buffer (no copy), when pyarrow is
    installed; else None."""
    if arr.dtype.kind != "S" or arr.itemsize == 0 or arr.ndim != 1:
        return None
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    arr = np.ascontiguousarray(arr)
    fixed = pa.Array.from_buffers(pa.binary(arr.itemsize), len(arr), [None, pa.py_buffer(arr)])
    encoded = pc.dictionary_encode(fixed)
    dictionary = encoded.dictionary
    distinct = np.frombuffer(dictionary.buffers()[1], dtype=f"S{arr.itemsize}", count=len(dictionary),
                             offset=dictionary.offset * arr.itemsize)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), distinct


def spread_from_start(n: int, head_changes: int, sample: int) -> bool:
    """Whether a column of *n* ids whose first *sample* rows change id *head_changes* times is
    spread from its start: more than one change in four rows there (and a column over twice the
    sample). Its rows are then grouped at once, with no search for contiguous runs first -- a
    pass that spread ids would waste."""
    return n > 2 * sample and head_changes > sample // 4


def polars_views(column: Any) -> tuple[Any, int, int, list[Any]] | None:
    """The arguments the C speedups read a Polars string Series without nulls by, in its own
    memory (no copy): the views buffer, offset, length and data buffers of its Arrow string-view
    export (the buffers keep that memory alive); None for anything else, or without the speedups."""
    pl = sys.modules.get("polars")
    if _fast.speedups is None or pl is None or not _is_polars(column) or not hasattr(column, "str"):
        return None
    if column.dtype != pl.String or column.null_count():
        return None
    try:
        arrow = column.to_arrow(compat_level=pl.CompatLevel.newest())
    except (ImportError, TypeError, AttributeError):  # no pyarrow (Polars exports through it), an older Polars
        return None
    pa = sys.modules["pyarrow"]
    is_view = getattr(pa.types, "is_string_view", None)
    if is_view is None or not is_view(arrow.type) or arrow.null_count:
        return None
    buffers = arrow.buffers()
    return buffers[1], arrow.offset, len(arrow), list(buffers[2:])


def _view_runs(column: Any) -> QidRuns | None:
    """`_polars_runs` by the C speedups, comparing each row's view (and bytes) with the
    previous one's in the Series' own memory; None when they cannot, or the ids are spread."""
    native, views = _fast.speedups, polars_views(column)
    if native is None or views is None or len(column) < 2:
        return None
    found = native.view_runs(*views)
    if found is None:
        return None
    starts = np.frombuffer(found, dtype=np.int64)
    if len(starts) - 1 >= len(column) // 4:
        return None
    heads = column.gather(starts).to_list()
    if len(set(heads)) != len(heads):
        return None
    return QidRuns(np.diff(starts, append=len(column)), heads)


def _polars_runs(column: Any, what: str, sample: int) -> QidRuns | None:
    """The runs of equal ids of a Polars string (or categorical) Series, as `_arrow_runs`
    finds them, by Polars' own run-length encoding: its strings are views, which Arrow's
    encoder does not take, so this spares a copy of the column into Arrow's layout."""
    pl = sys.modules.get("polars")
    if pl is None or not hasattr(column, "rle") or column.dtype not in (pl.String, pl.Categorical):
        return None
    if column.null_count():
        raise MetricError(f"{what} has {column.null_count()} missing values")
    viewed = _view_runs(column)
    if viewed is not None:
        return viewed
    if spread_from_start(len(column), len(column.head(sample).rle()) - 1, sample):
        return None
    runs = column.rle()
    lengths = runs.struct.field("len").to_numpy()
    if not len(lengths) or len(lengths) > len(column) // 4:
        return None
    qids = runs.struct.field("value").cast(pl.String).to_list()
    if len(set(qids)) != len(qids):
        return None
    return QidRuns(lengths.astype(np.int64), qids)


def _arrow_runs(pc: Any, arrow: Any, sample: int) -> QidRuns | None:
    """The runs of equal ids of an Arrow string column (chunked or not) when each id makes one
    run and runs average 4 rows or more (a query's rows are nearly always contiguous), else None.
    The ids are then never looked at row by row. None at once when they are
    `spread_from_start` (encoding the whole column would be wasted)."""
    n = len(arrow)
    if not n or not hasattr(pc, "run_end_encode"):
        return None
    chunks = [c for c in getattr(arrow, "chunks", [arrow]) if len(c)]
    if spread_from_start(n, len(pc.run_end_encode(chunks[0].slice(0, sample)).values) - 1, sample):
        return None
    encoded = [pc.run_end_encode(c) for c in chunks]
    if sum(len(e.values) for e in encoded) - (len(encoded) - 1) > n // 4:
        return None
    return joined_runs(encoded_runs(e) for e in encoded)


def encoded_runs(encoded: Any) -> QidRuns:
    """The runs of one Arrow run-end-encoded array of ids."""
    return QidRuns(np.diff(encoded.run_ends.to_numpy(zero_copy_only=False), prepend=0).astype(np.int64),
                   encoded.values.to_pylist())


def joined_runs(steps: Iterable[QidRuns]) -> QidRuns | None:
    """Runs of consecutive pieces of one column (Arrow chunks, steps of rows) as one: a run that
    crosses into the next piece is one run. None when an id makes two runs: its rows are not
    contiguous."""
    lengths: list[np.ndarray] = []
    qids: list[str] = []
    for step in steps:
        sizes, names = step.lengths, step.qids
        if not len(sizes):
            continue
        if qids and names[0] == qids[-1]:
            lengths[-1] = lengths[-1].copy()  # a piece's lengths may be the caller's: never edited
            lengths[-1][-1] += sizes[0]
            sizes, names = sizes[1:], names[1:]
        if len(sizes):
            lengths.append(sizes)
            qids.extend(names)
    if len(set(qids)) != len(qids):
        return None
    return QidRuns(np.concatenate(lengths), qids)


def qid_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
