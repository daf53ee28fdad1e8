"""Where ragaudit's time goes on the host's thread: cProfile of the overhead benchmark's pipeline.

    python benchmarks/profile_hot_path.py                         # LangChain chain, 1,500 calls
    python benchmarks/profile_hot_path.py --framework llamaindex
    python benchmarks/profile_hot_path.py --root /path/to/other/checkout   # profile another version

The pipeline and the ragaudit configuration are those of ``overhead.py`` (spans to an in-memory
exporter, FakeJudge in the background). cProfile records only the thread that enables it, so the
figures are the calling thread's: work handed to background threads (the auditor's closing and
judging threads, the span processor) does not appear, and neither does work LangChain runs on its
executor threads (``RunnableParallel`` branches). Flushes between blocks are not profiled.
Absolute times are inflated by the profiler; the shares are what matter.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=("langchain", "llamaindex"), default="langchain")
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--top", type=int, default=14, help="rows to print")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                        help="checkout whose src/ragaudit is profiled (default: this one)")
    args = parser.parse_args(argv)
    root = str(Path(args.root).resolve())
    sys.path[:0] = [root, f"{root}/src"]
    from benchmarks import overhead

    build = overhead._langchain_bench if args.framework == "langchain" else overhead._llamaindex_bench
    bench = build("ragaudit", None)
    for _ in range(200):
        bench.invoke()
    bench.after_block()
    profile = cProfile.Profile()
    for _ in range(max(1, args.calls // 100)):
        profile.enable()
        for _ in range(100):
            bench.invoke()
        profile.disable()
        bench.after_block()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(r"ragaudit/(integrations|auditor|tracing|citations)", args.top)
    print(out.getvalue().replace(f"{root}/src/", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
