"""Full audit cost: prompt and completion tokens per judged answer, three-score protocol vs full audit.

    python benchmarks/full_audit_cost.py           # the 10 turns of the judge cost table
    python benchmarks/full_audit_cost.py --quick   # 2 turns

Method. The same loopback server process and the same turns as the cost table of
``benchmarks/judge_throughput.py`` (``make_turns``: a question, a one- or two-sentence answer with a
``[1]`` marker, k = 4 documents; the first 10 turns), the real ``openai`` SDK and ``ChatRagJudge``
with ``protocol="three-score"`` and ``protocol="full-audit"``, interleaved turn by turn (three-score,
full audit, three-score, ...) so both see the same server and load. Calls and tokens are the server's
log (tokens: whitespace-separated words of every message and reply -- the rule of the cost table,
so the peers' rows there compare). The server answers the full audit with one verdict per numbered
sentence and one grade per document (``benchmarks/_replies.py``, ``full_audit_reply``): the reply's
real shape. The rule of issue 16: the full audit becomes ``ChatRagJudge``'s default when its tokens
(prompt + completion) are at most 1.5x the three-score protocol's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import machine_info, print_machine, write_result
from benchmarks.judge_throughput import MODEL, TOP_K, ServerProcess, make_turns

from ragaudit import ChatRagJudge, JudgeRequest

PROTOCOLS = ("three-score", "full-audit")
DEFAULT_RULE = 1.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 turns instead of 10")
    parser.add_argument("--out", help="result file (default benchmarks/results/full_audit_cost[.quick].json)")
    args = parser.parse_args(argv)
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    turns = make_turns(2 if args.quick else 10)
    totals: dict[str, dict[str, float]] = {
        p: {"calls": 0, "prompt": 0, "completion": 0, "prompt_chars": 0, "completion_chars": 0} for p in PROTOCOLS}
    errors: dict[str, list[str]] = {p: [] for p in PROTOCOLS}
    server = ServerProcess(0.0)
    try:
        judges = {p: ChatRagJudge(MODEL, base_url=server.base_url, api_key="dummy", max_retries=0, timeout_s=60,
                                  protocol=p) for p in PROTOCOLS}
        for turn in turns:
            for protocol in PROTOCOLS:  # interleaved: one turn of each protocol in turn
                server.command("reset")
                request = JudgeRequest.from_turn(turn)
                judgement = judges[protocol].judge(request)
                # characters too: words undercount JSON punctuation, which BPE tokenizers count
                totals[protocol]["prompt_chars"] += sum(len(m["content"]) for m in judges[protocol]._messages(request))
                totals[protocol]["completion_chars"] += len(judgement.raw_output or "")
                if judgement.error:
                    errors[protocol].append(judgement.error)
                if protocol == "full-audit" and not all(s.verdict for s in judgement.sentences):
                    errors[protocol].append("a sentence verdict was not read")
                stats = server.command("stats")
                totals[protocol]["calls"] += stats["chat_calls"]
                totals[protocol]["prompt"] += stats["prompt_tokens"]
                totals[protocol]["completion"] += stats["completion_tokens"]
        for judge in judges.values():
            judge.close()
    finally:
        server.close()
    n = len(turns)
    rows = {p: {"calls_per_answer": t["calls"] / n, "prompt_tokens_per_answer": t["prompt"] / n,
                "completion_tokens_per_answer": t["completion"] / n,
                "total_tokens_per_answer": (t["prompt"] + t["completion"]) / n,
                "prompt_chars_per_answer": t["prompt_chars"] / n,
                "completion_chars_per_answer": t["completion_chars"] / n,
                "total_chars_per_answer": (t["prompt_chars"] + t["completion_chars"]) / n, "errors": errors[p]}
            for p, t in totals.items()}
    ratio = rows["full-audit"]["total_tokens_per_answer"] / rows["three-score"]["total_tokens_per_answer"]
    char_ratio = rows["full-audit"]["total_chars_per_answer"] / rows["three-score"]["total_chars_per_answer"]
    default = "full-audit" if max(ratio, char_ratio) <= DEFAULT_RULE else "three-score"
    for protocol, row in rows.items():
        print(f"{protocol:<12} calls {row['calls_per_answer']:.2f}  prompt {row['prompt_tokens_per_answer']:6.1f}"
              f"  completion {row['completion_tokens_per_answer']:5.1f}  total {row['total_tokens_per_answer']:6.1f}"
              f"  | chars prompt {row['prompt_chars_per_answer']:6.0f}"
              f" completion {row['completion_chars_per_answer']:5.0f}"
              + (f"  errors: {row['errors'][:2]}" if row["errors"] else ""))
    print(f"full audit / three-score characters: {char_ratio:.3f}")
    print(f"full audit / three-score tokens: {ratio:.3f} -> default protocol: {default} "
          f"(rule: full audit when <= {DEFAULT_RULE}x)")
    write_result("full_audit_cost", {
        "machine": info,
        "load_average": {"before": load_before, "after": os.getloadavg() if hasattr(os, "getloadavg") else None},
        "config": {"turns": n, "top_k": TOP_K, "model": MODEL, "interleaved": True,
                   "token_unit": "server count: whitespace-separated words of messages and replies"},
        "results": rows, "ratio_total_tokens": ratio, "ratio_total_chars": char_ratio, "default_protocol": default,
    }, quick=args.quick, out=args.out)
    return 0 if not any(errors.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
