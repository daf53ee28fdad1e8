"""Where the review queue goes to be labelled, and how the labels come back for ``ragaudit calibrate``.

* A **Phoenix dataset** (Phoenix's REST API: ``POST /v1/datasets/upload``): one example per item, the
  turn, evidence, answer and verdicts as its input, the labels to fill in as its output (``null`` until a
  person sets them in Phoenix), the turn id, reasons and trace link as its metadata.
* A **Langfuse annotation queue** (its public API: ``POST /api/public/annotation-queues/{queueId}/items``):
  one item per trace; Langfuse shows the trace (our spans carry the turn, evidence and verdicts).
* **CSV** (UTF-8 with a byte-order mark, so Excel reads it as UTF-8) and **JSONL** files, with empty
  ``label_*`` columns (``labels`` objects in JSONL) to fill in.

[`labels_from_phoenix`][ragaudit.evaluation.review_destinations.labels_from_phoenix] and
[`labels_from_file`][ragaudit.evaluation.review_destinations.labels_from_file] read the filled-in labels
back; [`write_labels`][ragaudit.evaluation.review_destinations.write_labels] writes them as the labels
JSONL ``ragaudit calibrate`` reads (``{"id": turn id, "faithfulness": 1, ...}``) and checks the file with
calibrate's own reader.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

from .._jsonl import read_jsonl
from ..content import register_secret, scrub_url
from ..errors import ConfigurationError, RagAuditError
from ..records import SCORE_NAMES
from .calibration import read_labels
from .review import ReviewItem

__all__ = ["CSV_COLUMNS", "LABEL_COLUMNS", "labels_from_file", "labels_from_phoenix", "to_langfuse_queue",
           "to_phoenix", "write_csv", "write_jsonl", "write_labels"]

PathLike = Union[str, "os.PathLike[str]"]

LABEL_COLUMNS = tuple(f"label_{name}" for name in SCORE_NAMES)
"""The CSV columns a person fills in: a score in [0, 1] or pass/fail (``ragaudit calibrate``'s words)."""

CSV_COLUMNS = ("id", "reasons", "detail", "question", "answer", "evidence", "verdicts", *SCORE_NAMES,
               "judge", "judge_reason", "trace_url", "trace_id", "timestamp", *LABEL_COLUMNS, "note")

# A cell a spreadsheet would run as a formula (CSV injection): recorded text is untrusted.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(text: str | None) -> str:
    if text is None:
        return ""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _evidence_text(item: ReviewItem) -> str:
    return "\n\n".join(f"[{d.get('rank')}] {d.get('id')}" + (f" ({d.get('source')})" if d.get("source") else "")
                       + ": " + ("(content not captured)" if d.get("content") is None else str(d.get("content")))
                       for d in item.evidence)


def _verdicts_text(item: ReviewItem) -> str:
    lines = [f"S{s.get('index')} {s.get('verdict')}: {s.get('text')}" for s in item.sentences]
    lines += [f"S{c.get('sentence')} cites [{c.get('rank')}] {c.get('doc_id')}: "
              + ("holds" if c.get("holds") else "does NOT hold" if c.get("holds") is False else "not checked")
              for c in item.citation_checks]
    return "\n".join(lines)


def write_csv(items: Iterable[ReviewItem], path: PathLike) -> int:
    """Write *items* as CSV with the columns `CSV_COLUMNS` (label columns empty); returns the row count."""
    count = 0
    with open(path, "w", encoding="utf-8-sig", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for item in items:
            scores = [("" if item.scores.get(n) is None else f"{item.scores[n]:.4g}") for n in SCORE_NAMES]
            writer.writerow([_cell(item.id), ",".join(item.reasons), _cell(item.detail), _cell(item.question),
                             _cell(item.answer), _cell(_evidence_text(item)), _cell(_verdicts_text(item)), *scores,
                             _cell(item.judge), _cell(item.judge_reason), _cell(item.trace_url),
                             _cell(item.trace_id), _cell(item.timestamp), *([""] * len(LABEL_COLUMNS)), ""])
            count += 1
    return count


def write_jsonl(items: Iterable[ReviewItem], path: PathLike) -> int:
    """Write *items* as JSONL, each with ``labels: {score: null}`` to fill in; returns the line count."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps({**item.to_dict(), "labels": dict.fromkeys(SCORE_NAMES)}, ensure_ascii=False)
                      + "\n")
            count += 1
    return count


# -- labels back ---------------------------------------------------------------------------------

def _label(value: object) -> object:
    """A filled-in label as calibrate reads it (a number, a pass/fail word, a boolean); None when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        text = value.strip().lstrip("'")
        try:
            return float(text)
        except ValueError:
            return text
    return value


def _labels_of(values: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name in SCORE_NAMES:
        value = _label(values.get(name))
        if value is not None:
            out[name] = value
    return out


def labels_from_file(path: PathLike) -> list[dict[str, Any]]:
    """The labelled items of a review CSV (its ``label_*`` columns) or JSONL (its ``labels`` objects) as
    ``[{"id": turn id, score name: label, ...}]``; items with no label are left out."""
    where = f"review file {os.fspath(path)!r}"
    out: list[dict[str, Any]] = []
    if os.fspath(path).lower().endswith(".csv"):
        try:
            with open(path, encoding="utf-8-sig", newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as exc:
            raise ConfigurationError(f"cannot read {where}: {exc}") from exc
        if rows and not {"id", *LABEL_COLUMNS} <= set(rows[0]):
            raise ConfigurationError(f"{where}: expected the columns id and {', '.join(LABEL_COLUMNS)}")
        for row in rows:
            labels = _labels_of({name: row.get(f"label_{name}") for name in SCORE_NAMES})
            if labels:
                out.append({"id": str(row["id"]).lstrip("'"), **labels})
        return out
    for number, row in read_jsonl(path, "review file"):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("labels"), dict):
            raise ConfigurationError(f"{where} line {number}: expected an item with id and a labels object")
        labels = _labels_of(row["labels"])
        if labels:
            out.append({"id": row["id"], **labels})
    return out


def write_labels(labels: Sequence[Mapping[str, Any]], path: PathLike) -> int:
    """Write *labels* as the labels JSONL ``ragaudit calibrate`` reads, then read it back with calibrate's
    reader (a label it would refuse is named now, not at calibration); returns how many ids it holds."""
    with open(path, "w", encoding="utf-8") as out:
        for entry in labels:
            out.write(json.dumps(dict(entry), ensure_ascii=False) + "\n")
    return len(read_labels(path))


# -- HTTP ----------------------------------------------------------------------------------------

def _request(method: str, url: str, *, headers: Mapping[str, str], body: Any = None, timeout_s: float,
             what: str) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Accept": "application/json", **headers,
                                              **({"Content-Type": "application/json"} if data is not None else {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise RagAuditError(f"{what}: HTTP {exc.code} from {scrub_url(url)}: {detail}") from None
    except (OSError, ValueError) as exc:
        raise RagAuditError(f"{what}: cannot reach {scrub_url(url)}: {exc}") from None
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        raise RagAuditError(f"{what}: {scrub_url(url)} did not answer JSON (check the URL and any proxy in front "
                            f"of it): {raw[:120]!r}") from None


def _phoenix(endpoint: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    endpoint = (endpoint or os.environ.get("PHOENIX_COLLECTOR_ENDPOINT") or "http://localhost:6006")
    api_key = api_key or os.environ.get("PHOENIX_API_KEY")
    register_secret(api_key)
    return (endpoint.rstrip("/").removesuffix("/v1/traces"),
            {"Authorization": f"Bearer {api_key}"} if api_key else {})


def _phoenix_dataset_id(base: str, headers: Mapping[str, str], name: str, timeout_s: float) -> str | None:
    query = urllib.parse.urlencode({"name": name})
    found = _request("GET", f"{base}/v1/datasets?{query}", headers=headers, timeout_s=timeout_s,
                     what="Phoenix datasets")
    for dataset in (found or {}).get("data") or ():
        if isinstance(dataset, Mapping) and dataset.get("name") == name:
            return str(dataset["id"])
    return None


def _phoenix_example(item: ReviewItem) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    inputs = {"question": item.question, "answer": item.answer, "evidence": [dict(d) for d in item.evidence],
              "verdicts": _verdicts_text(item), "scores": dict(item.scores), "judge_reason": item.judge_reason,
              "selected_because": item.detail}
    metadata = {"turn_id": item.id, "reasons": list(item.reasons), "trace_id": item.trace_id,
                "trace_url": item.trace_url, "judge": item.judge, "timestamp": item.timestamp,
                "stratum": item.stratum}
    return inputs, dict.fromkeys(SCORE_NAMES), metadata


def to_phoenix(items: Sequence[ReviewItem], dataset: str, *, endpoint: str | None = None,
               api_key: str | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """Upload *items* as examples of the Phoenix dataset *dataset* (created, or appended to when it exists).

    *endpoint* defaults to ``$PHOENIX_COLLECTOR_ENDPOINT`` or ``http://localhost:6006``, *api_key* to
    ``$PHOENIX_API_KEY``. Returns Phoenix's answer (``dataset_id``, ``version_id``). Raises
    [`RagAuditError`][ragaudit.RagAuditError] naming the server and its answer when the upload fails.
    """
    if not dataset:
        raise ConfigurationError("the Phoenix dataset needs a name")
    base, headers = _phoenix(endpoint, api_key)
    existing = _phoenix_dataset_id(base, headers, dataset, timeout_s)
    examples = [_phoenix_example(item) for item in items]
    body = {"action": "append" if existing else "create", "name": dataset,
            "description": "ragaudit review queue: fill in the output labels (1 pass, 0 fail, or a score)",
            "inputs": [e[0] for e in examples], "outputs": [e[1] for e in examples],
            "metadata": [e[2] for e in examples]}
    answer = _request("POST", f"{base}/v1/datasets/upload?sync=true", headers=headers, body=body,
                      timeout_s=timeout_s, what=f"Phoenix dataset {dataset!r}")
    data = (answer or {}).get("data") if isinstance(answer, Mapping) else None
    return dict(data) if isinstance(data, Mapping) else {}


def labels_from_phoenix(dataset: str, *, endpoint: str | None = None, api_key: str | None = None,
                        timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The labels set in the Phoenix dataset *dataset* (its latest version): each example's output labels
    with the turn id of its metadata, ``[{"id": turn id, score name: label, ...}]``; unlabelled examples are
    left out."""
    base, headers = _phoenix(endpoint, api_key)
    dataset_id = _phoenix_dataset_id(base, headers, dataset, timeout_s)
    if dataset_id is None:
        raise RagAuditError(f"Phoenix at {scrub_url(base)} has no dataset named {dataset!r}")
    answer = _request("GET", f"{base}/v1/datasets/{urllib.parse.quote(dataset_id)}/examples", headers=headers,
                      timeout_s=timeout_s, what=f"Phoenix dataset {dataset!r}")
    examples = ((answer or {}).get("data") or {}).get("examples") or ()
    out: list[dict[str, Any]] = []
    for example in examples:
        metadata, output = example.get("metadata") or {}, example.get("output") or {}
        turn_id = metadata.get("turn_id") if isinstance(metadata, Mapping) else None
        if not isinstance(turn_id, str) or not isinstance(output, Mapping):
            continue  # an example not made by the review queue
        labels = _labels_of(output)
        if labels:
            out.append({"id": turn_id, **labels})
    return out


def to_langfuse_queue(items: Iterable[ReviewItem], queue_id: str, *, host: str | None = None,
                      public_key: str | None = None, secret_key: str | None = None,
                      timeout_s: float = 30.0) -> dict[str, int]:
    """Add the trace of each of *items* to the Langfuse annotation queue *queue_id*.

    *host* defaults as for [`LangfuseExporter`][ragaudit.tracing.LangfuseExporter] (``$LANGFUSE_BASE_URL``,
    ``$LANGFUSE_HOST``, Langfuse Cloud), the keys to ``$LANGFUSE_PUBLIC_KEY`` / ``$LANGFUSE_SECRET_KEY``.
    Langfuse queues traces, so an item without a trace id (the app ran without tracing) is skipped and
    counted. Returns ``{"sent": n, "skipped": m}``.
    """
    from ..tracing.setup import langfuse_host

    public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
    secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
    if not public_key or not secret_key:
        raise ConfigurationError("the Langfuse queue needs public and secret keys "
                                 "(or LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY)")
    if not queue_id:
        raise ConfigurationError("the Langfuse annotation queue needs its id")
    register_secret(public_key)
    register_secret(secret_key)
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
    url = f"{langfuse_host(host)}/api/public/annotation-queues/{urllib.parse.quote(queue_id, safe='')}/items"
    sent = skipped = 0
    for item in items:
        if not item.trace_id:
            skipped += 1
            continue
        _request("POST", url, headers={"Authorization": f"Basic {token}"},
                 body={"objectId": item.trace_id, "objectType": "TRACE"}, timeout_s=timeout_s,
                 what=f"Langfuse annotation queue {queue_id!r}")
        sent += 1
    return {"sent": sent, "skipped": skipped}
