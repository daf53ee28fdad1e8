"""Reading runs and qrels (TREC text or JSONL, detected from the content) and the ``metrics`` command.

Formats:

- TREC run: ``qid Q0 docid rank score tag`` per line (the rank column is ignored, as trec_eval
  ignores it; a missing tag is allowed, and so are fields after the tag, which trec_eval ignores
  too, as in its own ``results.trunc`` test input).
- TREC qrels: ``qid iteration docid relevance`` per line.
- JSONL run: one ``{"qid": ..., "docid": ..., "score": ...}`` object per line.
- JSONL qrels: ``{"qid": ..., "docid": ..., "relevance": ...}`` per line, or one line per query
  with ``{"qid": ..., "qrels": {docid: label}}`` or ``{"qid": ..., "relevant_ids": [docid, ...]}``.

``query_id``/``doc_id`` are accepted for ``qid``/``docid``, ``rel``/``label`` for ``relevance``.
Blank lines and lines starting with ``#`` are skipped. Errors name the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._jsonl import read_bytes, read_lines
from ..errors import MetricError
from ._runfile import mapped, trec_columns
from .retrieval import Run

__all__ = ["read_qrels", "read_run"]

_QID_KEYS = ("qid", "query_id")
_DOC_KEYS = ("docid", "doc_id")
_LABEL_KEYS = ("relevance", "rel", "label")


def _lines(path: str | os.PathLike[str], what: str) -> list[tuple[int, str]]:
    # One reader for every input file: a BOM accepted, a byte that is not UTF-8 named by line and column.
    lines, _ = read_lines(path, f"{what} file", error=MetricError)
    out = [(i, line) for i, line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not out:
        raise MetricError(f"{what} file {os.fspath(path)!r} is empty")
    return out


def _is_jsonl(lines: list[tuple[int, str]]) -> bool:
    return lines[0][1].lstrip().startswith("{")


def _json_rows(path: str | os.PathLike[str], lines: list[tuple[int, str]]) -> Iterable[tuple[int, dict[str, Any]]]:
    for lineno, line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MetricError(f"{os.fspath(path)}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise MetricError(f"{os.fspath(path)}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def _field(row: dict[str, Any], keys: Sequence[str], where: str, what: str) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    raise MetricError(f"{where}: no {what} (looked for {', '.join(repr(k) for k in keys)})")


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a run file (TREC ``qid Q0 docid rank score tag`` or JSONL ``{qid, docid, score}``).

    The format is detected from the content. Returns a [`Run`][ragaudit.metrics.Run] (columns,
    rows in file order, duplicates kept so [`evaluate`][ragaudit.metrics.evaluate] can refuse them).
    A TREC file's ids come as byte strings (numpy ``S``, their UTF-8): read straight from the
    file's bytes, a run of millions of lines is never split into Python strings, and holds a
    quarter of the memory numpy's ``U`` strings would.
    Raises [`MetricError`][ragaudit.MetricError] naming the file and line for anything malformed,
    including a qrels file passed by mistake.
    """
    name = os.fspath(path)
    data = mapped(path)
    fast = trec_columns(data if data is not None else read_bytes(path, "run file", error=MetricError), name)
    del data  # unmapped once nothing else holds it
    if fast is not None:
        return Run(*fast)
    lines = _lines(path, "run")
    qids: list[str] = []
    docids: list[str] = []
    raw_scores: list[Any] = []
    if _is_jsonl(lines):
        for lineno, row in _json_rows(path, lines):
            where = f"{name}:{lineno}"
            if "score" not in row and any(k in row for k in (*_LABEL_KEYS, "qrels", "relevant_ids")):
                raise MetricError(f"{where}: this looks like a qrels file (no 'score'), not a run")
            qids.append(str(_field(row, _QID_KEYS, where, "query id")))
            docids.append(str(_field(row, _DOC_KEYS, where, "doc id")))
            score = _field(row, ("score",), where, "score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise MetricError(f"{where}: score must be a number, got {score!r}")
            raw_scores.append(score)
    else:
        for lineno, line in lines:
            fields = line.split()
            if len(fields) < 5:  # fields after the tag are ignored, as trec_eval ignores them
                hint = " (this looks like a qrels file)" if len(fields) == 4 else ""
                raise MetricError(
                    f"{name}:{lineno}: expected 'qid Q0 docid rank score tag', got {line.strip()!r}{hint}"
                )
            qids.append(fields[0])
            docids.append(fields[2])
            raw_scores.append(fields[4])
    try:
        scores = np.array(raw_scores, dtype=np.float64)
    except ValueError:
        for (lineno, _), value in zip(lines, raw_scores):
            try:
                float(value)
            except ValueError:
                raise MetricError(f"{name}:{lineno}: score {value!r} is not a number") from None
        raise
    bad = np.flatnonzero(np.isnan(scores))
    if len(bad):
        raise MetricError(f"{name}:{lines[int(bad[0])][0]}: score is NaN")
    return Run(np.array(qids, dtype=str), np.array(docids, dtype=str), scores)


def _label(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise MetricError(f"{where}: relevance must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise MetricError(f"{where}: relevance must be an integer, got {value!r}")


def read_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Read a qrels file (TREC ``qid iter docid rel`` or JSONL) into ``{qid: {docid: label}}``.

    The format is detected from the content. A doc judged twice for one query with different
    labels is an error; the same label twice is accepted. Raises
    [`MetricError`][ragaudit.MetricError] naming the file and line for anything malformed.
    """
    name = os.fspath(path)
    lines = _lines(path, "qrels")
    qrels: dict[str, dict[str, int]] = {}

    def add(qid: Any, docid: Any, label: int, where: str) -> None:
        docs = qrels.setdefault(str(qid), {})
        key = str(docid)
        if key in docs and docs[key] != label:
            raise MetricError(f"{where}: query {str(qid)!r}, doc {key!r} judged twice ({docs[key]} and {label})")
        docs[key] = label

    if _is_jsonl(lines):
        for lineno, row in _json_rows(path, lines):
            where = f"{name}:{lineno}"
            qid = _field(row, _QID_KEYS, where, "query id")
            if "qrels" in row and isinstance(row["qrels"], dict):
                for docid, value in row["qrels"].items():
                    add(qid, docid, _label(value, where), where)
            elif "relevant_ids" in row and isinstance(row["relevant_ids"], list):
                for docid in row["relevant_ids"]:
                    add(qid, docid, 1, where)
            else:
                if "score" in row and not any(k in row for k in _LABEL_KEYS):
                    raise MetricError(f"{where}: this looks like a run file (a 'score', no relevance), not qrels")
                add(
                    qid,
                    _field(row, _DOC_KEYS, where, "doc id"),
                    _label(_field(row, _LABEL_KEYS, where, "relevance"), where),
                    where,
                )
    else:
        for lineno, line in lines:
            fields = line.split()
            where = f"{name}:{lineno}"
            if len(fields) != 4:
                hint = " (this looks like a run file)" if len(fields) in (5, 6) else ""
                raise MetricError(f"{where}: expected 'qid iteration docid relevance', got {line.strip()!r}{hint}")
            add(fields[0], fields[2], _label(fields[3], where), where)
    return qrels
