"""Calibration: how far a judge's scores agree with human labels, and how to compare judges fairly.

* [`calibrate`][ragaudit.calibrate] joins human labels and judgements by id and gives, per dimension, the agreement
  rate and Cohen's kappa at a pass threshold, balanced accuracy, Pearson and Spearman correlations,
  the confusion matrix and a verdict: kappa < 0.40 "reformulate the rubric", 0.40-0.75 "fit for
  development", > 0.75 "fit for a CI gate"; agreement below 75% adds "refine the rubric".
* `read_labels` and `read_judgements` load the inputs of ``ragaudit calibrate``: labels as
  JSONL (``id`` + a score in [0, 1] or pass/fail per dimension); judgements as an audit log (JSONL,
  ``turn_id``) or an evaluation report (JSON with ``rows``), told apart by content.
* `ZScoreNormalizer` puts a strict and a lenient judge on one scale, from each one's history.
* `consistency` runs a judge twice on the same requests and counts how often a score changes.

Everything is computed with numpy; ties in Spearman's rank correlation get average ranks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .._jsonl import read_jsonl, read_lines
from ..errors import ConfigurationError, RagAuditError
from ..judges.base import RagJudge
from ..records import SCORE_NAMES, Judgement, JudgeRequest

__all__ = [
    "AGREEMENT_FLOOR",
    "KAPPA_CI_GATE",
    "KAPPA_DEVELOPMENT",
    "CalibrationReport",
    "ConfusionMatrix",
    "ConsistencyReport",
    "DimensionCalibration",
    "DimensionConsistency",
    "ZScoreNormalizer",
    "average_ranks",
    "balanced_accuracy",
    "calibrate",
    "cohen_kappa",
    "consistency",
    "judgement_rows",
    "pearson",
    "read_judgements",
    "read_labels",
    "spearman",
    "verdicts_for",
]

KAPPA_DEVELOPMENT = 0.40
"""Below this kappa the rubric needs reformulating; from here on the judge is fit for development."""
KAPPA_CI_GATE = 0.75
"""Above this kappa the judge is fit to gate CI."""
AGREEMENT_FLOOR = 0.75
"""Below this agreement rate the rubric needs refining, whatever kappa says."""

PathLike = str | os.PathLike[str]

_PASS_WORDS = frozenset({"pass", "passed", "true", "yes", "y", "ok", "correct", "good", "1"})
_FAIL_WORDS = frozenset({"fail", "failed", "false", "no", "n", "incorrect", "bad", "0"})
_ID_KEYS = ("id", "turn_id", "row_id", "qid")
_NESTED_KEYS = ("labels", "scores", "label")
_ALIASES = {
    "faithfulness": "faithfulness",
    "faithfulnessscore": "faithfulness",
    "contextrelevance": "context_relevance",
    "contextrelevancescore": "context_relevance",
    "answerrelevance": "answer_relevance",
    "answerrelevancescore": "answer_relevance",
}
_SMALL_SAMPLE = 30


# -- statistics -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfusionMatrix:
    """Pass/fail counts with the human label as truth: ``tp`` both pass, ``tn`` both fail,
    ``fp`` the judge passes what the human failed, ``fn`` the judge fails what the human passed."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @classmethod
    def from_pairs(cls, human: Sequence[bool], judge: Sequence[bool]) -> ConfusionMatrix:
        """Count the pairs ``(human[i], judge[i])``."""
        if len(human) != len(judge):
            raise ConfigurationError(f"need as many human as judge verdicts, got {len(human)} and {len(judge)}")
        tp = sum(h and j for h, j in zip(human, judge))
        fp = sum(j and not h for h, j in zip(human, judge))
        fn = sum(h and not j for h, j in zip(human, judge))
        return cls(tp, fp, fn, len(human) - tp - fp - fn)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    def to_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn}


def _as_matrix(human: Sequence[bool] | ConfusionMatrix, judge: Sequence[bool] | None) -> ConfusionMatrix:
    if isinstance(human, ConfusionMatrix):
        return human
    if judge is None:
        raise ConfigurationError("give a ConfusionMatrix, or the human and the judge verdicts")
    return ConfusionMatrix.from_pairs(human, judge)


def cohen_kappa(human: Sequence[bool] | ConfusionMatrix, judge: Sequence[bool] | None = None) -> float | None:
    """Cohen's kappa of two pass/fail raters: ``(p_o - p_e) / (1 - p_e)``.

    None when it is undefined: no pairs, or chance agreement is 1 (both raters put everything in
    the same single class).
    """
    m = _as_matrix(human, judge)
    if m.n == 0:
        return None
    observed = (m.tp + m.tn) / m.n
    expected = ((m.tp + m.fn) * (m.tp + m.fp) + (m.fp + m.tn) * (m.fn + m.tn)) / (m.n * m.n)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1.0 - expected)


def balanced_accuracy(human: Sequence[bool] | ConfusionMatrix, judge: Sequence[bool] | None = None) -> float | None:
    """The mean of the judge's recall on human passes and on human fails (classes present only)."""
    m = _as_matrix(human, judge)
    recalls = []
    if m.tp + m.fn:
        recalls.append(m.tp / (m.tp + m.fn))
    if m.tn + m.fp:
        recalls.append(m.tn / (m.tn + m.fp))
    return sum(recalls) / len(recalls) if recalls else None


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of *values*; tied values share the mean of the ranks they span."""
    data = np.asarray(values, dtype=float)
    order = np.argsort(data, kind="mergesort")
    ordered = data[order]
    ranks = np.empty(len(data), dtype=float)
    start = 0
    while start < len(data):
        end = start
        while end + 1 < len(data) and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's correlation; None with fewer than two pairs or when either side is constant."""
    if len(x) != len(y):
        raise ConfigurationError(f"need as many x as y values, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    a = np.asarray(x, dtype=float) - np.mean(x)
    b = np.asarray(y, dtype=float) - np.mean(y)
    denominator = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    if denominator == 0.0:
        return None
    return max(-1.0, min(1.0, float(np.dot(a, b)) / denominator))


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson on average ranks); None as for `pearson`."""
    if len(x) != len(y):
        raise ConfigurationError(f"need as many x as y values, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    return pearson(list(average_ranks(x)), list(average_ranks(y)))


def verdicts_for(kappa: float | None, agreement: float | None) -> tuple[str, ...]:
    """The calibration verdicts for a kappa and an agreement rate (see the module docstring)."""
    if agreement is None:
        return ("no labelled pairs",)
    out: list[str] = []
    if kappa is None:
        out.append("kappa undefined: label and judgement fall in one class; add examples of both outcomes")
    elif kappa < KAPPA_DEVELOPMENT:
        out.append("reformulate the rubric")
    elif kappa <= KAPPA_CI_GATE:
        out.append("fit for development")
    else:
        out.append("fit for a CI gate")
    if agreement < AGREEMENT_FLOOR:
        out.append("refine the rubric")
    return tuple(out)


# -- reports --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DimensionCalibration:
    """One dimension's agreement between judge and humans over ``n`` labelled, judged pairs.

    ``agreement``, ``kappa`` and ``balanced_accuracy`` are at the pass threshold (score >= threshold
    passes); ``pearson`` and ``spearman`` are on the scores themselves. A figure that cannot be
    computed (no pairs, a constant side) is None. ``unjudged`` counts labelled, matched ids whose
    judgement has no score for this dimension (left out of every figure).
    """

    dimension: str
    n: int
    threshold: float
    agreement: float | None
    kappa: float | None
    balanced_accuracy: float | None
    pearson: float | None
    spearman: float | None
    confusion: ConfusionMatrix
    verdicts: tuple[str, ...]
    unjudged: int = 0
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        """The verdicts joined: e.g. ``"fit for development; refine the rubric"``."""
        return "; ".join(self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "n": self.n,
            "threshold": self.threshold,
            "agreement": self.agreement,
            "kappa": self.kappa,
            "balanced_accuracy": self.balanced_accuracy,
            "pearson": self.pearson,
            "spearman": self.spearman,
            "confusion": self.confusion.to_dict(),
            "verdicts": list(self.verdicts),
            "verdict": self.verdict,
            "unjudged": self.unjudged,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """Calibration of one judge against human labels, per dimension (only dimensions with labels).

    ``labelled``/``judged`` count ids in each input, ``matched`` the ids in both;
    ``unmatched_labels`` are labelled ids with no judgement (first 20).
    """

    threshold: float
    labelled: int
    judged: int
    matched: int
    dimensions: tuple[DimensionCalibration, ...]
    unmatched_labels: tuple[str, ...] = ()

    def __getitem__(self, dimension: str) -> DimensionCalibration:
        for item in self.dimensions:
            if item.dimension == dimension:
                return item
        raise KeyError(dimension)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "threshold": self.threshold,
            "labelled": self.labelled,
            "judged": self.judged,
            "matched": self.matched,
            "unmatched_labels": list(self.unmatched_labels),
            "dimensions": {d.dimension: d.to_dict() for d in self.dimensions},
        }

    def to_table(self) -> str:
        """A plain-text table, one row per dimension, with the verdicts."""
        head = (f"ragaudit calibrate: {self.labelled} labelled, {self.judged} judged, {self.matched} matched"
                f" · pass threshold {self.threshold:.2f}")
        columns = ["dimension", "n", "agree", "kappa", "bal.acc", "pearson", "spearman", "TP", "FP", "FN", "TN",
                   "verdict"]
        rows = [columns]
        for d in self.dimensions:
            c = d.confusion
            rows.append([
                d.dimension, str(d.n), _pct(d.agreement), _num(d.kappa), _num(d.balanced_accuracy),
                _num(d.pearson), _num(d.spearman), str(c.tp), str(c.fp), str(c.fn), str(c.tn), d.verdict,
            ])
        widths = [max(len(row[i]) for row in rows) for i in range(len(columns) - 1)]
        lines = [head, ""]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
            lines.append("  ".join([*cells, row[-1]]))
        lines += ["", "TP/FP/FN/TN: the judge's pass/fail against the human's (TP both pass, FP the judge passes a "
                     "human fail)"]
        notes = [f"{d.dimension}: {note}" for d in self.dimensions for note in d.notes]
        notes += [f"{d.dimension}: labelled ids judged without this score (left out): {d.unjudged}"
                  for d in self.dimensions if d.unjudged]
        if self.unmatched_labels:
            notes.append(f"labelled ids without a judgement: {self.labelled - self.matched} (e.g. "
                         + ", ".join(self.unmatched_labels[:5]) + ")")
        if notes:
            lines += ["", *notes]
        return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ConfigurationError(f"threshold must be a number in [0, 1], got {threshold!r}")
    return float(threshold)


def calibrate(
    labels: Mapping[str, Mapping[str, float | None]],
    judgements: Mapping[str, Mapping[str, float | None] | Judgement],
    *,
    threshold: float = 0.5,
    dimensions: Sequence[str] = SCORE_NAMES,
) -> CalibrationReport:
    """Agreement of *judgements* with human *labels*, joined by id, per dimension.

    *labels*: ``{id: {dimension: score in [0, 1]}}`` (pass/fail as 1.0/0.0; a dimension may be
    absent). *judgements*: ``{id: {dimension: score or None}}`` or ``{id: Judgement}``. Only
    dimensions that some label covers are reported. A score passes when it is >= *threshold*.
    """
    threshold = _check_threshold(threshold)
    judged = {key: value.scores() if isinstance(value, Judgement) else value for key, value in judgements.items()}
    matched = [key for key in labels if key in judged]
    results = []
    for name in dimensions:
        labelled_ids = [key for key in matched if labels[key].get(name) is not None]
        if not any(labels[key].get(name) is not None for key in labels):
            continue
        pairs = [(float(labels[k][name]), float(v)) for k in labelled_ids  # type: ignore[arg-type]
                 if (v := judged[k].get(name)) is not None]
        human = [h for h, _ in pairs]
        scores = [j for _, j in pairs]
        matrix = ConfusionMatrix.from_pairs([h >= threshold for h in human], [j >= threshold for j in scores])
        agreement = (matrix.tp + matrix.tn) / matrix.n if matrix.n else None
        kappa = cohen_kappa(matrix)
        notes = []
        if 0 < matrix.n < _SMALL_SAMPLE:
            notes.append(f"only {matrix.n} pairs: the figures are rough (aim for {_SMALL_SAMPLE} or more)")
        results.append(
            DimensionCalibration(
                dimension=name,
                n=matrix.n,
                threshold=threshold,
                agreement=agreement,
                kappa=kappa,
                balanced_accuracy=balanced_accuracy(matrix),
                pearson=pearson(human, scores),
                spearman=spearman(human, scores),
                confusion=matrix,
                verdicts=verdicts_for(kappa, agreement),
                unjudged=len(labelled_ids) - len(pairs),
                notes=tuple(notes),
            )
        )
    unmatched = tuple(key for key in labels if key not in judged)
    return CalibrationReport(
        threshold=threshold,
        labelled=len(labels),
        judged=len(judged),
        matched=len(matched),
        dimensions=tuple(results),
        unmatched_labels=unmatched[:20],
    )


# -- reading the inputs ---------------------------------------------------------------------------


def _norm_key(key: object) -> str:
    return str(key).replace("_", "").replace("-", "").replace(" ", "").lower()


def _row_id(row: Mapping[str, Any], where: str) -> str:
    for key in _ID_KEYS:
        value = row.get(key)
        if value is not None and not isinstance(value, (dict, list, bool)) and str(value) != "":
            return str(value)
    raise ConfigurationError(f"{where}: no id (one of {', '.join(_ID_KEYS)})")


def _dimension_values(row: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for nested in _NESTED_KEYS:
        inner = row.get(nested)
        if isinstance(inner, Mapping):
            for key, value in inner.items():
                name = _ALIASES.get(_norm_key(key))
                if name is not None:
                    found[name] = value
    for key, value in row.items():
        name = _ALIASES.get(_norm_key(key))
        if name is not None:
            found[name] = value
    return found


def _label_value(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _PASS_WORDS:
            return 1.0
        if word in _FAIL_WORDS:
            return 0.0
        try:
            value = float(word)
        except ValueError:
            raise ConfigurationError(
                f"{where}: label {value!r} is neither a score in [0, 1] nor pass/fail/true/false/1/0"
            ) from None
    if isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    raise ConfigurationError(f"{where}: label {value!r} is neither a score in [0, 1] nor pass/fail/true/false/1/0")


def _score_value(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"{where}: score {value!r} is not a number in [0, 1] or null")
    if not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{where}: score {value!r} is outside [0, 1]")
    return float(value)


def _read_text(path: PathLike, what: str) -> str:
    lines, _ = read_lines(path, what, error=RagAuditError)  # a BOM accepted, bad UTF-8 named by line
    return "\n".join(line for _, line in lines)


def read_labels(path: PathLike) -> dict[str, dict[str, float]]:
    """Human labels from JSONL: one object per line with ``id`` and a label per dimension.

    A label is a score in [0, 1] or a pass/fail word (``pass``/``fail``, ``true``/``false``,
    ``yes``/``no``, ``1``/``0``, JSON booleans), read as 1.0/0.0. Dimension keys may be
    ``faithfulness`` or ``faithfulnessScore`` (likewise for the others), at the top level or inside
    ``labels``/``scores``. A missing or null label leaves that dimension unlabelled. An id given
    twice is an error.
    """
    labels: dict[str, dict[str, float]] = {}
    for number, row in read_jsonl(path, "labels"):
        where = f"labels {str(path)!r} line {number}"
        key = _row_id(row, where)
        if key in labels:
            raise ConfigurationError(f"{where}: id {key!r} is labelled twice")
        values = {}
        for name, raw in _dimension_values(row).items():
            value = _label_value(raw, f"{where} ({name})")
            if value is not None:
                values[name] = value
        labels[key] = values
    return labels


def read_judgements(path: PathLike) -> dict[str, dict[str, float | None]]:
    """Judgements from an audit log (JSONL with ``turn_id``) or an evaluation report (JSON).

    The format is told by content: a JSON object with ``rows`` (an ``EvaluationReport``) or a JSON
    list of rows is a report, anything else is read as JSONL lines. Each row gives an id
    (``id`` or ``turn_id``) and the three scores (null when the judge gave none). When an id occurs
    twice (a turn judged again), the last line wins.
    """
    judged: dict[str, dict[str, float | None]] = {}
    for number, row in judgement_rows(path):
        where = f"judgements {str(path)!r} row {number}"
        found = _dimension_values(row)
        judged[_row_id(row, where)] = {
            name: _score_value(found.get(name), f"{where} ({name})") for name in SCORE_NAMES
        }
    return judged


def judgement_rows(path: PathLike) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a judgements file (audit log or report, told apart as `read_judgements` does), numbered."""
    text = _read_text(path, "judgements")
    stripped = text.strip()
    rows: list[tuple[int, dict[str, Any]]] | None = None
    if stripped[:1] in ("{", "["):
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and isinstance(whole.get("rows"), list):
            whole = whole["rows"]
        if isinstance(whole, list):
            rows = []
            for index, row in enumerate(whole, start=1):
                if not isinstance(row, dict):
                    raise ConfigurationError(f"judgements {str(path)!r}: row {index} is not a JSON object")
                rows.append((index, row))
    if rows is None:
        # An audit log whose writer was cut off mid-line: its last line skipped, as `ragaudit report` does.
        rows = read_jsonl(path, "judgements", cut_tail=True)
    return rows


# -- z-score normalisation ------------------------------------------------------------------------


def _score_rows(history: Iterable[Judgement | Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for item in history:
        if isinstance(item, Judgement):
            if item.error is None:
                yield item.scores()
        elif isinstance(item, Mapping):
            yield item
        else:
            raise ConfigurationError(f"history items must be Judgements or mappings, got {type(item).__name__}")


@dataclass(frozen=True, slots=True)
class ZScoreNormalizer:
    """Per-dimension z-scores of one judge, from that judge's own history.

    A strict judge that gives 0.6 where a lenient one gives 0.9 puts both at the same z-score when
    0.6 and 0.9 sit equally high in their own histories. Fit on a judge's past scores, then
    `transform` new ones: ``z = (score - mean) / std`` (population std, as
    ``scipy.stats.zscore``). A dimension with fewer than ``min_history`` past scores, or with no
    spread, cannot be normalised: it is listed in ``unfitted`` and transforms to None.
    """

    mean: Mapping[str, float]
    std: Mapping[str, float]
    count: Mapping[str, int]
    judge: str | None = None
    unfitted: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("mean", "std", "count"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "unfitted", tuple(self.unfitted))

    @classmethod
    def fit(
        cls,
        history: Iterable[Judgement | Mapping[str, Any]],
        *,
        judge: str | None = None,
        dimensions: Sequence[str] = SCORE_NAMES,
        min_history: int = 2,
    ) -> ZScoreNormalizer:
        """Learn each dimension's mean and spread from *history* (Judgements or score mappings).

        Failed judgements and None scores are left out.
        """
        if isinstance(min_history, bool) or not isinstance(min_history, int) or min_history < 2:
            raise ConfigurationError(f"min_history must be an int >= 2, got {min_history!r}")
        values: dict[str, list[float]] = {name: [] for name in dimensions}
        for row in _score_rows(history):
            for name in dimensions:
                value = row.get(name)
                if value is not None:
                    values[name].append(_score_value(value, f"history ({name})"))  # type: ignore[arg-type]
        mean, std, count, unfitted = {}, {}, {}, []
        for name, series in values.items():
            count[name] = len(series)
            spread = float(np.std(series)) if series else 0.0
            if len(series) < min_history or spread == 0.0:
                unfitted.append(name)
                continue
            mean[name] = float(np.mean(series))
            std[name] = spread
        return cls(mean=mean, std=std, count=count, judge=judge, unfitted=tuple(unfitted))

    def transform(self, scores: Judgement | Mapping[str, Any]) -> dict[str, float | None]:
        """The z-score of each fitted dimension of *scores* (None where a score or the fit is missing)."""
        row = scores.scores() if isinstance(scores, Judgement) else scores
        out: dict[str, float | None] = {}
        for name in (*self.mean, *self.unfitted):
            value = row.get(name)
            if value is None or name not in self.mean:
                out[name] = None
            else:
                out[name] = (float(value) - self.mean[name]) / self.std[name]
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (`from_dict` reads it back)."""
        return {"judge": self.judge, "mean": dict(self.mean), "std": dict(self.std), "count": dict(self.count),
                "unfitted": list(self.unfitted)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ZScoreNormalizer:
        """The normalizer saved by `to_dict`."""
        try:
            return cls(mean=data["mean"], std=data["std"], count=data.get("count", {}), judge=data.get("judge"),
                       unfitted=tuple(data.get("unfitted", ())))
        except (KeyError, TypeError) as exc:
            raise ConfigurationError(f"not a saved ZScoreNormalizer: {exc}") from exc


# -- consistency ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DimensionConsistency:
    """How one dimension's score moved between runs on the same request.

    ``n`` counts requests scored in at least two runs; ``changed`` those whose scores differ by more
    than the tolerance; ``change_rate`` is ``changed / n``; ``mean_change`` and ``max_change`` are
    over the per-request range (max - min) of the scores.
    """

    dimension: str
    n: int
    changed: int
    change_rate: float | None
    mean_change: float | None
    max_change: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "n": self.n, "changed": self.changed, "change_rate": self.change_rate,
                "mean_change": self.mean_change, "max_change": self.max_change}


@dataclass(frozen=True, slots=True)
class ConsistencyReport:
    """The result of `consistency`: per-dimension change counts and the runs that failed."""

    judge: str
    runs: int
    requests: int
    failed_runs: int
    dimensions: Mapping[str, DimensionConsistency]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dimensions", MappingProxyType(dict(self.dimensions)))

    def to_dict(self) -> dict[str, Any]:
        return {"judge": self.judge, "runs": self.runs, "requests": self.requests, "failed_runs": self.failed_runs,
                "dimensions": {k: v.to_dict() for k, v in self.dimensions.items()}}


def consistency(
    judge: RagJudge, requests: Sequence[JudgeRequest], runs: int = 2, *, tolerance: float = 1e-9
) -> ConsistencyReport:
    """Judge every request *runs* times (all requests, then all again) and count score changes.

    A failed judgement is counted in ``failed_runs`` and left out; a request needs a score from at
    least two runs to count for a dimension. Blocking: it calls ``judge.judge``.
    """
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ConfigurationError(f"runs must be an int >= 2, got {runs!r}")
    if not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise ConfigurationError(f"tolerance must be a number >= 0, got {tolerance!r}")
    requests = list(requests)
    table: list[list[Judgement]] = [[judge.judge(request) for request in requests] for _ in range(runs)]
    failed = sum(j.error is not None for row in table for j in row)
    dimensions = {}
    for name in SCORE_NAMES:
        ranges = []
        for index in range(len(requests)):
            values = [v for row in table if row[index].error is None and (v := getattr(row[index], name)) is not None]
            if len(values) >= 2:
                ranges.append(max(values) - min(values))
        changed = sum(r > tolerance for r in ranges)
        dimensions[name] = DimensionConsistency(
            dimension=name,
            n=len(ranges),
            changed=changed,
            change_rate=changed / len(ranges) if ranges else None,
            mean_change=float(np.mean(ranges)) if ranges else None,
            max_change=max(ranges) if ranges else None,
        )
    return ConsistencyReport(judge=judge.name, runs=runs, requests=len(requests), failed_runs=failed,
                             dimensions=dimensions)
