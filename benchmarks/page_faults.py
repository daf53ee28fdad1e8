"""What fresh memory costs here: a large array touched for the first time, as numpy allocates it
(huge pages advised for 4 MiB and more) and as ``ragaudit.metrics._fast.empty`` does (no advice:
4 KiB pages), right after the same size was freed and again after a pause.

    python benchmarks/page_faults.py                       # 64 and 320 MiB, pauses of 0 and 5 s
    python benchmarks/page_faults.py --sizes 8 --pauses 0,1 --rounds 2 --quick --out /tmp/page_faults.json

Why it matters (issue 31's linear scaling): a 20 M-row evaluation's temporaries are hundreds of
MB, allocated afresh by every call (the C allocator keeps freed blocks of at most 32 MiB for
reuse; larger ones go back to the kernel), while a 1 M-row evaluation's come from memory it kept.
Whatever a fresh byte costs is then paid per row by large runs only. On a virtual machine that
hands freed memory back to its host (free page reporting), a huge page freed and touched again
after a pause is faulted in at the host's cost as well. Each (kind, size, pause) touches one
byte per 4 KiB of a new array ``--rounds`` times, sleeping the pause before each (after one untimed
allocation of the size, freed: the allocator has it to give back); wall ns per byte, the median,
written to ``benchmarks/results/page_faults.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchmarks import _bench

from ragaudit.metrics import _fast

KINDS: dict[str, Callable[[int], np.ndarray]] = {
    "numpy.empty (huge pages advised)": lambda n: np.empty(n, dtype=np.uint8),
    "_fast.empty (4 KiB pages)": lambda n: _fast.empty(n, np.uint8),
}


def touch_ns_per_byte(make: Callable[[int], np.ndarray], nbytes: int, pause: float, rounds: int) -> list[float]:
    """Wall ns per byte to allocate *nbytes* and touch every page, *rounds* times, *pause* s before each."""
    out = []
    for _ in range(rounds):
        time.sleep(pause)
        started = time.perf_counter()
        arr = make(nbytes)
        arr[::4096] = 1
        out.append((time.perf_counter() - started) / nbytes * 1e9)
        del arr
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,320", help="MiB, comma-separated")
    parser.add_argument("--pauses", default="0,5", help="seconds before each allocation, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="write page_faults.quick.json")
    parser.add_argument("--out", default=None, help="the result file (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    info = _bench.machine_info()
    _bench.print_machine(info)
    if _fast.speedups is None:
        print("the C speedups are not built: _fast.empty is numpy.empty here")
    results: list[dict[str, Any]] = []
    for mib in (int(x) for x in args.sizes.split(",")):
        for pause in (float(x) for x in args.pauses.split(",")):
            for kind, make in KINDS.items():
                touch_ns_per_byte(make, mib << 20, 0.0, 1)  # the size once, untimed: freed, then reused
                ns = touch_ns_per_byte(make, mib << 20, pause, args.rounds)
                results.append({"kind": kind, "mib": mib, "pause_s": pause, "ns_per_byte": ns,
                                "median_ns_per_byte": statistics.median(ns)})
                print(f"{kind:34s} {mib:5d} MiB  pause {pause:4.1f} s  {statistics.median(ns):6.3f} ns/byte "
                      f"(min {min(ns):.3f}, max {max(ns):.3f})", flush=True)
    _bench.write_result("page_faults", {"machine": info, "rounds": args.rounds, "results": results,
                                        "built": _fast.speedups is not None}, quick=args.quick, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
