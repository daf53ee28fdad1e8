"""trec_eval 10's own test suite, through ``metrics.evaluate`` and ``ragaudit metrics``.

The inputs and expected outputs in ``tests/data/trec_eval/`` are trec_eval's (``test/`` of
usnistgov/trec_eval at v10.0, redistributed under its licence, kept beside them). Each case below
is one ``quicktest`` line of trec_eval's Makefile whose input formats we read (not the preference,
jg or z-score ones); for every measure of its expected output that we support, every printed value
-- per query and ``all`` -- must be what we print at trec_eval's precision (``%6.4f``, integers for
the counts, ``relstring`` as a quoted string). Measures we do not support are listed, so a new
entry in ``measures.ENTRIES`` cannot be left out of this check.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ragaudit import metrics
from ragaudit.cli import main
from ragaudit.cli.metrics import render_metrics
from ragaudit.errors import MetricError

DATA = Path(__file__).parent / "data" / "trec_eval"
REPO = Path(__file__).resolve().parents[1]

# trec_eval measures (in its all_trec set and the cases' -m lists) that ragaudit does not compute.
UNSUPPORTED = {
    "runid", "num_q", "Rprec_mult", "utility", "binG", "G", "ndcg_rel", "Rndcg", "gm_bpref", "relative_P",
    "set_relative_P", "num_nonrel_judged_ret", "rbp", "rbp_resid", "unj",
}
# How trec_eval names the output of `-m name.params`: name_params. Our spelling is its -m argument.
PARAMETER_NAMES = {"ndcg_1=3,2=9,4=4.5": "ndcg.1=3,2=9,4=4.5", "11pt_avg_.25,.5,.75": "11pt_avg..25,.5,.75"}


@dataclass(frozen=True)
class Case:
    """One quicktest line: trec_eval's arguments, as ragaudit's options."""

    expected: str
    qrels: str
    run: str
    per_query: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    cli: tuple[str, ...] = ()


CASES = [
    Case("out.test", "qrels.test", "results.test"),
    Case("out.test", "qrels.test.with-comments", "results.test"),
    Case("out.comment.test", "qrels.comment.test", "results.comment.test"),
    Case("out.test.a", "qrels.test", "results.test"),
    Case("out.test.aq", "qrels.test", "results.test", per_query=True),
    Case("out.test.aqc", "qrels.test", "results.trunc", True, {"all_queries": True}, ("-c",)),
    Case("out.test.aqcM", "qrels.test", "results.trunc", True, {"all_queries": True, "max_docs_per_query": 100},
         ("-c", "-M100")),
    Case("out.test.aql", "qrels.rel_level", "results.test", True, {"relevance_level": 2}, ("-l2",)),
    Case("out.test.meas_params", "qrels.test", "results.test", per_query=True),
]
IDS = [f"{c.expected}:{c.qrels}:{c.run}" for c in CASES]


def _expected(name: str) -> dict[tuple[str, str], str]:
    """trec_eval's output: (measure, qid) -> the printed value."""
    out: dict[tuple[str, str], str] = {}
    for line in (DATA / name).read_text().splitlines():
        measure, qid, value = line.split("\t")
        out[(measure.strip(), qid)] = value
    return out


def _ours(trec_name: str) -> str | None:
    """Our spelling of a trec_eval output name, None when we do not support the measure."""
    if trec_name in PARAMETER_NAMES:
        return PARAMETER_NAMES[trec_name]
    try:
        metrics.parse_measure(trec_name)
    except MetricError:
        base = trec_name.rsplit("_", 1)[0] if trec_name[-1].isdigit() else trec_name
        assert trec_name in UNSUPPORTED or base in UNSUPPORTED, f"trec_eval measure {trec_name!r} not classified"
        return None
    return trec_name


def _printed(measure: str, value: Any) -> str:
    kind = metrics.parse_measure(measure).entry.kind
    if kind == "string":
        return f"'{value}'"
    return str(round(value)) if kind == "count" else f"{value:.4f}"


def _supported(expected: dict[tuple[str, str], str]) -> dict[str, str]:
    names = dict.fromkeys(name for name, _ in expected)
    return {name: ours for name in names if (ours := _ours(name)) is not None}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_evaluate_prints_what_trec_eval_10_prints(case: Case) -> None:
    expected = _expected(case.expected)
    names = _supported(expected)
    run, qrels = metrics.read_run(DATA / case.run), metrics.read_qrels(DATA / case.qrels)
    per = metrics.evaluate(run, qrels, list(names.values()), per_query=True, **case.options)
    summarised = [ours for ours in names.values() if metrics.parse_measure(ours).entry.aggregate != "none"]
    means = metrics.evaluate(run, qrels, summarised, **case.options)
    checked = 0
    for (name, qid), want in expected.items():
        if name not in names:
            continue
        ours = names[name]
        got = means[ours] if qid == "all" else per[qid][ours]
        assert _printed(ours, got) == want, f"{case.expected}: {name} for {qid}: ours {got!r}, trec_eval {want}"
        checked += 1
    if case.per_query:
        assert set(per) == {qid for _, qid in expected} - {"all"}
    if ("num_q", "all") in expected:  # trec_eval's count of evaluated queries
        assert int(expected[("num_q", "all")]) == len(per)
    assert checked >= len(names)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ragaudit_metrics_prints_trec_eval_10s_lines(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    expected = _expected(case.expected)
    names = _supported(expected)
    args = ["metrics", "--run", str(DATA / case.run), "--qrels", str(DATA / case.qrels), "--format", "trec"]
    for name in names.values():
        args += ["-m", name]
    code = main([*args, *case.cli, *(["-q"] if case.per_query else [])])
    assert code == 0
    printed = {(line.split("\t")[0].strip(), line.split("\t")[1]): line.split("\t")[2]
               for line in capsys.readouterr().out.splitlines()}
    ours_to_trec = {ours: name for name, ours in names.items()}
    got = {(ours_to_trec[m], qid): v for (m, qid), v in printed.items()}
    want = {key: value for key, value in expected.items() if key[0] in names}
    assert got == want


def test_the_command_line_reads_trec_eval_flags_in_a_subprocess(tmp_path: Path) -> None:
    # The -c -M100 line on the run with extra fields after its tag (results.trunc), as a user types it.
    done = subprocess.run(
        [sys.executable, "-m", "ragaudit.cli", "metrics", "--run", str(DATA / "results.trunc"), "--qrels",
         str(DATA / "qrels.test"), "-q", "-c", "-M100", "--format", "trec", "-m", "map", "-m", "num_ret",
         "-m", "bpref", "-m", "relstring"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    expected = _expected("out.test.aqcM")
    lines = done.stdout.splitlines()
    assert len(lines) == 4 * 3 + 3  # 3 queries (302 missing from the run: an empty ranking), 3 summaries
    for line in lines:
        name, qid, value = line.split("\t")
        assert expected[(name.strip(), qid)] == value, line


def test_no_summary_is_trec_evals_n(tmp_path: Path) -> None:
    text = render_metrics(DATA / "results.test", DATA / "qrels.test", ["map", "P_10"], per_query=True, fmt="trec",
                          summary=False)
    assert {line.split("\t")[1] for line in text.splitlines()} == {"301", "302", "303"}
    assert render_metrics(DATA / "results.test", DATA / "qrels.test", ["map"], fmt="trec", summary=False) == ""


def test_every_declared_measure_is_in_trec_evals_suite_or_said_not_to_be() -> None:
    covered = set()
    for case in CASES:
        covered |= {metrics.parse_measure(ours).name for ours in _supported(_expected(case.expected)).values()}
    not_in_trec_eval = {"ndcg_burges"}  # 2^label - 1 gains: checked against a plain reference elsewhere
    assert covered == set(metrics.MEASURE_NAMES) - not_in_trec_eval


def test_run_lines_with_fields_after_the_tag_are_read_as_trec_eval_reads_them() -> None:
    run = metrics.read_run(DATA / "results.trunc")
    assert len(run) == sum(1 for line in (DATA / "results.trunc").read_text().splitlines() if line.strip())
    # A TREC file's ids come as their UTF-8 bytes (read_run's docstring).
    assert run.docids[0] == b"FBIS3-27619" and run.scores[0] == 2.138276
