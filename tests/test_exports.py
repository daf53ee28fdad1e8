"""The public names: every lazy export resolves, the type-checking imports match the lazy table, the
version comes from the package metadata, and the names renamed before the first release have no alias."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import ragaudit

PACKAGES = ("ragaudit", "ragaudit.judges")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("package", PACKAGES)
def test_type_checking_imports_match_the_lazy_table(package: str) -> None:
    # The lazy table (_EXPORTS) is what runs; the `if TYPE_CHECKING:` block is what type checkers see.
    # They must name the same things, so neither can drift from the other.
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
    typed = {alias.asname or alias.name
             for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
             for stmt in node.body if isinstance(stmt, ast.ImportFrom) for alias in stmt.names}
    assert typed == set(module._EXPORTS)


def test_import_ragaudit_stays_light() -> None:
    code = ("import sys, ragaudit; heavy = [m for m in ('openai', 'langchain_core', 'llama_index.core', "
            "'opentelemetry.sdk', 'importlib.metadata', 'ragaudit.judges.chat') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_is_the_package_metadata() -> None:
    assert ragaudit.__version__ == importlib.metadata.version("ragaudit")


def test_cli_version_is_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    from ragaudit.cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"ragaudit {importlib.metadata.version('ragaudit')}"


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ragaudit.nope  # type: ignore[attr-defined]  # noqa: B018


# Names renamed before the first release (0.2.0) have no alias (issue 49; CHANGELOG "Removed").
OLD_MODULE_NAMES = [("ragaudit", "evaluate"), ("ragaudit.evaluation", "evaluate"),
                    ("ragaudit.metrics", "metrics_command"), ("ragaudit.judges", "calibrate"),
                    ("ragaudit.judges", "consistency"), ("ragaudit.judges", "ZScoreNormalizer"),
                    ("ragaudit.turn_audit", "judged_metrics"), ("ragaudit.turn_audit", "judged_labels"),
                    ("ragaudit.turn_audit", "JUDGED_MEASURES"), ("ragaudit.turn_audit", "JUDGED_PREFIX"),
                    ("ragaudit.tracing.conventions", "ERROR_TYPE_TURN_ERROR"),
                    # one name per role: exporters are exporters everywhere
                    ("ragaudit.tracing", "HttpSink"), ("ragaudit.tracing", "PhoenixSink"),
                    ("ragaudit.tracing", "LangfuseSink"), ("ragaudit.tracing", "sinks"),
                    ("ragaudit.tracing.evaluation_logs", "EvaluationLogSink"),
                    ("ragaudit.auditor", "JudgementSink"), ("ragaudit.auditor", "BaseJudgementSink"),
                    # one session type per job: the public value is Sessions
                    ("ragaudit", "SessionTracking"), ("ragaudit.auditor", "SessionTracking")]
OLD_MEMBERS = [("ragaudit:Auditor", ("flush", "flush_turns", "content", "attach_source", "defer")),
               ("ragaudit:ChatRagJudge", ("protocol_name", "full_audit")),
               ("ragaudit.evaluation:RowResult", ("judged_metrics",)),
               ("ragaudit.tracing:SpanRecorder", ("content", "retrieval_span_ids")),
               ("ragaudit.tracing:AuditLog", ("content",)),
               ("ragaudit.tracing.http_exporters:HttpExporter", ("content", "emit", "bind_recorder", "requests")),
               ("ragaudit.content:ContentPolicy", ("content",)),
               ("ragaudit.integrations.langchain:RagAuditCallbackHandler", ("flush",)),
               ("ragaudit.integrations.llamaindex:LlamaIndexInstrumentation", ("flush",))]


@pytest.mark.parametrize(("module", "old"), OLD_MODULE_NAMES)
def test_names_renamed_before_the_first_release_are_gone(module: str, old: str) -> None:
    assert not hasattr(importlib.import_module(module), old)


@pytest.mark.parametrize(("owner", "old"), OLD_MEMBERS)
def test_members_renamed_before_the_first_release_are_gone(owner: str, old: tuple[str, ...]) -> None:
    module, _, name = owner.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert [member for member in old if hasattr(cls, member)] == []


@pytest.mark.parametrize("module", ["ragaudit.online", "ragaudit.judged", "ragaudit.tracing.sinks", "ragaudit._sink"])
def test_modules_renamed_before_the_first_release_are_gone(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_keywords_renamed_before_the_first_release_are_refused(tmp_path: Path) -> None:
    from ragaudit import Auditor, ChatRagJudge, SqliteCache
    from ragaudit.integrations.otlp import Worker
    from ragaudit.metrics import evaluate

    with pytest.raises(TypeError, match="timeout"):
        ChatRagJudge("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=7.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="timeout"):
        SqliteCache(tmp_path / "c.sqlite", timeout=2.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="judged_only"):
        evaluate({"q": {"d": 1.0}}, {"q": {"d": 1}}, ["map"], judged_only=False)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="sinks"):
        Auditor(audit_log=None, sinks=[])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="sinks"):
        Worker(sinks=[])  # type: ignore[call-arg]
