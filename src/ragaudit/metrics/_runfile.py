"""TREC run files read straight into columns: no line or field ever a Python object.

With the C speedups the file is read in one pass over its bytes (``_runfile.c``: fields found 16
bytes at a time, ids copied into fixed-width rows, scores parsed as float() parses them); that
reader declines what only the pure one reads, which then reads the file as below.

A TREC run is ``qid Q0 docid rank score tag`` per line. The pure reader finds every field of every
line at once (a byte-class table, the positions where fields start and end, the first field of each
line by one binary search per line), copies the query ids and doc ids into fixed-width byte arrays
and parses the scores in C (pyarrow's parser when pyarrow is installed, else numpy's). It reads
the file in blocks of whole lines, so what it holds besides the columns stays a few times the block.

It is exact with respect to the line reader in `io` (``str.split()`` per line, lines split at
``\\n``): whenever the file holds anything on which the two could differ -- a control character
that ``str.split`` does not treat as whitespace, Unicode whitespace, bytes that are not UTF-8,
JSON lines -- `trec_columns` returns None and the line reader reads the file (and names
any error by file and line, as it always has).
"""

from __future__ import annotations

import functools
import mmap
import os
import re

import numpy as np

from ..errors import MetricError
from . import _fast
from ._tables import arrow_strings, padded_strings, with_room

__all__ = ["mapped", "trec_columns"]

# Bytes per block (whole lines): big enough that numpy's per-call costs vanish, small enough that
# the per-byte masks and per-field positions of a block stay small next to the columns.
_BLOCK_BYTES = 1 << 24

# Unicode whitespace (what str.split also splits on) other than ASCII's.
_UNICODE_SPACE = re.compile("[\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_FIELDS = 5  # qid Q0 docid rank score; the tag and anything after it are ignored, as trec_eval does


def mapped(path: str | os.PathLike[str]) -> mmap.mmap | None:
    """The file at *path* mapped read-only (its pages read in at once where the system can), for
    `trec_columns`; None for an empty file, one that starts with a byte-order mark, or one that
    cannot be mapped (the caller reads it instead).

    A mapping reads the page cache in place: reading a file of millions of lines into a ``bytes``
    copies it into as much fresh memory, whose page faults cost more than the copy and vary from
    call to call with what the allocator kept. (A file truncated while it is mapped would stop the
    process with SIGBUS; a run file is not rewritten while it is evaluated.) Nothing that
    `trec_columns` returns points into the mapping; it is unmapped when the last reference goes.
    """
    try:
        with open(path, "rb") as fh:
            populate = getattr(mmap, "MAP_POPULATE", 0)
            if populate:
                data = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
            else:  # pragma: no cover - not Linux
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # empty, not a regular file, or no mapping here
        return None
    if data[:3] == b"\xef\xbb\xbf":  # a byte-order mark: the reader strips it from a copy
        data.close()
        return None
    return data


def trec_columns(data: bytes | mmap.mmap, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(query ids, doc ids, scores) of a TREC run file's *data* (BOM removed): 'S' arrays of the
    ids' UTF-8 bytes and float64 scores, rows in file order; None where the line reader must read it.

    Raises [`MetricError`][ragaudit.MetricError] naming *name* and the line for a line with too
    few fields and for a NaN score.
    """
    native = _fast.speedups
    read = None if native is None else native.trec_columns(data, _powers())
    if read is not None:
        qids, qwidth, docids, dwidth, scores, _ = read
        return (np.frombuffer(qids, dtype=f"S{qwidth}"), np.frombuffer(docids, dtype=f"S{dwidth}"),
                np.frombuffer(scores, dtype=np.float64))
    buf = np.frombuffer(data, dtype=np.uint8)
    kept, single = _scan(buf)
    if kept or (len(buf) and int(buf.max()) >= 0x80 and not _plain_text(data)):
        return None
    simple = _arrow_csv(data, buf) if single else None
    if simple is not None:
        return simple
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    start, line = 0, 1
    first_run_line = True
    while start < len(buf):
        end = min(start + _BLOCK_BYTES, len(buf))
        if end < len(buf):  # end the block after its last whole line
            cut = data.rfind(b"\n", start, end)
            end = cut + 1 if cut >= start else (data.find(b"\n", end) + 1 or len(buf))
        columns = _block_columns(buf[start:end], name, line, first_run_line)
        if columns is None:
            return None
        parts.append(columns[0])
        first_run_line = first_run_line and not len(columns[0][2])
        line += columns[1]
        start = end
    rows = [p for p in parts if len(p[2])]
    if not rows:
        return None  # no run line at all: the line reader says what the file is
    return _joined([p[0] for p in rows]), _joined([p[1] for p in rows]), np.concatenate([p[2] for p in rows])


@functools.cache
def _powers() -> bytes:
    """The C reader's table of powers of five (``_runfile.c``): for q in [-342, 308], 5**q as the
    128-bit number whose top bit is set -- 5**q shifted, truncated, for q >= 0; for q < 0 one more
    than 2**b // 5**-q, b chosen for 128 bits (fast_float's table, derived here exactly) -- each
    as its high and low 64-bit words."""
    words: list[int] = []
    for q in range(-342, 309):
        if q >= 0:
            power = 5**q
            bits = power.bit_length()
            value = power << (128 - bits) if bits < 128 else power >> (bits - 128)
        else:
            power = 5**-q
            z = power.bit_length()  # 2**(z - 1) < 5**-q < 2**z
            value = 2 ** (z + 127) // power + 1 if q >= -27 else 2 ** (2 * z + 128) // power + 1
            value >>= max(value.bit_length() - 128, 0)
        words += [value >> 64, value & (2**64 - 1)]
    return np.array(words, dtype=np.uint64).tobytes()


def _scan(buf: np.ndarray) -> tuple[bool, bool]:
    """(kept, single) for a file's bytes. *kept*: it holds a control character that ``str.split``
    keeps inside a field (below 32, but for \\t \\n \\v \\f \\r and 28-31, which it splits at).
    *single*: every line is fields joined by single spaces -- no other whitespace, no space at a
    line's start or end or next to another, \\r only before \\n, no comment line -- which a CSV
    reader splits as ``str.split`` does.

    Six vector passes per block, no Python per byte: control bytes other than newlines are counted
    (a plain file has none), then pairs of adjacent blank bytes (<= 32) are found -- a plain file
    has only "\\r\\n" and blank lines' "\\n\\n" there, so the few pairs are then looked at one by
    one --, then the '#' bytes (comment lines start with one; ids rarely hold one). ``bytes.find``
    of a two-byte pattern such as a double space is several times slower: spaces and newlines, its
    first bytes, are everywhere."""
    n = len(buf)
    single = n == 0 or (buf[0] != 32 and buf[-1] != 32)  # no space at the file's start or end
    for start in range(0, n, _BLOCK_BYTES):
        block = buf[start : start + _BLOCK_BYTES + 1]  # one byte of overlap: pairs across blocks
        if np.count_nonzero(block < 32) != np.count_nonzero(block == 10):  # rare: other control bytes
            if bool(((block < 9) | ((block >= 14) & (block < 28))).any()):
                return True, False
            if single:
                returns = block == 13
                lone = bool((returns[:-1] & (block[1:] != 10)).any()) or bool(returns[-1] and start + len(block) >= n)
                other = np.count_nonzero(block < 32) - np.count_nonzero(block == 10) - np.count_nonzero(returns)
                single = not lone and other == 0
        if single:
            blank = block <= 32
            pairs = np.flatnonzero(blank[1:] & blank[:-1])
            del blank
            # A pair is fine only as "\r\n" or "\n\n" (no space in it: spaces are single, inside lines).
            single = not len(pairs) or not bool(((block[pairs] == 32) | (block[pairs + 1] == 32)).any())
        if single:
            hashes = np.flatnonzero(block == 35)
            single = not bool((block[np.maximum(hashes - 1, 0)] == 10).any()) and not (start == 0 and buf[0] == 35)
    return False, single


def _arrow_csv(data: bytes | mmap.mmap, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The columns read by pyarrow's CSV reader (C++, a few times the speed of splitting with
    numpy) when pyarrow is installed, for a single-spaced file (`_scan`) whose lines all have
    one field count >= 5 and whose scores are all numbers (not NaN); else None."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        return None
    first = 0
    while first < len(data) and data[first] in b"\r\n":  # blank lines before the first line
        first += 1
    if data[first : first + 1] in (b"#", b"{"):
        return None  # a comment or JSON first line: the other readers decide
    wanted = {"f0": pa.string(), "f2": pa.string(), "f4": pa.float64()}
    try:
        table = pcsv.read_csv(
            pa.py_buffer(data),
            read_options=pcsv.ReadOptions(autogenerate_column_names=True, use_threads=False, block_size=_BLOCK_BYTES),
            parse_options=pcsv.ParseOptions(
                delimiter=" ", quote_char=False, escape_char=False, ignore_empty_lines=True
            ),
            convert_options=pcsv.ConvertOptions(
                include_columns=list(wanted), column_types=wanted, null_values=[], strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, KeyError, ValueError):
        return None  # fewer than 5 fields, lines of different field counts, a score that is no number
    scores = np.asarray(table.column("f4").to_numpy(), dtype=np.float64)
    if table.num_rows == 0 or bool(np.isnan(scores).any()):
        return None  # the line reader names the file and line
    qids, docids = (arrow_strings(table.column(c), "run ids") for c in ("f0", "f2"))
    if qids is None or docids is None:
        return None
    return qids, docids, scores


def _plain_text(data: bytes | mmap.mmap) -> bool:
    """Whether non-ASCII *data* is UTF-8 without Unicode whitespace (``str.split`` splits there)."""
    try:
        text = str(data, "utf-8")  # bytes or a mapping, decoded in place
    except UnicodeDecodeError:
        return False
    return _UNICODE_SPACE.search(text) is None


def _block_columns(
    block: np.ndarray, name: str, first_line: int, first_run_line: bool
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int] | None:
    """The columns of one block of whole lines, and how many lines it holds; None for JSON lines
    (*first_run_line*: no run line came before this block, so its first one tells the format)."""
    space = block <= 32  # whitespace only, once _scan found no other control character
    # Fields start and end where space and non-space meet: the boundaries alternate start, end.
    edges = np.flatnonzero(space[1:] != space[:-1]) + 1
    if not space[0]:
        edges = np.concatenate(([0], edges))
    if not space[-1]:
        edges = np.append(edges, len(block))
    del space
    starts, ends = edges[0::2], edges[1::2]
    newlines = np.flatnonzero(block == 10)
    n_lines = len(newlines) + (0 if block[-1] == 10 else 1)
    line_starts = np.concatenate(([0], newlines + 1))[:n_lines]
    first = np.searchsorted(starts, line_starts)  # each line's first field
    count = np.diff(np.append(first, len(starts)))
    filled = count > 0
    comment = np.zeros(n_lines, dtype=bool)
    comment[filled] = block[starts[first[filled]]] == ord("#")
    run_line = filled & ~comment
    if not run_line.any():
        return (_empty(), _empty(), np.zeros(0)), n_lines
    if first_run_line and block[starts[first[np.argmax(run_line)]]] == ord("{"):
        return None  # JSON lines
    short = np.flatnonzero(run_line & (count < _FIELDS))
    if len(short):
        k = int(short[0])
        text = bytes(block[line_starts[k] : (newlines[k] if k < len(newlines) else len(block))]).decode("utf-8")
        hint = " (this looks like a qrels file)" if count[k] == 4 else ""
        raise MetricError(
            f"{name}:{first_line + k}: expected 'qid Q0 docid rank score tag', got {text.strip()!r}{hint}"
        )
    lines = np.flatnonzero(run_line)
    field = first[lines]
    room = with_room(block)
    qids = _field(block, room, starts[field], ends[field])
    docids = _field(block, room, starts[field + 2], ends[field + 2])
    scores = _scores(_field(block, room, starts[field + 4], ends[field + 4]), ends[field + 4] - starts[field + 4],
                     name, first_line + lines)
    return (qids, docids, scores), n_lines


def _empty() -> np.ndarray:
    return np.zeros(0, dtype="S1")


def _field(block: np.ndarray, room: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    lengths = ends - starts
    return padded_strings(block, starts, lengths, int(lengths.max()), room=room)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    width = max(p.itemsize for p in parts)
    return np.concatenate([p if p.itemsize == width else p.astype(f"S{width}") for p in parts])


def _scores(texts: np.ndarray, lengths: np.ndarray, name: str, line_numbers: np.ndarray) -> np.ndarray:
    """The score fields (*texts*, NUL-padded) as float64, parsed in C; a field that is not a number,
    or is NaN, is named by its line."""
    scores = _arrow_floats(texts, lengths)
    if scores is None:
        try:
            scores = texts.astype(np.float64)  # numpy's parser: what the line reader uses
        except ValueError:
            for i, text in enumerate(texts.tolist()):
                try:
                    float(text)
                except ValueError:
                    value = text.decode("utf-8", "replace")
                    raise MetricError(f"{name}:{int(line_numbers[i])}: score {value!r} is not a number") from None
            raise
    bad = np.flatnonzero(np.isnan(scores))
    if len(bad):
        raise MetricError(f"{name}:{int(line_numbers[int(bad[0])])}: score is NaN")
    return scores


def _arrow_floats(texts: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """*texts* parsed by pyarrow (a correctly rounded parser, several times numpy's speed) when it
    is installed; None when it is not or a field is not a plain number (numpy then decides)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # The fields' bytes back to back (an Arrow string array): the padded rows without their NULs.
    width = texts.itemsize
    matrix = texts.view(np.uint8).reshape(len(texts), width)
    packed = matrix[np.arange(width) < lengths[:, None]]
    strings = pa.Array.from_buffers(pa.large_string(), len(texts), [None, pa.py_buffer(offsets), pa.py_buffer(packed)])
    try:
        parsed = pc.cast(strings, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return np.asarray(parsed.to_numpy(zero_copy_only=False), dtype=np.float64)
