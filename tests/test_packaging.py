"""`pip install .` with no extras: the CLI works and `import ragaudit` loads no framework or OTel SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("langchain", "langchain_core", "llama_index", "chromadb", "opentelemetry.sdk", "openai")


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    subprocess.run([str(py), "-m", "pip", "install", "-q", *core], check=True, timeout=600)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(ROOT)], check=True, timeout=600)
    return venv


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cli_help_and_light_import_without_extras(bare_venv: Path) -> None:
    py = bare_venv / "bin" / "python"
    installed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                               check=True).stdout.lower()
    assert "langchain" not in installed and "llama-index" not in installed and "chromadb" not in installed
    assert "opentelemetry-sdk" not in installed

    help_out = subprocess.run([str(bare_venv / "bin" / "ragaudit"), "--help"], capture_output=True, text=True,
                              timeout=60)
    assert help_out.returncode == 0, help_out.stderr
    for command in ("demo", "eval", "metrics", "report", "calibrate"):
        assert command in help_out.stdout

    code = ("import sys, ragaudit; ragaudit.RagTurn; ragaudit.FakeJudge; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith({HEAVY!r})))")
    loaded = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]"

    # a command that needs an extra says which one instead of failing with a traceback
    demo = subprocess.run([str(bare_venv / "bin" / "ragaudit"), "demo"], capture_output=True, text=True, timeout=60)
    assert demo.returncode == 2 and "pip install" in demo.stderr  # a clear hint, not a traceback
