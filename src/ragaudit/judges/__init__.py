"""Judges: the :class:`RagJudge` protocol and its implementations."""

from __future__ import annotations

import os

from .base import BaseRagJudge, FakeJudge, JudgeError, RagJudge

__all__ = ["BaseRagJudge", "FakeJudge", "JudgeError", "RagJudge", "default_judge"]


def default_judge() -> RagJudge:
    """The judge used when none is given.

    :class:`~ragaudit.ChatRagJudge` when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set (model from
    ``RAGAUDIT_JUDGE_MODEL``, default ``gpt-4o-mini``), else the offline
    :class:`~ragaudit.LexicalJudge`.
    """
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from .chat import ChatRagJudge

        return ChatRagJudge(model=os.environ.get("RAGAUDIT_JUDGE_MODEL", "gpt-4o-mini"))
    from .lexical import LexicalJudge

    return LexicalJudge()
