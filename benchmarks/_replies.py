"""Replies the loopback chat-completions server gives in the judge benchmarks, and their token counts.

ragaudit's judge gets its JSON verdict with a one-sentence reason. The peers' metrics (RAGAS,
DeepEval, TruLens) ask for structured output in their own shapes: a JSON schema in
``response_format`` (OpenAI structured outputs), a JSON schema quoted in the prompt, a tool to call,
or a "Score: N" line. :func:`reply_for` answers each with the smallest valid instance (one item
per list, the first value of each enum, a short sentence per string), so every peer can parse
every reply and no call is repeated because of our replies: the counts are the peers' own.

Tokens are the server's count (whitespace-separated words of every message and every returned
choice): rough, but one rule for every judge, so the ratios hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["OUR_SYSTEM_PROMPT_START", "reply_for", "session_reply", "synthesize"]

OUR_SYSTEM_PROMPT_START = "You are a strict RAG evaluator"
SENTENCE = "The answer states the return window given in the first passage."
OUR_REPLY = json.dumps({"faithfulnessScore": 0.9, "contextRelevanceScore": 0.8, "answerRelevanceScore": 0.9,
                        "reason": "The answer's claim is stated in passage [1] and addresses the question."})
_SCHEMA_IN_PROMPT = re.compile(r"JSON [Ss]chema[^{]*?(\{)", re.S)
FULL_AUDIT_SYSTEM_PROMPT_START = "You are a strict RAG evaluator. Return only JSON with faithfulnessScore, " \
    "contextRelevanceScore, answerRelevanceScore, reason, sentences and documents."
_SENTENCE_NUMBER = re.compile(r"^\(S(\d+)\) ", re.M)
_DOCUMENT_NUMBER = re.compile(r"^\[(\d+)\][^\n]*\bid=\S+", re.M)


def full_audit_reply(text: str) -> str:
    """A full-audit reply of a realistic size: the three scores, a one-sentence reason, one verdict per
    numbered answer sentence (the first supported by document 1, the others unsupported) and one grade
    per numbered document."""
    sentences = [int(n) for n in _SENTENCE_NUMBER.findall(text)]
    documents = [int(n) for n in _DOCUMENT_NUMBER.findall(text)]
    return json.dumps({
        **json.loads(OUR_REPLY),
        "sentences": [{"n": n, "verdict": "supported" if i == 0 else "unsupported", "docs": [1] if i == 0 else []}
                      for i, n in enumerate(sentences)],
        "documents": [{"n": n, "grade": 3 if i == 0 else 1} for i, n in enumerate(documents)],
    })


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, Mapping) else {}
        return _resolve(node, root) if isinstance(node, Mapping) else {}
    return schema


def synthesize(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, name: str = "") -> Any:
    """The smallest valid instance of a JSON schema: one item per array, the first enum value, 1 for
    numbers, a short sentence for strings (``"yes"`` for a field named like a verdict)."""
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            chosen = next((o for o in options if _resolve(o, root).get("type") != "null"), options[0])
            return synthesize(chosen, root, name)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {key: synthesize(sub, root, key) for key, sub in props.items()}
    if kind == "array":
        items = schema.get("items") or {"type": "string"}
        return [synthesize(items, root, name)]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if "verdict" in name.lower():
        return "yes"
    return SENTENCE


def _schema_in_text(text: str) -> Mapping[str, Any] | None:
    match = _SCHEMA_IN_PROMPT.search(text)
    if match is None:
        return None
    try:
        schema, _ = json.JSONDecoder().raw_decode(text, match.start(1))
    except ValueError:
        return None
    return schema if isinstance(schema, Mapping) else None


def _texts(body: Mapping[str, Any]) -> tuple[str, str]:
    """(system text, all message text)."""
    system, every = [], []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if not isinstance(content, str):
            continue
        every.append(content)
        if message.get("role") in ("system", "developer"):
            system.append(content)
    return "\n".join(system), "\n".join(every)


SESSION_SYSTEM_PROMPT_START = "You are a strict evaluator of conversations"
_TURN_NUMBER = re.compile(r"^Turn (\d+)$", re.M)


def session_reply(text: str) -> str:
    """A session verdict of a realistic size: resolved at the last turn, one contradiction between the
    first and the last turn's first sentences, one repeated turn, a one-sentence reason."""
    turns = [int(n) for n in _TURN_NUMBER.findall(text)] or [1]
    last = turns[-1]
    return json.dumps({"resolved": "yes", "resolvedTurn": last,
                       "contradictions": [{"turn": 1, "sentence": 1, "laterTurn": last, "laterSentence": 1}]
                       if last > 1 else [],
                       "repeated": [{"turn": last, "repeats": 1}] if last > 1 else [],
                       "reason": "The last answer met the need; it contradicts the first one on the return window."})


def reply_for(body: Mapping[str, Any]) -> dict[str, Any]:
    """``{"content": str}`` or ``{"tool_call": (name, arguments_json)}`` for one chat request."""
    system, text = _texts(body)
    if system.startswith(SESSION_SYSTEM_PROMPT_START):
        return {"content": session_reply(text)}
    if system.startswith(FULL_AUDIT_SYSTEM_PROMPT_START):
        return {"content": full_audit_reply(text)}
    if system.startswith(OUR_SYSTEM_PROMPT_START):
        return {"content": OUR_REPLY}
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping) and response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        return {"content": json.dumps(synthesize(schema))}
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        function = tools[0].get("function", {}) if isinstance(tools[0], Mapping) else {}
        arguments = synthesize(function.get("parameters") or {"type": "object"})
        return {"tool_call": (str(function.get("name", "tool")), json.dumps(arguments))}
    if system.startswith("Split the following statement into individual sentences"):
        user = text[len(system):].strip()
        return {"content": "\n".join(part.strip() for part in re.split(r"(?<=[.!?])\s+", user) if part.strip())}
    if '"criteria"' in text and '"supporting_evidence"' in text:  # TruLens graders (chain-of-thought JSON)
        return {"content": json.dumps({"criteria": SENTENCE, "supporting_evidence": SENTENCE, "score": 3})}
    schema = _schema_in_text(text)
    if schema is not None:
        return {"content": json.dumps(synthesize(schema))}
    if isinstance(response_format, Mapping) and response_format.get("type") == "json_object":
        return {"content": json.dumps({"verdict": "yes", "reason": SENTENCE, "score": 1})}
    # Free-text graders ("Score: N" with reasons); a number from 0 to 3 fits their scales.
    return {"content": f"Criteria: {SENTENCE}\nSupporting Evidence: {SENTENCE}\nScore: 3"}
