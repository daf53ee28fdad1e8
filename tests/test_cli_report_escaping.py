"""``ragaudit report`` shows recorded text's terminal control characters instead of obeying them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragaudit import Auditor, FakeJudge, RagTurn, RetrievedDoc
from ragaudit.cli import main


def test_cli_report_escapes_terminal_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    hostile = "\x1b]0;pwned\x07\x1b[2J\x1b[1A answer\r\x9b31m"
    with Auditor(FakeJudge(lambda r: {"faithfulness": 0.5, "reason": "why \x1b[8mhidden"}), mode="inline",
                 audit_log=log) as auditor:
        auditor.submit(RagTurn(turn_id="t\x1b[0m1", query="q\x1b[31m?", answer=hostile,
                               documents=(RetrievedDoc(id="d1", content="text", rank=1),)))
    assert main(["report", str(log)]) == 0
    text = capsys.readouterr().out
    assert not any(ch in text for ch in "\x1b\x07\r\x9b")  # shown, not obeyed
    assert "\\x1b[2J" in text and "\\x1b[8mhidden" in text and "\\x9b31m" in text
