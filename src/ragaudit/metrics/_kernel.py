"""The ranking kernel: where each judged document landed in its query's ranking, in trec_eval's order.

trec_eval orders a query's documents by score, descending, then by doc id, descending (``strcmp``;
scores compared as doubles since trec_eval 10.0, as 32-bit floats by pytrec_eval and trec_eval <=
9.0.8: the ``ties`` option). The metrics need only the ranks of the judged documents -- those
labelled >= 1, or every judged one for bpref, infAP, relstring and -J; a few per query -- so the
run is never sorted as a whole. The rank of such a document is::

    rank(d) = #{e : score(e) > score(d)} + #{e : score(e) == score(d) and id(e) > id(d)}

Queries are padded into ``[queries, depth]`` blocks of similar depth. The first term comes from a
binary search per judged document, all of them at once: in the row itself when the row is in score
order (as retrievers write runs; in a run of columns a judged document with no equal neighbour
then simply ranks at its column), else in a sorted copy of the row. The second term is evaluated
only for the judged documents whose score equals another one's: their tied neighbours' ids are
compared with theirs. Ties therefore cost in proportion to how many judged documents tie -- never a
slower path for the whole run. A rank-only run (no scores; rows best first) needs neither: a row's
position is its rank.

Finding the judged documents in the run: a run of dicts is looked up by key (the caller's dicts,
never copied). A run of columns is hashed once; in each block every cell's doc-id hash is packed
with its row and column into a 64-bit key and every block row sorted at once, which exposes
duplicate ids (trec_eval refuses them) and lets a binary search find each judged id; every match is
then confirmed by comparing the ids themselves.

With the C speedups a run of columns is ranked query by query instead (``_kernel.c``,
`_native_column_hits`): the same two terms, counted over each query's scores, the duplicates
and judged docs found through a small hash table of its rows; the blocks (``_blocks``) are the
pure path. Both leave every id comparison -- matches, duplicates, ties -- to the ids themselves,
here.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Literal

import numpy as np

from ..errors import MetricError
from . import _fast
from ._blocks import Block, block_of, chunks, count_ranks, descending_rows, has_equal_neighbour, search_ranks
from ._docids import DocIds
from ._inputs import PreparedQrels, PreparedRun, duplicate_message

__all__ = ["TIES", "Hits", "Judged", "Ties", "check_ties", "judged_of", "rank_judged", "trec_scores"]


Ties = Literal["trec_eval", "pytrec_eval"]
TIES: tuple[str, ...] = ("trec_eval", "pytrec_eval")


def check_ties(ties: str) -> None:
    if ties not in TIES:
        raise MetricError(
            f"ties must be 'trec_eval' (scores compared as doubles, trec_eval >= 10.0) or 'pytrec_eval' "
            f"(as 32-bit floats: pytrec_eval, trec_eval <= 9.0.8), got {ties!r}"
        )


def trec_scores(scores: np.ndarray, ties: str = "trec_eval") -> np.ndarray:
    """Scores as the chosen trec_eval compares them: doubles (``ties="trec_eval"``: trec_eval >= 10.0
    reads ``double sim``) or 32-bit floats (``"pytrec_eval"``: pytrec_eval and trec_eval <= 9.0.8
    store ``float sim``).

    Two scores equal at that precision tie, and are then ordered by doc id; rounding the same way is
    what makes the rankings identical. ``-0.0`` and ``0.0`` compare equal either way.
    """
    if ties == "trec_eval":
        return scores if scores.dtype == np.float64 else scores.astype(np.float64)
    out = _fast.empty(len(scores), np.float32)
    with np.errstate(over="ignore"):
        np.copyto(out, scores, casting="same_kind")
    out += np.float32(0.0)
    return out


@dataclass(frozen=True, slots=True)
class Judged:
    """The qrels side for the evaluated queries (query index = position in the run's query list).

    ``entry_*``: one per judged doc with a label >= 1 (the only docs that move most metrics), or
    with any label when ``every_label`` (bpref, infAP, relstring and -J need the others' ranks);
    ``ideal_*``: the docs labelled >= 1 ordered by label, descending, within each query (for ideal
    DCG); ``num_nonrel``: judged non-relevant docs (0 <= label < level) per query; ``num_zero``:
    docs labelled 0 per query (custom NDCG gains may give level 0 a gain).
    """

    num_rel: np.ndarray
    num_nonrel: np.ndarray
    num_zero: np.ndarray
    every_label: bool
    entry_q: np.ndarray
    entry_docids: list[str]
    entry_label: np.ndarray
    ideal_q: np.ndarray
    ideal_label: np.ndarray
    ideal_rank: np.ndarray


@dataclass(frozen=True, slots=True)
class Hits:
    """The retrieved docs with a label >= 1: query index, 0-based rank, label; sorted by (query, rank)."""

    q: np.ndarray
    rank: np.ndarray
    label: np.ndarray


def judged_of(run: PreparedRun, qrels: PreparedQrels, level: int, every_label: bool = False) -> Judged:
    n = len(run.qids)
    labels = qrels.labels
    if run.qids == qrels.qids:  # the run has every query of the qrels, in their order (common)
        entry_q = qrels.entry_q
        in_run = np.ones(len(entry_q), dtype=bool)
    else:
        sel = np.full(len(qrels.qids), -1, dtype=np.int64)
        sel[np.fromiter(map(qrels.index.__getitem__, run.qids), dtype=np.int64, count=n)] = np.arange(n)
        entry_q = sel[qrels.entry_q]
        in_run = entry_q >= 0
    num_rel = np.bincount(entry_q[in_run & (labels >= level)], minlength=n)
    num_nonrel = np.bincount(entry_q[in_run & (labels >= 0) & (labels < level)], minlength=n)
    num_zero = np.bincount(entry_q[in_run & (labels == 0)], minlength=n)
    positive = np.flatnonzero(in_run & (labels >= 1))
    ideal_q, ideal_label = _by_query_then_label_desc(entry_q[positive], labels[positive])
    entries = np.flatnonzero(in_run) if every_label else positive
    every = len(entries) == len(labels)
    return Judged(
        num_rel=num_rel,
        num_nonrel=num_nonrel,
        num_zero=num_zero,
        every_label=every_label,
        entry_q=entry_q if every else entry_q[entries],
        entry_docids=qrels.docids if every else [qrels.docids[i] for i in entries.tolist()],
        entry_label=labels if every else labels[entries],
        ideal_q=ideal_q,
        ideal_label=ideal_label,
        ideal_rank=rank_in_group(ideal_q),
    )


def rank_in_group(q: np.ndarray) -> np.ndarray:
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
    bins = span * (int(q.max()) + 1)
    if bins <= 4 * len(q):
        # Few labels (graded 0-3, say): a counting sort of the same key, in three linear passes.
        counts = np.bincount(q * span + (top - label), minlength=bins)
        keys = np.repeat(np.arange(bins), counts)
        return keys // span, top - keys % span
    if bins < 2**62:
        # Both fit in one integer key: a plain sort of it beats an argsort or a lexsort. The qrels
        # are usually grouped by query already, and timsort ("stable") makes short work of runs.
        keys = np.sort(q * span + (top - label), kind="stable")
        return keys // span, top - keys % span
    order = np.lexsort((-label, q))
    return q[order], label[order]


@dataclass(frozen=True, slots=True)
class _ByQuery:
    """Entries grouped by query: query q's are ``order[first[q] : first[q] + count[q]]``."""

    order: np.ndarray
    first: np.ndarray
    count: np.ndarray

    def of(self, qs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of the queries *qs*, and the row (position in *qs*) of each."""
        counts = self.count[qs]
        rows = np.repeat(np.arange(len(qs)), counts)
        firsts = np.cumsum(counts) - counts
        return self.order[np.repeat(self.first[qs] - firsts, counts) + np.arange(len(rows))], rows


def _by_query(entry_q: np.ndarray, n_queries: int) -> _ByQuery:
    count = np.bincount(entry_q, minlength=n_queries)
    first = np.cumsum(count) - count
    if len(entry_q) < 2 or bool((entry_q[1:] >= entry_q[:-1]).all()):  # qrels in the run's query order
        return _ByQuery(np.arange(len(entry_q)), first, count)
    if 1 + int(np.count_nonzero(entry_q[1:] != entry_q[:-1])) == int(np.count_nonzero(count)):
        # Each query's entries are contiguous (qrels come grouped by query), only the queries are
        # in another order than the run's: place each entry at its query's slot, no sort.
        order = np.empty(len(entry_q), dtype=np.int64)
        order[first[entry_q] + rank_in_group(entry_q)] = np.arange(len(entry_q))
        return _ByQuery(order, first, count)
    return _ByQuery(np.argsort(entry_q, kind="stable"), first, count)


def _collect(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Hits:
    """All chunks' hits (query, rank, label), sorted by query then rank."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Hits(empty, empty, empty)
    q, rank, label = (np.concatenate(p).astype(np.int64, copy=False) for p in zip(*parts))
    if not len(q):
        return Hits(q, rank, label)
    low, span = int(label.min()), int(label.max()) - int(label.min()) + 1
    depth = int(rank.max()) + 1
    if (int(q.max()) + 1) * depth * span < 2**62:
        # All three fit in one integer key: a plain sort of it beats an argsort plus gathers, and
        # timsort ("stable") is quick on chunks that already come in query order.
        keys = np.sort((q * depth + rank) * span + (label - low), kind="stable")
        position, label = np.divmod(keys, span)
        q, rank = np.divmod(position, depth)
        return Hits(q, rank, label + low)
    order = np.lexsort((rank, q))
    return Hits(q[order], rank[order], label[order])


# ---------------------------------------------------------------------------------------------
# Runs of dicts


def _get(mapping: Mapping[Any, Any], key: Any, default: Any) -> Any:
    return mapping.get(key, default)


def _rank_dict_hits(run: PreparedRun, judged: Judged, ties: str) -> Hits:
    """Ranks for a run of dicts, found from the qrels side by dict lookups.

    Each labelled doc's score (or, rank-only, its position) comes from its query's dict; its rank
    is counted against the query's scores. Doc ids are read from a dict only for the queries
    where a labelled doc's score ties with another doc's.
    """
    assert run.dicts is not None
    dicts = run.dicts
    owners = map(dicts.__getitem__, judged.entry_q.tolist())
    getter: Callable[[Any, Any, Any], Any] = dict.get if set(map(type, dicts)) <= {dict} else _get
    looked_up = map(getter, owners, judged.entry_docids, repeat(math.nan))
    hit_values = np.fromiter(looked_up, dtype=np.float64, count=len(judged.entry_docids))
    present = np.flatnonzero(~np.isnan(hit_values))
    hit_q, hit_label = judged.entry_q[present], judged.entry_label[present]
    if run.scores is None:  # rank-only: the dicts hold positions, which are the ranks
        return _collect([(hit_q, hit_values[present].astype(np.int64), hit_label)])
    own = trec_scores(hit_values[present], ties)
    scores = trec_scores(run.scores, ties)
    by_query = _by_query(hit_q, len(run.qids))
    lengths = np.diff(run.offsets)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for qs in chunks(lengths):
        block = block_of(run.offsets, qs, lengths)
        take, rows = by_query.of(qs)
        mine = own[take]
        ranks, tied = search_ranks(block, scores, rows, mine, descending_rows(block, scores))
        # Docs whose score ties another's: counted, and the doc ids decide.
        count = np.flatnonzero(tied)
        if len(count):
            counted, tie_hit, tie_col = count_ranks(block, scores, rows[count], mine[count])
            if len(tie_hit):
                # Tied scores: the doc ids decide, read from the few dicts concerned.
                keys_of: dict[int, list[Any]] = {}
                ids = [judged.entry_docids[int(present[take[count[h]]])] for h in tie_hit.tolist()]
                for h, col, docid in zip(tie_hit.tolist(), tie_col.tolist(), ids):
                    q = int(qs[int(rows[count[h]])])
                    keys = keys_of.get(q)
                    if keys is None:
                        keys = keys_of[q] = list(dicts[q])
                    if keys[col] > docid:
                        counted[h] += 1
            ranks[count] = counted
        parts.append((qs[rows], ranks, hit_label[take]))
    return _collect(parts)


# ---------------------------------------------------------------------------------------------
# Runs of columns


class _DuplicatesFound(Exception):
    def __init__(self, drop: list[int]) -> None:
        super().__init__("duplicates")
        self.drop = drop


def _duplicates(block: Block, hash_keys: np.ndarray, run: PreparedRun, on_duplicate: str) -> list[int]:
    pairs = block.same_value_pairs(hash_keys)
    if not len(pairs):
        return []
    row = pairs // block.depth
    a = block.flat(row, (hash_keys[pairs] & block.col_mask).astype(np.int64))
    b = block.flat(row, (hash_keys[pairs + 1] & block.col_mask).astype(np.int64))
    return _duplicate_rows(run, a, b, on_duplicate)


def _duplicate_rows(run: PreparedRun, a: np.ndarray, b: np.ndarray, on_duplicate: str) -> list[int]:
    """The rows to drop for the pairs of rows (*a*, *b*: run rows of one query) whose doc-id hashes
    are equal: none when no pair's ids are; a MetricError naming the first duplicate unless
    ``on_duplicate="max"``, which keeps each duplicated doc's highest score."""
    docs = run.docs
    assert docs is not None
    real = docs.at(a) == docs.at(b)
    if not np.any(real):
        return []
    if on_duplicate == "error":
        first = int(np.flatnonzero(real)[0])
        raise MetricError(duplicate_message(run.qid_of_row(int(a[first])), docs.text(int(a[first]))))
    query = np.searchsorted(run.offsets, a, side="right") - 1
    groups: dict[tuple[int, str], list[int]] = {}
    for r, i, j in zip(query[real].tolist(), a[real].tolist(), b[real].tolist()):
        members = groups.setdefault((r, docs.text(i)), [])
        members.extend(k for k in (i, j) if k not in members)
    drop: list[int] = []
    scores = run.scores
    for members in groups.values():
        # Keep the highest score (the first row, i.e. the best rank, of a rank-only run).
        best = min(members) if scores is None else max(members, key=lambda k: (scores[k], -k))
        drop.extend(k for k in members if k != best)
    return drop


@dataclass(frozen=True, slots=True)
class _Columns:
    """What every block of a run of columns reads: the run with its row hashes and scores (as
    compared), and the labelled docs (encoded, hashed) grouped by query."""

    run: PreparedRun
    docs: DocIds
    lengths: np.ndarray
    hashes: np.ndarray
    scores: np.ndarray | None
    entry_doc: np.ndarray
    entry_hash: np.ndarray
    entry_label: np.ndarray
    by_query: _ByQuery
    on_duplicate: str


def _find_labelled(
    c: _Columns, block: Block, hash_keys: np.ndarray, qs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labelled docs of the block's queries found in its rows: block row, column, label."""
    take, rows = c.by_query.of(qs)
    needles = block.needles(rows, c.entry_hash[take], 63)
    found = hash_keys[np.minimum(np.searchsorted(hash_keys, needles), len(hash_keys) - 1)]
    cols = (found & block.col_mask).astype(np.int64)
    shift = np.uint64(block.col_bits)
    hit = ((found >> shift) == (needles >> shift)) & (cols < block.depth)
    # Confirm the hash hits only (a labelled doc is often not retrieved): the ids are compared as
    # strings, the costliest comparison here.
    exact = np.zeros(len(take), dtype=bool)
    at = np.flatnonzero(hit)
    exact[at] = c.docs.at(block.flat(rows[at], cols[at])) == c.entry_doc[take[at]]
    for e in np.flatnonzero(hit & ~exact).tolist():
        # Two doc ids of one query share their hash bits: settle it by comparing the strings.
        r = int(rows[e])
        own_row = block.starts[r] + np.arange(block.lengths[r])
        match = np.flatnonzero(c.docs.at(own_row) == c.entry_doc[take[e]])
        if len(match):
            exact[e], cols[e] = True, int(match[0])
    return rows[exact], cols[exact], c.entry_label[take][exact]


def _column_ranks(c: _Columns, block: Block, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The ranks of the found docs (block rows *rows*, columns *cols*) of a run with scores."""
    scores = c.scores
    assert scores is not None
    own_rows = block.flat(rows, cols)
    own = scores[own_rows]
    descending = descending_rows(block, scores)
    # Rows in score order (as retrievers write them): a doc whose neighbours score
    # differently ranks at its column. Other rows are searched; ties are counted.
    ranks = cols.copy()
    search_at = ~descending[rows]
    in_order = np.flatnonzero(~search_at)
    if len(in_order):
        search_at[in_order] = has_equal_neighbour(block, scores, rows[in_order], cols[in_order], own[in_order])
    search = np.flatnonzero(search_at)
    if not len(search):
        return ranks
    found, tied = search_ranks(block, scores, rows[search], own[search], descending)
    ranks[search] = found
    count = search[tied]
    if len(count):
        sub = own_rows[count]
        counted, tie_hit, tie_col = count_ranks(block, scores, rows[count], own[count])
        if len(tie_hit):
            # Tied scores: doc id descending decides (the doc itself is not greater than itself).
            greater = c.docs.at(block.flat(rows[count][tie_hit], tie_col)) > c.docs.at(sub[tie_hit])
            counted += np.bincount(tie_hit, weights=greater, minlength=len(counted)).astype(np.int64)
        ranks[count] = counted
    return ranks


def _column_block(c: _Columns, qs: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, list[int]]:
    """One block's hits (query, rank, label), or the rows to drop as duplicates."""
    block = block_of(c.run.offsets, qs, c.lengths)
    hash_keys = block.sorted_keys(block.cells(c.hashes), 63)
    found_dups = _duplicates(block, hash_keys, c.run, c.on_duplicate)
    if found_dups:
        return None, found_dups
    rows, cols, labels = _find_labelled(c, block, hash_keys, qs)
    if c.scores is None:
        return (qs[rows], cols, labels), []  # rank-only: rows are in rank order
    return (qs[rows], _column_ranks(c, block, rows, cols), labels), []


def _encode_entries(docs: DocIds, docids: list[str]) -> np.ndarray:
    """``docs.encode(docids)``; for ids of one length (the usual case), from a single join.

    numpy converts a list of strings to a fixed-width array at some 40 ns an item; one
    ``"\\0".join`` and one ``str.encode`` move the same characters in bulk. Each id then ends in a
    NUL, which fixed-width strings read as padding: it changes neither comparisons nor hashes.
    """
    kind = docs.ids.dtype.kind
    n = len(docids)
    if kind not in "US" or not n:
        return docs.encode(docids)
    joined = "\0".join(docids) + "\0"
    width = len(joined) // n
    # Exactly n NULs, each ending a row of *width* units: every id has width - 1 characters. (An
    # id holding a NUL, or ids of several lengths, take the general path.)
    if len(joined) != width * n or joined.count("\0") != n:
        return docs.encode(docids)
    if kind == "S":
        try:
            data = joined.encode("ascii")  # ASCII ids: their UTF-8, one byte a character
        except UnicodeEncodeError:
            return docs.encode(docids)
        unit, dtype = np.uint8, f"S{width}"
    else:
        data = joined.encode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")
        unit, dtype = np.uint32, f"U{width}"
    if np.frombuffer(data, dtype=unit).reshape(n, width)[:, -1].any():
        return docs.encode(docids)
    return np.frombuffer(data, dtype=dtype)


def _rank_column_hits(run: PreparedRun, judged: Judged, on_duplicate: str, ties: str) -> Hits:
    """Find the labelled docs in a run of columns (and any duplicate id), then count their ranks:
    query by query by the C speedups (``_kernel.c``), else in blocks of queries."""
    docs = run.docs
    assert docs is not None
    entry_doc = _encode_entries(docs, judged.entry_docids)
    c = _Columns(
        run=run,
        docs=docs,
        lengths=np.diff(run.offsets),
        # Hashed once, in row order (sequential reads); blocks then gather hashes, not strings.
        hashes=docs.row_hashes(),
        scores=None if run.scores is None else trec_scores(run.scores, ties),
        entry_doc=entry_doc,
        entry_hash=docs.hash(entry_doc),
        entry_label=judged.entry_label,
        by_query=_by_query(judged.entry_q, len(run.qids)),
        on_duplicate=on_duplicate,
    )
    if _fast.speedups is not None:
        return _native_column_hits(c)
    results = [_column_block(c, qs) for qs in chunks(c.lengths)]
    drop = [row for _, dups in results for row in dups]
    if drop:
        raise _DuplicatesFound(drop)
    return _collect([part for part, _ in results if part is not None])


def _native_column_hits(c: _Columns) -> Hits:
    """`_rank_column_hits` by the C speedups: ``rank_columns`` visits each query's rows once
    and gives the candidates -- rows whose hash is a labelled doc's, rows of one query with equal
    hashes, rows that tie with a candidate -- which are settled here by comparing the ids
    themselves, as the blocks settle theirs: a hash is only ever a shortcut."""
    native = _fast.speedups
    assert native is not None
    scores = None if c.scores is None else np.ascontiguousarray(c.scores)
    found = native.rank_columns(
        np.ascontiguousarray(c.run.offsets, dtype=np.int64), np.ascontiguousarray(c.hashes, dtype=np.uint64), scores,
        *(np.ascontiguousarray(x, dtype=np.int64) for x in (c.by_query.first, c.by_query.count, c.by_query.order)),
        np.ascontiguousarray(c.entry_hash, dtype=np.uint64),
    )
    hit_q, hit_row, hit_entry, greater, tie_hit, tie_row, dup_a, dup_b = (
        np.frombuffer(column, dtype=np.int64) for column in found
    )
    if len(dup_a):
        drop = _duplicate_rows(c.run, dup_a, dup_b, c.on_duplicate)
        if drop:
            raise _DuplicatesFound(drop)
    exact = np.flatnonzero(c.docs.at(hit_row) == c.entry_doc[hit_entry]) if len(hit_row) else hit_row
    rank = greater.copy()
    if len(tie_hit):
        # Tied scores: doc id descending decides (the doc itself is not among its tied rows).
        above = c.docs.at(tie_row) > c.docs.at(hit_row[tie_hit])
        rank += np.bincount(tie_hit, weights=above, minlength=len(rank)).astype(np.int64)
    return _collect([(hit_q[exact], rank[exact], c.entry_label[hit_entry[exact]])])


def rank_judged(
    run: PreparedRun, judged: Judged, on_duplicate: str, ties: str = "trec_eval"
) -> tuple[Hits, np.ndarray]:
    """The ranks of the judged docs, and the number of docs each query retrieved (duplicates
    dropped when ``on_duplicate="max"``); scores compared as *ties* says (`trec_scores`)."""
    if int(run.offsets[-1]) == 0:  # every evaluated query retrieved nothing
        return _collect([]), np.diff(run.offsets)
    if run.docs is None:
        return _rank_dict_hits(run, judged, ties), np.diff(run.offsets)
    try:
        hits = _rank_column_hits(run, judged, on_duplicate, ties)
    except _DuplicatesFound as found:
        run = run.without_rows(found.drop)
        hits = _rank_column_hits(run, judged, on_duplicate, ties)
    return hits, np.diff(run.offsets)
