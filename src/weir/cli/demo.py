"""`weir demo --storage`: the storage engine alone at work on real system logs shipped with weir.

Loads the Loghub samples (see demo_data/LICENSE.loghub) into partition logs, reads every record
back through file slices, restarts cleanly and after a torn write, compacts a keyed topic, and
prints what happened. Everything lives in a temporary directory unless `--data-dir` is given.
The full demo (broker, Spark ETL) is in `weir.cli.pipeline_demo`.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from weir.cli.table import print_table
from weir.clock import SystemClock, ThreadScheduler
from weir.records import BatchSpec, Compression, Record, build_batch, iter_batches, iter_records
from weir.storage import LogConfig, LogManager, LogManagerConfig

BATCH_RECORDS = 200
DEMO_CONFIG = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=4096)
COMPACTED = LogConfig(segment_bytes=64 * 1024, cleanup_policy=("compact",), delete_retention_ms=0)
QUIET = LogManagerConfig(retention_check_interval_ms=3_600_000, cleaner_backoff_ms=3_600_000)


def register(commands: Any) -> None:
    parser = commands.add_parser("demo", help="run the demo on real logs shipped with weir")
    parser.add_argument("--data-dir", type=Path, help="keep everything here instead of a temp dir")
    parser.add_argument(
        "--storage", action="store_true", help="show the storage engine alone (no broker, no Spark)"
    )
    parser.set_defaults(run=run)


def load_samples() -> dict[str, list[bytes]]:
    """source name -> its log lines, from the samples packaged with weir."""
    samples = {}
    for entry in sorted(
        resources.files("weir.cli").joinpath("demo_data").iterdir(), key=lambda e: e.name
    ):
        if entry.name.endswith(".log.gz"):
            source = entry.name.split("_", 1)[0].lower()
            samples[source] = gzip.decompress(entry.read_bytes()).splitlines()
    return samples


def run(args: argparse.Namespace) -> int:
    if not args.storage:
        from weir.cli.pipeline_demo import run_pipeline_demo

        return run_pipeline_demo(args.data_dir)
    if args.data_dir is not None:
        status = _run_in(args.data_dir)
        print(f"\ndata directory: {args.data_dir}")
        return status
    with tempfile.TemporaryDirectory(prefix="weir-demo-") as scratch:
        return _run_in(Path(scratch))


def _open(data_dir: Path) -> tuple[LogManager, ThreadScheduler]:
    clock = SystemClock()
    scheduler = ThreadScheduler(clock)
    topics = {"components": COMPACTED}
    return LogManager(data_dir, DEMO_CONFIG, clock, scheduler, QUIET, topics), scheduler


def _close(manager: LogManager, scheduler: ThreadScheduler) -> None:
    manager.close()
    scheduler.shutdown()


def _run_in(data_dir: Path) -> int:
    samples = load_samples()
    total_lines = sum(len(lines) for lines in samples.values())
    print(
        f"weir demo: the storage engine on {total_lines:,} real log lines from "
        f"{len(samples)} systems\n"
    )
    manager, scheduler = _open(data_dir)
    elapsed, written = _ingest(manager, samples)
    print_table(
        ("topic", "records", "segments", "bytes"),
        [
            (f"{topic}-{partition}", f"{log.log_end_offset:,}", len(log.segments), f"{log.size:,}")
            for (topic, partition), log in sorted(manager)
        ],
    )
    print(f"\nappended {written / 1e6:.1f} MB of lz4 batches in {elapsed * 1000:.0f} ms")
    mismatches = _verify(manager, samples)
    print(f"read back through file slices: {total_lines:,} lines, {mismatches} mismatches")
    _close(manager, scheduler)

    manager, scheduler = _open(data_dir)
    rescanned = sum(log.load_report.recovered_segments for _, log in manager)
    print(f"restart after a clean shutdown: {rescanned} segments rescanned")
    tail = manager.get("logs.apache", 0)
    assert tail is not None
    damaged = tail.active_segment.log_path
    _close(manager, scheduler)
    _tear_last_batch(damaged, data_dir)

    manager, scheduler = _open(data_dir)
    tail = manager.get("logs.apache", 0)
    assert tail is not None
    for problem in tail.load_report.problems:
        print(f"restart after a torn write: {problem}")
    print(
        f"  logs.apache now ends at offset {tail.log_end_offset:,}; "
        f"{_verify(manager, samples)} mismatches in what remains"
    )

    compacted = manager.get("components", 0)
    assert compacted is not None
    before = compacted.log_end_offset
    compacted.roll()
    manager.compact_logs()
    kept = sum(1 for h in compacted.batches() for _ in iter_records(h))
    print(f"compaction of 'components' (key = source): {before:,} records -> {kept} latest values")
    _close(manager, scheduler)
    return 0 if mismatches == 0 else 1


def _ingest(manager: LogManager, samples: dict[str, list[bytes]]) -> tuple[float, int]:
    now = int(time.time() * 1000)
    written = 0
    started = time.perf_counter()
    compacted = manager.get_or_create("components", 0)
    for source, lines in samples.items():
        log = manager.get_or_create(f"logs.{source}", 0)
        for start in range(0, len(lines), BATCH_RECORDS):
            chunk = lines[start : start + BATCH_RECORDS]
            records = [
                Record(offset=i, timestamp=now + start + i, key=None, value=line)
                for i, line in enumerate(chunk)
            ]
            batch = build_batch(records, spec=BatchSpec(compression=Compression.LZ4))
            log.append(batch, leader_epoch=0)
            keyed = [
                Record(offset=i, timestamp=now, key=source.encode(), value=line)
                for i, line in enumerate(chunk)
            ]
            compacted.append(build_batch(keyed), leader_epoch=0)
            written += len(batch)
    return time.perf_counter() - started, written


def _verify(manager: LogManager, samples: dict[str, list[bytes]]) -> int:
    """Read every logs.* partition from offset 0 through file slices; count lines that differ."""
    mismatches = 0
    for source, lines in samples.items():
        log = manager.get(f"logs.{source}", 0)
        assert log is not None
        offset = 0
        while offset < log.log_end_offset:
            info = log.read(offset, 64 * 1024, max_offset=log.log_end_offset)
            assert info.data is not None
            for header in iter_batches(info.data.read_bytes(), verify_crc=True):
                for record in iter_records(header):
                    mismatches += record.value != lines[record.offset]
                offset = header.next_offset
    return mismatches


def _tear_last_batch(segment: Path, data_dir: Path) -> None:
    """Simulate a crash mid-write: cut the last batch short and drop the clean-shutdown mark."""
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size - 100)
    (data_dir / ".weir-clean-shutdown").unlink(missing_ok=True)
