"""What a trace backend's answer must look like to count as delivered.

A 2xx status alone is not proof: a proxy or single sign-on page in front of the backend answers 200
with an HTML login page, and the scores never arrive. A backend's API answers JSON; anything else
is a failure, counted like any other (``export_errors``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["ResponseCheck", "check_response"]


@dataclass(frozen=True, slots=True)
class ResponseCheck:
    """The expected answer: a 2xx status and a JSON object (or array) body holding *required_keys*;
    an empty body only with 204 No Content."""

    required_keys: tuple[str, ...] = ()


def check_response(response: Any, check: ResponseCheck) -> str | None:
    """None when *response* (an ``httpx.Response``) looks delivered; else what is wrong, in a few words
    (never the body itself: it may quote what was sent)."""
    status = response.status_code
    if not 200 <= status < 300:
        return f"HTTP {status}"
    body = response.content
    if not body.strip():
        return None if status == 204 else "the body is empty, not the backend's JSON answer"
    content_type = response.headers.get("content-type", "")
    if "html" in content_type.lower() or body.lstrip()[:1] == b"<":
        return "the body is an HTML page, not the backend's JSON answer"
    try:
        parsed = json.loads(body)
    except ValueError:
        return f"the body is not JSON (content-type {content_type or 'none'!r})"
    if not isinstance(parsed, (dict, list)):
        return "the body is not a JSON object"
    missing = [key for key in check.required_keys if not isinstance(parsed, dict) or key not in parsed]
    if missing:
        return f"the JSON answer lacks {', '.join(missing)}"
    return None
