"""Judge cost: calls, prompt tokens and completion tokens per judged answer, for each judge.

    python benchmarks/judge_costs.py            # 20 demo-like turns per judge
    python benchmarks/judge_costs.py --quick    # 4 turns per judge (smoke run)

Method. Every judge runs against the loopback chat-completions server of the test suite
(``tests/support/llm_server.py``) with the real ``openai`` SDK, on demo-like turns: the embedded
demo's questions in turn, each with its top k=2 documents from the demo knowledge base (by word
overlap) and its reference answer with a ``[1]`` marker. Calls and prompt tokens are counted from
the server's request log; completion tokens are what the server reported in ``usage`` (summed from
the judgements). Tokens are the server's count: whitespace-separated words of every message and of
every returned choice -- rough, but the same rule for every judge, so the ratios hold (BPE tokens
are about 1.3 words in English). The server's replies are scripted with a realistic length per
protocol (a one-sentence reason; G-Eval's analysis of about 40 words), so completion tokens reflect
the protocol's reply shape, not a model's verbosity. Pairwise is counted per comparison.

The anchors' figures are their published call counts, quoted, with the formula evaluated at the
demo's k=2 retrieved chunks and s=3 answer sentences; they were not measured here.

Another benchmark may add judges by appending :class:`Case` objects to :data:`CASES`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks._bench import machine_info, print_machine, write_result
from benchmarks._replies import full_audit_reply
from tests.support.llm_server import LLMServer, Scripted, judgement_json

from ragaudit.demo.kb import DOCUMENTS, QUESTIONS
from ragaudit.judges.chat import ChatRagJudge
from ragaudit.judges.combinators.ensemble import ConsensusJudge, JuryJudge
from ragaudit.judges.geval import GEVAL_SYSTEM_PROMPT, GEvalJudge
from ragaudit.judges.llm.fullaudit import FULL_AUDIT_SYSTEM_PROMPT
from ragaudit.judges.pairwise import PAIRWISE_SYSTEM_PROMPT, PairwiseJudge
from ragaudit.records import JudgeRequest, RetrievedDoc

TOP_K = 2
ANSWER_SENTENCES = 3
TURNS, QUICK_TURNS = 20, 4

# -- scripted replies of a realistic length ---------------------------------------------------------

_REASON = "The answer's claim about the return window is stated in the first passage and addresses the question."
_ANALYSIS = (
    "Claims: the refund window is 30 days; the item must be unused. Both are stated in passage [1]. "
    "Passage [2] is unrelated. The answer addresses what was asked without extra claims; no contradiction."
)


def scripted_reply(body: Mapping[str, Any]) -> Scripted:
    """What a well-behaved judge model answers to each protocol."""
    messages = body.get("messages") or [{}]
    system = messages[0].get("content", "")
    if system == GEVAL_SYSTEM_PROMPT:
        if '"score": <integer 1-5>' in messages[-1].get("content", ""):
            return json.dumps({"analysis": _ANALYSIS, "score": 4, "reason": _REASON})
        return json.dumps({"analysis": _ANALYSIS, "faithfulness": 5, "context_relevance": 4,
                           "answer_relevance": 5, "reason": _REASON})
    if system == PAIRWISE_SYSTEM_PROMPT:
        return json.dumps({"winner": "A", "reason": _REASON})
    if system == FULL_AUDIT_SYSTEM_PROMPT:
        return full_audit_reply(messages[-1].get("content", ""))
    return judgement_json(0.9, 0.8, 0.9, reason=_REASON)


# -- demo-like turns --------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def demo_requests(count: int, k: int = TOP_K) -> list[JudgeRequest]:
    """*count* judge requests: the demo questions in turn, top-*k* documents by word overlap."""
    requests = []
    for index in range(count):
        question = QUESTIONS[index % len(QUESTIONS)]
        terms = _words(question.text)
        ranked = sorted(DOCUMENTS, key=lambda d: -len(terms & _words(d.text)))[:k]
        docs = tuple(RetrievedDoc(id=d.id, content=d.text, rank=r, source=d.source)
                     for r, d in enumerate(ranked, start=1))
        requests.append(JudgeRequest(query=question.text, answer=f"{question.reference_answer} [1]",
                                     context=JudgeRequest.build_context(docs), documents=docs))
    return requests


# -- the judges -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One judge configuration: how to build it against a base URL and judge one request with it."""

    name: str
    make: Callable[[str], Any]
    run: Callable[[Any, JudgeRequest], Mapping[str, int]]
    unit: str = "answer"
    note: str = ""
    server_options: Mapping[str, Any] = field(default_factory=dict)  # LLMServer options, e.g. honour_n


def _chat(base_url: str, model: str = "judge", **kwargs: Any) -> ChatRagJudge:
    return ChatRagJudge(model, base_url=base_url, max_retries=0, timeout_s=30.0, **kwargs)


def _judge(judge: Any, request: JudgeRequest) -> Mapping[str, int]:
    judgement = judge.judge(request)
    if judgement.error is not None:
        raise RuntimeError(f"{judge.name} failed on the loopback server: {judgement.error}")
    return judgement.usage


def _compare(judge: PairwiseJudge, request: JudgeRequest) -> Mapping[str, int]:
    alternative = f"{request.answer} Please note that our policies may change, so check the website."
    result = judge.compare(request.query, request.answer, alternative, request.context)
    if result.error is not None:
        raise RuntimeError(f"{judge.name} failed on the loopback server: {result.error}")
    return result.usage


CASES: list[Case] = [
    Case("ChatRagJudge, three-score protocol (one call)", lambda url: _chat(url, protocol="three-score"), _judge),
    Case("ChatRagJudge, full audit (one call: + sentence verdicts, document grades)",
         lambda url: _chat(url, protocol="full-audit"), _judge),
    Case("GEvalJudge single-call (logprobs)",
         lambda url: GEvalJudge("judge", base_url=url, max_retries=0, timeout_s=30.0), _judge),
    Case("GEvalJudge per-dimension (logprobs)",
         lambda url: GEvalJudge("judge", base_url=url, max_retries=0, timeout_s=30.0, mode="per_dimension"),
         _judge),
    Case("GEvalJudge sampling fallback, n=5 in one request",
         lambda url: GEvalJudge("judge", base_url=url, max_retries=0, timeout_s=30.0, use_logprobs=False,
                                samples=5),
         _judge, note="as after a server without logprobs was detected (detection costs one extra call, once "
         "per judge)"),
    Case("GEvalJudge sampling fallback, server without n",
         lambda url: GEvalJudge("judge", base_url=url, max_retries=0, timeout_s=30.0, use_logprobs=False,
                                samples=5),
         _judge, note="one n=5 request answered with one choice on the first turn, then 5 requests",
         server_options={"honour_n": False}),
    Case("PairwiseJudge (both orders)",
         lambda url: PairwiseJudge("judge", base_url=url, max_retries=0, timeout_s=30.0), _compare,
         unit="comparison"),
    Case("JuryJudge of 3 ChatRagJudges",
         lambda url: JuryJudge([_chat(url, f"juror-{i}", protocol="three-score") for i in range(3)]), _judge),
    Case("ConsensusJudge, ChatRagJudge x3 (temperature 0.7)",
         lambda url: ConsensusJudge(_chat(url, temperature=0.7, protocol="three-score"), n=3), _judge),
]

ANCHORS = [
    {"name": "RAGAS", "formula": "~3 + k", "calls": 3 + TOP_K},
    {"name": "DeepEval", "formula": "8 + k", "calls": 8 + TOP_K},
    {"name": "TruLens", "formula": "2 + s + k", "calls": 2 + ANSWER_SENTENCES + TOP_K},
]
"""The anchors' published call counts per judged answer (quoted, not measured)."""


def _prompt_words(request_body: Any) -> int:
    messages = request_body.get("messages") if isinstance(request_body, dict) else None
    total = 0
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content.split())
    return total


def measure(case: Case, requests: list[JudgeRequest]) -> dict[str, Any]:
    """Run *case* on every request against a fresh loopback server; figures per judged unit."""
    with LLMServer(scripted_reply, **case.server_options) as server:
        judge = case.make(server.base_url)
        try:
            usages = [case.run(judge, request) for request in requests]
        finally:
            close = getattr(judge, "close", None)
            if callable(close):
                close()
        log = server.requests
    units = len(requests)
    calls = len(log)
    prompt_tokens = sum(_prompt_words(r.body) for r in log)
    completion_tokens = sum(int(u.get("completion_tokens", 0)) for u in usages)
    reported_prompt = sum(int(u.get("prompt_tokens", 0)) for u in usages)
    reported_calls = sum(int(u.get("calls", 0)) for u in usages)
    return {
        "judge": case.name,
        "unit": case.unit,
        "units": units,
        "calls_per_unit": calls / units,
        "prompt_tokens_per_unit": prompt_tokens / units,
        "completion_tokens_per_unit": completion_tokens / units,
        "total_tokens_per_unit": (prompt_tokens + completion_tokens) / units,
        "calls_total": calls,
        "prompt_tokens_total": prompt_tokens,
        "completion_tokens_total": completion_tokens,
        # the judges' own usage accounting must agree with the server's log
        "usage_matches_log": reported_prompt == prompt_tokens and reported_calls == calls,
        "note": case.note,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table for BENCHMARKS.md."""
    lines = [
        f"| judge | calls per answer | prompt tokens | completion tokens | total tokens | anchors' calls (k={TOP_K}, "
        f"s={ANSWER_SENTENCES}) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        unit = "" if row["unit"] == "answer" else f" (per {row['unit']})"
        lines.append(
            f"| {row['judge']}{unit} | {row['calls_per_unit']:.2f} | {row['prompt_tokens_per_unit']:.0f} | "
            f"{row['completion_tokens_per_unit']:.0f} | {row['total_tokens_per_unit']:.0f} | |"
        )
    for anchor in ANCHORS:
        lines.append(f"| {anchor['name']} — published, quoted | | | | | {anchor['formula']} = {anchor['calls']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TURNS} turns per judge instead of {TURNS}")
    parser.add_argument("--turns", type=int, default=None, help="turns per judge")
    parser.add_argument("--out", help="result file (default benchmarks/results/judge_costs[.quick].json)")
    args = parser.parse_args(argv)
    turns = args.turns or (QUICK_TURNS if args.quick else TURNS)
    if turns < 1:
        parser.error("--turns must be >= 1")
    info = machine_info()
    print_machine(info)
    requests = demo_requests(turns)
    rows = []
    for case in CASES:
        row = measure(case, requests)
        rows.append(row)
        flag = "" if row["usage_matches_log"] else "  (judge usage differs from the server log!)"
        print(f"{case.name:<55} {row['calls_per_unit']:5.2f} calls  {row['prompt_tokens_per_unit']:7.0f} prompt"
              f"  {row['completion_tokens_per_unit']:5.0f} completion per {case.unit}{flag}")
    print()
    print(table(rows))
    write_result(
        "judge_costs",
        {
            "machine": info,
            "method": {
                "turns": turns,
                "top_k": TOP_K,
                "answer_sentences": ANSWER_SENTENCES,
                "server": "tests/support/llm_server.py (loopback, real openai SDK)",
                "token_unit": "server count: whitespace-separated words of messages and choices",
                "completion": "scripted replies of a realistic length per protocol",
            },
            "results": rows,
            "anchors": [{**a, "source": "published call counts, quoted (not measured)"} for a in ANCHORS],
            "table_markdown": table(rows),
        },
        quick=args.quick,
        out=args.out,
    )
    return 0 if all(row["usage_matches_log"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
