"""Which of ragaudit's source files one turn passes through, from its spans to its record.

Not a timing: a map. One OpenInference RAG trace (the worker's test trace, made with the real OTel
SDK) goes into an in-process `Worker` (``ingest`` → ``tick`` → the Auditor → every exporter). A first
worker's turn imports what the pipeline needs; a second worker's turn is watched, every Python call
on every thread (``sys.setprofile``, ``threading.setprofile``), and the files under ``src/ragaudit``
that ran are listed in the order first entered.

```bash
python benchmarks/turn_walk.py
```
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _watch(seen: dict[str, None]) -> Any:
    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_name != "<module>":
            name = frame.f_code.co_filename
            if "/ragaudit/" in name and name not in seen:
                seen[name] = None

    return profile


def worker_walk() -> list[str]:
    from tests.support.otlp_receiver import OTLPReceiver
    from tests.worker.file_exporter import Records
    from tests.worker.spans import SpanMaker, encode, rag_trace

    from ragaudit import LexicalJudge
    from ragaudit.integrations.otlp import Worker

    maker = SpanMaker()
    receiver = OTLPReceiver().start()

    def make() -> tuple[Any, Records, list[float]]:
        now = [0.0]
        records = Records()
        worker = Worker(
            LexicalJudge(),
            port=0,
            exporters=[records],
            clock=lambda: now[0],
            quiet_s=0.5,
            audit_log=None,
            metrics_interval_s=60,
            otlp_endpoint=receiver.endpoint,
        )
        return worker, records, now

    def one_turn(worker: Any, now: list[float]) -> None:
        worker.ingest(encode(rag_trace(maker)))
        now[0] += 5
        worker.tick(now[0])
        worker.auditor.force_flush(30)

    worker, records, now = make()
    one_turn(worker, now)  # a first worker imports what the pipeline needs: not part of a turn's walk
    worker.auditor.shutdown(10)
    worker, records, now = make()  # its threads start with its first turn, watched
    seen: dict[str, None] = {}
    profile = _watch(seen)
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        one_turn(worker, now)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    worker.auditor.shutdown(10)
    assert len(records.records) == 1, records.records
    receiver.stop()
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    files = worker_walk()
    src = str(ROOT / "src") + "/"
    for name in files:
        print(name.replace(src, ""))
    print(f"{len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
