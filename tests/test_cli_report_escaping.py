"""The command line shows recorded text's terminal control characters instead of obeying them.

Recorded text is untrusted: an answer, a document, a judge's reason or a question id may carry an
OSC title sequence, a clear-screen, a carriage return that overwrites the line, a C1 CSI. Every
subcommand's standard output goes through one escaping writer (``ragaudit.cli.main``).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ragaudit import Auditor, FakeJudge, RagTurn, RetrievedDoc
from ragaudit.cli import main
from tests.support.llm_server import LLMServer, judgement_json

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[1A answer\r\x9b31m"
RAW = "\x1b\x07\r\x9b"


def shown_not_obeyed(text: str) -> None:
    assert not any(ch in text for ch in RAW), repr(text)
    assert "\\x1b]0;pwned\\x07" in text and "\\x1b[2J" in text and "\\r" not in text.replace("\\x0d", "")


def test_cli_report_escapes_terminal_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    with Auditor(FakeJudge(lambda r: {"faithfulness": 0.5, "reason": "why \x1b[8mhidden"}), mode="inline",
                 audit_log=log) as auditor:
        auditor.submit(RagTurn(turn_id="t\x1b[0m1", query="q\x1b[31m?", answer=HOSTILE,
                               documents=(RetrievedDoc(id="d1", content="text", rank=1),)))
    assert main(["report", str(log)]) == 0
    text = capsys.readouterr().out
    shown_not_obeyed(text)
    assert "\\x1b[8mhidden" in text and "\\x9b31m" in text


_JUDGE_SYSTEM = "You are a strict RAG evaluator"


def _hostile_model(request: Mapping[str, Any]) -> str:
    """The generator answers with terminal escapes; the judge quotes them in its reason."""
    messages = request.get("messages") or []
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    if system.startswith(_JUDGE_SYSTEM):
        return judgement_json(0.2, 0.9, 0.6, reason=f"The answer says {HOSTILE} which the context never says.")
    return f"Returns are accepted {HOSTILE} within 30 days [1]."


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_demo_output_escapes_recorded_answers_and_reasons(framework: str, tmp_path: Path) -> None:
    out = io.StringIO()
    with LLMServer(rule=_hostile_model) as server, pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("OPENAI_", "OTEL_EXPORTER_OTLP", "RAGAUDIT_")):
                mp.delenv(name)
        mp.setenv("OPENAI_BASE_URL", server.base_url)
        mp.setenv("OPENAI_API_KEY", "test-key")
        with contextlib.redirect_stdout(out):
            code = main(["demo", "--framework", framework, "--traces", str(tmp_path / "t.jsonl"),
                         "--audit-log", str(tmp_path / "a.jsonl")])
    text = out.getvalue()
    assert code == 0, text
    assert "Faithfulness < 0.5" in text and "which the context never says" in text  # the reason is printed
    shown_not_obeyed(text)
    recorded = (tmp_path / "a.jsonl").read_text()
    assert "\\u001b]0;pwned" in recorded  # the audit log kept the text as it was (JSON-escaped)


def test_eval_output_escapes_dataset_questions_and_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({"id": "r\x1b[2J1", "question": f"When does the apple orchard open? {HOSTILE}"})
                       + "\n")
    code = main(["eval", str(dataset), "--pipeline", "tests.test_evaluation:build_keyword_chain",
                 "--judge", "tests.test_evaluation:low_faithfulness_judge", "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0
    assert "apple orchard" in text
    shown_not_obeyed(text)


def test_metrics_per_query_output_escapes_query_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qid = "q\x1b]0;pwned\x07\x1b[2J\x9b1"
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.trec"
    run.write_text(f"{qid} Q0 d1 1 0.9 r\n")
    qrels.write_text(f"{qid} 0 d1 1\n")
    assert main(["metrics", "--run", str(run), "--qrels", str(qrels), "-m", "mrr@10", "--per-query"]) == 0
    text = capsys.readouterr().out
    assert "1.0000" in text
    assert not any(ch in text for ch in RAW) and "\\x1b[2J" in text
