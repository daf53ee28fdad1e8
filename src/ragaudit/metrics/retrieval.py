"""Retrieval metrics with trec_eval semantics: precision, recall, F1, hit rate, MRR, MAP, NDCG.

Every function here computes what ``trec_eval`` (and so ``pytrec_eval``) computes:

- **Ranking.** Documents are ordered by score, descending; equal scores are ordered by doc id
  compared as strings, **descending** (so ``"d9"`` ranks above ``"d10"``). The order of the input
  and any rank column are ignored. Scores are compared as 32-bit floats, because trec_eval stores
  them so: scores that differ only beyond ~7 significant digits tie (and doc ids decide).
- **Relevance.** A doc missing from the qrels, or with a label <= 0, is non-relevant. A doc is
  relevant when its label >= ``relevance_level`` (default 1, must be >= 1). Negative labels count
  neither in the number of relevant docs nor in the ideal DCG.
- **Divisors.** ``P@K`` divides by K even when fewer than K docs were retrieved; ``recall@K`` and
  ``map@K`` divide by all relevant docs of the query in the qrels; a query with no relevant doc
  scores 0 on every metric.
- **NDCG.** Gain is the raw label (``ndcg``) or ``2**label - 1`` (``ndcg_burges``) for labels > 0,
  whatever ``relevance_level`` is (as trec_eval); discount ``log2(rank + 1)``; the ideal DCG is
  built from all labels >= 1 of the query, cut at K; NDCG is 0 when the ideal DCG is 0.
- **MRR@K.** trec_eval's ``recip_rank`` has no cut-off: ``mrr@K`` is 1/rank of the first relevant
  doc when it is within the top K, else 0 (``mrr`` alone is ``recip_rank``).
- **Queries.** Run and qrels are paired by query id only, never by position; ids are compared as
  strings (``str()`` of numbers). Queries in the run but not in the qrels are ignored, as
  trec_eval ignores them (their rows are not validated either). A query in the qrels with no
  judgement at all is treated as absent from the qrels.
- **Averaging** (``judged_only``). ``True`` (the default) averages over the queries present in
  both the run and the qrels, as trec_eval does without ``-c`` and as ``pytrec_eval`` does, so
  numbers compare with published ones. ``False`` is trec_eval ``-c``: qrels queries the run does
  not contain count as 0 in the means and appear with 0.0 in per-query results; use it when a
  missing answer is a failure (a RAG system that returned nothing for a question).
- **Duplicates.** trec_eval refuses a run that lists a doc twice for one query; so do we
  (:class:`~ragaudit.errors.MetricError`), unless ``on_duplicate="max"``, which keeps the
  occurrence with the highest score.

Implementation: a vectorised numpy path with no Python loop per query or per document. Queries
are padded into ``[queries, depth]`` blocks (in chunks of similar depth); each cell's doc-id hash
(and, unless the rows already come in score order, its score) is packed with its row and column
into a 64-bit key, and one ``np.sort`` per block orders every row at once. Sorted hashes expose
duplicates and locate the judged docs; sorted scores give their ranks (rows with equal scores
are re-ranked exactly, ties by doc id). The metrics then need only the ranks of the docs
labelled >= 1, a few per query. A run given as dicts skips the hashing (dict keys cannot repeat):
the judged docs' scores come from dict lookups. Every hash match is confirmed by comparing the
ids themselves, so a collision costs time, never a wrong number.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Literal, TypeAlias, overload

import numpy as np

from ..errors import MetricError
from .measures import Measure, parse_measure

__all__ = [
    "OnDuplicate",
    "Run",
    "evaluate",
    "evaluate_columns",
    "score_ranking",
]

OnDuplicate = Literal["error", "max"]
MeasureSpec: TypeAlias = str | Measure
Qrels = Mapping[Any, Mapping[Any, Any]]

_HASH_MASK = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
_CHUNK_CELLS = 1 << 17
_HASH_ROWS = 1 << 18
_QID_NAMES = ("qid", "query_id", "query", "q")
_DOCID_NAMES = ("docid", "doc_id", "docno", "document_id", "id")
_SCORE_NAMES = ("score", "sim", "similarity")
_LABEL_NAMES = ("relevance", "rel", "label", "grade", "judgment", "judgement")


@dataclass(frozen=True, slots=True, eq=False)
class Run:
    """A run held in three aligned 1-D numpy arrays: query id, doc id and score per row.

    What :func:`~ragaudit.metrics.read_run` returns; accepted by :func:`evaluate`. Rows may come in
    any order and a query's rows need not be contiguous. Duplicates are kept as read, so
    :func:`evaluate` can refuse them as trec_eval does.
    """

    qids: np.ndarray
    docids: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        for name in ("qids", "docids", "scores"):
            value = np.asarray(getattr(self, name))
            if value.ndim != 1:
                raise MetricError(f"Run.{name} must be one-dimensional, got shape {value.shape}")
            object.__setattr__(self, name, value)
        if not len(self.qids) == len(self.docids) == len(self.scores):
            raise MetricError(
                f"Run columns differ in length: {len(self.qids)} qids, {len(self.docids)} docids, "
                f"{len(self.scores)} scores"
            )

    def __len__(self) -> int:
        return len(self.qids)

    def to_dict(self, on_duplicate: OnDuplicate = "error") -> dict[str, dict[str, float]]:
        """The run as ``{qid: {docid: score}}``; a duplicate doc raises unless ``on_duplicate="max"``."""
        _check_on_duplicate(on_duplicate)
        out: dict[str, dict[str, float]] = {}
        for qid, docid, score in zip(self.qids.tolist(), self.docids.tolist(), self.scores.tolist()):
            docs = out.setdefault(str(qid), {})
            key = str(docid)
            if key in docs:
                if on_duplicate == "error":
                    raise MetricError(_duplicate_message(str(qid), key))
                docs[key] = max(docs[key], float(score))
            else:
                docs[key] = float(score)
        return out


# ---------------------------------------------------------------------------------------------
# Validation helpers


def _check_on_duplicate(on_duplicate: str) -> None:
    if on_duplicate not in ("error", "max"):
        raise MetricError(f"on_duplicate must be 'error' or 'max', got {on_duplicate!r}")


def _check_level(relevance_level: Any) -> int:
    if isinstance(relevance_level, (bool, np.bool_)) or not isinstance(relevance_level, (int, np.integer)):
        raise MetricError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    level = int(relevance_level)
    if level < 1:
        raise MetricError(f"relevance_level must be >= 1 (labels <= 0 are never relevant), got {relevance_level!r}")
    return level


def _parse_measures(measures: MeasureSpec | Iterable[MeasureSpec]) -> list[tuple[str, Measure]]:
    items = [measures] if isinstance(measures, (str, Measure)) else list(measures)
    if not items:
        raise MetricError("no metric requested; pass names such as ['ndcg@10', 'recall@5', 'map']")
    parsed: dict[str, Measure] = {}
    for item in items:
        measure = parse_measure(item)
        parsed.setdefault(item if isinstance(item, str) else str(measure), measure)
    return list(parsed.items())


def _duplicate_message(qid: str, docid: str) -> str:
    return (
        f"query {qid!r}: doc id {docid!r} appears more than once in the run (trec_eval refuses "
        "duplicates); pass on_duplicate='max' to keep its highest score"
    )


def _as_label(value: Any, qid: str, docid: str) -> int:
    if isinstance(value, (int, np.integer, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise MetricError(f"qrels label for query {qid!r}, doc {docid!r} must be an integer, got {value!r}")


def _labels_array(values: list[Any], qids: Sequence[str], docids: list[str]) -> np.ndarray:
    """Validate qrels labels in bulk; the slow per-value path only runs to name a bad one."""
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError):
        arr = np.asarray(values, dtype=object)
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f":
        good = np.isfinite(arr)
        good[good] = arr[good] == np.floor(arr[good])
        if good.all():
            return arr.astype(np.int64)
        bad = int(np.flatnonzero(~good)[0])
        _as_label(values[bad], qids[bad], docids[bad])
    for i, value in enumerate(values):
        _as_label(value, qids[i], docids[i])
    return np.asarray([int(v) for v in values], dtype=np.int64)


def _is_table(obj: Any) -> bool:
    return hasattr(obj, "column_names") or (hasattr(obj, "columns") and hasattr(obj, "iloc"))


def _table_column(table: Any, names: Sequence[str], what: str) -> Any:
    available = list(table.column_names) if hasattr(table, "column_names") else list(table.columns)
    lowered = {str(c).lower(): c for c in available}
    for name in names:
        if name in lowered:
            col = lowered[name]
            return table.column(col) if hasattr(table, "column_names") else table[col]
    raise MetricError(f"table has no {what} column (looked for {', '.join(names)}); columns: {available}")


def _to_numpy(column: Any, what: str) -> np.ndarray:
    categories = getattr(getattr(column, "cat", None), "categories", None)
    if categories is not None and hasattr(column, "iloc"):
        codes = np.asarray(column.cat.codes.to_numpy(), dtype=np.intp)
        if len(codes) and int(codes.min()) < 0:
            raise MetricError(f"{what} has {int((codes < 0).sum())} missing values")
        values = _to_numpy(categories, what)
        return values[codes] if len(values) else values[:0]
    arrow = _as_arrow(column, combine=False)
    if arrow is not None:
        fixed = _arrow_strings(arrow, what)
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


def _as_arrow(column: Any, combine: bool = True) -> Any:
    """*column* as a pyarrow Array (a ChunkedArray unless *combine*) when it is Arrow data
    (pyarrow, or pandas' pyarrow-backed strings), else None. pyarrow is never imported here
    unless the caller already did."""
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return None
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        dtype = getattr(column, "dtype", None)
        if getattr(dtype, "storage", None) not in ("pyarrow", "pyarrow_numpy"):
            return None
        try:
            column = pa.array(column)
        except (TypeError, ValueError, pa.ArrowException):
            return None
    if combine and isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column


def _arrow_strings(column: Any, what: str) -> np.ndarray | None:
    """An Arrow string column (pyarrow, or pandas' pyarrow-backed strings) as a fixed-width bytes array.

    Read straight from Arrow's buffers, so no Python string is made per row. Returns None for
    anything else.
    """
    column = _as_arrow(column, combine=False)
    if column is None:
        return None
    pa = sys.modules["pyarrow"]
    kind = column.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)):
        return None
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            # Chunk by chunk: combining the chunks first would copy every string once more.
            parts = [_arrow_strings(chunk, what) for chunk in column.chunks]
            fixed = [part for part in parts if part is not None]
            if not parts or len(fixed) != len(parts):
                return _arrow_strings(column.combine_chunks(), what)
            return np.concatenate(fixed)
        column = column.chunk(0)
    if pa.types.is_dictionary(column.type):
        if column.null_count:
            raise MetricError(f"{what} has {column.null_count} missing values")
        values = _arrow_strings(column.dictionary, what)
        if values is None:
            return None
        return values[column.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False)]
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
    return _padded_strings(data, offsets[:-1], lengths, width)


def _padded_strings(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """The byte strings ``data[starts[i] : starts[i] + lengths[i]]`` NUL-padded into an ``S{width}`` array.

    Eight bytes per gather: each string is read as 64-bit words (from a copy of *data* with
    room past its end) and the bytes past its length are masked off.
    """
    n = len(starts)
    words = -(-width // 8)
    room = np.zeros(len(data) + 8, dtype=np.uint8)
    room[: len(data)] = data
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
class _QidRuns:
    """Query ids whose rows are contiguous, each id once: the number of rows and the id of each run."""

    lengths: np.ndarray
    qids: list[str]


def _coded_ids(column: Any, what: str) -> _QidRuns | tuple[np.ndarray, list[str]] | None:
    """Query ids as integer codes and the distinct ids (as strings) they index, without a
    Python object per row: Arrow string columns are dictionary-encoded in C, pandas categoricals
    give their codes. None for any other column (numpy arrays take the generic path)."""
    categories = getattr(getattr(column, "cat", None), "categories", None)
    if categories is not None and hasattr(column, "iloc"):
        codes = np.asarray(column.cat.codes.to_numpy(), dtype=np.int64)
        if len(codes) and int(codes.min()) < 0:
            raise MetricError(f"{what} has {int((codes < 0).sum())} missing values")
        names = [_qid_text(v) for v in categories.tolist()]
        if len(set(names)) != len(names):
            return None  # two categories print alike: compare them as strings the slow way
        return codes, names
    arrow = _as_arrow(column, combine=False)
    if arrow is None:
        return None
    pa = sys.modules["pyarrow"]
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
    runs = _arrow_runs(pc, arrow)
    if runs is not None:
        return runs
    if isinstance(arrow, pa.ChunkedArray):
        arrow = arrow.combine_chunks()
    encoded = pc.dictionary_encode(arrow)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def _arrow_runs(pc: Any, arrow: Any) -> _QidRuns | None:
    """The runs of equal ids of an Arrow string column (chunked or not) when each id makes one
    run and runs average 4 rows or more (a query's rows are nearly always contiguous), else None.
    The ids are then never looked at row by row."""
    n = len(arrow)
    if not n or not hasattr(pc, "run_end_encode"):
        return None
    chunks = [c for c in getattr(arrow, "chunks", [arrow]) if len(c)]
    encoded = [pc.run_end_encode(c) for c in chunks]
    if sum(len(e.values) for e in encoded) - (len(encoded) - 1) > n // 4:
        return None
    qids: list[str] = []
    sizes: list[np.ndarray] = []
    for e in encoded:
        values = e.values.to_pylist()
        part = np.diff(e.run_ends.to_numpy(zero_copy_only=False), prepend=0).astype(np.int64)
        if qids and values[0] == qids[-1]:  # a run split across two chunks
            sizes[-1][-1] += part[0]
            values, part = values[1:], part[1:]
        if len(part):
            qids.extend(values)
            sizes.append(part)
    if len(set(qids)) != len(qids):
        return None
    return _QidRuns(np.concatenate(sizes), qids)


# ---------------------------------------------------------------------------------------------
# Doc id hashing: equal strings hash equal whatever the array width, so run and qrels pair up.


def _weights(width: int) -> np.ndarray:
    z = (np.arange(1, width + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xD1B54A32D192ED03)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def _str_len(arr: np.ndarray) -> np.ndarray:
    strings = getattr(np, "strings", None)
    return strings.str_len(arr) if strings is not None else np.char.str_len(arr)


def _hash_fixed(arr: np.ndarray) -> np.ndarray:
    """Hash a 'U' or 'S' array: a weighted sum (mod 2**64) of its code units.

    The hash of a string does not depend on the array's width (padding adds nothing) nor on
    whether the units are read one by one or eight bytes at a time (the weights of single units
    are those of 64-bit words shifted into place), so a run and its qrels always hash alike.
    """
    n = len(arr)
    out = np.zeros(n, dtype=np.uint64)
    if n == 0 or arr.itemsize == 0:
        return out
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    arr = np.ascontiguousarray(arr)
    unit = 4 if arr.dtype.kind == "U" else 1
    # Wide dtypes (ids cast from ints are U21) are mostly padding: skip the columns no id uses.
    used_bytes = int(_str_len(arr).max()) * unit if arr.itemsize > 32 else arr.itemsize
    if used_bytes == 0:
        return out
    if arr.itemsize % 8 == 0 and sys.byteorder == "little":
        view: np.ndarray = arr.view(np.uint64).reshape(n, -1)[:, : -(-used_bytes // 8)]
        weights = _weights(view.shape[1])
    else:
        view = arr.view(np.uint32 if unit == 4 else np.uint8).reshape(n, -1)[:, : used_bytes // unit]
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
    out &= _HASH_MASK
    return out


def _hash_objects(values: Iterable[Any], n: int) -> np.ndarray:
    return np.fromiter(map(hash, values), dtype=np.int64, count=n).view(np.uint64) & _HASH_MASK


@dataclass(frozen=True, slots=True)
class _DocIds:
    """Doc ids of the run (for exact checks and tie-breaks) and how to hash them and others alike."""

    ids: np.ndarray

    def encode(self, docids: list[str]) -> np.ndarray:
        """*docids* (strings) as an array comparable with :attr:`ids`."""
        kind = self.ids.dtype.kind
        if kind == "U":
            width = max(map(len, docids), default=1) or 1
            return np.fromiter(docids, dtype=f"U{width}", count=len(docids))
        if kind == "S":
            pa = sys.modules.get("pyarrow")
            if pa is not None and docids:
                fixed = _arrow_strings(pa.array(docids, pa.string()), "doc ids")
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
            return _hash_fixed(encoded)
        return _hash_objects(encoded, len(encoded))

    def text(self, index: int) -> str:
        value = self.ids[index]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def take(self, index: np.ndarray) -> _DocIds:
        return _DocIds(self.ids[index])


def _docids_from_array(arr: np.ndarray) -> _DocIds:
    kind = arr.dtype.kind
    if kind in "iu":
        arr = arr.astype(str)
        kind = "U"
    if kind in "US":
        return _DocIds(arr)
    if kind == "O":
        types = set(map(type, arr))
        if not types <= {str}:
            for i, value in enumerate(arr):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    raise MetricError(f"doc id at row {i} is missing ({value!r})")
                if not isinstance(value, (str, bytes, int, np.integer)):
                    raise MetricError(f"doc id at row {i} must be a string, got {value!r}")
            arr = np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr], dtype=object)
        return _DocIds(arr)
    raise MetricError(f"doc ids must be strings (or integers), got an array of {arr.dtype}")


# ---------------------------------------------------------------------------------------------
# Prepared inputs


@dataclass(frozen=True, slots=True)
class _Qrels:
    qids: list[str]
    index: dict[str, int]
    entry_q: np.ndarray
    docids: list[str]
    labels: np.ndarray


@dataclass(frozen=True, slots=True)
class _Run:
    """The evaluated queries' rows, grouped by query (rows of query i: ``offsets[i]:offsets[i+1]``).

    A run given as dicts keeps its dicts and has ``docs=None`` until doc ids are needed (ties):
    the common case never builds a Python list of every doc id.
    """

    qids: list[str]
    offsets: np.ndarray
    scores: np.ndarray
    docs: _DocIds | None
    dicts: list[Mapping[Any, Any]] | None = None

    def materialized(self) -> _Run:
        """The same run with its doc ids in one numpy string array (sorted and hashed fast)."""
        if self.docs is not None or self.dicts is None:
            return self
        keys = list(chain.from_iterable(self.dicts))
        width = max(map(len, keys), default=1) or 1
        return _Run(
            self.qids, self.offsets, self.scores, _DocIds(np.fromiter(keys, dtype=f"U{width}", count=len(keys)))
        )

    def without_rows(self, drop: list[int]) -> _Run:
        """The run without the rows *drop* (query order kept)."""
        run = self.materialized()
        assert run.docs is not None
        keep = np.ones(len(run.scores), dtype=bool)
        keep[drop] = False
        group = np.repeat(np.arange(len(run.qids)), np.diff(run.offsets))
        counts = np.bincount(group[keep], minlength=len(run.qids))
        offsets = np.zeros(len(run.qids) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return _Run(run.qids, offsets, run.scores[keep], run.docs.take(np.flatnonzero(keep)))

    def qid_of_row(self, row: int) -> str:
        return self.qids[int(np.searchsorted(self.offsets, row, side="right")) - 1]


def _prepare_qrels(qrels: Any) -> _Qrels:
    if _is_table(qrels):
        q_col = _to_numpy(_table_column(qrels, _QID_NAMES, "query id"), "qrels query ids")
        d_col = _to_numpy(_table_column(qrels, _DOCID_NAMES, "doc id"), "qrels doc ids")
        l_col = _to_numpy(_table_column(qrels, _LABEL_NAMES, "relevance"), "qrels labels")
        nested: dict[str, dict[str, Any]] = {}
        for q, d, lab in zip(q_col.tolist(), d_col.tolist(), l_col.tolist()):
            nested.setdefault(_qid_text(q), {})[_qid_text(d)] = lab
        qrels = nested
    if not isinstance(qrels, Mapping):
        raise MetricError(f"qrels must be a mapping {{qid: {{docid: label}}}} or a table, got {type(qrels).__name__}")
    raw_qids = list(qrels)
    docs_per_query: list[Mapping[Any, Any]] = list(qrels.values())
    if not set(map(type, docs_per_query)) <= {dict}:
        for raw_qid, docs in zip(raw_qids, docs_per_query):
            if not isinstance(docs, Mapping):
                raise MetricError(f"qrels for query {raw_qid!r} must be a mapping {{docid: label}}, got {docs!r}")
    counts = list(map(len, docs_per_query))
    if 0 in counts:
        kept = [i for i, count in enumerate(counts) if count]
        raw_qids = [raw_qids[i] for i in kept]
        docs_per_query = [docs_per_query[i] for i in kept]
        counts = [counts[i] for i in kept]
    if not raw_qids:
        raise MetricError("the qrels are empty: no query has a judged document")
    qids = _as_texts(raw_qids)
    index = dict(zip(qids, range(len(qids))))
    if len(index) != len(qids):
        raise MetricError(f"query id {_first_repeat(qids)!r} appears twice in the qrels (ids are compared as strings)")
    docids = _as_texts(list(chain.from_iterable(docs_per_query)))
    values = list(chain.from_iterable(_all_values(docs_per_query)))
    entry_q = np.repeat(np.arange(len(qids), dtype=np.int64), counts)
    labels = _labels_array(values, _LazyQids(qids, entry_q), docids)
    return _Qrels(qids, index, entry_q, docids, labels)


def _as_texts(values: list[Any]) -> list[str]:
    return values if set(map(type, values)) <= {str} else [_qid_text(v) for v in values]


def _first_repeat(values: list[str]) -> str:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    raise AssertionError("no repeated value")


def _all_values(mappings: list[Mapping[Any, Any]]) -> Iterable[Iterable[Any]]:
    """The values views of *mappings* (``dict.values`` mapped at C speed when all are dicts)."""
    if set(map(type, mappings)) <= {dict}:
        return map(dict.values, mappings)  # type: ignore[arg-type]
    return (m.values() for m in mappings)


class _LazyQids(Sequence[str]):
    """Query id per qrels entry, built only when an error message needs one."""

    def __init__(self, qids: list[str], entry_q: np.ndarray) -> None:
        self._qids, self._entry_q = qids, entry_q

    def __len__(self) -> int:
        return len(self._entry_q)

    def __getitem__(self, i: Any) -> Any:
        return self._qids[int(self._entry_q[i])]


def _check_scores(run: _Run) -> None:
    nan = np.isnan(run.scores)
    if not nan.any():
        return
    row = int(np.flatnonzero(nan)[0])
    qid = run.qid_of_row(row)
    if run.docs is not None:
        docid = run.docs.text(row)
    else:
        assert run.dicts is not None
        docs = run.dicts[run.qids.index(qid)]
        docid = next(str(d) for d, s in docs.items() if isinstance(s, (float, np.floating)) and math.isnan(s))
    raise MetricError(f"score for query {qid!r}, doc {docid!r} is NaN")


def _as_trec_scores(scores: np.ndarray) -> np.ndarray:
    """Scores as 32-bit floats, which is how trec_eval stores them (``float sim``).

    Two scores equal in single precision tie in trec_eval (and pytrec_eval), and are then
    ordered by doc id; rounding the same way is what makes the rankings identical.
    """
    with np.errstate(over="ignore"):
        return scores.astype(np.float32)


def _scores_array(values: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MetricError(f"{where}: scores must be numbers ({exc})") from exc
    return arr


def _string_keys(qid: str, docs: Mapping[Any, Any], on_duplicate: str) -> dict[str, Any]:
    """A query's dict with its doc ids as strings (ids are compared as strings, as trec_eval's are)."""
    out: dict[str, Any] = {}
    for docid, score in docs.items():
        key = docid if isinstance(docid, str) else _qid_text(docid)
        if key in out:
            if on_duplicate == "error":
                raise MetricError(_duplicate_message(qid, key))
            if score <= out[key]:
                continue
        out[key] = score
    return out


def _prepare_dict_run(run: Mapping[Any, Any], qrels: _Qrels, on_duplicate: str) -> tuple[_Run, int]:
    if not run:
        raise MetricError("the run is empty: no query")
    all_qids = _as_texts(list(run))
    if len(set(all_qids)) != len(all_qids):
        raise MetricError(
            f"query id {_first_repeat(all_qids)!r} appears twice in the run (ids are compared as strings)"
        )
    all_docs: list[Mapping[Any, Any]] = list(run.values())
    if not set(map(type, all_docs)) <= {dict}:
        for raw_qid, docs in zip(all_qids, all_docs):
            if not isinstance(docs, Mapping):
                raise MetricError(f"run entry for query {raw_qid!r} must be a mapping {{docid: score}}, got {docs!r}")
    wanted = list(map(qrels.index.__contains__, all_qids))
    if all(wanted):
        qids, dicts = all_qids, all_docs
    else:
        qids = [q for q, keep in zip(all_qids, wanted) if keep]
        dicts = [d for d, keep in zip(all_docs, wanted) if keep]
    # Doc ids should be strings; a query whose first id is not one is converted (cheap to check).
    first_types = set(map(type, map(next, map(iter, filter(None, dicts)))))
    if not first_types <= {str}:
        dicts = [
            d if not d or type(next(iter(d))) is str else _string_keys(q, d, on_duplicate) for q, d in zip(qids, dicts)
        ]
    lengths = np.fromiter(map(len, dicts), dtype=np.int64, count=len(dicts))
    offsets = np.zeros(len(dicts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    n = int(offsets[-1])
    try:
        scores = np.fromiter(chain.from_iterable(_all_values(dicts)), dtype=np.float64, count=n)
    except (TypeError, ValueError):
        for qid, docs in zip(qids, dicts):
            for docid, score in docs.items():
                if isinstance(score, (bool, np.bool_)) or not isinstance(score, (int, float, np.number)):
                    raise MetricError(
                        f"score for query {qid!r}, doc {docid!r} must be a number, got {score!r}"
                    ) from None
        raise MetricError("run scores must be numbers") from None
    prepared = _Run(qids, offsets, scores, None, dicts)
    _check_scores(prepared)
    return prepared, len(run)


def _prepare_columns(qids: Any, docids: Any, scores: Any, qrels: _Qrels) -> tuple[_Run, int]:
    coded = _coded_ids(qids, "qids")
    q_names = None
    q_runs = None
    if coded is None:
        q_arr = _to_numpy(qids, "qids")
    elif isinstance(coded, _QidRuns):
        q_runs = coded
    else:
        q_arr, q_names = coded
    d_arr = _to_numpy(docids, "docids")
    s_arr = _scores_array(_to_numpy(scores, "scores"), "run")
    n_rows = int(q_runs.lengths.sum()) if q_runs is not None else len(q_arr)
    if not n_rows == len(d_arr) == len(s_arr):
        raise MetricError(f"run columns differ in length: {n_rows} qids, {len(d_arr)} docids, {len(s_arr)} scores")
    if n_rows == 0:
        raise MetricError("the run is empty: no row")
    if q_runs is not None:
        lengths, run_qids = q_runs.lengths, q_runs.qids
    elif (
        q_arr.dtype.kind == "O"
        and not set(map(type, q_arr)) <= {str}
        and any(v is None or (isinstance(v, float) and math.isnan(v)) for v in q_arr)
    ):
        raise MetricError("the run has a missing query id")
    else:
        lengths, run_qids, d_arr, s_arr = _group_columns(q_arr, q_names, d_arr, s_arr)
    selected = np.fromiter(map(qrels.index.__contains__, run_qids), dtype=bool, count=len(run_qids))
    qid_list = run_qids
    if not selected.all():
        qid_list = [q for q, keep in zip(run_qids, selected.tolist()) if keep]
        row_keep = np.repeat(selected, lengths)
        d_arr, s_arr = d_arr[row_keep], s_arr[row_keep]
        lengths = lengths[selected]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    prepared = _Run(qid_list, offsets, s_arr, _docids_from_array(d_arr))
    _check_scores(prepared)
    return prepared, len(run_qids)


def _group_columns(
    q_arr: np.ndarray, q_names: list[str] | None, d_arr: np.ndarray, s_arr: np.ndarray
) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """Rows grouped by query: rows per query, the query ids, doc ids and scores in that order.

    *q_names*: *q_arr* holds exact integer codes of these ids.
    """
    # Rows of a query are nearly always contiguous: find the blocks without sorting any strings.
    starts = np.concatenate(([0], np.flatnonzero(q_arr[1:] != q_arr[:-1]) + 1))
    if len(starts) <= len(q_arr) // 4 and _distinct(q_arr[starts]):
        lengths = np.diff(np.append(starts, len(q_arr)))
        run_qids = q_arr[starts].tolist()
        if q_names is not None:
            run_qids = [q_names[c] for c in run_qids]
        elif q_arr.dtype.kind != "U":
            run_qids = [_qid_text(v) for v in run_qids]
    else:
        # A query's rows are spread out: gather them (queries in order of first appearance).
        order, run_qids, lengths = _group_rows(q_arr, q_names)
        d_arr, s_arr = d_arr[order], s_arr[order]
    return lengths, run_qids, d_arr, s_arr


def _id_codes(ids: np.ndarray) -> np.ndarray:
    """Integer codes equal for equal ids (as strings); different ids may rarely share one (a hash)."""
    kind = ids.dtype.kind
    if kind in "iu":
        return ids.astype(np.int64)
    if kind in "US":
        return _hash_fixed(ids)
    return _hash_objects((_qid_text(v) for v in ids), len(ids))


def _distinct(ids: np.ndarray) -> bool:
    """True when no id repeats (certain: only distinct ids can have distinct codes)."""
    return len(np.unique(_id_codes(ids))) == len(ids)


def _group_rows(q_arr: np.ndarray, names: list[str] | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Row order that groups equal query ids (first appearance first), the ids, the group sizes.

    *names*: *q_arr* holds exact integer codes of these ids.
    """
    codes = _id_codes(q_arr)
    order = np.argsort(codes)
    sorted_codes = codes[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = sorted_codes[1:] != sorted_codes[:-1]
    ids_sorted = q_arr[order]
    if bool((~new_group[1:] & (ids_sorted[1:] != ids_sorted[:-1])).any()):
        # Two query ids share a hash: group by the ids themselves (slower, exact).
        _, exact = np.unique(np.array([_qid_text(v) for v in q_arr.tolist()]), return_inverse=True)
        order = np.argsort(exact)
        new_group[1:] = exact[order][1:] != exact[order][:-1]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.append(starts, len(order)))
    first_rows = np.minimum.reduceat(order, starts)
    by_first_row = np.argsort(first_rows)
    starts, sizes = starts[by_first_row], sizes[by_first_row]
    rows = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(len(order))
    first_ids = q_arr[first_rows[by_first_row]].tolist()
    run_qids = [names[c] for c in first_ids] if names is not None else [_qid_text(v) for v in first_ids]
    return order[rows], run_qids, sizes


def _qid_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# ---------------------------------------------------------------------------------------------
# The vectorised kernel


class _DuplicatesFound(Exception):
    def __init__(self, drop: list[int]) -> None:
        super().__init__("duplicates")
        self.drop = drop


@dataclass(frozen=True, slots=True)
class _Judged:
    """The qrels side for the evaluated queries (query index = position in the run's query list).

    ``entry_*``: one per judged doc with a label >= 1 (the only docs that move a metric);
    ``ideal_*``: the same docs ordered by label, descending, within each query (for ideal DCG).
    """

    num_rel: np.ndarray
    entry_q: np.ndarray
    entry_docids: list[str]
    entry_label: np.ndarray
    ideal_q: np.ndarray
    ideal_label: np.ndarray
    ideal_rank: np.ndarray


def _judged(run: _Run, qrels: _Qrels, level: int) -> _Judged:
    n = len(run.qids)
    sel = np.full(len(qrels.qids), -1, dtype=np.int64)
    sel[np.array(list(map(qrels.index.__getitem__, run.qids)), dtype=np.int64)] = np.arange(n)
    entry_q = sel[qrels.entry_q]
    in_run = entry_q >= 0
    labels = qrels.labels
    num_rel = np.bincount(entry_q[in_run & (labels >= level)], minlength=n)
    positive = np.flatnonzero(in_run & (labels >= 1))
    ideal_q, ideal_label = _by_query_then_label_desc(entry_q[positive], labels[positive])
    docids = qrels.docids if len(positive) == len(labels) else [qrels.docids[i] for i in positive.tolist()]
    return _Judged(
        num_rel=num_rel,
        entry_q=entry_q[positive],
        entry_docids=docids,
        entry_label=labels[positive],
        ideal_q=ideal_q,
        ideal_label=ideal_label,
        ideal_rank=_rank_in_group(ideal_q),
    )


def _rank_in_group(q: np.ndarray) -> np.ndarray:
    """0-based position of each element within its run of equal values of *q* (runs contiguous)."""
    position = np.arange(len(q))
    if not len(q):
        return position
    is_first = np.ones(len(q), dtype=bool)
    is_first[1:] = q[1:] != q[:-1]
    return position - np.maximum.accumulate(np.where(is_first, position, 0))


def _by_query_then_label_desc(q: np.ndarray, label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, label) pairs sorted by query, then label descending."""
    if not len(q):
        return q, label
    top, span = int(label.max()), int(label.max()) - int(label.min()) + 1
    if span * (int(q.max()) + 1) < 2**62:
        # Both fit in one integer key: a plain sort of it beats an argsort or a lexsort. The qrels
        # are usually grouped by query already, and timsort ("stable") makes short work of runs.
        keys = np.sort(q * span + (top - label), kind="stable")
        return keys // span, top - keys % span
    order = np.lexsort((-label, q))
    return q[order], label[order]


def _gain(labels: np.ndarray, burges: bool) -> np.ndarray:
    positive = np.maximum(labels, 0).astype(np.float64)
    return np.exp2(positive) - 1.0 if burges else positive


def _ideal_dcg(judged: _Judged, n: int, cutoff: int | None, burges: bool) -> np.ndarray:
    keep = slice(None) if cutoff is None else judged.ideal_rank < cutoff
    weights = _gain(judged.ideal_label[keep], burges) / np.log2(judged.ideal_rank[keep] + 2.0)
    return np.bincount(judged.ideal_q[keep], weights=weights, minlength=n)


def _chunks(lengths: np.ndarray) -> list[np.ndarray]:
    """Query indices grouped by similar depth so each padded block stays near _CHUNK_CELLS cells."""
    order = np.argsort(lengths, kind="stable")
    sorted_len = np.maximum(lengths[order], 1)
    out: list[np.ndarray] = []
    start, n = 0, len(order)
    while start < n:
        span = sorted_len[start : start + _CHUNK_CELLS]
        cells = np.arange(1, len(span) + 1) * span
        take = max(1, int(np.searchsorted(cells, _CHUNK_CELLS, side="right")))
        out.append(order[start : start + take])
        start += take
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    measures: list[Measure]
    level: int
    on_duplicate: str


@dataclass(frozen=True, slots=True)
class _Hits:
    """The retrieved docs with a label >= 1: query index, 0-based rank, label; sorted by (query, rank)."""

    q: np.ndarray
    rank: np.ndarray
    label: np.ndarray


@dataclass(frozen=True, slots=True)
class _Block:
    """One chunk of queries padded to ``[rows, depth]``, with the bit layout of its sort keys.

    A sort key packs, from the top: the row (so one flat sort orders every row at once and
    ``np.searchsorted`` finds any row's cells), the high bits of a value (a doc-id hash, or a score
    turned into an order-preserving integer), and the column. A column field of all ones marks
    padding, which sorts after every real cell of its row.
    """

    qs: np.ndarray
    lengths: np.ndarray
    depth: int
    doc_index: np.ndarray
    valid: np.ndarray | None
    row_part: np.ndarray
    value_bits: int
    col_bits: int
    starts: np.ndarray
    span: tuple[int, int] | None = None

    @property
    def col_mask(self) -> np.uint64:
        return np.uint64((1 << self.col_bits) - 1)

    def cells(self, column: np.ndarray) -> np.ndarray:
        """*column* (one value per run row) laid out as ``[rows, depth]``; a view when rows are contiguous."""
        if self.span is not None:
            return column[self.span[0] : self.span[1]].reshape(len(self.qs), self.depth)
        return column[self.doc_index]

    def is_descending(self, scores: np.ndarray) -> bool:
        """Whether every row's scores already descend (runs are usually written in rank order)."""
        if self.valid is None:
            # Compare the flat array (contiguous, so fast) and ignore the pairs that span two rows.
            flat = scores.ravel()
            descending = flat[1:] <= flat[:-1]
            descending[self.depth - 1 :: self.depth] = True
            return bool(descending.all())
        return bool(((scores[:, 1:] <= scores[:, :-1]) | ~self.valid[:, 1:]).all())

    def value_part(self, values: np.ndarray, bits_in: int) -> np.ndarray:
        """The top ``value_bits`` of *values* (which use *bits_in* bits), shifted above the column."""
        if bits_in > self.value_bits:
            part = values.astype(np.uint64, copy=False) >> np.uint64(bits_in - self.value_bits)
        else:
            part = values.astype(np.uint64)
        part <<= np.uint64(self.col_bits)
        return part

    def sorted_keys(self, values: np.ndarray, bits_in: int, presorted: bool = False) -> np.ndarray:
        """Keys of ``[rows, depth]`` *values*, sorted, flattened; *presorted*: rows already ascend."""
        keys = self.value_part(values, bits_in)
        keys |= np.arange(self.depth, dtype=np.uint64)
        keys |= self.row_part[:, None]
        if self.valid is not None:
            pad = np.uint64((1 << (self.value_bits + self.col_bits)) - 1)
            np.copyto(keys, self.row_part[:, None] | pad, where=~self.valid)
        if not presorted:
            keys.sort(axis=1)
        return keys.ravel()

    def same_value_pairs(self, flat: np.ndarray) -> np.ndarray:
        """Flat positions i where cells i and i+1 are real, in one row, and share their value bits."""
        high = flat >> np.uint64(self.col_bits)
        same = high[1:] == high[:-1]
        if self.valid is not None:
            real = (flat & self.col_mask) != self.col_mask
            same &= real[1:]
        return np.flatnonzero(same)

    def needles(self, rows: np.ndarray, values: np.ndarray, bits_in: int) -> np.ndarray:
        """Keys for (row, value) with a zero column: they sort just before that value's cells."""
        return self.value_part(values, bits_in) | self.row_part[rows]

    @staticmethod
    def search(keys: np.ndarray, needles: np.ndarray) -> np.ndarray:
        """Leftmost position in the sorted flat *keys* at or after each needle."""
        return np.searchsorted(keys, needles)

    def flat(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Run row index of the cells (rows, cols), which must be real cells."""
        return self.starts[rows] + cols


def _block(run: _Run, qs: np.ndarray, lengths: np.ndarray) -> _Block:
    ls = lengths[qs]
    depth = max(int(ls.max()), 1)
    col_bits = depth.bit_length()
    row_bits = (len(qs) - 1).bit_length()
    value_bits = 64 - row_bits - col_bits
    starts = run.offsets[qs]
    full = bool((ls == depth).all())
    span = None
    if full and len(qs) > 0 and bool((np.diff(qs) == 1).all()):
        span = (int(starts[0]), int(starts[0]) + len(qs) * depth)
        doc_index = np.arange(span[0], span[1]).reshape(len(qs), depth)
    else:
        doc_index = np.minimum(starts[:, None] + np.arange(depth), max(len(run.scores) - 1, 0))
    return _Block(
        qs=qs,
        lengths=ls,
        depth=depth,
        doc_index=doc_index,
        valid=None if full else np.arange(depth) < ls[:, None],
        row_part=np.arange(len(qs), dtype=np.uint64) << np.uint64(value_bits + col_bits),
        value_bits=value_bits,
        col_bits=col_bits,
        starts=starts,
        span=span,
    )


def _score_bits(scores: np.ndarray) -> np.ndarray:
    """32-bit scores as unsigned integers whose ascending order is the scores' descending order."""
    bits = scores + np.float32(0.0)  # turns -0.0 into 0.0: equal scores, equal keys
    keys = bits.view(np.uint32)
    flip = ~keys
    flip >>= np.uint32(31)
    flip *= np.uint32(0x7FFF_FFFF)
    flip ^= keys
    return flip


def _tie_ranks(
    block: _Block,
    ranked_values: np.ndarray,
    ranked_cols: np.ndarray | None,
    row_ids: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of the cells whose scores tie, with ties ordered by doc id descending (trec_eval).

    *ranked_values* holds, for each (row, rank) position of the block (flattened), the score key
    of the cell ranked there; *ranked_cols* its column (None: the rank is the column, rows being
    in score order already). Only cells in runs of equal scores are touched: the ranks a run
    occupies are dealt out again by doc id. *row_ids(rows)* gives those rows' doc ids
    (``[len(rows), depth]``), which are ordered row by row (many small sorts beat one big one).
    Returns the tied cells' keys (``row * depth + col``, sorted) and their ranks.
    """
    depth = block.depth
    equal = ranked_values[1:] == ranked_values[:-1]
    equal[depth - 1 :: depth] = False  # never across two rows
    if block.valid is not None:
        equal &= block.valid.ravel()[1:]  # the second cell is real (so the first one is too)
    if not equal.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    tied = np.zeros(len(ranked_values), dtype=bool)
    tied[:-1] |= equal
    tied[1:] |= equal
    cells = np.flatnonzero(tied)
    first = np.ones(len(cells), dtype=bool)
    first[1:] = ~equal[cells[1:] - 1]
    group = np.cumsum(first) - 1
    group_start = np.flatnonzero(first)
    rows = cells // depth
    cols = cells % depth if ranked_cols is None else ranked_cols[cells].astype(np.int64)
    tied_rows, row_of_cell = np.unique(rows, return_inverse=True)
    by_id = np.argsort(row_ids(tied_rows), axis=1)
    id_rank = np.empty_like(by_id)
    id_rank[np.arange(len(tied_rows))[:, None], by_id] = np.arange(depth)
    # Within a group the largest doc id comes first: sort by (group, descending id rank).
    order = np.argsort(group * depth + (depth - 1 - id_rank[row_of_cell.ravel(), cols]))
    new_rank = cells[group_start[group[order]] + (np.arange(len(cells)) - group_start[group[order]])] % depth
    keys = rows[order] * depth + cols[order]
    by_key = np.argsort(keys)
    return keys[by_key], new_rank[by_key]


def _apply_tie_ranks(
    ranks: np.ndarray, rows: np.ndarray, cols: np.ndarray, depth: int, tied: tuple[np.ndarray, np.ndarray]
) -> None:
    """Overwrite, in place, the ranks of the cells (rows, cols) that are among the *tied* cells."""
    keys, tie_ranks = tied
    if not len(keys) or not len(rows):
        return
    wanted = rows * depth + cols
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    match = keys[pos] == wanted
    ranks[match] = tie_ranks[pos[match]]


def _duplicates(block: _Block, hash_keys: np.ndarray, run: _Run, on_duplicate: str) -> list[int]:
    pairs = block.same_value_pairs(hash_keys)
    if not len(pairs):
        return []
    docs = run.docs
    assert docs is not None
    width = block.depth
    row = pairs // width
    a = block.doc_index[row, (hash_keys[pairs] & block.col_mask).astype(np.int64)]
    b = block.doc_index[row, (hash_keys[pairs + 1] & block.col_mask).astype(np.int64)]
    real = docs.ids[a] == docs.ids[b]
    if not np.any(real):
        return []
    if on_duplicate == "error":
        first = int(np.flatnonzero(real)[0])
        raise MetricError(_duplicate_message(run.qids[int(block.qs[row[first]])], docs.text(int(a[first]))))
    groups: dict[tuple[int, str], list[int]] = {}
    for r, i, j in zip(row[real].tolist(), a[real].tolist(), b[real].tolist()):
        members = groups.setdefault((r, docs.text(i)), [])
        members.extend(k for k in (i, j) if k not in members)
    drop: list[int] = []
    for members in groups.values():
        best = max(members, key=lambda k: (run.scores[k], -k))
        drop.extend(k for k in members if k != best)
    return drop


def _entries_of(qs: np.ndarray, entry_order: np.ndarray, entry_q_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The qrels entries of the queries *qs*, and the row (position in *qs*) of each."""
    lo = np.searchsorted(entry_q_sorted, qs, side="left")
    counts = np.searchsorted(entry_q_sorted, qs, side="right") - lo
    rows = np.repeat(np.arange(len(qs)), counts)
    firsts = np.cumsum(counts) - counts
    return entry_order[np.repeat(lo - firsts, counts) + np.arange(int(counts.sum()))], rows


def _by_query(entry_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(entry_q) < 2 or bool((entry_q[1:] >= entry_q[:-1]).all()):  # qrels in the run's query order
        return np.arange(len(entry_q)), entry_q
    order = np.argsort(entry_q, kind="stable")
    return order, entry_q[order]


def _score_ranks(block: _Block, score_keys: np.ndarray, rows: np.ndarray, own_bits: np.ndarray) -> np.ndarray:
    """0-based ranks of cells given by row and score bits, in rows where no two scores tie."""
    return block.search(score_keys, block.needles(rows, own_bits, 32)) - rows * block.depth


def _rank_dict_hits(run: _Run, judged: _Judged) -> _Hits | None:
    """Ranks for a dict run, found from the qrels side by dict lookups; None to go columnar.

    Each labelled doc's score comes from its query's dict; its rank is where that score falls in
    the query's sorted scores. A query with tied scores needs its doc ids: a few such queries
    are ranked exactly here from their dicts; when many are, None sends the whole run down the
    columnar path, which handles ties in bulk.
    """
    assert run.dicts is not None
    dicts = run.dicts
    owners = map(dicts.__getitem__, judged.entry_q.tolist())
    getter: Callable[[Any, Any, Any], Any] = dict.get if set(map(type, dicts)) <= {dict} else _get
    found = map(getter, owners, judged.entry_docids, repeat(math.nan))
    hit_scores = np.fromiter(found, dtype=np.float64, count=len(judged.entry_docids))
    present = np.flatnonzero(~np.isnan(hit_scores))
    hit_q, hit_label = judged.entry_q[present], judged.entry_label[present]
    hit_bits = _score_bits(_as_trec_scores(hit_scores[present]))
    order, q_sorted = _by_query(hit_q)
    lengths = np.diff(run.offsets)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for qs in _chunks(lengths):
        block = _block(run, qs, lengths)
        scores = _as_trec_scores(block.cells(run.scores))
        descending = block.is_descending(scores)
        score_keys = block.sorted_keys(_score_bits(scores), 32, presorted=descending)
        tied_rows = np.unique(block.same_value_pairs(score_keys) // block.depth)
        if len(tied_rows) > max(8, len(qs) // 16):
            return None
        take, rows = _entries_of(qs, order, q_sorted)
        ranks = _score_ranks(block, score_keys, rows, hit_bits[take])
        if len(tied_rows):
            # A few queries with tied scores: their doc ids come from their dicts.
            keys_of = {row: list(dicts[int(qs[row])]) for row in tied_rows.tolist()}

            def ids_of(
                tie_rows: np.ndarray, keys_of: dict[int, list[Any]] = keys_of, depth: int = block.depth
            ) -> np.ndarray:
                out = np.full((len(tie_rows), depth), "", dtype=object)
                for i, row in enumerate(tie_rows.tolist()):
                    out[i, : len(keys_of[row])] = keys_of[row]
                return out

            col_bits = np.uint64(block.col_bits)
            tied = _tie_ranks(block, score_keys >> col_bits, score_keys & block.col_mask, ids_of)
            in_tied = np.flatnonzero(np.isin(rows, tied_rows))
            hit_docs = [judged.entry_docids[int(present[take[e]])] for e in in_tied.tolist()]
            hit_cols = np.array([keys_of[int(rows[e])].index(d) for e, d in zip(in_tied.tolist(), hit_docs)])
            sub = ranks[in_tied]
            _apply_tie_ranks(sub, rows[in_tied], hit_cols.astype(np.int64), block.depth, tied)
            ranks[in_tied] = sub
        parts.append((qs[rows], ranks, hit_label[take]))
    return _collect(parts)


def _get(mapping: Mapping[Any, Any], key: Any, default: Any) -> Any:
    return mapping.get(key, default)


def _collect(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> _Hits:
    """All chunks' hits (query, rank, label), sorted by query then rank."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return _Hits(empty, empty, empty)
    q, rank, label = (np.concatenate(p).astype(np.int64, copy=False) for p in zip(*parts))
    if not len(q):
        return _Hits(q, rank, label)
    low, span = int(label.min()), int(label.max()) - int(label.min()) + 1
    depth = int(rank.max()) + 1
    if (int(q.max()) + 1) * depth * span < 2**62:
        # All three fit in one integer key: a plain sort of it beats an argsort plus gathers, and
        # timsort ("stable") is quick on chunks that already come in query order.
        keys = np.sort((q * depth + rank) * span + (label - low), kind="stable")
        position, label = np.divmod(keys, span)
        q, rank = np.divmod(position, depth)
        return _Hits(q, rank, label + low)
    order = np.lexsort((rank, q))
    return _Hits(q[order], rank[order], label[order])


def _rank_column_hits(run: _Run, judged: _Judged, plan: _Plan) -> _Hits:
    """Rank every query's docs (score desc, doc id desc) and return where the labelled docs landed.

    Per chunk of queries of similar depth: doc-id hashes are packed into sort keys of a
    ``[rows, depth]`` block and sorted per row, which reveals duplicates and locates each qrels
    doc by binary search. Ranks: when a block's rows are already in score order (runs usually
    are), a doc's column is its rank; otherwise scores are packed and sorted the same way. Rows
    with tied scores are ranked again with doc ids. Only the labelled docs (a few per query)
    leave the chunk.
    """
    docs = run.docs
    assert docs is not None
    entry_doc = docs.encode(judged.entry_docids)
    entry_hash = docs.hash(entry_doc)
    lengths = np.diff(run.offsets)
    order, q_sorted = _by_query(judged.entry_q)

    def chunk(qs: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, list[int]]:
        block = _block(run, qs, lengths)
        # Hashing block by block keeps the hashes in cache instead of a run-sized array.
        hashes = docs.hash(block.cells(docs.ids).ravel()).reshape(len(qs), block.depth)
        hash_keys = block.sorted_keys(hashes, 63)
        found_dups = _duplicates(block, hash_keys, run, plan.on_duplicate)
        if found_dups:
            return None, found_dups
        take, rows = _entries_of(qs, order, q_sorted)
        needles = block.needles(rows, entry_hash[take], 63)
        found = hash_keys[np.minimum(block.search(hash_keys, needles), len(hash_keys) - 1)]
        cols = (found & block.col_mask).astype(np.int64)
        shift = np.uint64(block.col_bits)
        hit = ((found >> shift) == (needles >> shift)) & (cols < block.depth)
        cols = np.where(hit, cols, 0)
        exact = hit & (docs.ids[block.flat(rows, cols)] == entry_doc[take])
        for e in np.flatnonzero(hit & ~exact).tolist():
            # Two doc ids of one query share their hash bits: settle it by comparing the strings.
            r = int(rows[e])
            match = np.flatnonzero(docs.ids[block.doc_index[r, : block.lengths[r]]] == entry_doc[take][e])
            if len(match):
                exact[e], cols[e] = True, int(match[0])
        rows, cols, labels = rows[exact], cols[exact], judged.entry_label[take][exact]
        scores = _as_trec_scores(block.cells(run.scores))

        def ids_of(tie_rows: np.ndarray) -> np.ndarray:
            return docs.ids[block.doc_index[tie_rows]]

        if block.is_descending(scores):
            ranks = cols.copy()  # rows already in rank order: a doc's column is its rank
            tied = _tie_ranks(block, scores.ravel(), None, ids_of)
        else:
            score_bits = _score_bits(scores)
            score_keys = block.sorted_keys(score_bits, 32)
            ranks = _score_ranks(block, score_keys, rows, score_bits[rows, cols])
            col_bits = np.uint64(block.col_bits)
            tied = _tie_ranks(block, score_keys >> col_bits, score_keys & block.col_mask, ids_of)
        _apply_tie_ranks(ranks, rows, cols, block.depth, tied)
        return (qs[rows], ranks, labels), []

    results = [chunk(qs) for qs in _chunks(lengths)]
    drop = [row for _, dups in results for row in dups]
    if drop:
        raise _DuplicatesFound(drop)
    return _collect([part for part, _ in results if part is not None])


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(len(num), dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _metrics(hits: _Hits, lengths: np.ndarray, judged: _Judged, plan: _Plan) -> dict[Measure, np.ndarray]:
    """Every requested metric per query, from the ranks of the labelled docs alone."""
    n = len(lengths)
    num_rel = judged.num_rel.astype(np.float64)
    relevant = hits.label >= plan.level
    rq, rr = hits.q[relevant], hits.rank[relevant]
    in_group = _rank_in_group(rq)
    seen_so_far = (in_group + 1).astype(np.float64)
    is_first = in_group == 0
    first_rank = np.full(n, np.inf)
    first_rank[rq[is_first]] = rr[is_first]

    def found(k: int | None) -> np.ndarray:
        return np.bincount(rq if k is None else rq[rr < k], minlength=n).astype(np.float64)

    def precision(k: int | None) -> np.ndarray:
        return _safe_div(found(None), lengths.astype(np.float64)) if k is None else found(k) / k

    out: dict[Measure, np.ndarray] = {}
    for m in plan.measures:
        k = m.cutoff
        if m.name == "P":
            out[m] = precision(k)
        elif m.name == "recall":
            out[m] = _safe_div(found(k), num_rel)
        elif m.name == "f1":
            p, r = precision(k), _safe_div(found(k), num_rel)
            out[m] = _safe_div(2.0 * p * r, p + r)
        elif m.name == "hit_rate":
            out[m] = (found(k) > 0).astype(np.float64)
        elif m.name == "mrr":
            limit = np.inf if k is None else k
            out[m] = np.where(first_rank < limit, 1.0 / (first_rank + 1.0), 0.0)
        elif m.name == "map":
            keep = slice(None) if k is None else rr < k
            precision_at = seen_so_far[keep] / (rr[keep] + 1.0)
            out[m] = _safe_div(np.bincount(rq[keep], weights=precision_at, minlength=n), num_rel)
        else:
            burges = m.name == "ndcg_burges"
            keep = slice(None) if k is None else hits.rank < k
            dcg_terms = _gain(hits.label[keep], burges) / np.log2(hits.rank[keep] + 2.0)
            dcg = np.bincount(hits.q[keep], weights=dcg_terms, minlength=n)
            out[m] = _safe_div(dcg, _ideal_dcg(judged, n, k, burges))
    return out


def _kernel(run: _Run, judged: _Judged, plan: _Plan) -> dict[Measure, np.ndarray]:
    if len(run.scores) == 0:  # every evaluated query retrieved nothing
        return _metrics(_collect([]), np.diff(run.offsets), judged, plan)
    hits = _rank_dict_hits(run, judged) if run.docs is None else None
    if hits is None:
        run = run.materialized()
        try:
            hits = _rank_column_hits(run, judged, plan)
        except _DuplicatesFound as found:
            run = run.without_rows(found.drop)
            hits = _rank_column_hits(run, judged, plan)
    return _metrics(hits, np.diff(run.offsets), judged, plan)


# ---------------------------------------------------------------------------------------------
# Public entry points


def _finish(
    run: _Run,
    qrels: _Qrels,
    keys: list[tuple[str, Measure]],
    plan: _Plan,
    per_query: bool,
    judged_only: bool,
    n_run_queries: int,
) -> dict[str, float] | dict[str, dict[str, float]]:
    if judged_only and not run.qids:
        example_run = "no query" if n_run_queries == 0 else f"{n_run_queries} queries"
        raise MetricError(
            f"no query of the run ({example_run}) is in the qrels ({len(qrels.qids)} queries, e.g. "
            f"{qrels.qids[0]!r}); queries are paired by id, compared as strings"
        )
    unique = list(dict.fromkeys(m for _, m in keys))
    plan = _Plan(unique, plan.level, plan.on_duplicate)
    values = _kernel(run, _judged(run, qrels, plan.level), plan)
    qids = list(run.qids)
    if not judged_only:
        present = set(qids)
        missing = [q for q in qrels.qids if q not in present]
        if missing:
            qids += missing
            values = {m: np.concatenate([v, np.zeros(len(missing))]) for m, v in values.items()}
    if per_query:
        columns = [(key, values[m].tolist()) for key, m in keys]
        return {qid: {key: col[i] for key, col in columns} for i, qid in enumerate(qids)}
    return {key: float(values[m].mean()) if len(qids) else 0.0 for key, m in keys}


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[False] = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: Literal[True],
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, dict[str, float]]: ...


@overload
def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]: ...


def evaluate(
    run: Mapping[Any, Mapping[Any, Any]] | Run | Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    per_query: bool = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]:
    """Score a run against qrels with trec_eval semantics (see the module docstring for the rules).

    *run* is ``{qid: {docid: score}}``, a :class:`Run`, or a pandas DataFrame / pyarrow Table with
    ``qid``, ``docid`` and ``score`` columns; *qrels* is ``{qid: {docid: label}}`` (integer labels,
    graded allowed) or a table with ``qid``, ``docid`` and ``relevance`` columns. Numpy integers and
    floats are accepted anywhere. *measures* are names such as ``"ndcg@10"``, ``"recall@5"``,
    ``"mrr@10"``, ``"map"`` (see :data:`~ragaudit.metrics.MEASURE_NAMES`).

    Returns ``{measure: mean}``, or ``{qid: {measure: value}}`` with ``per_query=True``; keys are the
    measure names as given. ``judged_only=True`` averages over queries in both run and qrels
    (trec_eval and pytrec_eval); ``False`` also counts qrels queries missing from the run as 0.
    Raises :class:`~ragaudit.errors.MetricError` for an unknown metric, a bad cut-off, a NaN score,
    an empty run or qrels, no query in common (with ``judged_only=True``), or a duplicate doc in a
    query (unless ``on_duplicate="max"``).
    """
    _check_on_duplicate(on_duplicate)
    keys = _parse_measures(measures)
    plan = _Plan([m for _, m in keys], _check_level(relevance_level), on_duplicate)
    if isinstance(run, Run):
        return evaluate_columns(
            run.qids,
            run.docids,
            run.scores,
            qrels,
            measures,
            per_query=per_query,
            relevance_level=relevance_level,
            judged_only=judged_only,
            on_duplicate=on_duplicate,
        )
    if _is_table(run):
        return evaluate_columns(
            _table_column(run, _QID_NAMES, "query id"),
            _table_column(run, _DOCID_NAMES, "doc id"),
            _table_column(run, _SCORE_NAMES, "score"),
            qrels,
            measures,
            per_query=per_query,
            relevance_level=relevance_level,
            judged_only=judged_only,
            on_duplicate=on_duplicate,
        )
    if not isinstance(run, Mapping):
        raise MetricError(
            f"run must be a mapping {{qid: {{docid: score}}}}, a Run or a table, got {type(run).__name__}"
        )
    prepared_qrels = _prepare_qrels(qrels)
    prepared_run, n_run_queries = _prepare_dict_run(run, prepared_qrels, on_duplicate)
    return _finish(prepared_run, prepared_qrels, keys, plan, per_query, judged_only, n_run_queries)


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: Literal[False] = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float]: ...


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: Literal[True],
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, dict[str, float]]: ...


@overload
def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: bool,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]: ...


def evaluate_columns(
    qids: Any,
    docids: Any,
    scores: Any,
    qrels: Qrels | Any,
    measures: MeasureSpec | Iterable[MeasureSpec],
    *,
    per_query: bool = False,
    relevance_level: int = 1,
    judged_only: bool = True,
    on_duplicate: OnDuplicate = "error",
) -> dict[str, float] | dict[str, dict[str, float]]:
    """:func:`evaluate` for a run given as three aligned columns: query id, doc id and score per row.

    The columns may be numpy arrays, lists, pandas Series or pyarrow arrays. This is the fast path
    for large runs: with numpy string arrays (dtype ``U``) it never builds Python objects per row.
    Integer ids are compared as their decimal strings. Rows may come in any order; a query's rows
    are found by id, whether contiguous or not. Same rules, options and errors as :func:`evaluate`.
    """
    _check_on_duplicate(on_duplicate)
    keys = _parse_measures(measures)
    plan = _Plan([m for _, m in keys], _check_level(relevance_level), on_duplicate)
    prepared_qrels = _prepare_qrels(qrels)
    prepared_run, n_run_queries = _prepare_columns(qids, docids, scores, prepared_qrels)
    return _finish(prepared_run, prepared_qrels, keys, plan, per_query, judged_only, n_run_queries)


def score_ranking(
    ranked_ids: Sequence[str],
    qrels: Mapping[str, int],
    measures: MeasureSpec | Iterable[MeasureSpec],
    relevance_level: int = 1,
) -> dict[str, float]:
    """Metrics for one ranked list that is already in order (first id = rank 1); cheap, pure Python.

    Meant for one RAG turn (a handful of retrieved documents) whose ground truth is known: *qrels*
    maps doc id -> label (``{id: 1}`` for binary relevance). A repeated id keeps its first rank.
    Same definitions as :func:`evaluate`; an empty ranking scores 0 on every metric. Raises
    :class:`~ragaudit.errors.MetricError` for an unknown metric or a non-integer label.
    """
    keys = _parse_measures(measures)
    level = _check_level(relevance_level)
    judged = {str(doc): _as_label(label, "<turn>", str(doc)) for doc, label in qrels.items()}
    seen: set[str] = set()
    ranked: list[int] = []
    for doc in ranked_ids:
        key = doc if type(doc) is str else str(doc)
        if key not in seen:
            seen.add(key)
            ranked.append(judged.get(key, 0))
    ideal = sorted((label for label in judged.values() if label >= 1), reverse=True)
    num_rel = sum(1 for label in judged.values() if label >= level)
    return {key: _score_one(m, ranked, ideal, num_rel, level) for key, m in keys}


def _score_one(m: Measure, ranked: list[int], ideal: list[int], num_rel: int, level: int) -> float:
    k = m.cutoff
    top = ranked if k is None else ranked[:k]
    hits = sum(1 for label in top if label >= level)
    if m.name == "P":
        denominator = len(ranked) if k is None else k
        return hits / denominator if denominator else 0.0
    if m.name == "recall":
        return hits / num_rel if num_rel else 0.0
    if m.name == "f1":
        p = hits / (len(ranked) if k is None else k) if (ranked or k) else 0.0
        r = hits / num_rel if num_rel else 0.0
        return 2.0 * p * r / (p + r) if p + r > 0 else 0.0
    if m.name == "hit_rate":
        return 1.0 if hits else 0.0
    if m.name == "mrr":
        for i, label in enumerate(top):
            if label >= level:
                return 1.0 / (i + 1)
        return 0.0
    if m.name == "map":
        total, found = 0.0, 0
        for i, label in enumerate(top):
            if label >= level:
                found += 1
                total += found / (i + 1)
        return total / num_rel if num_rel else 0.0
    burges = m.name == "ndcg_burges"

    def dcg(labels: list[int]) -> float:
        return sum(
            ((2.0**label - 1.0) if burges else float(label)) / math.log2(i + 2)
            for i, label in enumerate(labels)
            if label > 0
        )

    best = dcg(ideal if k is None else ideal[:k])
    return dcg(top) / best if best > 0 else 0.0
