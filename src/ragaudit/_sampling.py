"""Deterministic turn sampling, shared by the Auditor (``sample_rate``) and RuleJudge (its LLM share).

It lives at the bottom floor because judges sit below the auditor and may not import it.
"""

from __future__ import annotations

import zlib

__all__ = ["sampled"]


def sampled(turn_id: str, sample_rate: float) -> bool:
    """Whether *turn_id* falls in the sample: deterministic, so a rerun samples the same turns."""
    if sample_rate >= 1.0:
        return True
    if sample_rate <= 0.0:
        return False
    return (zlib.crc32(turn_id.encode("utf-8", "replace")) & 0xFFFFFFFF) / 2**32 < sample_rate


