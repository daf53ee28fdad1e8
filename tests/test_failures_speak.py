"""Issue 44 item 2: a judge that fails is said on stderr in a script that configured no logging.

Each test runs a real script in a fresh interpreter (no logging configured, as most scripts and notebooks
are), with ``ChatRagJudge`` on the real ``openai`` SDK pointed at the loopback chat-completions server
answering HTTP 500, or at a port nobody listens on. Before issue 44 the package's ``NullHandler`` swallowed
the warning: the script printed its answer and exited 0, and stderr was empty.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.llm_server import Fault, LLMServer

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
{setup}
from ragaudit import Auditor, ChatRagJudge, RagTurn, RetrievedDoc

judge = ChatRagJudge("judge-model-x", base_url=sys.argv[1], max_retries=0, timeout_s=10)
auditor = Auditor(judge{audit_log})
for n in range(3):
    auditor.submit(RagTurn(turn_id=f"t{{n}}", query="How long do I have to return an item?",
                           answer="Within 30 days [returns].",
                           documents=(RetrievedDoc(id="returns", content="Returns within 30 days."),)))
auditor.force_flush(30)
print("failed:", auditor.stats()["failed"])
auditor.shutdown(10)
"""


def _run(tmp_path: Path, base_url: str, *, setup: str = "", audit_log: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(SCRIPT.format(setup=setup, audit_log=audit_log)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAGAUDIT_", "OTEL_"))}
    env.update(OPENAI_API_KEY="sk-test-secret-1234", PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, str(script), base_url], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def _failing_server() -> LLMServer:
    return LLMServer(rule=lambda body: Fault.server_error(500))


def test_a_failing_judge_is_said_on_stderr_without_logging_configured(tmp_path: Path) -> None:
    with _failing_server() as srv:
        url = srv.base_url
        run = _run(tmp_path, url)
    assert run.returncode == 0, run.stderr
    assert "failed: 3" in run.stdout
    lines = [line for line in run.stderr.splitlines() if "judging failed" in line]
    assert len(lines) == 1, run.stderr  # the first failure at once; the summary waits for its interval
    line = lines[0]
    assert "HTTP 500" in line and "failing on its side" in line
    assert "judge-model-x" in line and url.rstrip("/") in line  # the model and the URL
    assert "OPENAI_API_KEY set" in line and "sk-test-secret" not in line  # whether a key is set, never the key
    assert f"the audit log {tmp_path / 'ragaudit-audit.jsonl'}" in line  # where each error is recorded


def test_without_an_audit_log_the_line_points_at_stats_and_the_span(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    run = _run(tmp_path, dead, audit_log=", audit_log=None")
    assert run.returncode == 0, run.stderr
    line = next(line for line in run.stderr.splitlines() if "judging failed" in line)
    assert "APIConnectionError" in line and "cannot be reached" in line and dead in line
    assert 'Auditor.stats()["failed"]' in line and "ragaudit.judge span" in line and "audit log /" not in line


def test_an_app_that_configured_logging_gets_the_line_once_in_its_own_format(tmp_path: Path) -> None:
    with _failing_server() as srv:
        run = _run(tmp_path, srv.base_url, setup="import logging; logging.basicConfig(format='APP %(message)s')")
    lines = [line for line in run.stderr.splitlines() if "judging failed" in line]
    assert len(lines) == 1 and lines[0].startswith("APP ragaudit: judging failed"), run.stderr


def test_an_app_that_silenced_ragaudit_hears_nothing(tmp_path: Path) -> None:
    with _failing_server() as srv:
        run = _run(tmp_path, srv.base_url,
                   setup="import logging; logging.getLogger('ragaudit').setLevel(logging.ERROR)")
    assert run.returncode == 0 and "failed: 3" in run.stdout
    assert "judging" not in run.stderr, run.stderr
