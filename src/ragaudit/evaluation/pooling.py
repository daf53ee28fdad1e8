"""Pooled judged qrels from the document grades of many audited turns (``ragaudit qrels``).

Every fully audited turn in an audit log carries the judge's UMBRELA grade (0-3) for each document
it retrieved. Pooled over many turns — and over the audit logs of several retrievers — those grades
are qrels: ``ragaudit metrics`` can then compare the retrievers offline, **recall included, over
the pool** (a relevant document only counts when some audited turn retrieved it), with no human
labels. The rules:

- **one query id per distinct question**: the question with its whitespace collapsed and its case
  folded; the id is ``q-`` and the first 12 hex digits of its SHA-1, so the same question gets the
  same id in every run of the command and in every run file it writes;
- **disagreeing grades** (one question, one document, graded differently by different turns) are
  resolved to the **lower median** of the grades given (for 3, 1 → 1; for 3, 2, 2 → 2): a document
  has to be graded relevant by at least half of the turns that saw it to count as relevant. Every
  disagreement is counted and reported;
- a grade the judge did not give is not a grade (skipped and counted); a turn with no grades (a
  three-score judgement) contributes nothing (counted); a doc id with whitespace cannot be written
  in TREC format (skipped and counted).

With ``--runs DIR`` each audit log is also written as a TREC run (``DIR/<log name>.run``: per
question, the documents of its first turn in the log, by rank), so::

    ragaudit qrels a.jsonl b.jsonl -o judged.qrels --runs runs/
    ragaudit metrics --run runs/a.run --qrels judged.qrels -m ndcg@5 -m recall@5 --relevance-level 2
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GradeAgreement",
    "PooledQrels",
    "grade_agreement",
    "pool_qrels",
    "qid_for",
    "write_qrels",
    "write_run",
]


def qid_for(question: str) -> str:
    """The pooled query id of *question*: ``q-`` + 12 hex digits of the SHA-1 of its normalised text."""
    normalised = " ".join(question.split()).casefold()
    return "q-" + hashlib.sha1(normalised.encode("utf-8", "replace")).hexdigest()[:12]


@dataclass
class PooledQrels:
    """The pooled qrels and what pooling did. ``qrels`` is ``{qid: {doc_id: grade}}``; ``questions``
    maps each qid to the question as first seen; ``runs`` per audit log ``{qid: [doc ids by rank]}``."""

    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    questions: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    turns: int = 0
    turns_without_grades: int = 0
    grades: int = 0
    grades_missing: int = 0
    disagreements: int = 0
    skipped_ids: int = 0

    def summary(self) -> str:
        """One paragraph: what was pooled, and every count of what was resolved or left out."""
        pairs = sum(len(docs) for docs in self.qrels.values())
        return (f"{len(self.qrels)} questions, {pairs} judged documents from {self.grades} grades in "
                f"{self.turns} turns; {self.disagreements} question-document pairs graded differently "
                f"(resolved to the lower median grade); {self.turns_without_grades} turns without grades, "
                f"{self.grades_missing} grades not given, {self.skipped_ids} doc ids with whitespace skipped")


def _rank(doc: Mapping[str, Any]) -> int:
    rank = doc.get("rank")
    return rank if isinstance(rank, int) else 0


def _lower_median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def pool_qrels(entries_by_log: Mapping[str, Iterable[Mapping[str, Any]]]) -> PooledQrels:
    """Pool the document grades of the audit-log entries (``{log name: entries}``) into qrels."""
    pooled = PooledQrels()
    seen: dict[str, dict[str, list[int]]] = {}
    for log_name, entries in entries_by_log.items():
        run: dict[str, list[str]] = {}
        pooled.runs[log_name] = run
        for entry in entries:
            query = entry.get("query")
            if entry.get("kind") == "session" or not isinstance(query, str) or not query.strip():
                continue  # a judged session's line (a whole conversation) is no turn
            pooled.turns += 1
            qid = qid_for(query)
            pooled.questions.setdefault(qid, " ".join(query.split()))
            documents = [d for d in entry.get("documents") or () if isinstance(d, Mapping) and d.get("id")]
            if qid not in run:
                ranked = sorted(documents, key=_rank)
                run[qid] = [str(d["id"]) for d in ranked if not any(ch.isspace() for ch in str(d["id"]))]
            grades = [g for g in entry.get("document_grades") or () if isinstance(g, Mapping)]
            if not grades:
                pooled.turns_without_grades += 1
                continue
            for grade in grades:
                doc_id, value = grade.get("doc_id"), grade.get("grade")
                if not isinstance(doc_id, str) or not doc_id:
                    continue
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
                    pooled.grades_missing += 1
                    continue
                if any(ch.isspace() for ch in doc_id):
                    pooled.skipped_ids += 1
                    continue
                pooled.grades += 1
                seen.setdefault(qid, {}).setdefault(doc_id, []).append(value)
    for qid, docs in seen.items():
        for doc_id, values in docs.items():
            if len(set(values)) > 1:
                pooled.disagreements += 1
            pooled.qrels.setdefault(qid, {})[doc_id] = _lower_median(values)
    return pooled


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike[str]) -> None:
    """Write *qrels* as TREC ``qid 0 docid grade`` lines, sorted."""
    with open(path, "w", encoding="utf-8") as out:
        for qid in sorted(qrels):
            for doc_id in sorted(qrels[qid]):
                out.write(f"{qid} 0 {doc_id} {qrels[qid][doc_id]}\n")


def write_run(run: Mapping[str, Sequence[str]], path: str | os.PathLike[str], tag: str) -> None:
    """Write *run* (``{qid: [doc ids by rank]}``) as TREC ``qid Q0 docid rank score tag`` lines;
    score = number of documents - rank + 1, so trec_eval's order is the retriever's."""
    tag = "".join(ch if not ch.isspace() else "_" for ch in tag) or "run"
    with open(path, "w", encoding="utf-8") as out:
        for qid in sorted(run):
            docs = run[qid]
            for rank, doc_id in enumerate(docs, start=1):
                out.write(f"{qid} Q0 {doc_id} {rank} {len(docs) - rank + 1} {tag}\n")


@dataclass(frozen=True)
class GradeAgreement:
    """Human graded qrels against judged grades on the (question, document) pairs both have.

    ``agreement`` is the share of exact matches; ``weighted_kappa`` Cohen's kappa with quadratic
    weights on the 0-3 scale (None when undefined: every grade in one class); ``binary_agreement``
    the share that agree on *relevant = grade >= 2*; ``confusion[h][j]`` counts human grade *h*
    against judged grade *j*. ``human_only``/``judged_only`` count pairs only one side graded.
    """

    n: int
    agreement: float | None
    weighted_kappa: float | None
    binary_agreement: float | None
    confusion: tuple[tuple[int, ...], ...]
    human_only: int
    judged_only: int

    def to_table(self) -> str:
        """The figures and the 4x4 confusion table (rows: human grade, columns: judged grade)."""
        def pct(v: float | None) -> str:
            return "–" if v is None else f"{v:.1%}"

        kappa = "–" if self.weighted_kappa is None else f"{self.weighted_kappa:.3f}"
        lines = [f"{self.n} pairs graded by both · exact agreement {pct(self.agreement)} · quadratic weighted "
                 f"kappa {kappa} · agreement on relevant (grade >= 2) {pct(self.binary_agreement)}",
                 f"({self.human_only} pairs graded only by humans, {self.judged_only} only by the judge)",
                 "", "human \\ judged     0     1     2     3"]
        for grade, row in enumerate(self.confusion):
            lines.append(f"{grade:>14} " + " ".join(f"{n:>5}" for n in row))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"n": self.n, "agreement": self.agreement, "weighted_kappa": self.weighted_kappa,
                "binary_agreement": self.binary_agreement, "confusion": [list(r) for r in self.confusion],
                "human_only": self.human_only, "judged_only": self.judged_only}


def grade_agreement(human: Mapping[str, Mapping[str, int]], judged: Mapping[str, Mapping[str, int]]) -> GradeAgreement:
    """Compare *human* graded qrels with *judged* ones (both ``{qid: {doc_id: grade}}``, grades 0-3;
    human labels above 3 count as 3, below 0 as 0, so TREC's -1/4 scales still compare)."""
    pairs: list[tuple[int, int]] = []
    human_only = 0
    for qid, docs in human.items():
        for doc_id, label in docs.items():
            got = judged.get(qid, {}).get(doc_id)
            if got is None:
                human_only += 1
            else:
                pairs.append((min(3, max(0, int(label))), got))
    judged_only = sum(1 for qid, docs in judged.items() for doc_id in docs if doc_id not in human.get(qid, {}))
    confusion = [[0] * 4 for _ in range(4)]
    for h, j in pairs:
        confusion[h][j] += 1
    n = len(pairs)
    if not n:
        return GradeAgreement(0, None, None, None, tuple(tuple(r) for r in confusion), human_only, judged_only)
    agreement = sum(1 for h, j in pairs if h == j) / n
    binary = sum(1 for h, j in pairs if (h >= 2) == (j >= 2)) / n
    rows = [sum(confusion[i]) / n for i in range(4)]
    cols = [sum(confusion[i][k] for i in range(4)) / n for k in range(4)]
    observed = sum((i - k) ** 2 * confusion[i][k] / n for i in range(4) for k in range(4))
    expected = sum((i - k) ** 2 * rows[i] * cols[k] for i in range(4) for k in range(4))
    kappa = 1.0 - observed / expected if expected > 0 else None
    return GradeAgreement(n, agreement, kappa, binary, tuple(tuple(r) for r in confusion), human_only, judged_only)
