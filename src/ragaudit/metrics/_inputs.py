"""Preparing inputs: qrels and runs of every form, validated, as query-grouped arrays.

Runs come as nested dicts ``{qid: {docid: score}}``, rank-only nested lists ``{qid: [docid, ...]}``
(best first), three columns (numpy, lists, pandas, pyarrow; scores optional) or tables. Every form
ends as a `PreparedRun`: the evaluated queries (those in the qrels), their rows grouped by
query, one score per row (or none: rank-only), and the doc ids (a numpy array, or the caller's
own dicts, which are never copied row by row).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from ..errors import MetricError
from . import _fast
from ._docids import (
    WEIGHTS,
    DocIds,
    SeriesDocIds,
    docids_from_array,
    hashed_docids,
    id_codes,
    plain_polars_strings,
)
from ._groups import QidGroups, fixed_groups, row_groups, string_groups
from ._tables import (
    DOCID_NAMES,
    LABEL_NAMES,
    QID_NAMES,
    QidRuns,
    array_runs,
    arrow_strings,
    ascii_bytes,
    changes,
    coded_ids,
    encoded_runs,
    fixed_strings,
    fixed_width_codes,
    is_table,
    joined_runs,
    object_runs,
    object_values,
    placed,
    python_strings,
    qid_text,
    same_rows,
    spread_from_start,
    table_column,
    take,
    to_numpy,
)

__all__ = [
    "PreparedQrels",
    "PreparedRun",
    "as_label",
    "check_level",
    "check_on_duplicate",
    "columns_of_rows",
    "duplicate_message",
    "prepare_columns",
    "prepare_dict_run",
    "prepare_qrels",
]


def check_on_duplicate(on_duplicate: str) -> None:
    if on_duplicate not in ("error", "max"):
        raise MetricError(f"on_duplicate must be 'error' or 'max', got {on_duplicate!r}")


def check_level(relevance_level: Any) -> int:
    if isinstance(relevance_level, (bool, np.bool_)) or not isinstance(relevance_level, (int, np.integer)):
        raise MetricError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    level = int(relevance_level)
    if level < 1:
        raise MetricError(f"relevance_level must be >= 1 (labels <= 0 are never relevant), got {relevance_level!r}")
    return level


def duplicate_message(qid: str, docid: str) -> str:
    return (
        f"query {qid!r}: doc id {docid!r} appears more than once in the run (trec_eval refuses "
        "duplicates); pass on_duplicate='max' to keep its highest score"
    )


def as_label(value: object, qid: str, docid: str) -> int:
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
        as_label(values[bad], qids[bad], docids[bad])
    for i, value in enumerate(values):
        as_label(value, qids[i], docids[i])
    return np.asarray([int(v) for v in values], dtype=np.int64)


@dataclass(frozen=True, slots=True)
class PreparedQrels:
    qids: list[str]
    index: dict[str, int]
    entry_q: np.ndarray
    docids: list[str]
    labels: np.ndarray


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """The evaluated queries' rows, grouped by query (rows of query i: ``offsets[i]:offsets[i+1]``).

    ``scores`` holds one score per row, or is None for a rank-only run, whose rows come best first
    within each query. ``docs`` holds the doc ids of a run given as columns. A run given as dicts
    keeps the caller's dicts instead (``docs=None``): ``{docid: score}``, or ``{docid: 0-based
    position}`` for a rank-only run; doc ids are then read from a dict only for the few queries
    whose scores tie.
    """

    qids: list[str]
    offsets: np.ndarray
    scores: np.ndarray | None
    docs: DocIds | None
    dicts: list[Mapping[Any, Any]] | None = None

    def without_rows(self, drop: list[int]) -> PreparedRun:
        """The (column) run without the rows *drop*, query order and row order kept."""
        assert self.docs is not None
        keep = np.ones(len(self.docs), dtype=bool)
        keep[drop] = False
        group = np.repeat(np.arange(len(self.qids)), np.diff(self.offsets))
        counts = np.bincount(group[keep], minlength=len(self.qids))
        offsets = np.zeros(len(self.qids) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        scores = None if self.scores is None else self.scores[keep]
        return PreparedRun(self.qids, offsets, scores, self.docs.take(np.flatnonzero(keep)))

    def qid_of_row(self, row: int) -> str:
        return self.qids[int(np.searchsorted(self.offsets, row, side="right")) - 1]


def prepare_qrels(qrels: Any) -> PreparedQrels:
    if is_table(qrels):
        q_col = to_numpy(table_column(qrels, QID_NAMES, "query id"), "qrels query ids")
        d_col = to_numpy(table_column(qrels, DOCID_NAMES, "doc id"), "qrels doc ids")
        l_col = to_numpy(table_column(qrels, LABEL_NAMES, "relevance"), "qrels labels")
        nested: dict[str, dict[str, Any]] = {}
        for q, d, lab in zip(q_col.tolist(), d_col.tolist(), l_col.tolist()):
            nested.setdefault(qid_text(q), {})[qid_text(d)] = lab
        qrels = nested
    if not isinstance(qrels, Mapping):
        raise MetricError(f"qrels must be a mapping {{qid: {{docid: label}}}} or a table, got {type(qrels).__name__}")
    raw_qids = list(qrels)
    docs_per_query: list[Mapping[Any, Any]] = list(qrels.values())
    if not set(map(type, docs_per_query)) <= {dict}:
        for raw_qid, docs in zip(raw_qids, docs_per_query):
            if not isinstance(docs, Mapping):
                raise MetricError(f"qrels for query {raw_qid!r} must be a mapping {{docid: label}}, got {docs!r}")
    # An array, not a list: np.repeat below would convert a list item by item.
    counts = np.fromiter(map(len, docs_per_query), dtype=np.int64, count=len(docs_per_query))
    if not counts.all():
        kept = np.flatnonzero(counts)
        raw_qids = [raw_qids[i] for i in kept.tolist()]
        docs_per_query = [docs_per_query[i] for i in kept.tolist()]
        counts = counts[kept]
    if not raw_qids:
        raise MetricError("the qrels are empty: no query has a judged document")
    qids = _qrels_texts(raw_qids)
    index = dict(zip(qids, range(len(qids))))
    if len(index) != len(qids):
        raise MetricError(f"query id {_first_repeat(qids)!r} appears twice in the qrels (ids are compared as strings)")
    docids = _qrels_texts(list(chain.from_iterable(docs_per_query)))
    values = list(chain.from_iterable(_all_values(docs_per_query)))
    entry_q = np.repeat(np.arange(len(qids), dtype=np.int64), counts)
    labels = _labels_array(values, _LazyQids(qids, entry_q), docids)
    return PreparedQrels(qids, index, entry_q, docids, labels)


def _qrels_texts(values: list[Any]) -> list[str]:
    """Ids as strings: *values* itself when every one is a str, which one ``str.join`` checks in C
    (a Python-level check, even ``set(map(type, ...))``, costs twice as much on the qrels' ids)."""
    try:
        "".join(values)
    except TypeError:
        return [qid_text(v) for v in values]
    return values


def _as_texts(values: list[Any]) -> list[str]:
    return values if set(map(type, values)) <= {str} else [qid_text(v) for v in values]


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


def _check_scores(run: PreparedRun) -> None:
    if run.scores is None:
        return
    # A sum is NaN when a score is (or when +inf and -inf both are: then looked at row by row) --
    # one pass, no temporary a row.
    with np.errstate(invalid="ignore"):  # inf - inf
        total = float(np.add.reduce(run.scores))
    if not math.isnan(total):
        return
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
        key = docid if isinstance(docid, str) else qid_text(docid)
        if key in out:
            if on_duplicate == "error":
                raise MetricError(duplicate_message(qid, key))
            if score <= out[key]:
                continue
        out[key] = score
    return out


def prepare_dict_run(run: Mapping[Any, Any], qrels: PreparedQrels, on_duplicate: str) -> tuple[PreparedRun, int]:
    """A run of nested dicts ``{qid: {docid: score}}``, or rank-only ``{qid: [docid, ...]}``."""
    if not run:
        raise MetricError("the run is empty: no query")
    raw_qids = list(run)
    all_qids = _as_texts(raw_qids)
    # Keys of one mapping are distinct; only ids converted to strings can collide ("1" and 1).
    if all_qids is not raw_qids and len(set(all_qids)) != len(all_qids):
        raise MetricError(
            f"query id {_first_repeat(all_qids)!r} appears twice in the run (ids are compared as strings)"
        )
    all_docs: list[Any] = list(run.values())
    kinds = set(map(type, all_docs))
    ranked = bool(kinds) and kinds <= {list, tuple}
    if not ranked and not kinds <= {dict}:
        ranked = all(isinstance(d, (list, tuple)) for d in all_docs)
        if not ranked:
            for raw_qid, docs in zip(all_qids, all_docs):
                if not isinstance(docs, Mapping):
                    raise MetricError(
                        f"run entry for query {raw_qid!r} must be a mapping {{docid: score}} (or, for a rank-only "
                        f"run, every entry a list of doc ids, best first), got {docs!r}"
                    )
    wanted = list(map(qrels.index.__contains__, all_qids))
    if all(wanted):
        qids, dicts = all_qids, all_docs
    else:
        qids = [q for q, keep in zip(all_qids, wanted) if keep]
        dicts = [d for d, keep in zip(all_docs, wanted) if keep]
    if ranked:
        dicts = [_positions(q, docs, on_duplicate) for q, docs in zip(qids, dicts)]
    else:
        # Doc ids should be strings; a query whose first id is not one is converted (cheap to check).
        first_types = set(map(type, map(next, map(iter, filter(None, dicts)))))
        if not first_types <= {str}:
            dicts = [
                d if not d or type(next(iter(d))) is str else _string_keys(q, d, on_duplicate)
                for q, d in zip(qids, dicts)
            ]
    lengths = np.fromiter(map(len, dicts), dtype=np.int64, count=len(dicts))
    offsets = np.zeros(len(dicts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if ranked:
        return PreparedRun(qids, offsets, None, None, dicts), len(run)
    n = int(offsets[-1])
    native = _fast.speedups
    # The C speedups read the scores with each one fetched ahead: a run built from spread rows has
    # its score objects spread through the heap, a cache miss an item read dict by dict.
    read = None if native is None else native.dict_scores(dicts, n)
    try:
        scores = (
            np.frombuffer(read, dtype=np.float64) if read is not None
            else np.fromiter(chain.from_iterable(_all_values(dicts)), dtype=np.float64, count=n)
        )
    except (TypeError, ValueError):
        for qid, docs in zip(qids, dicts):
            for docid, score in docs.items():
                if isinstance(score, (bool, np.bool_)) or not isinstance(score, (int, float, np.number)):
                    raise MetricError(
                        f"score for query {qid!r}, doc {docid!r} must be a number, got {score!r}"
                    ) from None
        raise MetricError("run scores must be numbers") from None
    prepared = PreparedRun(qids, offsets, scores, None, dicts)
    _check_scores(prepared)
    return prepared, len(run)


def _positions(qid: str, ranked: Sequence[Any], on_duplicate: str) -> dict[str, int]:
    """A rank-only query's doc ids -> 0-based rank (the first occurrence of a repeated id counts)."""
    if not set(map(type, ranked)) <= {str}:
        for item in ranked:
            if isinstance(item, bool) or not isinstance(item, (str, bytes, int, np.integer)):
                raise MetricError(
                    f"run entry for query {qid!r} must be a mapping {{docid: score}} or a list of doc ids "
                    f"(best first); got the item {item!r}"
                )
    keys = ranked if set(map(type, ranked)) <= {str} else [qid_text(d) for d in ranked]
    # Built back to front so a repeated id keeps its first (best) position.
    out = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))
    if len(out) != len(keys):
        if on_duplicate == "error":
            raise MetricError(duplicate_message(qid, _first_repeat(list(keys))))
        # Drop the repeats; the docs after one move up a rank.
        out = dict(zip(dict.fromkeys(keys), range(len(out))))
    return out


# Rows at the start of a run looked at to tell spread query ids (then not searched for blocks).
_SPREAD_SAMPLE = 1 << 14
# Rows converted per step by pyarrow: a step's tuples, strings and Arrow buffers stay in cache while
# they are read (64 Ki rows convert ~30 % faster than 1 Mi), and the step's Arrow copy is released
# before the next, so the conversion holds little beyond the compact columns it fills.
_ROWS_STEP = 1 << 16
# Below this many rows, importing pyarrow would cost more than its conversion saves.
_ARROW_ROWS = 1 << 14
# Score types read as numbers without a look at each value (numpy would also read None and strings).
_SCORE_TYPES = {float, int, bool, np.float64, np.float32, np.float16, np.int64, np.int32}


def columns_of_rows(rows: Iterable[Any]) -> tuple[Any, Any, Any]:
    """A run given as ``(qid, docid, score)`` rows (a list, a tuple, or any iterator of them), as
    three columns for `prepare_columns`.

    With pyarrow: each step of rows is read by pyarrow in C, one pass over its tuples (a struct
    array), into query ids (their runs, or Arrow strings), doc ids as fixed-width bytes and float64
    scores -- several times faster than a pass per column and a conversion per column, and without
    the three lists of 8-byte pointers those passes build. Anything that conversion refuses (a row
    that is not a 3-tuple, ids that are not strings, a missing value, a score that is no number)
    sends the whole run to the generic path, which names the first bad row.
    """
    if not isinstance(rows, list):
        rows = list(rows)  # a tuple or an iterator (pyarrow reads a list fastest; a generator once)
    if not rows:
        raise MetricError("the run is empty: no row")
    fast: tuple[Any, Any, np.ndarray] | None = _native_rows(rows)
    if fast is None and len(rows) >= _ARROW_ROWS:
        fast = _arrow_rows(rows)
    return fast if fast is not None else _generic_rows(rows)


def _native_rows(rows: list[Any]) -> tuple[Any, DocIds, np.ndarray] | None:
    """The columns of *rows* read by the C speedups in one pass over the tuples: query ids as their
    runs (else the ids themselves, to be grouped), doc ids as their hashes with the ids left in
    the rows (`HashedDocIds`), float64 scores. None without the speedups, or when they
    decline a row (see ``_speedups.rows_columns``): pyarrow's path, or the generic one, reads it."""
    native = _fast.speedups
    read = None if native is None else native.rows_columns(rows, WEIGHTS)
    if read is None:
        return None
    (heads, lengths), hashes, scores = read
    docids = hashed_docids(rows, 1, np.frombuffer(hashes, dtype=np.uint64))
    assert docids is not None
    qids: Any
    if heads is not None and len(heads) - 1 < len(rows) // 4 and len(set(heads)) == len(heads):
        qids = QidRuns(np.frombuffer(lengths, dtype=np.int64), heads)
    else:  # spread, or a query's rows in two places: grouped from the rows themselves
        qids = row_groups(rows, 0) or list(map(itemgetter(0), rows))
    return qids, docids, np.frombuffer(scores, dtype=np.float64)


def _arrow_rows(rows: list[Any]) -> tuple[Any, np.ndarray, np.ndarray] | None:
    """The columns of *rows* read by pyarrow step by step; None when pyarrow is not installed or
    refuses a step (the generic path then reads, or names, what it refused).

    Query ids come as `QidRuns` when each query's rows are contiguous (as nearly always):
    each step's ids are run-end encoded as they come, so no column of them is kept (at 5 M rows
    of 18-character ids, 110 MB less). Else as Arrow strings, to be grouped.
    """
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    kind = pa.struct([("qid", pa.string()), ("docid", pa.string()), ("score", pa.float64())])
    n = len(rows)
    runs: list[QidRuns] | None = []  # None once a step's rows are not in runs of queries
    qids: list[Any] = []
    scores = np.empty(n, dtype=np.float64)
    docids: np.ndarray | None = None
    for start in range(0, n, _ROWS_STEP):
        try:
            part = pa.array(rows[start : start + _ROWS_STEP], type=kind, from_pandas=False)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        q, d, s = (part.field(i) for i in range(3))
        if part.null_count or q.null_count or d.null_count or s.null_count:
            return None
        fixed = arrow_strings(d, "doc ids")
        if fixed is None:  # pragma: no cover - a string array always has its bytes
            return None
        docids = placed(docids, fixed, start, n)
        scores[start : start + len(s)] = s.to_numpy(zero_copy_only=False)
        step_runs = _step_runs(pc, q) if runs is not None else None
        if step_runs is not None and runs is not None:
            runs.append(step_runs)
            continue
        if runs is not None:  # the first step not in runs: the ids before it as strings again
            qids = [pa.array(list(map(itemgetter(0), rows[:start])), pa.string())] if start else []
            runs = None
        qids.append(q)
    assert docids is not None
    joined = joined_runs(runs) if runs is not None else None
    if runs is not None and joined is None:  # a query's rows in two places: group them after all
        qids = [pa.array(list(map(itemgetter(0), rows)), pa.string())]
    return (joined if joined is not None else pa.chunked_array(qids, type=pa.string())), docids, scores


def _step_runs(pc: Any, qids: Any) -> QidRuns | None:
    """A step's query ids as runs of equal ids (each id one run), or None if they average fewer than
    4 rows a run (then spread: encoding more steps would be wasted)."""
    encoded = pc.run_end_encode(qids)
    if len(encoded.values) > max(len(qids) // 4, 1):
        return None
    return encoded_runs(encoded)


def _generic_rows(rows: list[Any]) -> tuple[list[Any], list[Any], np.ndarray]:
    """*rows* as two id lists and float64 scores: a pass per column, in C (``zip(*rows)`` is
    several times slower on millions of rows: each step touches every row); the first row that is
    not a (qid, docid, score) tuple, or whose score is missing or no number, is named."""
    try:
        widths = set(map(len, rows)) if isinstance(rows[0], (tuple, list)) else set()
    except TypeError:
        widths = set()
    if widths != {3}:
        bad = next((i for i, row in enumerate(rows) if not isinstance(row, (tuple, list)) or len(row) != 3), 0)
        raise MetricError(f"run rows must be (qid, docid, score) tuples; row {bad} is {rows[bad]!r}")
    qids, docids = list(map(itemgetter(0), rows)), list(map(itemgetter(1), rows))
    # numpy reads None as NaN and parses strings: both are named here instead.
    if not set(map(type, map(itemgetter(2), rows))) <= _SCORE_TYPES:
        for i, (_, _, score) in enumerate(rows):
            if not isinstance(score, (int, float, np.number, np.bool_)):  # None, a string, anything else
                what = "is missing" if score is None else f"must be a number, got {score!r}"
                raise MetricError(f"score of row {i} ({rows[i][0]!r}, {rows[i][1]!r}) {what}")
    try:
        scores = np.fromiter(map(itemgetter(2), rows), dtype=np.float64, count=len(rows))
    except (TypeError, ValueError, OverflowError) as exc:
        raise MetricError(f"run scores must be numbers ({exc})") from exc
    return qids, docids, scores


def prepare_columns(qids: Any, docids: Any, scores: Any, qrels: PreparedQrels) -> tuple[PreparedRun, int]:
    """A run as aligned columns; *scores* None: rank-only, each query's rows in rank order."""
    q_runs, q_arr, q_names = _query_ids(qids)
    d_arr, d_kept = _doc_ids(docids, qrels)
    n_docs = len(d_kept) if d_kept is not None else len(d_arr)
    s_arr = None if scores is None else _scores_array(to_numpy(scores, "scores"), "run")
    n_rows = int(q_runs.lengths.sum()) if q_runs is not None else len(q_arr)
    n_scores = n_docs if s_arr is None else len(s_arr)
    if not n_rows == n_docs == n_scores:
        raise MetricError(f"run columns differ in length: {n_rows} qids, {n_docs} docids, {n_scores} scores")
    if n_rows == 0:
        raise MetricError("the run is empty: no row")
    order = None
    if q_runs is not None:  # runs, or groups (their order is moved below)
        lengths, run_qids = q_runs.lengths, q_runs.qids
    elif (
        q_arr.dtype.kind == "O"
        and not set(map(type, q_arr)) <= {str}
        and any(v is None or (isinstance(v, float) and math.isnan(v)) for v in q_arr)
    ):
        raise MetricError("the run has a missing query id")
    else:
        grouped = _group_columns(q_arr, q_names)
        if isinstance(grouped, QidGroups):  # by the C speedups: moved below like any groups
            q_runs, lengths, run_qids = grouped, grouped.lengths, grouped.qids
        else:
            lengths, run_qids, order = grouped
    selected = np.fromiter(map(qrels.index.__contains__, run_qids), dtype=bool, count=len(run_qids))
    qid_list = run_qids
    docs = docids_from_array(d_arr) if d_kept is None else d_kept
    # Row numbers, not rows, are moved: the run's row i (grouped by query) is the columns' row rows[i].
    rows = order
    if isinstance(q_runs, QidGroups):
        # Grouped by the C speedups: the scores and the doc ids' hashes are put in group order
        # with the row numbers, in one sequential pass each (gathering them by row would be a
        # cache miss a row); from here the run is in order.
        moved = q_runs.grouped([docs.column_hashes()] + ([] if s_arr is None else [s_arr]))
        docs = docs.in_order(moved[0], moved[1])
        s_arr = None if s_arr is None else moved[2]
    if not selected.all():
        qid_list = [q for q, keep in zip(run_qids, selected.tolist()) if keep]
        kept = np.flatnonzero(np.repeat(selected, lengths))
        rows = kept if rows is None else rows[kept]
        lengths = lengths[selected]
    if rows is not None:
        s_arr = None if s_arr is None else s_arr[rows]
        docs = docs.take(rows)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    prepared = PreparedRun(qid_list, offsets, s_arr, docs)
    _check_scores(prepared)
    return prepared, len(run_qids)


def _doc_ids(docids: Any, qrels: PreparedQrels) -> tuple[np.ndarray, DocIds | None]:
    """The run's doc ids as an array -- or, the array then empty, as `DocIds` that keep the
    caller's own column: ids read by `columns_of_rows` (its `HashedDocIds`), a
    Polars string Series (`SeriesDocIds`, read in place), Python strings or a numpy ``U``
    array the C speedups hash in place (`HashedDocIds`)."""
    empty = np.zeros(0, dtype="S1")
    if isinstance(docids, DocIds):
        return empty, docids
    kept = hashed_docids(docids)
    if kept is not None:
        return empty, kept
    if plain_polars_strings(docids, qrels.docids):
        return empty, SeriesDocIds(empty, series=docids)
    fixed = fixed_strings(docids, "docids")
    return (fixed if fixed is not None else ascii_bytes(to_numpy(docids, "docids"))), None


def _query_ids(qids: Any) -> tuple[QidRuns | QidGroups | None, np.ndarray, list[str] | None]:
    """The run's query ids as contiguous runs, as rows grouped by the C speedups, or as an array
    (exact integer codes of the ids *names* when these are given). Any converted copy of the
    column (Arrow strings) is dropped on return, before the doc ids are converted: it is not part
    of the peak memory."""
    # Rows already run-end encoded (columns_of_rows), or Python strings whose queries come in
    # contiguous runs: found without converting an id.
    if isinstance(qids, QidGroups):  # grouped already (columns_of_rows)
        return qids, np.zeros(0, dtype=np.int64), None
    runs = qids if isinstance(qids, QidRuns) else object_runs(qids) or array_runs(qids)
    if runs is not None:
        return runs, np.zeros(0, dtype=np.int64), None
    # Python strings spread out: grouped where they are, no Arrow copy made (see _groups).
    # (Spread numpy ids are grouped, once narrowed, by _group_columns.)
    groups = string_groups(object_values(qids))
    if groups is not None:
        return groups, np.zeros(0, dtype=np.int64), None
    qids = python_strings(qids)
    coded = coded_ids(qids, "qids", _SPREAD_SAMPLE)
    if coded is None:
        return None, ascii_bytes(to_numpy(qids, "qids")), None
    if isinstance(coded, (QidRuns, QidGroups)):
        return coded, np.zeros(0, dtype=np.int64), None
    return None, coded[0], coded[1]


def _group_columns(
    q_arr: np.ndarray, q_names: list[str] | None
) -> tuple[np.ndarray, list[str], np.ndarray | None] | QidGroups:
    """Rows grouped by query: rows per query, the query ids, and the row order (None: rows are
    grouped already) -- or, spread ids grouped by the C speedups, their `QidGroups`.

    *q_names*: *q_arr* holds exact integer codes of these ids.
    """
    # Rows of a query are nearly always contiguous: find the blocks without sorting any strings --
    # unless the ids are spread from the start (then the pass is wasted).
    if not spread_from_start(len(q_arr), int(np.count_nonzero(changes(q_arr[:_SPREAD_SAMPLE]))), _SPREAD_SAMPLE):
        starts = np.concatenate(([0], np.flatnonzero(changes(q_arr)) + 1))
        run_qids = _id_texts(q_arr[starts], q_names) if len(starts) <= len(q_arr) // 4 else []
        # Contiguous when no id starts two blocks (the texts are the ids, compared as the run is).
        if run_qids and len(set(run_qids)) == len(run_qids):
            return np.diff(np.append(starts, len(q_arr))), run_qids, None
    # A query's rows are spread out: gather them (queries in order of first appearance), by exact
    # codes of the ids when there are (categories, Arrow's dictionary, pyarrow's hash of 'S' ids).
    groups = None if q_names is not None else fixed_groups(q_arr, lambda ids: _id_texts(ids, None))
    if groups is not None:  # by the C speedups, from the array itself (see _groups)
        return groups
    if q_names is not None and q_arr.dtype.kind in "iu":
        order, run_qids, lengths = _group_codes(q_arr, q_names)
    else:
        coded = fixed_width_codes(q_arr)
        if coded is not None:
            order, run_qids, lengths = _group_codes(coded[0], _id_texts(coded[1], None))
        else:
            order, run_qids, lengths = _group_rows(q_arr, q_names)
    return lengths, run_qids, order


def _group_codes(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """`_group_rows` for exact codes ``0 <= code < len(names)``: no hash, no check of it."""
    n = len(codes)
    row_bits = max(n - 1, 1).bit_length()
    if max(len(names) - 1, 1).bit_length() + row_bits > 64:
        return _group_rows(codes, names)
    # One plain sort of (code, row) packed in 64 bits: rows of a query stay in their order. In
    # place, and the row numbers read back as a view: each pass over 8 bytes a row counts here.
    keys = codes.astype(np.uint64)
    keys <<= np.uint64(row_bits)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    keys &= np.uint64((1 << row_bits) - 1)
    order = keys.view(np.int64)
    counts = np.bincount(codes, minlength=len(names))
    present = np.flatnonzero(counts)
    sizes = counts[present]
    starts = np.cumsum(sizes) - sizes
    first_rows = order[starts]
    if len(first_rows) > 1 and not bool((first_rows[1:] > first_rows[:-1]).all()):
        # Codes not in order of first appearance (categories): reorder the groups.
        by_first_row = np.argsort(first_rows)
        present, starts, sizes = present[by_first_row], starts[by_first_row], sizes[by_first_row]
        order = order[np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(n)]
    return order, [names[c] for c in present.tolist()], sizes


def _id_texts(ids: np.ndarray, names: list[str] | None) -> list[str]:
    """Query ids as text; *names*: *ids* are integer codes of these."""
    if names is not None:
        return [names[c] for c in ids.tolist()]
    if ids.dtype.kind == "S":
        try:  # one cast when they are ASCII (nearly always), else one by one
            return ids.astype(f"U{max(ids.itemsize, 1)}").tolist()  # type: ignore[no-any-return]
        except UnicodeDecodeError:
            pass
    elif ids.dtype.kind == "U":
        return ids.tolist()  # type: ignore[no-any-return]
    return [qid_text(v) for v in ids.tolist()]


def _group_rows(q_arr: np.ndarray, names: list[str] | None = None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Row order that groups equal query ids (first appearance first), the ids, the group sizes.

    *names*: *q_arr* holds exact integer codes of these ids.
    """
    n = len(q_arr)
    # One plain sort of 64-bit keys (a mixed id code above the row number) instead of an argsort,
    # which is several times slower: rows of a query stay in their order (rank-only runs need it).
    row_bits = max(n - 1, 1).bit_length()
    mixed = id_codes(q_arr).astype(np.uint64, copy=False) * np.uint64(0x9E3779B97F4A7C15)  # a bijection
    keys = (mixed >> np.uint64(row_bits)) << np.uint64(row_bits)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    order = (keys & np.uint64((1 << row_bits) - 1)).astype(np.intp)
    keys >>= np.uint64(row_bits)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = keys[1:] != keys[:-1]
    del keys
    if q_arr.dtype.kind not in "iu" and _groups_mixed(q_arr, order, new_group):
        # Two query ids share the code's top bits: group by the ids themselves (slower, exact).
        _, exact = np.unique(np.array([qid_text(v) for v in q_arr.tolist()]), return_inverse=True)
        order = np.argsort(exact, kind="stable")
        new_group[1:] = exact[order][1:] != exact[order][:-1]
    starts = np.flatnonzero(new_group)
    sizes = np.diff(np.append(starts, len(order)))
    first_rows = np.minimum.reduceat(order, starts)
    by_first_row = np.argsort(first_rows)
    starts, sizes = starts[by_first_row], sizes[by_first_row]
    rows = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(len(order))
    run_qids = _id_texts(q_arr[first_rows[by_first_row]], names)
    return order[rows], run_qids, sizes


def _groups_mixed(q_arr: np.ndarray, order: np.ndarray, new_group: np.ndarray) -> bool:
    """Whether a group of rows (*order*, groups starting where *new_group*) holds two different ids.

    Each row is compared with its group's first row, in the columns' own order: the ids read
    sequentially, their groups' first rows from a set small enough to stay in cache (a gather of
    the ids in group order would be a random read of the whole column).
    """
    group = np.cumsum(new_group) - 1
    first_row = order[np.flatnonzero(new_group)]
    representative = np.empty(len(order), dtype=np.intp)
    representative[order] = first_row[group]
    del group
    return not bool(same_rows(q_arr, take(q_arr, representative)).all())
