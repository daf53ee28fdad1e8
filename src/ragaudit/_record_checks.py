"""The checks the records run at construction, shared by the turn's side (`ragaudit.records`) and the judge's
(`ragaudit._judgement_records`): a bad value fails where it is made, with a message naming the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .errors import ConfigurationError

__all__ = ["EMPTY", "check_optional_str", "check_score", "check_time", "frozen_mapping"]

EMPTY: Mapping[str, Any] = MappingProxyType({})
"""The one empty read-only mapping of every record's unset mapping field."""


def frozen_mapping(value: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    if value is None:
        return EMPTY
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name} must be a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


def check_score(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a float in [0, 1] or None, got {value!r}")
    value = float(value)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"{name} must be in [0, 1] or None, got {value!r}")
    return value


def check_time(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigurationError(f"{name} must be epoch nanoseconds (int >= 0) or None, got {value!r}")


def check_optional_str(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string or None, got {type(value).__name__}")
