"""Roll benchmark: how long the append that rolls a segment holds the appending thread.

Appends 1 KiB batches at `--rate` a second to a `PartitionLog` with small segments, so that it
rolls every `--segment-kb`, and times each append on the appending thread (the event loop, in the
broker):
- `prepared`: the next segment made ahead on the scheduler's thread (`segment_spare.py`), as the
  broker runs; the roll renames its files into place;
- `in_append`: no scheduler thread runs, so every roll creates its segment in the append (what
  every roll did before, and what a roll does still when no spare is ready).
Both with `preallocate` off (Kafka's default) and on. Reports percentiles of the rolling appends
and of the others. Writes JSON to bench/results/roll.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from weir.clock import FakeClock, FakeScheduler, Scheduler, SystemClock, ThreadScheduler
from weir.records import Record, build_batch
from weir.storage import LogConfig, PartitionLog

BATCH = build_batch([Record(offset=0, timestamp=0, key=None, value=b"x" * 1000)])


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1e6

    return {"count": len(ordered), "p50_us": at(0.5), "p99_us": at(0.99), "max_us": at(1.0),
            "mean_us": statistics.fmean(ordered) * 1e6}  # fmt: skip


def run(
    directory: Path, config: LogConfig, rolls: int, prepared: bool, rate: int
) -> dict[str, Any]:
    scheduler: Scheduler = ThreadScheduler(name="bench-storage") if prepared else FakeScheduler(
        FakeClock()
    )
    log = PartitionLog(directory, config, SystemClock(), scheduler)
    rolling: list[float] = []
    others: list[float] = []
    period = 1 / rate
    due = time.perf_counter()
    try:
        while len(rolling) < rolls:
            due += period
            time.sleep(max(0.0, due - time.perf_counter()))
            segments = len(log.segments)
            start = time.perf_counter()
            log.append(BATCH, leader_epoch=0)
            took = time.perf_counter() - start
            (rolling if len(log.segments) > segments else others).append(took)
    finally:
        scheduler.shutdown()
        log.close()
    return {"rolling_append": percentiles(rolling), "other_appends": percentiles(others)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rolls", type=int, default=100)
    parser.add_argument("--segment-kb", type=int, default=1024)
    parser.add_argument("--rate", type=int, default=10_000, help="appends a second")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "roll.json")
    parser.add_argument("--dir", type=Path, help="where to write (default: a temp dir in /tmp)")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": platform.platform(), "rolls": args.rolls,
                              "segment_kb": args.segment_kb, "rate": args.rate}  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for preallocate in (False, True):
            config = LogConfig(segment_bytes=args.segment_kb * 1024, preallocate=preallocate)
            for prepared in (True, False):
                name = f"{'prepared' if prepared else 'in_append'}-preallocate_{preallocate}"
                directory = Path(scratch) / name / "roll-0"
                report[name] = run(directory, config, args.rolls, prepared, args.rate)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
