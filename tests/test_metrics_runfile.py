"""The TREC run reader's fast path against the line reader (issue 31): the byte scan that decides
whether pyarrow's CSV reader may read a file, and the mapped file it reads.

The scan must call a file single-spaced exactly when every line is fields joined by single spaces
(``str.split`` and a CSV reader then split it alike); whatever it decides, ``read_run`` must give the
line reader's rows, values and errors. Files here are small and the scan's blocks tiny, so that
pairs of bytes straddle blocks.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from ragaudit.errors import MetricError
from ragaudit.metrics import _runfile, io

_FIELD = r"[^\x00-\x20]+"


def _single_reference(data: bytes) -> tuple[bool, bool]:
    """What :func:`_runfile._scan` must say, line by line in Python."""
    kept = any(b < 9 or 14 <= b < 28 for b in data)
    if kept:
        return True, False
    if re.search(rb"\r(?!\n)", data):
        return False, False
    lines = data.split(b"\n")
    for line in lines:
        line = line[:-1] if line.endswith(b"\r") else line
        if line and (line.startswith(b"#") or not re.fullmatch(rf"{_FIELD}( {_FIELD})*".encode(), line)):
            return False, False
    return False, True


def _variant(rng: random.Random) -> bytes:
    seps = [" "] * 12 + ["  ", "\t", " \t", "\x0b", "\x1c"]
    ends = ["\n"] * 8 + ["\r\n", "\r", " \n", "\n\n", "\n#c\n", "\n\x01"]
    lines = []
    for i in range(rng.randint(1, 6)):
        fields = [f"q{i % 3}", "Q0", rng.choice(["d1", "d2", "dé", "d#3", "#d"]), str(i + 1), str(rng.random()), "t"]
        lead = rng.choice(["", "", "", " ", "#"])
        lines.append(lead + "".join(f + (rng.choice(seps) if k < 5 else "") for k, f in enumerate(fields)))
        lines.append(rng.choice(ends))
    return "".join(lines).encode("utf-8")


@pytest.mark.parametrize("block", [1, 2, 7, 1 << 24])
def test_the_scan_calls_single_spaced_exactly_the_single_spaced_files(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(_runfile, "_BLOCK_BYTES", block)
    rng = random.Random(block)
    fixed = [b"", b" ", b"#", b"q Q0 d 1 0.5 t", b" q Q0 d 1 0.5 t\n", b"q Q0 d 1 0.5 t \n", b"q Q0 d 1 0.5 t\r",
             b"q Q0 d 1 0.5 t\r\n\r\n", b"\n\nq Q0 d 1 0.5 t\n", b"q\tQ0 d 1 0.5 t\n", b"q Q0 d 1 0.5 t\n#x\n"]
    for data in fixed + [_variant(rng) for _ in range(400)]:
        assert _runfile._scan(np.frombuffer(data, dtype=np.uint8)) == _single_reference(data), data


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """read_run's result (or error message) through the fast path and through the line reader."""

    def read() -> object:
        try:
            run = io.read_run(path)
        except MetricError as exc:
            return str(exc)
        ids = [[v.decode() if isinstance(v, bytes) else str(v) for v in c.tolist()] for c in (run.qids, run.docids)]
        return ids, run.scores.tolist()

    fast = read()
    with monkeypatch.context() as patched:
        patched.setattr(io, "trec_columns", lambda data, name: None)
        slow = read()
    return fast, slow


def test_every_spacing_reads_as_the_line_reader_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_runfile, "_BLOCK_BYTES", 16)  # many blocks: lines never split across two
    rng = random.Random(7)
    path = tmp_path / "run.trec"
    for _ in range(300):
        path.write_bytes(_variant(rng))
        fast, slow = _read_both(path, monkeypatch)
        assert fast == slow, path.read_bytes()


def test_a_mapped_file_reads_as_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = "".join(f"q{i // 7} Q0 doc-{i * 13 % 97} {i % 7 + 1} {1 / (i + 1)!r} run\n" for i in range(5_000))
    plain, bom = tmp_path / "plain.trec", tmp_path / "bom.trec"
    plain.write_text(lines, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + lines.encode("utf-8"))
    mapped = _runfile.mapped(plain)
    assert mapped is not None and len(mapped) == len(lines)
    assert _runfile.mapped(bom) is None  # the reader strips the mark from a copy
    empty = tmp_path / "empty.trec"
    empty.write_bytes(b"")
    assert _runfile.mapped(empty) is None and _runfile.mapped(tmp_path / "absent.trec") is None
    with pytest.raises(MetricError, match="is empty"):
        io.read_run(empty)
    want = _read_both(plain, monkeypatch)
    assert want[0] == want[1]
    assert _read_both(bom, monkeypatch) == want
    with monkeypatch.context() as patched:
        patched.setattr(io, "mapped", lambda path: None)  # read into bytes instead
        assert _read_both(plain, monkeypatch) == want
    # Nothing read points into the mapping: the run outlives it unchanged.
    run = io.read_run(plain)
    first = (run.qids[:3].tolist(), run.docids[:3].tolist(), run.scores[:3].tolist())
    del mapped
    assert (run.qids[:3].tolist(), run.docids[:3].tolist(), run.scores[:3].tolist()) == first
