"""Deterministic turn sampling, shared by the Auditor (``sample_rate``) and RuleJudge (its LLM share).

It lives at the bottom floor because judges sit below the auditor and may not import it.
"""

from __future__ import annotations

import hashlib
import zlib

__all__ = ["sampled"]


def sampled(turn_id: str, sample_rate: float, salt: str = "") -> bool:
    """Whether *turn_id* falls in the sample: deterministic, so a rerun samples the same turns.

    Each sampling decision takes its own *salt*: decisions made on one hash would be one decision
    (an Auditor sampling 20 % and a TieredJudge sending 10 % to its detailed judge would send half of
    the judged turns there, not a tenth). The unsalted hash is CRC-32 (the Auditor's, unchanged since
    0.1); a salted one is BLAKE2b keyed with the salt, since CRC-32 of a salted text is the CRC-32 of
    the text XOR a constant, which would not make the decisions independent.
    """
    if sample_rate >= 1.0:
        return True
    if sample_rate <= 0.0:
        return False
    data = turn_id.encode("utf-8", "replace")
    if salt:
        digest = hashlib.blake2b(data, digest_size=8, key=salt.encode("utf-8")[:64]).digest()
        return int.from_bytes(digest, "big") / 2**64 < sample_rate
    return (zlib.crc32(data) & 0xFFFFFFFF) / 2**32 < sample_rate


