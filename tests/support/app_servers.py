"""The two loopback chat-completions servers of an app matrix (``tests/test_app_matrix_*.py``), as
module-scoped fixtures registered in ``tests/conftest.py``.

``app_server`` answers the app's own model calls by the requesting module's ``app_model`` fixture
(its rule: what the app's model says to each prompt); ``judge_server`` is the judge's endpoint, whose
default reply is a well-formed three-score judgement.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.llm_server import LLMServer

__all__ = ["app_server", "judge_server"]


@pytest.fixture(scope="module")
def app_server(app_model: Any) -> Iterator[LLMServer]:
    """The app's model: a loopback server answering by the module's ``app_model`` rule."""
    with LLMServer(app_model) as srv:
        yield srv


@pytest.fixture(scope="module")
def judge_server() -> Iterator[LLMServer]:
    """The judge's endpoint (its default reply is a well-formed three-score judgement)."""
    with LLMServer() as srv:
        yield srv
