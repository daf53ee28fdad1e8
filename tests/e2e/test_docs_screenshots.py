"""The docs' screenshots come from the real programs: the script that takes them runs here, against a
real Phoenix and headless Chromium, and each picture it writes is a real, non-blank image."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.phoenix import PHOENIX_BIN

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.timeout(900)
def test_screenshot_script_takes_every_picture_the_docs_show(tmp_path: Path) -> None:
    if os.environ.get("RAGAUDIT_SKIP_E2E") == "1":
        pytest.skip("RAGAUDIT_SKIP_E2E=1")
    if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("Chromium not found (install Debian's 'chromium' package)")
    if not PHOENIX_BIN.exists():
        pytest.skip(f"{PHOENIX_BIN} not found: run `make test` (it creates .venv-phoenix)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p)}
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_screenshots.py"), "--out", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=880)
    assert run.returncode == 0, run.stderr[-4000:]
    shown = {p.name for p in (ROOT / "docs" / "images").glob("*.png")}
    taken = {p.name for p in tmp_path.glob("*.png")}
    assert shown and shown <= taken, f"the docs show {sorted(shown - taken)} that the script did not take"
    for name in taken:
        width, height = _png_size(tmp_path / name)
        assert (width, height) == (1400, 1000)
        assert (tmp_path / name).stat().st_size > 30_000, f"{name} looks blank"
