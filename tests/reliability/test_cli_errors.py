"""Bad input to the command line (issue 25 item 7): one clear line, exit code 2, never a traceback.

Each case runs the real ``ragaudit`` command (``python -m ragaudit.cli``) in a fresh process on a
file with one fault, and checks stderr is exactly one line naming the file, the line and what was
expected; ``--debug`` adds the traceback. Files with a byte-order mark are accepted, and a cut-off
last line of an audit log is skipped by every command that reads one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)

BOM = b"\xef\xbb\xbf"
LINE = {"turn_id": "t1", "query": "How do returns work?", "answer": "30 days.", "judge": "lexical",
        "judge_status": "judged", "faithfulness": 0.9, "context_relevance": 0.8, "answer_relevance": 0.7,
        "documents": [{"id": "d1", "content": "Returns within 30 days.", "rank": 1}], "citations": []}


def ragaudit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    return subprocess.run([sys.executable, "-m", "ragaudit.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess[str], *expected: str) -> str:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]


def jsonl(*rows: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


# -- eval -----------------------------------------------------------------------------------------


def test_eval_dataset_with_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_bytes(jsonl({"question": "a?"}) + b'{"question": "caf\xe9?"}\n')
    one_line_error(ragaudit(tmp_path, "eval", "data.jsonl", "--pipeline", "app:chain"),
                   "dataset 'data.jsonl' line 2 is not valid UTF-8", "byte 0xe9 at column 18")


@pytest.mark.parametrize("source, attr, expected", [
    ('raise RuntimeError("index not built")\n', "chain",
     ("importing 'app' raised RuntimeError: index not built", "app.py line 1")),
    ("def chain(:\n    pass\n", "chain", ("app.py line 1: invalid syntax",)),
    ("def make():\n    return {}['retriever']\n", "make",
     ("the factory raised KeyError: 'retriever'", "app.py line 2")),
], ids=["raises-at-import", "syntax-error", "factory-raises"])
def test_eval_pipeline_module_that_fails_is_one_line(tmp_path: Path, source: str, attr: str,
                                                     expected: tuple[str, ...]) -> None:
    (tmp_path / "data.jsonl").write_bytes(jsonl({"question": "a?"}))
    (tmp_path / "app.py").write_text(source)
    proc = ragaudit(tmp_path, "eval", "data.jsonl", "--pipeline", f"app:{attr}", "--judge", "lexical")
    one_line_error(proc, f"--pipeline 'app:{attr}'", *expected)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_bytes(jsonl({"question": "a?"}))
    (tmp_path / "app.py").write_text('raise RuntimeError("index not built")\n')
    for args in (["--debug", "eval"], ["eval", "--debug"]):
        proc = ragaudit(tmp_path, *args, "data.jsonl", "--pipeline", "app:chain", "--judge", "lexical")
        assert proc.returncode == 2 and "Traceback (most recent call last)" in proc.stderr, proc.stderr
        assert "RuntimeError: index not built" in proc.stderr


def test_eval_dataset_with_a_bom_is_read(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_bytes(BOM + jsonl({"question": "a?"}, {"question": "b?"}))
    proc = ragaudit(tmp_path, "eval", "data.jsonl", "--dry-run", "--judge", "lexical")
    assert proc.returncode == 0, proc.stderr
    assert "dry run: 2 rows" in proc.stdout


# -- report ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, expected", [
    ("documents", 5, "'documents' is a number; expected a list of objects or null"),
    ("retrieval_metrics", [0.5], "'retrieval_metrics' is a list; expected an object or null"),
    ("faithfulness", "high", "'faithfulness' is a string; expected a number or null"),
    ("query", {"text": "q"}, "'query' is an object; expected a string or null"),
    ("citations", ["d1"], "'citations' is a list; expected a list of objects or null"),
])
def test_report_on_a_wrong_typed_field_names_line_and_field(tmp_path: Path, field: str, value: object,
                                                           expected: str) -> None:
    (tmp_path / "audit.jsonl").write_bytes(jsonl(LINE, {**LINE, "turn_id": "t2", field: value}))
    one_line_error(ragaudit(tmp_path, "report", "audit.jsonl"), "audit log 'audit.jsonl' line 2:", expected)


def test_report_on_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(jsonl(LINE) + b'{"turn_id": "t\xff"}\n')
    one_line_error(ragaudit(tmp_path, "report", "audit.jsonl"),
                   "audit log 'audit.jsonl' line 2 is not valid UTF-8 (byte 0xff at column 15)")


def test_report_on_a_line_that_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(jsonl(LINE, [1, 2]))
    one_line_error(ragaudit(tmp_path, "report", "audit.jsonl"),
                   "audit log 'audit.jsonl' line 2 is an array; expected a JSON object")


def test_report_with_a_bom_is_read(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").write_bytes(BOM + jsonl(LINE, {**LINE, "turn_id": "t2"}))
    proc = ragaudit(tmp_path, "report", "audit.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 turns in the log")


# -- calibrate and metrics ------------------------------------------------------------------------


def test_calibrate_skips_a_cut_off_last_line_as_report_does(tmp_path: Path) -> None:
    # Was: report skipped it with a warning, calibrate refused the whole file.
    cut = json.dumps({**LINE, "turn_id": "t3"})[:40].encode()
    (tmp_path / "audit.jsonl").write_bytes(jsonl(LINE, {**LINE, "turn_id": "t2"}) + cut)
    (tmp_path / "labels.jsonl").write_bytes(BOM + jsonl({"id": "t1", "faithfulness": 1},
                                                        {"id": "t2", "faithfulness": 0}))
    report = ragaudit(tmp_path, "report", "audit.jsonl")
    assert report.returncode == 0 and "truncated last line" in report.stderr, report.stderr
    calibrate = ragaudit(tmp_path, "calibrate", "labels.jsonl", "audit.jsonl", "--format", "json")
    assert calibrate.returncode == 0, calibrate.stderr
    assert "truncated last line" in calibrate.stderr
    assert json.loads(calibrate.stdout)["matched"] == 2


def test_calibrate_cut_off_line_that_is_not_last_is_an_error(tmp_path: Path) -> None:
    cut = json.dumps(LINE)[:40].encode()
    (tmp_path / "audit.jsonl").write_bytes(jsonl(LINE) + cut + b"\n" + jsonl({**LINE, "turn_id": "t2"}))
    (tmp_path / "labels.jsonl").write_bytes(jsonl({"id": "t1", "faithfulness": 1}))
    one_line_error(ragaudit(tmp_path, "calibrate", "labels.jsonl", "audit.jsonl"),
                   "judgements 'audit.jsonl' line 2 is not valid JSON", "expected one JSON object per line")


def test_metrics_jsonl_run_with_a_bom_is_read(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_bytes(BOM + jsonl({"qid": "q1", "docid": "d1", "score": 2.0},
                                                     {"qid": "q1", "docid": "d2", "score": 1.0}))
    (tmp_path / "qrels.jsonl").write_bytes(BOM + jsonl({"qid": "q1", "docid": "d2", "relevance": 1}))
    proc = ragaudit(tmp_path, "metrics", "--run", "run.jsonl", "--qrels", "qrels.jsonl", "-m", "mrr@10",
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "0.5" in proc.stdout


def test_metrics_run_with_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_bytes(jsonl({"qid": "q1", "docid": "d1", "score": 2.0})
                                         + b'{"qid": "q1", "docid": "d\xe9", "score": 1.0}\n')
    (tmp_path / "qrels.jsonl").write_bytes(jsonl({"qid": "q1", "docid": "d1", "relevance": 1}))
    one_line_error(ragaudit(tmp_path, "metrics", "--run", "run.jsonl", "--qrels", "qrels.jsonl", "-m", "mrr@10"),
                   "run file 'run.jsonl' line 2 is not valid UTF-8")
