"""The closing thread's evidence matching and citations for one answer, on their own (issue 50).

    python benchmarks/evidence_cost.py                                  # this checkout, 5 rounds
    python benchmarks/evidence_cost.py --before /path/to/other/checkout # and that one's, alternated

One answer of ``overhead.py``'s LCEL chain (its four documents numbered into the prompt, its answer
with a ``[1]`` marker), as the assembler handles it when it closes the turn:

* *evidence*: the final model call's input read as a ``Reference``, the documents that reached it
  (``reached``), the turn's documents remembered (``DocumentMemory.remember``), the prompt's own
  passages (``prompt_passages``) and whether it numbers from 0 (``numbers_from_zero``);
* *citations*: ``find_citations(answer, documents)``.

Each is timed with the thread's CPU clock (``time.thread_time_ns``: other processes' load does not
count) over blocks of 500 calls; a round is one process, and its figure is the best block (the least
disturbed). With ``--before ROOT`` each round runs ROOT's ``src/ragaudit`` too, in a process of its own,
alternated with this checkout's; the figure is the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._bench import best_us, child_ragaudit, machine_info, print_machine, run_child, write_result  # noqa: E402

BLOCK = 500
BLOCKS = 8


def child() -> dict[str, Any]:
    # the given checkout's ragaudit, imported before overhead.py puts this checkout's src first on the path
    ragaudit = child_ragaudit()
    from benchmarks.overhead import ANSWER, DOC_TEXTS, QUESTION

    from ragaudit.citations import find_citations
    from ragaudit.integrations._evidence import (
        DocumentMemory,
        Reference,
        numbers_from_zero,
        prompt_passages,
        reached,
    )
    from ragaudit.records import RetrievedDoc

    docs = [
        RetrievedDoc(id=f"doc-{i}", content=text, source=source, rank=i + 1)
        for i, (source, text) in enumerate(DOC_TEXTS[:4])
    ]
    context = "\n\n".join(f"[{i}] {d.content}" for i, d in enumerate(docs, 1))
    messages = (
        ("system", "Answer from the numbered context only and cite it like [1]."),
        ("user", f"Context:\n{context}\n\nQuestion: {QUESTION}"),
    )
    variables = {"context": context, "question": QUESTION}
    memory = DocumentMemory()

    def evidence() -> Any:
        reference = Reference(messages, None)
        found = reached([reference], docs)
        memory.remember(docs)
        prompt_passages(messages, variables, question=QUESTION, explained=found)
        return found, numbers_from_zero(reference.text)

    def citations() -> Any:
        return find_citations(ANSWER, docs)

    out: dict[str, Any] = {"ragaudit": ragaudit.__file__, "result": repr((evidence(), citations()))}
    for name, fn in (("evidence_us", evidence), ("citations_us", citations)):
        out[name] = best_us(fn, blocks=BLOCKS, block=BLOCK)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="ROOT", help="also run ROOT's src/ragaudit, alternated")
    parser.add_argument("--out", help="result file (default benchmarks/results/evidence_cost.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return 0
    info = machine_info()
    print_machine(info)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    roots = {"after": ROOT, **({"before": Path(args.before).resolve()} if args.before else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
    for round_ in range(args.rounds):
        for name, root in roots.items() if round_ % 2 == 0 else reversed(roots.items()):
            run = run_child(__file__, root)
            runs[name].append(run)
            print(
                f"round {round_} {name:<6} evidence {run['evidence_us']:7.1f} us  "
                f"citations {run['citations_us']:7.1f} us  ({run['ragaudit']})",
                flush=True,
            )
    if args.before and {r["result"] for rs in runs.values() for r in rs} != {runs["after"][0]["result"]}:
        print("warning: the two checkouts' results differ", flush=True)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    summary = {
        name: {key: statistics.median(r[key] for r in rs) for key in ("evidence_us", "citations_us")}
        for name, rs in runs.items()
    }
    for name, figures in summary.items():
        print(f"{name:<6} median: evidence {figures['evidence_us']:.1f} us, citations {figures['citations_us']:.1f} us")
    print(f"load average: {' '.join(load_before)} -> {' '.join(load_after)}")
    payload = {
        "machine": info,
        "load_before": load_before,
        "load_after": load_after,
        "block": BLOCK,
        "blocks": BLOCKS,
        "summary": summary,
        "runs": runs,
    }
    write_result("evidence_cost", payload, quick=False, out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
