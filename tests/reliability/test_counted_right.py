"""Issue 25 item 6, counted right: what a sink backend answered, and audit-log lines really lost.

Each test uses only the public API that existed before the fix, so it runs (and fails) against the
code before it: a 200 with an HTML login page counted as delivered; on a full disk one lost audit
line was counted twice; after a transient error more lines were counted lost than were missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragaudit import Auditor, Judgement, LexicalJudge, RagTurn, RetrievedDoc
from ragaudit.tracing import LangfuseExporter, PhoenixExporter
from tests.support.http_recorder import HttpRecorder
from tests.support.records import judged

ROOT = Path(__file__).resolve().parents[2]
LOGIN_PAGE = b"<!doctype html><html><head><title>Sign in</title></head><body><form>...</form></body></html>"


def _turn(n: int = 1) -> RagTurn:
    docs = (RetrievedDoc(id="kb-1", content="Returns are accepted within 30 days of delivery.", rank=1),)
    return RagTurn(turn_id=f"t{n}", query="How long do I have to return an item?",
                   answer="You can return an item within 30 days of delivery.", documents=docs,
                   trace_id="ab" * 16, span_id="cd" * 8)


JUDGEMENT = Judgement(faithfulness=0.9, context_relevance=0.8, answer_relevance=0.7, reason="ok", judge="fake")


@pytest.mark.parametrize("sink_kind", ["phoenix", "langfuse"])
def test_a_200_html_login_page_is_a_failure_counted_in_export_errors(sink_kind: str) -> None:
    with HttpRecorder() as backend:
        backend.ok_body, backend.ok_content_type = LOGIN_PAGE, "text/html; charset=utf-8"
        sink = (PhoenixExporter(backend.url, max_retries=0) if sink_kind == "phoenix"
                else LangfuseExporter(backend.url, public_key="pk", secret_key="sk", max_retries=0))
        auditor = Auditor(LexicalJudge(), mode="inline", audit_log=None, exporters=[sink])
        try:
            assert auditor.submit(_turn()) == "judged"
            delivered = auditor.force_flush(10)
        finally:
            auditor.shutdown(10)
        assert backend.requests, "the sink did post"
    assert not delivered  # flush says truthfully that the scores did not arrive
    assert sink.stats()["sent"] == 0  # nothing counted as delivered: every score was answered with HTML
    assert auditor.stats()["export_errors"] >= 1
    assert sink.errors == auditor.stats()["export_errors"]


def test_a_200_json_answer_is_delivered() -> None:
    with HttpRecorder() as backend:
        sink = PhoenixExporter(backend.url, max_retries=0)
        sink.export([judged(_turn(), JUDGEMENT)])
        assert sink.force_flush(10)
        sink.shutdown()
    assert sink.errors == 0 and sink.stats()["sent"] >= 1


def _run(script: str, tmp_path: Path) -> dict[str, int]:
    import ragaudit

    # The ragaudit this test imported (so that the test runs against the code under test).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(ragaudit.__file__).parents[1]), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_PRELUDE = """
    import json, os, resource, signal
    from ragaudit import Auditor, LexicalJudge, RagTurn, RetrievedDoc

    def turn(n):
        docs = (RetrievedDoc(id="kb-1", content="Returns are accepted within 30 days of delivery.", rank=1),)
        return RagTurn(turn_id=f"t{n}", query="How long do I have to return an item?",
                       answer="You can return an item within 30 days of delivery.", documents=docs)
"""


def test_full_disk_one_lost_line_is_counted_once(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (every write fails with ENOSPC)")
    out = _run(_PRELUDE + """
    auditor = Auditor(LexicalJudge(), mode="inline", audit_log="/dev/full")
    assert auditor.submit(turn(1)) == "judged"
    auditor.shutdown(10)
    print(json.dumps(auditor.stats()))
    """, tmp_path)
    assert out["judged"] == 1
    assert out["export_errors"] == 1  # one line lost, counted once (it was counted twice)


def test_after_a_transient_error_the_lost_count_equals_the_lines_missing(tmp_path: Path) -> None:
    # A file size limit is a real refusal by the OS (EFBIG), like a full disk, and it can be lifted:
    # three lines fit, the fourth is cut short, three more are refused, then the limit goes.
    out = _run(_PRELUDE + """
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    path = "audit.jsonl"
    auditor = Auditor(LexicalJudge(), mode="inline", audit_log=path)
    for n in range(1, 4):
        auditor.submit(turn(n))
    size = os.path.getsize(path)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + (size // 3) // 3, hard))
    for n in range(4, 8):
        auditor.submit(turn(n))
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    for n in range(8, 10):
        auditor.submit(turn(n))
    auditor.shutdown(10)
    from ragaudit.tracing import read_audit_log
    lines = read_audit_log(path)
    stats = auditor.stats()
    stats["lines"] = len(lines)
    stats["distinct"] = len({line["turn_id"] for line in lines})
    print(json.dumps(stats))
    """, tmp_path)
    assert out["judged"] == 9
    assert out["lines"] == out["distinct"]  # no line written twice
    missing = out["judged"] - out["lines"]
    assert missing == 3  # lines 5-7: the cut line 4 was finished by the next write
    assert out["export_errors"] == missing
