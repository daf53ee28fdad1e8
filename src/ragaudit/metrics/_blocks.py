"""The pure ranking kernel's blocks: queries padded into ``[queries, depth]`` arrays of similar depth,
and the ranks of judged documents counted or searched in them (see ``_kernel``'s docstring).

Every function here is numpy over whole blocks; the C speedups rank a run of columns query by query
instead (``_kernel.c``), and the dicts path looks its judged docs up by key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "CHUNK_CELLS",
    "COUNT_CELLS",
    "Block",
    "block_of",
    "chunks",
    "count_ranks",
    "counting_pays",
    "descending_rows",
    "has_equal_neighbour",
    "search_ranks",
]

# Cells per padded block: big enough that numpy's per-call overhead vanishes, small enough to stay
# in cache.
CHUNK_CELLS = 1 << 17
# Cells compared per step when counting ranks (judged docs x depth).
COUNT_CELLS = 1 << 19


# ---------------------------------------------------------------------------------------------
# Blocks of queries


def chunks(lengths: np.ndarray) -> list[np.ndarray]:
    """Query indices grouped by similar depth so each padded block stays near CHUNK_CELLS cells."""
    if len(lengths) and int(lengths.max()) * len(lengths) <= CHUNK_CELLS:
        return [np.arange(len(lengths))]
    order = np.argsort(lengths, kind="stable")
    sorted_len = np.maximum(lengths[order], 1)
    out: list[np.ndarray] = []
    start, n = 0, len(order)
    while start < n:
        span = sorted_len[start : start + CHUNK_CELLS]
        cells = np.arange(1, len(span) + 1) * span
        take = max(1, int(np.searchsorted(cells, CHUNK_CELLS, side="right")))
        # Runs are nearly always of one depth: keep a chunk's queries in run order (contiguous rows).
        out.append(np.sort(order[start : start + take]))
        start += take
    return out


@dataclass(frozen=True, slots=True)
class Block:
    """One chunk of queries padded to ``[rows, depth]``, with the bit layout of its hash sort keys.

    A sort key packs, from the top: the row (so one flat sort orders every row at once and
    ``np.searchsorted`` finds any row's cells), the high bits of a doc-id hash, and the column. A
    column field of all ones marks padding, which sorts after every real cell of its row.
    """

    qs: np.ndarray
    lengths: np.ndarray
    depth: int
    doc_index: np.ndarray | None  # run row of each cell; None when the rows are one contiguous span
    valid: np.ndarray | None
    starts: np.ndarray
    span: tuple[int, int] | None

    @property
    def col_bits(self) -> int:
        return self.depth.bit_length()

    @property
    def value_bits(self) -> int:
        return 64 - (len(self.qs) - 1).bit_length() - self.col_bits

    @property
    def col_mask(self) -> np.uint64:
        return np.uint64((1 << self.col_bits) - 1)

    def row_part(self, rows: np.ndarray | None = None) -> np.ndarray:
        index = np.arange(len(self.qs), dtype=np.uint64) if rows is None else rows.astype(np.uint64)
        return index << np.uint64(self.value_bits + self.col_bits)

    def cells(self, column: np.ndarray) -> np.ndarray:
        """*column* (one value per run row) laid out as ``[rows, depth]``; a view when rows are contiguous.

        Padding cells hold some other row's value: mask them with `valid`.
        """
        if self.span is not None:
            return column[self.span[0] : self.span[1]].reshape(len(self.qs), self.depth)
        assert self.doc_index is not None
        return column[self.doc_index]

    def cells_index(self) -> np.ndarray:
        """The run row of every cell (padding: some other row), for a block that is not one span."""
        assert self.doc_index is not None
        return self.doc_index

    def value_part(self, values: np.ndarray, bits_in: int) -> np.ndarray:
        """The top ``value_bits`` of *values* (which use *bits_in* bits), shifted above the column."""
        if bits_in > self.value_bits:
            part = values.astype(np.uint64, copy=False) >> np.uint64(bits_in - self.value_bits)
        else:
            part = values.astype(np.uint64)
        part <<= np.uint64(self.col_bits)
        return part

    def sorted_keys(self, values: np.ndarray, bits_in: int) -> np.ndarray:
        """Keys of ``[rows, depth]`` *values*, each row sorted, flattened."""
        keys = self.value_part(values, bits_in)
        keys |= np.arange(self.depth, dtype=np.uint64)
        row_part = self.row_part()
        keys |= row_part[:, None]
        if self.valid is not None:
            pad = np.uint64((1 << (self.value_bits + self.col_bits)) - 1)
            np.copyto(keys, row_part[:, None] | pad, where=~self.valid)
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
        return self.value_part(values, bits_in) | self.row_part(rows)

    def flat(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Run row index of the cells (rows, cols), which must be real cells."""
        return self.starts[rows] + cols


def block_of(offsets: np.ndarray, qs: np.ndarray, lengths: np.ndarray) -> Block:
    ls = lengths[qs]
    depth = max(int(ls.max()), 1)
    starts = offsets[qs]
    full = bool((ls == depth).all())
    span = None
    doc_index = None
    n_rows = int(offsets[-1])
    if full and len(qs) > 0 and bool((np.diff(qs) == 1).all()):
        span = (int(starts[0]), int(starts[0]) + len(qs) * depth)
    else:
        doc_index = np.minimum(starts[:, None] + np.arange(depth), max(n_rows - 1, 0))
    return Block(
        qs=qs,
        lengths=ls,
        depth=depth,
        doc_index=doc_index,
        valid=None if full else np.arange(depth) < ls[:, None],
        starts=starts,
        span=span,
    )


# ---------------------------------------------------------------------------------------------
# Counting ranks


def count_ranks(
    block: Block, scores: np.ndarray, rows: np.ndarray, own: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For judged docs in block rows *rows* with scores *own* (as compared): how many docs of their row
    score higher, and the (judged doc, column) pairs of equal scores (each judged doc itself
    included) whose doc ids decide the order."""
    values = block.cells(scores) if block.span is not None else None
    ranks = np.zeros(len(rows), dtype=np.int64)
    tie_hit: list[np.ndarray] = []
    tie_col: list[np.ndarray] = []
    step = max(1, COUNT_CELLS // block.depth)
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        mine = own[start : start + step, None]
        row_values = values[part] if values is not None else scores[block.cells_index()[part]]
        if block.valid is not None:
            # NaN never compares: padding neither outranks nor ties (NaN scores are refused earlier).
            row_values = np.where(block.valid[part], row_values, np.float32(np.nan))
        ranks[start : start + step] = np.count_nonzero(row_values > mine, axis=1)
        equal = row_values == mine
        tied = np.flatnonzero(np.count_nonzero(equal, axis=1) > 1)
        if len(tied):
            hit, col = np.nonzero(equal[tied])
            tie_hit.append(tied[hit] + start)
            tie_col.append(col)
    if not tie_hit:
        empty = np.zeros(0, dtype=np.int64)
        return ranks, empty, empty
    return ranks, np.concatenate(tie_hit), np.concatenate(tie_col)


# Leading pairs of a row checked before the whole row: a row out of order nearly always shows it there.
_HEAD = 8


def descending_rows(block: Block, scores: np.ndarray) -> np.ndarray:
    """Per block row: are its scores non-increasing (rank order)?

    The first _HEAD pairs of every row first (a shuffled row of 100 passes them once in 9!), then
    the whole row only where they hold: rows of a shuffled run cost a tenth of a full pass.
    """
    values = block.cells(scores)
    if block.depth <= 2 * _HEAD:
        return _rows_descending(block, values)
    head = values[:, 1 : _HEAD + 1] <= values[:, :_HEAD]
    if block.valid is not None:
        head |= ~block.valid[:, 1 : _HEAD + 1]
    maybe = np.flatnonzero(head.all(axis=1))
    if len(maybe) == len(values):
        return _rows_descending(block, values)
    out = np.zeros(len(values), dtype=bool)
    if len(maybe):
        ok = values[maybe, 1:] <= values[maybe, :-1]
        if block.valid is not None:
            ok |= ~block.valid[maybe, 1:]
        out[maybe] = ok.all(axis=1)
    return out


def _rows_descending(block: Block, values: np.ndarray) -> np.ndarray:
    """`descending_rows` of *values* (the block's cells), in one comparison pass."""
    if block.depth < 2:
        return np.ones(len(block.qs), dtype=bool)
    if block.valid is None and values.flags.c_contiguous:
        # Compare the flat array (contiguous, so fast) and ignore the pairs that span two rows.
        flat = values.ravel()
        ok = np.empty(values.size, dtype=bool)
        np.less_equal(flat[1:], flat[:-1], out=ok[:-1])
        ok[-1] = True
        ok[block.depth - 1 :: block.depth] = True
        return np.asarray(ok.reshape(values.shape).all(axis=1))
    ok = values[:, 1:] <= values[:, :-1]
    if block.valid is not None:
        ok |= ~block.valid[:, 1:]
    return np.asarray(ok.all(axis=1))


def search_ranks(
    block: Block, scores: np.ndarray, rows: np.ndarray, own: np.ndarray, descending: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For docs in block rows *rows* with scores *own* (as compared): how many docs of their row score
    higher, and whether another doc of the row has the same score (then doc ids must decide).

    A binary search per doc, all docs at once, in the row itself when it is in score order
    (*descending*, per block row). Other rows: a count of the cells above each doc when that is
    cheaper (`counting_pays`: short rows), else a binary search in a sorted copy of the row.
    """
    higher = np.zeros(len(rows), dtype=np.int64)
    tied = np.zeros(len(rows), dtype=bool)
    in_order = descending[rows]
    lengths = block.lengths[rows].astype(np.int64)
    fast = np.flatnonzero(in_order)
    if len(fast):
        starts = block.starts[rows[fast]]
        first = _first_index(scores, starts, lengths[fast], own[fast], ascending=False, depth=block.depth)
        higher[fast] = first
        nxt = np.minimum(starts + first + 1, len(scores) - 1)
        tied[fast] = (first + 1 < lengths[fast]) & (scores[nxt] == own[fast])
    slow = np.flatnonzero(~in_order)
    if not len(slow):
        return higher, tied
    slow_rows = rows[slow]
    # Rows come sorted, so this counts the distinct ones without np.unique's sort (were they not,
    # it would overcount, which only sways the choice below).
    distinct = 1 + int(np.count_nonzero(slow_rows[1:] != slow_rows[:-1]))
    if counting_pays(len(slow), distinct, block.depth):
        higher[slow], tied[slow] = _count_higher(block, scores, slow_rows, own[slow])
        return higher, tied
    # Sort the rows (ascending; padding as +inf sorts after every real score) and search them.
    need, where = np.unique(slow_rows, return_inverse=True)
    values = block.cells(scores)[need]
    if block.valid is not None:
        values = np.where(block.valid[need], values, np.float32(np.inf))
    values.sort(axis=1)
    flat = values.ravel()
    starts = where.ravel().astype(np.int64) * block.depth
    above = _first_index(flat, starts, lengths[slow], own[slow], ascending=True, depth=block.depth)
    higher[slow] = lengths[slow] - above
    tied[slow] = (above >= 2) & (flat[np.maximum(starts + above - 2, 0)] == own[slow])
    return higher, tied


def counting_pays(docs: int, rows: int, depth: int) -> bool:
    """Whether comparing each of *docs* docs with every cell of its row (one SIMD pass per cell,
    about 1 ns) beats sorting the *rows* rows and a binary search per doc (numpy's row sort is
    about 1.2 ns a cell; the search's few vectorised steps cost about 100 ns a doc). Counting
    wins on short rows, however many docs; on long rows only with few docs per row."""
    return docs * (depth - 100) <= 1.2 * rows * depth


def _count_higher(
    block: Block, scores: np.ndarray, rows: np.ndarray, own: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`search_ranks` by counting: per doc, the cells of its row scoring higher, and whether
    another cell scores the same. Compares ``[docs x depth]`` in steps of COUNT_CELLS cells."""
    higher = np.empty(len(rows), dtype=np.int64)
    tied = np.empty(len(rows), dtype=bool)
    values = block.cells(scores) if block.span is not None else None
    # Counts fit the narrowest integer: the reduction then moves a byte per cell, not eight.
    count_type = np.uint8 if block.depth < 256 else np.int64
    step = max(1, COUNT_CELLS // block.depth)
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        row_values = np.take(values, part, axis=0) if values is not None else scores[block.cells_index()[part]]
        if block.valid is not None:
            # NaN never compares: padding neither outranks nor ties (NaN scores are refused earlier).
            np.copyto(row_values, np.nan, where=~block.valid[part])
        mine = own[start : start + step, None]
        higher[start : start + step] = np.add.reduce((row_values > mine).view(np.uint8), axis=1, dtype=count_type)
        equal = np.add.reduce((row_values == mine).view(np.uint8), axis=1, dtype=count_type)
        tied[start : start + step] = equal > 1
    return higher, tied


def _first_index(
    flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, own: np.ndarray, ascending: bool, depth: int
) -> np.ndarray:
    """Per doc, the first index i < length of its row (``flat[start:start + length]``, sorted) where
    the row's value is > *own* (*ascending*) or <= *own* (descending); the length if none."""
    lo = np.zeros(len(starts), dtype=np.int64)
    hi = lengths.copy()
    last = len(flat) - 1
    for _ in range(int(depth).bit_length()):
        active = lo < hi
        mid = (lo + hi) // 2
        value = flat[np.minimum(starts + mid, last)]
        past = (value > own) if ascending else (value <= own)
        go_right = active & ~past
        lo = np.where(go_right, mid + 1, lo)
        hi = np.where(active & past, mid, hi)
    return lo


def has_equal_neighbour(
    block: Block, scores: np.ndarray, rows: np.ndarray, cols: np.ndarray, own: np.ndarray
) -> np.ndarray:
    """Whether the cell before or after each (row, col) in its row has the same score."""
    flat = block.flat(rows, cols)
    last = len(scores) - 1
    before = (cols > 0) & (scores[np.maximum(flat - 1, 0)] == own)
    after = (cols < block.lengths[rows] - 1) & (scores[np.minimum(flat + 1, last)] == own)
    return before | after
