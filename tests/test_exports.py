"""The public names: every lazy export resolves, the type-checking imports match the lazy table, the
version comes from the package metadata, and each renamed name still works with a DeprecationWarning."""

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


def test_evaluate_is_a_deprecated_alias_of_evaluate_pipeline() -> None:
    from ragaudit.evaluation.runner import evaluate_pipeline

    with pytest.deprecated_call(match="ragaudit.evaluate_pipeline"):
        assert ragaudit.evaluate is evaluate_pipeline  # type: ignore[attr-defined]
    evaluation = importlib.import_module("ragaudit.evaluation")
    with pytest.deprecated_call(match="ragaudit.evaluate_pipeline"):
        assert evaluation.evaluate is evaluate_pipeline
    assert "evaluate" not in ragaudit.__all__ and "evaluate" not in dir(ragaudit)


def test_metrics_command_is_a_deprecated_alias_of_the_cli_renderer() -> None:
    from ragaudit import metrics
    from ragaudit.cli.metrics import render_metrics

    with pytest.deprecated_call(match="ragaudit.cli.metrics.render_metrics"):
        assert metrics.metrics_command is render_metrics  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["calibrate", "consistency", "ZScoreNormalizer"])
def test_calibration_names_in_judges_are_deprecated(name: str) -> None:
    import ragaudit.evaluation.calibration as calibration
    import ragaudit.judges as judges

    with pytest.deprecated_call(match=f"ragaudit.evaluation.calibration.{name}"):
        assert getattr(judges, name) is getattr(calibration, name)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ragaudit.nope  # type: ignore[attr-defined]  # noqa: B018


def test_renamed_keyword_warns_and_is_passed_on() -> None:
    from ragaudit._deprecation import renamed_kwargs

    @renamed_kwargs(timeout="timeout_s")
    def wait(timeout_s: float = 1.0) -> float:
        return timeout_s

    assert wait(2.0) == wait(timeout_s=2.0) == 2.0
    with pytest.deprecated_call(match=r"wait\(timeout=...\) is deprecated.*use timeout_s="):
        assert wait(timeout=3.0) == 3.0  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="both 'timeout' and 'timeout_s'"):
        wait(timeout=3.0, timeout_s=4.0)  # type: ignore[call-arg]


def test_timeout_is_a_deprecated_alias_of_timeout_s(tmp_path: Path) -> None:
    from ragaudit import Auditor, ChatRagJudge, FakeJudge, GEvalJudge, PairwiseJudge, SqliteCache

    for cls in (ChatRagJudge, GEvalJudge, PairwiseJudge):
        with pytest.deprecated_call(match="use timeout_s="):
            judge = cls("m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout=7.0)  # type: ignore[call-arg]
        try:
            assert judge._endpoint._sync_client.timeout == 7.0
        finally:
            judge.close()
    with pytest.deprecated_call(match="use timeout_s="):
        SqliteCache(tmp_path / "c.sqlite", timeout=2.0).close()  # type: ignore[call-arg]
    auditor = Auditor(FakeJudge(lambda request: {"faithfulness": 1.0}), audit_log=None)
    try:
        with pytest.deprecated_call(match=r"Auditor.flush\(timeout=...\)"), \
                pytest.deprecated_call(match=r"Auditor.flush\(\) is deprecated"):
            assert auditor.flush(timeout=5.0)
    finally:
        with pytest.deprecated_call(match=r"Auditor.shutdown\(timeout=...\)"):
            auditor.shutdown(timeout=5.0)  # type: ignore[call-arg]


def test_flush_is_a_deprecated_alias_of_force_flush() -> None:
    # One name for flushing (OTel's force_flush); the old flush() of the Auditor and of the
    # integrations' handlers keeps working for one release and says what to call instead.
    from ragaudit import Auditor, FakeJudge, RagTurn, RetrievedDoc
    from ragaudit.integrations import llamaindex
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    auditor = Auditor(FakeJudge(lambda request: {"faithfulness": 1.0}), audit_log=None)
    try:
        auditor.submit(RagTurn(turn_id="t1", query="q", answer="a", documents=[RetrievedDoc(id="d", content="c")]))
        with pytest.deprecated_call(match=r"Auditor\.flush\(\) is deprecated.*Auditor\.force_flush\(\)"):
            assert auditor.flush(10) is True
        assert auditor.stats()["judged"] == 1  # the alias really flushed
        handler = RagAuditCallbackHandler(auditor=auditor)
        with pytest.deprecated_call(match=r"RagAuditCallbackHandler\.flush\(\) is deprecated"):
            assert handler.flush(10) is True
        with llamaindex.instrumented(auditor=auditor) as installed, \
                pytest.deprecated_call(match=r"LlamaIndexInstrumentation\.flush\(\) is deprecated"):
            assert installed.flush(timeout_s=10) is True
    finally:
        auditor.shutdown(10)
