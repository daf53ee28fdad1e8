"""The first judgement of a process says, once, at INFO, which judge is in use, where the audit log is
and whether spans are exported (issue 29: a newcomer could not tell where to look)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    from ragaudit import Auditor, FakeJudge, RagTurn, RetrievedDoc
    if sys.argv[1] == "sdk":
        from ragaudit import tracing
        tracing.configure(console=False, file="spans.jsonl")
    auditor = Auditor(FakeJudge(lambda request: {"faithfulness": 1.0}), audit_log="audit.jsonl")
    doc = RetrievedDoc(id="d1", content="Returns within 30 days.", rank=1)
    for i in range(3):
        auditor.submit(RagTurn(turn_id=f"t{i}", query="q?", answer="Within 30 days.", documents=(doc,)))
    assert auditor.force_flush(10)
""")


def _run(tmp_path: Path, mode: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return [line for line in run.stderr.splitlines() if "first judgement of this process" in line]


def test_first_judgement_says_where_things_are_once(tmp_path: Path) -> None:
    said = _run(tmp_path, "bare")
    assert len(said) == 1, said
    line = said[0]
    assert line.startswith("INFO ") and "judge fake" in line
    assert str(tmp_path / "audit.jsonl") in line and "ragaudit report" in line
    assert "spans are not exported" in line and "ragaudit.tracing.configure()" in line


def test_with_a_tracer_provider_it_says_where_spans_go(tmp_path: Path) -> None:
    said = _run(tmp_path, "sdk")
    assert len(said) == 1 and "spans go to the TracerProvider in use" in said[0]
