"""Session verdict cost: the one judge call over a conversation against the sum of its turns' verdicts.

    python benchmarks/session_cost.py           # 3 conversations each of 4 and of 8 turns
    python benchmarks/session_cost.py --quick   # 1 conversation of 4 turns

Method. The loopback server process of the judge cost table (``benchmarks/judge_throughput.py``:
``ServerProcess``, tokens are its count of whitespace-separated words of every message and reply, the
rule of every cost table in BENCHMARKS.md; characters too, which words undercount for JSON), the real
``openai`` SDK and ``ChatRagJudge`` (the default full audit). A conversation of N turns is the judge
cost table's turns (``make_turns``: a question, a one- or two-sentence answer with a ``[1]`` marker,
k = 4 documents), each turn asked with the conversation so far as its history, as a chat app sends
it. Each turn is judged (one call each, what ragaudit does for every turn anyway), then the session
(one call, ``judge_session``: every question and answer sentence, no documents). The server answers
the full audit with one verdict per sentence and one grade per document, and the session with one
contradiction and one repeated turn (``benchmarks/_replies.py``: the replies' real shapes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import machine_info, print_machine, write_result
from benchmarks.judge_throughput import MODEL, TOP_K, ServerProcess, make_turns

from ragaudit import ChatRagJudge, JudgeRequest
from ragaudit.content import ContentPolicy
from ragaudit.sessions import SessionRequest, SessionTurn
from ragaudit.turn_audit import audit_record


def _counts(server: ServerProcess) -> tuple[int, int, int]:
    stats = server.command("stats")
    server.command("reset")
    return stats["chat_calls"], stats["prompt_tokens"], stats["completion_tokens"]


def conversation(size: int, offset: int) -> list[Any]:
    """*size* turns of the cost table, each with the conversation so far as its history."""
    from dataclasses import replace

    turns, history = [], []
    for turn in make_turns(offset + size)[offset:]:
        turns.append(replace(turn, history=tuple(history)))
        history += [("user", turn.query), ("assistant", turn.answer or "")]
    return turns


def run_session(judge: ChatRagJudge, server: ServerProcess, size: int, offset: int) -> dict[str, Any]:
    """Judge one conversation turn by turn, then as a whole; the tokens and characters of each part."""
    policy = ContentPolicy()
    records, turn_chars = [], 0
    for turn in conversation(size, offset):
        request = JudgeRequest.from_turn(turn)
        judgement = judge.judge(request)
        if judgement.error:
            raise RuntimeError(f"turn verdict failed: {judgement.error}")
        turn_chars += sum(len(m["content"]) for m in judge._messages(request)) + len(judgement.raw_output or "")
        records.append(audit_record(turn, judgement, policy))
    turn_calls, turn_prompt, turn_completion = _counts(server)
    request = SessionRequest(f"bench-{size}-{offset}", tuple(SessionTurn.from_record(r, i)
                                                             for i, r in enumerate(records, start=1)))
    verdict = judge.judge_session(request)
    if verdict.error or verdict.resolved is None or not verdict.contradictions:
        raise RuntimeError(f"session verdict not read: {verdict.error}")
    messages = judge.session_protocol.messages(request, max_context_chars=judge.max_context_chars)
    session_chars = sum(len(m["content"]) for m in messages) + len(verdict.raw_output or "")
    session_calls, session_prompt, session_completion = _counts(server)
    return {"turns": size, "turn_calls": turn_calls, "turn_tokens": turn_prompt + turn_completion,
            "turn_prompt_tokens": turn_prompt, "turn_completion_tokens": turn_completion, "turn_chars": turn_chars,
            "session_calls": session_calls, "session_tokens": session_prompt + session_completion,
            "session_prompt_tokens": session_prompt, "session_completion_tokens": session_completion,
            "session_chars": session_chars}


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    n = len(runs)

    def mean(key: str) -> float:
        return sum(r[key] for r in runs) / n

    return {"sessions": n, "turn_calls": mean("turn_calls"), "turn_tokens": mean("turn_tokens"),
            "session_calls": mean("session_calls"), "session_tokens": mean("session_tokens"),
            "session_prompt_tokens": mean("session_prompt_tokens"),
            "session_completion_tokens": mean("session_completion_tokens"),
            "ratio_tokens": mean("session_tokens") / mean("turn_tokens"),
            "ratio_chars": mean("session_chars") / mean("turn_chars")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one conversation of 4 turns")
    parser.add_argument("--out", help="result file (default benchmarks/results/session_cost[.quick].json)")
    args = parser.parse_args(argv)
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    plan = [(4, 0)] if args.quick else [(size, offset) for offset in (0, 2, 4) for size in (4, 8)]
    runs: dict[int, list[dict[str, Any]]] = {}
    server = ServerProcess(0.0)
    try:
        judge = ChatRagJudge(MODEL, base_url=server.base_url, api_key="dummy", max_retries=0, timeout_s=60)
        server.command("reset")
        for size, offset in plan:  # sizes interleaved: 4, 8, 4, 8, ...
            runs.setdefault(size, []).append(run_session(judge, server, size, offset))
        judge.close()
    finally:
        server.close()
    results = {str(size): summarize(rows) for size, rows in runs.items()}
    for size, row in results.items():
        print(f"{size} turns: turn verdicts {row['turn_calls']:.0f} calls, {row['turn_tokens']:.0f} tokens; "
              f"session verdict {row['session_calls']:.0f} call, {row['session_tokens']:.0f} tokens "
              f"(prompt {row['session_prompt_tokens']:.0f}, completion {row['session_completion_tokens']:.0f}); "
              f"session / turns: {row['ratio_tokens']:.3f} tokens, {row['ratio_chars']:.3f} characters")
    write_result("session_cost", {
        "machine": info,
        "load_average": {"before": load_before, "after": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "config": {"plan": plan, "top_k": TOP_K, "model": MODEL, "protocol": "full-audit + session",
                   "token_unit": "server count: whitespace-separated words of messages and replies"},
        "results": results, "runs": runs,
    }, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
