"""Fitting a judge to human labels: per-dimension pass thresholds and few-shot examples.

`fit_judge` (``ragaudit calibrate --fit``) joins labels and judgements
by id, as [`calibrate`][ragaudit.calibrate] does, and:

1. **splits** the labelled ids into a fit part and a held-out part (*holdout*, 0.3 by default), seeded
   and stratified by label (the pass/fail pattern over the labelled dimensions), so both parts keep the
   label balance;
2. **chooses a pass threshold per dimension on the fit part only**: the one with the highest balanced
   accuracy, or, with *target_precision*, the lowest one whose precision (human passes among the judge's
   passes) reaches it. Candidates are the midpoints between adjacent distinct judge scores (and the lowest
   score); ties go to the candidate nearest the default threshold, then the lower one;
3. **picks few-shot examples from the fit part only**: the labelled disagreements (the judge passed what
   the human failed, or the reverse, at the default threshold) whose texts are known, the widest ones
   first, balanced between the two kinds, at most *max_examples*;
4. **measures agreement on the held-out part only**, before (default threshold) and after (fitted
   thresholds): kappa and balanced accuracy per dimension. The examples are never among the held-out ids.

The result is a `JudgeConfig`, saved as versioned JSON
(``{"version": 1, ...}``) and loaded by `FittedJudge`.

A human label passes when it is >= the default threshold (0.5), as in `calibrate`. A dimension
needs at least `MIN_PER_CLASS` pass and as many fail labels (matched with a judge score) to be
fitted; with fewer, the error (or the note, when another dimension could be fitted) says how many more
of each class are needed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._jsonl import read_jsonl
from ..errors import ConfigurationError, RagAuditError
from ..judges.fitted import FewShotExample, JudgeConfig
from ..records import SCORE_NAMES
from .calibration import ConfusionMatrix, PathLike, _row_id, balanced_accuracy, cohen_kappa, judgement_rows

__all__ = [
    "MIN_PER_CLASS",
    "FitResult",
    "choose_threshold",
    "fit_judge",
    "read_label_texts",
    "read_texts",
    "split_ids",
]

MIN_PER_CLASS = 10
"""Labels of each class (pass and fail) a dimension needs before it is fitted."""
DEFAULT_THRESHOLD = 0.5
_MAX_EXAMPLE_CHARS = 2_000
_TEXT_KEYS = {"query": ("query", "question", "input"), "answer": ("answer", "output", "response"),
              "context": ("context", "evidence", "knowledge")}


# -- the split and the threshold ------------------------------------------------------------------


def split_ids(labels: Mapping[str, Mapping[str, float]], *, holdout: float = 0.3, seed: int = 0,
              threshold: float = DEFAULT_THRESHOLD) -> tuple[list[str], list[str]]:
    """``(fit_ids, held_out_ids)``: seeded, stratified by the pass/fail pattern of each id's labels.

    In each stratum (ids sorted, then shuffled with ``random.Random(seed)``) ``round(len * holdout)``
    ids are held out; a stratum of one stays in the fit part.
    """
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0.0 < holdout < 1.0:
        raise ConfigurationError(f"holdout must be a number between 0 and 1 (exclusive), got {holdout!r}")
    strata: dict[tuple[tuple[str, bool], ...], list[str]] = {}
    for key in sorted(labels):
        pattern = tuple(sorted((name, value >= threshold) for name, value in labels[key].items()))
        strata.setdefault(pattern, []).append(key)
    rng = random.Random(seed)
    fit, held = [], []
    for pattern in sorted(strata):
        ids = strata[pattern]
        rng.shuffle(ids)
        cut = math.floor(len(ids) * holdout + 0.5) if len(ids) > 1 else 0
        held.extend(ids[:cut])
        fit.extend(ids[cut:])
    return sorted(fit), sorted(held)


def choose_threshold(human: Sequence[bool], scores: Sequence[float], *, target_precision: float | None = None,
                     default: float = DEFAULT_THRESHOLD) -> float | None:
    """The pass threshold for *scores* against the *human* pass/fail (see the module docstring).

    None with *target_precision* when no candidate reaches it. One sorted sweep: every candidate's
    confusion matrix comes from two binary searches.
    """
    if len(human) != len(scores) or not scores:
        raise ConfigurationError(
            f"need as many human verdicts as scores (and some), got {len(human)} and {len(scores)}")
    values = np.asarray(scores, dtype=float)
    passes = np.asarray(human, dtype=bool)
    distinct = np.unique(values)
    candidates = np.concatenate([distinct[:1], (distinct[:-1] + distinct[1:]) / 2.0])
    pos, neg = np.sort(values[passes]), np.sort(values[~passes])
    tp = len(pos) - np.searchsorted(pos, candidates, side="left")
    fp = len(neg) - np.searchsorted(neg, candidates, side="left")
    recall = tp / len(pos) if len(pos) else np.zeros(len(candidates))
    if target_precision is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), -1.0)
        objective = np.where(precision >= target_precision, recall, -1.0)
    else:
        specificity = (len(neg) - fp) / len(neg) if len(neg) else None
        objective = recall if specificity is None else (recall + specificity) / 2.0 if len(pos) else specificity
    best_value = float(np.max(objective))
    if best_value < 0:
        return None
    tied = [float(t) for t, v in zip(candidates, objective) if math.isclose(float(v), best_value, abs_tol=1e-12)]
    return min(tied, key=lambda t: (abs(t - default), t))


def _agreement(human: Sequence[bool], scores: Sequence[float], threshold: float) -> dict[str, Any]:
    matrix = ConfusionMatrix.from_pairs(list(human), [s >= threshold for s in scores])
    return {"threshold": threshold, "n": matrix.n, "kappa": cohen_kappa(matrix),
            "balanced_accuracy": balanced_accuracy(matrix), "confusion": matrix.to_dict()}


# -- the texts of the examples --------------------------------------------------------------------


def _text_of(row: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _row_texts(row: Mapping[str, Any]) -> dict[str, str] | None:
    query = _text_of(row, _TEXT_KEYS["query"])
    answer = _text_of(row, _TEXT_KEYS["answer"])
    context = _text_of(row, _TEXT_KEYS["context"])
    documents = row.get("documents")
    if context is None and isinstance(documents, list):
        parts = [f"[{i}] {doc['content']}" for i, doc in enumerate(documents, start=1)
                 if isinstance(doc, Mapping) and isinstance(doc.get("content"), str) and doc["content"]]
        context = "\n\n".join(parts) or None
    if query is None or answer is None or context is None:
        return None
    return {"query": query, "answer": answer, "context": context}


def read_texts(*paths: PathLike) -> dict[str, dict[str, str]]:
    """The question, answer and context of each id, from labels (JSONL) and judgements files.

    A row gives them as ``query``/``question``, ``answer`` and ``context``/``evidence``/``knowledge``
    or, as an audit log line does, ``documents`` (their ``content`` numbered). Rows without all three
    (content capture off, say) give nothing; the first file that has an id's texts wins.
    """
    texts: dict[str, dict[str, str]] = {}
    for path in paths:
        rows = judgement_rows(path)
        for number, row in rows:
            key = _row_id(row, f"{str(path)!r} row {number}")
            found = _row_texts(row)
            if found is not None and key not in texts:
                texts[key] = found
    return texts


def read_label_texts(path: PathLike) -> dict[str, dict[str, str]]:
    """`read_texts` for a labels JSONL file."""
    texts: dict[str, dict[str, str]] = {}
    for number, row in read_jsonl(path, "labels"):
        found = _row_texts(row)
        if found is not None:
            texts.setdefault(_row_id(row, f"labels {str(path)!r} line {number}"), found)
    return texts


# -- the fit --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitResult:
    """What `fit_judge` found: the configuration, the held-out ids and notes (dimensions not fitted)."""

    config: JudgeConfig
    fit_ids: tuple[str, ...]
    held_out_ids: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "fit": len(self.fit_ids), "held_out": len(self.held_out_ids),
                "notes": list(self.notes)}

    def to_table(self) -> str:
        """A plain-text summary: per dimension, the threshold and the held-out agreement before and after."""
        c = self.config
        lines = [f"ragaudit calibrate --fit: judge {c.judge or '(unknown)'} · {len(self.fit_ids)} labels to fit, "
                 f"{len(self.held_out_ids)} held out · {len(c.examples)} few-shot examples", "",
                 "agreement on the held-out labels only (never those used to fit):"]
        rows = [["dimension", "threshold", "kappa before", "kappa after", "bal.acc before", "bal.acc after", "n"]]
        for name, threshold in c.thresholds.items():
            before, after = c.agreement[name]["before"], c.agreement[name]["after"]
            rows.append([name, f"{before['threshold']:.3f} -> {threshold:.3f}", _num(before["kappa"]),
                         _num(after["kappa"]), _num(before["balanced_accuracy"]),
                         _num(after["balanced_accuracy"]), str(after["n"])])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
                  for r in rows]
        if self.notes:
            lines += ["", *self.notes]
        return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _shortfall(name: str, passes: int, fails: int, need: int) -> str | None:
    more = [f"{need - n} more {kind}" for n, kind in ((passes, "pass"), (fails, "fail")) if n < need]
    if not more:
        return None
    return (f"{name}: {passes} pass and {fails} fail labels matched with a judge score; a fit needs {need} of each: "
            f"label {' and '.join(more)} answers")


def _check_args(holdout: float, target_precision: float | None, max_examples: int, min_per_class: int) -> None:
    if target_precision is not None and (isinstance(target_precision, bool)
                                         or not isinstance(target_precision, (int, float))
                                         or not 0.0 < target_precision <= 1.0):
        raise ConfigurationError(f"target_precision must be a number in (0, 1], got {target_precision!r}")
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 0:
        raise ConfigurationError(f"max_examples must be an int >= 0, got {max_examples!r}")
    if isinstance(min_per_class, bool) or not isinstance(min_per_class, int) or min_per_class < 2:
        raise ConfigurationError(f"min_per_class must be an int >= 2, got {min_per_class!r}")
    split_ids({}, holdout=holdout)  # checks holdout


def _pairs(ids: Sequence[str], labels: Mapping[str, Mapping[str, float]],
           judged: Mapping[str, Mapping[str, float | None]], name: str,
           threshold: float) -> tuple[list[bool], list[float]]:
    human, scores = [], []
    for key in ids:
        label, score = labels[key].get(name), judged[key].get(name)
        if label is not None and score is not None:
            human.append(label >= threshold)
            scores.append(float(score))
    return human, scores


def fit_judge(
    labels: Mapping[str, Mapping[str, float]],
    judgements: Mapping[str, Mapping[str, float | None]],
    *,
    texts: Mapping[str, Mapping[str, str]] | None = None,
    judge: str | None = None,
    holdout: float = 0.3,
    seed: int = 0,
    target_precision: float | None = None,
    max_examples: int = 4,
    min_per_class: int = MIN_PER_CLASS,
    threshold: float = DEFAULT_THRESHOLD,
) -> FitResult:
    """Fit pass thresholds (and few-shot examples, when *texts* are known) to *labels*; see the module docstring.

    *labels* as `read_labels` gives them, *judgements* as `read_judgements`; *texts* maps an id to its
    ``query``, ``answer`` and ``context`` (`read_texts`). *threshold* is the default pass threshold: a human
    label >= it passes, and the "before" agreement uses it for the judge. Raises RagAuditError when there are no labels,
    no id in both, or too few labels in every dimension (saying how many more of each class).
    """
    _check_args(holdout, target_precision, max_examples, min_per_class)
    if not labels:
        raise RagAuditError("no labels: label some answers first (JSONL, one object per line with id and a "
                            "pass/fail or a score per dimension), then fit")
    matched = {key: labels[key] for key in labels if key in judgements}
    if not matched:
        raise RagAuditError(f"no labelled id has a judgement ({len(labels)} labelled, {len(judgements)} judged): "
                            "check that the label ids are the turn ids of the audit log or the row ids of the report")
    fitted, notes = [], []
    for name in SCORE_NAMES:
        human, _ = _pairs(sorted(matched), matched, judgements, name, threshold)
        if not human:
            continue
        short = _shortfall(name, sum(human), len(human) - sum(human), min_per_class)
        if short is None:
            fitted.append(name)
        else:
            notes.append(short)
    if not fitted:
        if not notes:
            raise RagAuditError("no labelled id has both a label and a judge score in any dimension")
        raise RagAuditError("too few labels to fit:\n" + "\n".join(notes))
    usable = {key: {n: v for n, v in value.items() if n in fitted} for key, value in matched.items()}
    fit_ids, held_ids = split_ids({k: v for k, v in usable.items() if v}, holdout=holdout, seed=seed,
                                  threshold=threshold)
    thresholds, agreement, counts = {}, {}, {}
    for name in fitted:
        human, scores = _pairs(fit_ids, usable, judgements, name, threshold)
        chosen = choose_threshold(human, scores, target_precision=target_precision, default=threshold)
        if chosen is None:
            notes.append(f"{name}: no threshold reaches precision {target_precision:g} on the fit part; the "
                         f"default {threshold:g} is kept")
            chosen = threshold
        thresholds[name] = chosen
        held_human, held_scores = _pairs(held_ids, usable, judgements, name, threshold)
        agreement[name] = {"before": _agreement(held_human, held_scores, threshold),
                           "after": _agreement(held_human, held_scores, chosen)}
        all_human = human + held_human
        counts[name] = {"pass": sum(all_human), "fail": len(all_human) - sum(all_human), "fit": len(human),
                        "held_out": len(held_human)}
    examples = _examples(fit_ids, usable, judgements, texts or {}, max_examples, threshold)
    settings = {"holdout": holdout, "seed": seed, "default_threshold": threshold,
                "objective": "balanced_accuracy" if target_precision is None else f"precision>={target_precision:g}",
                "min_per_class": min_per_class}
    config = JudgeConfig(thresholds=thresholds, examples=examples, judge=judge, label_counts=counts,
                         agreement=agreement, settings=settings)
    return FitResult(config, tuple(fit_ids), tuple(held_ids), tuple(notes))


def _examples(fit_ids: Sequence[str], labels: Mapping[str, Mapping[str, float]],
              judged: Mapping[str, Mapping[str, float | None]], texts: Mapping[str, Mapping[str, str]],
              limit: int, threshold: float) -> tuple[FewShotExample, ...]:
    """The labelled disagreements of the fit part, widest first, alternating judge-too-lenient and too-strict."""
    lenient: list[tuple[float, str]] = []
    strict: list[tuple[float, str]] = []
    for key in fit_ids:
        if key not in texts:
            continue
        gaps = [(float(score) - label, name) for name, label in labels[key].items()
                if (score := judged[key].get(name)) is not None
                and (label >= threshold) != (score >= threshold)]
        if gaps:
            gap = max(gaps, key=lambda g: abs(g[0]))[0]
            (lenient if gap > 0 else strict).append((-abs(gap), key))
    lenient.sort()
    strict.sort()
    chosen: list[str] = []
    while len(chosen) < limit and (lenient or strict):
        for pool in (lenient, strict):
            if pool and len(chosen) < limit:
                chosen.append(pool.pop(0)[1])
    out = []
    for key in chosen:
        text = texts[key]
        out.append(FewShotExample(id=key, query=text["query"][:_MAX_EXAMPLE_CHARS],
                                  answer=text["answer"][:_MAX_EXAMPLE_CHARS],
                                  context=text["context"][:_MAX_EXAMPLE_CHARS], labels=dict(labels[key]),
                                  judge_scores={n: judged[key].get(n) for n in labels[key]}))
    return tuple(out)
