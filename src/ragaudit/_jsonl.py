"""Reading the text and JSONL files ragaudit takes (datasets, audit logs, labels, runs, qrels).

One reader, so every command says the same thing about the same fault, in one line naming the
file, the line number and what was expected:

- UTF-8; a byte-order mark at the start is accepted (Windows editors and spreadsheet exports
  write one); a byte that is not UTF-8 is an error naming its line and column;
- lines are split at ``\\n`` only (a JSON string written with ``ensure_ascii=False`` may hold
  U+2028, which ``str.splitlines`` would split at), a trailing ``\\r`` dropped;
- with *cut_tail*, a last line with no newline after it that is not valid JSON is skipped, with
  a warning: its writer was cut off mid-line (an Auditor killed while appending to its audit log).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from .errors import ConfigurationError, RagAuditError

__all__ = ["read_bytes", "read_jsonl", "read_lines"]

_logger = logging.getLogger("ragaudit")

_BOM = b"\xef\xbb\xbf"


def _decode(data: bytes, where: str, error: type[RagAuditError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{where} line {line} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
                    "expected UTF-8 text") from None


def read_bytes(path: str | os.PathLike[str], what: str, *, error: type[RagAuditError] = ConfigurationError) -> bytes:
    """The bytes of the file at *path*, a byte-order mark at the start removed (not yet decoded:
    the metrics' run reader splits runs of millions of lines as bytes)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise error(f"cannot read {what} {os.fspath(path)!r}: {exc.strerror or exc}") from exc
    return data[len(_BOM):] if data.startswith(_BOM) else data


def read_lines(path: str | os.PathLike[str], what: str, *,
               error: type[RagAuditError] = ConfigurationError) -> tuple[list[tuple[int, str]], bool]:
    """``([(line number, text), ...], ends_with_newline)`` of the file at *path*, empty lines included.

    *what* names the file in errors ("dataset", "audit log"); *error* is the exception raised
    (a [`RagAuditError`][ragaudit.RagAuditError]) for a file that cannot be read or is not UTF-8.
    """
    where = f"{what} {os.fspath(path)!r}"
    text = _decode(read_bytes(path, what, error=error), where, error)
    complete = text.endswith("\n")
    lines = text.split("\n")
    if complete or lines[-1] == "":
        lines.pop()
    return [(n, line[:-1] if line.endswith("\r") else line) for n, line in enumerate(lines, start=1)], complete


def read_jsonl(path: str | os.PathLike[str], what: str, *, error: type[RagAuditError] = ConfigurationError,
               cut_tail: bool = False, objects: bool = True) -> list[tuple[int, Any]]:
    """``[(line number, value), ...]`` of the JSON lines of *path*, blank lines skipped.

    With *objects* every value must be a JSON object; with *cut_tail* an unreadable last line
    without a newline after it is skipped (see the module docstring). Raises *error* naming the
    file and the line.
    """
    where = f"{what} {os.fspath(path)!r}"
    lines, complete = read_lines(path, what, error=error)
    out: list[tuple[int, Any]] = []
    for number, line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if cut_tail and not complete and number == lines[-1][0]:
                _logger.warning("%s: skipped a truncated last line (%d chars); the writer was probably interrupted",
                                where, len(line))
                break
            raise error(f"{where} line {number} is not valid JSON ({exc.msg} at column {exc.colno}); "
                        "expected one JSON object per line") from None
        if objects and not isinstance(value, dict):
            raise error(f"{where} line {number} is {_json_type(value)}; expected a JSON object")
        out.append((number, value))
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"
