from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.phoenix import PhoenixServer, start_phoenix


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """A real Phoenix server on loopback for the whole test session."""
    if os.environ.get("RAGAUDIT_SKIP_E2E") == "1":
        pytest.skip("RAGAUDIT_SKIP_E2E=1: end-to-end tests against a real Phoenix server are skipped")
    workdir: Path = tmp_path_factory.mktemp("phoenix")
    server = start_phoenix(workdir)
    try:
        yield server
    finally:
        server.stop()
