"""The TREC run reader's fast paths against the line reader (issue 31): the C speedups' one-pass
reader (``_runfile.c``), the pure reader's byte scan that decides whether pyarrow's CSV reader may
read a file, and the mapped file they read.

Whatever a fast path does -- read a file, or decline it -- ``read_run`` must give the line reader's
rows, values and errors. The scan must call a file single-spaced exactly when every line is fields
joined by single spaces (``str.split`` and a CSV reader then split it alike). Files here are small
and the scan's blocks tiny, so that pairs of bytes straddle blocks; the C reader's 16-byte blocks
are straddled by lines of every length. Its scores must be float()'s, bit for bit, on every kind
of decimal text: the Eisel-Lemire parser settles most, Python's parser the rest.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from ragaudit.errors import MetricError
from ragaudit.metrics import _fast, _runfile, io

built = pytest.mark.skipif(_fast.speedups is None, reason="the C speedups are not built in this install")


@pytest.fixture(params=["C", "pure"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The C reader, or the pure one (the speedups turned off) -- each against the line reader."""
    if request.param == "C" and _fast.speedups is None:
        pytest.skip("the C speedups are not built in this install")
    if request.param == "pure":
        monkeypatch.setattr(_fast, "speedups", None)
    return str(request.param)

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


def test_every_spacing_reads_as_the_line_reader_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    monkeypatch.setattr(_runfile, "_BLOCK_BYTES", 16)  # many blocks: lines never split across two
    rng = random.Random(7)
    path = tmp_path / "run.trec"
    for _ in range(300):
        path.write_bytes(_variant(rng))
        fast, slow = _read_both(path, monkeypatch)
        assert fast == slow, path.read_bytes()


def test_a_mapped_file_reads_as_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
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


def _scores_text(rng: random.Random) -> list[str]:
    """Decimal texts of every kind float() reads: repr of doubles from the whole range (subnormals
    and the largest too), fixed and exponent formats, up to 25 digits with the point anywhere,
    leading and trailing zeros, signs, and halfway cases (between two doubles, to be rounded to
    even) within the 19 digits the Eisel-Lemire parser takes and beyond."""
    texts = ["0", "-0", "+0.0", "0e0", "-0.000e-5", ".5", "5.", "-.5e1", "1E+05", "007", "1e-400", "1e400",
             "-1e400", "2.2250738585072013e-308", "2.2250738585072011e-308", "4.9e-324", "1.7976931348623157e308",
             "1.7976931348623159e308", "9007199254740993", "9007199254740995", "4503599627370496.5",
             "4503599627370497.5", "562949953421312.0625", "18446744073709551615", "18446744073709551616",
             "0.1", "0.2", "0.3", "123456789012345678901234567890", "1" + "0" * 30 + "e-30"]
    for _ in range(60_000):
        bits = rng.getrandbits(64)
        value = np.frombuffer(bits.to_bytes(8, "little"), dtype=np.float64)[0]
        if np.isfinite(value):
            texts.append(repr(float(value)))
        x = rng.random() * 10 ** rng.randint(-30, 30)
        texts += [repr(x), f"{x:.6f}", f"{x:.{rng.randint(0, 19)}e}", f"{-x:.17g}"]
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        point = rng.randint(0, len(digits))
        texts.append(f"{digits[:point]}.{digits[point:]}e{rng.randint(-340, 320)}")
        k = rng.getrandbits(53) | (1 << 52)
        shift = rng.randint(0, 11)
        texts.append(f"{(2 * k + 1) / 2 ** (shift + 1):.{shift + 1}f}")  # half way between k/2**s and its neighbour
        texts.append(str(2 * k + 1 << rng.randint(0, 10)))
    return texts


@built
def test_the_c_reader_parses_scores_as_float_does() -> None:
    texts = _scores_text(random.Random(11))
    data = "".join(f"q{i // 50} Q0 d{i} {i % 50 + 1} {t} run\n" for i, t in enumerate(texts)).encode()
    read = _fast.speedups.trec_columns(data, _runfile._powers())
    assert read is not None
    got = np.frombuffer(read[4], dtype=np.float64)
    want = np.array([float(t) for t in texts])
    # Bit for bit: -0.0 is not 0.0 here, and one ulp off fails.
    assert got.view(np.uint64).tolist() == want.view(np.uint64).tolist()


@built
def test_the_c_reader_widens_grows_and_declines_as_the_line_reader_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    native = _fast.speedups
    path = tmp_path / "run.trec"
    # Wider ids after the rows the first widths come from; a long comment first (rows guessed from
    # it: too few, so the columns grow); blank lines, tabs, \r\n; lines straddling 16-byte blocks.
    lines = [f"# {'c' * 300}"] + [f"q{i % 3}\tQ0  d{i % 7} {i} {i / 7!r} tag\r" for i in range(1500)]
    lines += [f"query-{'x' * 40} Q0 doc-{'y' * 70} 1 0.5 t", "", "q1 Q0 d-last 1 2", "  q2 Q0 d 1 -3 t extra fields"]
    for ending in ("\n", ""):
        path.write_text("\n".join(lines) + ending)
        fast, slow = _read_both(path, monkeypatch)
        assert fast == slow
        run = io.read_run(path)
        assert run.qids.dtype == np.dtype("S46") and run.docids.dtype == np.dtype("S74")
    for size in range(40, 80):  # every length of a last line without \n, against the 16-byte blocks
        data = f"q1 Q0 d1 1 0.5 t\nq2 Q0 {'d' * (size - 30)} 2 0.25".encode()
        read = native.trec_columns(data, _runfile._powers())
        assert read is not None and read[5] == 2 and np.frombuffer(read[4]).tolist() == [0.5, 0.25]
        assert np.frombuffer(read[2], dtype=f"S{read[3]}")[1] == b"d" * (size - 30)
    # Declined after a good row (the line the pure reader then names, or reads): too few fields, a
    # byte that is not ASCII, a control byte str.split keeps or splits at, a score that is not a
    # plain decimal; declined alone: JSON lines, no run line at all.
    after_a_row = [b"q1 Q0 d1 1\n", b"q1 Q0 d\xc3\xa9 1 0.5 t\n", b"q1 Q0 d\x01 1 0.5 t\n", b"q1 Q0 d1 1 0.5 t\x1c\n",
                   b"q1 Q0 d1 1 nan t\n", b"q1 Q0 d1 1 inf t\n", b"q1 Q0 d1 1 1_0 t\n", b"q1 Q0 d1 1 0x10 t\n",
                   b"q1 Q0 d1 1 . t\n", b"q1 Q0 d1 1 1e t\n", b"q1 Q0 d1 1 --1 t\n"]
    alone = [b'{"qid": "q1", "docid": "d1", "score": 1}\n', b"# only a comment\n", b"\n \n"]
    for data in [b"q0 Q0 d0 1 1 t\n" + bad for bad in after_a_row] + alone:
        assert native.trec_columns(data, _runfile._powers()) is None, data
        path.write_bytes(data)
        fast, slow = _read_both(path, monkeypatch)  # the pure reader reads it, or names what is wrong
        assert fast == slow, data
    with pytest.raises(ValueError, match="powers"):
        native.trec_columns(b"q1 Q0 d1 1 0.5 t\n", b"\0" * 8)
