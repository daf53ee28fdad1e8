"""The LangChain handler's own cost on the host's thread, per callback kind: the events of one answer replayed.

    python benchmarks/callback_cost.py                                  # this checkout, 4 x 3,000 answers
    python benchmarks/callback_cost.py --before /path/to/other/checkout # and that one's, alternated

The events are those of ``overhead.py``'s LCEL chain (retriever, prompt, chat model, parser: ten
callbacks per answer), recorded once from a real ``chain.invoke`` by a handler that keeps their
arguments, then replayed into ``RagAuditCallbackHandler`` with fresh run ids (made before the timed
loop), in the order LangChain called them. Each callback is timed on its own with the thread's CPU
clock (``time.thread_time_ns``; other processes' load does not count), so the figure is the handler
alone: no LangChain dispatch, no chain, which ``overhead.py`` measures. The auditor is the lean one
of ``overhead.py`` (``FakeJudge``, spans to an in-memory exporter, no audit log): each answer's turn is
handed to the closing thread at its root's end, and the closing, judging and export run there; the
background is flushed between blocks of 100 answers, outside the timed calls.

With ``--before ROOT`` the same replay runs in processes importing ROOT's ``src/ragaudit``,
alternated with this checkout's (``--rounds`` of each, one process per round), so both see the same
drift. The figure per kind is the median over a round's answers of the per-answer sum, then the
median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._bench import REPO, machine_info, print_machine, run_child, write_result

EVENTS = ("on_chain_start", "on_chain_end", "on_retriever_start", "on_retriever_end", "on_chat_model_start",
          "on_llm_start", "on_llm_end", "on_tool_start", "on_tool_end")


def _record() -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The callbacks of one answer of overhead.py's chain, in the order LangChain made them."""
    from benchmarks.overhead import QUESTION, _langchain_chain
    from langchain_core.callbacks import BaseCallbackHandler

    events: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Recorder(BaseCallbackHandler):
        run_inline = True

    def keep(name: str) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> None:
            events.append((name, args, kwargs))
        return method

    for name in EVENTS:
        setattr(Recorder, name, keep(name))
    _langchain_chain().invoke(QUESTION, config={"callbacks": [Recorder()]})
    return events


def _fresh(events: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[tuple[str, tuple[Any, ...],
                                                                                  dict[str, Any]]]:
    ids: dict[Any, uuid.UUID] = {}
    out = []
    for name, args, kwargs in events:
        kw = dict(kwargs)
        for key in ("run_id", "parent_run_id"):
            if kw.get(key) is not None:
                kw[key] = ids.setdefault(kw[key], uuid.uuid4())
        out.append((name, args, kw))
    return out


def child(answers: int) -> dict[str, Any]:
    from benchmarks.overhead import _fake_judge, _memory_provider

    import ragaudit
    from ragaudit import Auditor
    from ragaudit.integrations.langchain import RagAuditCallbackHandler

    provider, exporter = _memory_provider()
    auditor = Auditor(_fake_judge(), audit_log=None, tracer_provider=provider)
    handler = RagAuditCallbackHandler(auditor=auditor)
    events = _record()
    clock = time.thread_time_ns
    per_kind: dict[str, list[int]] = {}
    totals: list[int] = []
    for block in range(-3, answers // 100):  # three warm-up blocks
        replays = [_fresh(events) for _ in range(100)]
        for replay in replays:
            spent: dict[str, int] = {}
            for name, args, kwargs in replay:
                method = getattr(handler, name)
                c0 = clock()
                method(*args, **kwargs)
                spent[name] = spent.get(name, 0) + clock() - c0
            if block >= 0:
                for name, ns in spent.items():
                    per_kind.setdefault(name, []).append(ns)
                totals.append(sum(spent.values()))
        handler.force_flush(30)
        provider.force_flush()
        exporter.clear()
    stats = auditor.stats()
    return {"ragaudit": ragaudit.__file__, "answers": len(totals), "callbacks_per_answer": len(events),
            "counts": {name: sum(1 for e in events if e[0] == name) for name in EVENTS
                       if any(e[0] == name for e in events)},
            "median_us": {name: statistics.median(v) / 1000 for name, v in per_kind.items()},
            "total_median_us": statistics.median(totals) / 1000, "judged": stats["judged"]}


def _spawn(root: str | None, answers: int) -> dict[str, Any]:
    return run_child(__file__, Path(root) if root else REPO, "--answers", str(answers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=3000, help="answers per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--before", metavar="ROOT", help="also replay with the ragaudit of the checkout at ROOT")
    parser.add_argument("--out", help="result file (default benchmarks/results/callback_cost.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.answers)))
        return 0
    info = machine_info()
    print_machine(info)
    load_before = os.getloadavg()
    sides = {"this": None, **({"before": args.before} if args.before else {})}
    rounds: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for r in range(args.rounds):
        order = list(sides.items()) if r % 2 == 0 else list(reversed(sides.items()))
        for side, root in order:
            rounds[side].append(_spawn(root, args.answers))
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(
            f"{side} {rounds[side][-1]['total_median_us']:.1f} us" for side in sides), flush=True)
    results: dict[str, Any] = {}
    for side, runs in rounds.items():
        kinds = runs[0]["median_us"].keys()
        results[side] = {"ragaudit": runs[0]["ragaudit"], "counts": runs[0]["counts"],
                         "per_kind_us": {k: statistics.median(run["median_us"][k] for run in runs) for k in kinds},
                         "total_us": statistics.median(run["total_median_us"] for run in runs),
                         "rounds": runs}
    print("\n| callback (per answer) | calls | " + " | ".join(f"{side} µs" for side in sides) + " |")
    print("|---|--:|" + "--:|" * len(sides))
    first = results["this"]
    for kind, count in first["counts"].items():
        print(f"| {kind} | {count} | " + " | ".join(f"{results[s]['per_kind_us'][kind]:.1f}" for s in sides) + " |")
    print(f"| all | {sum(first['counts'].values())} | " + " | ".join(f"{results[s]['total_us']:.1f}" for s in sides)
          + " |")
    write_result("callback_cost", {"machine": info, "load_average": {"before": load_before, "after": os.getloadavg()},
                                   "answers_per_round": args.answers, "before_root": args.before,
                                   "results": results}, quick=False, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
