"""Storage benchmark: PartitionLog append and sendfile reads beside the plain system calls.

For each batch size (1 KiB, 16 KiB, 256 KiB) it appends the same bytes three ways, alternating
them over several trials (median kept) with dirty pages written back before each run:
plain `os.write` to a file (the page-cache baseline), `PartitionLog.append` (offset assignment,
index upkeep, roll checks), and `validate_batch` + `PartitionLog.append` (what the broker's
produce path does). Reads: `PartitionLog.read` + `os.sendfile` of every slice into a socket
drained by another thread, beside plain `os.sendfile` of the same files in the same chunk size.

Writes JSON to bench/results/storage.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weir.clock import SystemClock, ThreadScheduler
from weir.records import Record, build_batch, validate_batch
from weir.storage import LogConfig, PartitionLog

SIZES = {"1KiB": 1024, "16KiB": 16 * 1024, "256KiB": 256 * 1024}
RECORD_VALUE = 200
READ_CHUNK = 1024 * 1024


def make_batch(target_size: int) -> bytes:
    count = max(1, target_size // (RECORD_VALUE + 10))
    value = os.urandom(RECORD_VALUE // 2).hex().encode()
    records = [
        Record(offset=i, timestamp=1_700_000_000_000 + i, key=None, value=value)
        for i in range(count)
    ]
    return build_batch(records)


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rate(total_bytes: int, batches: int, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 4),
        "mb_per_s": round(total_bytes / seconds / 1e6, 1),
        "batches_per_s": round(batches / seconds, 1),
    }


def plain_write(path: Path, data: bytes, count: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(count):
            os.write(fd, data)
    finally:
        os.close(fd)


def log_append(log: PartitionLog, data: bytes, count: int, validate: bool) -> None:
    buf = bytearray(data)
    limit = len(data) + 1
    for _ in range(count):
        if validate:
            validate_batch(buf, max_message_bytes=limit)
        log.append(buf, leader_epoch=0)


def open_log(directory: Path, scheduler: ThreadScheduler) -> PartitionLog:
    return PartitionLog(
        directory, LogConfig(segment_bytes=256 * 1024 * 1024), SystemClock(), scheduler
    )


class Drain:
    """A socket pair whose far end a thread reads and discards, counting bytes."""

    def __init__(self) -> None:
        self.sender, self._receiver = socket.socketpair()
        self.received = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buf = bytearray(1 << 20)
        while n := self._receiver.recv_into(buf):
            self.received += n

    def close(self) -> None:
        self.sender.close()
        self._thread.join()
        self._receiver.close()


def sendfile_all(out: socket.socket, fd: int, position: int, size: int) -> None:
    while size > 0:
        sent = os.sendfile(out.fileno(), fd, position, size)
        position += sent
        size -= sent


def read_log(log: PartitionLog, out: socket.socket) -> int:
    offset, total = 0, 0
    while offset < log.log_end_offset:
        info = log.read(offset, READ_CHUNK, max_offset=log.log_end_offset)
        assert info.data is not None
        sendfile_all(out, info.data.fd, info.data.position, info.data.size)
        total += info.data.size
        offset = info.data.next_offset
    return total


def read_plain(paths: list[Path], out: socket.socket) -> int:
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for position in range(0, size, READ_CHUNK):
                chunk = min(READ_CHUNK, size - position)
                sendfile_all(out, fd, position, chunk)
                total += chunk
        finally:
            os.close(fd)
    return total


def bench_size(name: str, size: int, total_mb: int, workdir: Path, trials: int) -> dict[str, Any]:
    """Alternate plain writes and log appends of the same bytes, `trials` times each, with the
    page cache's dirty data written back (os.sync) before every run so no run pays for another's
    writeback; report the median run of each."""
    data = make_batch(size)
    count = max(1, total_mb * 1024 * 1024 // len(data))
    total = count * len(data)
    scheduler = ThreadScheduler()
    base = workdir / name
    base.mkdir()
    runs: dict[str, list[float]] = {"plain": [], "append": [], "validate": []}
    log = checked = None
    for trial in range(trials):
        for kind in runs:
            path = base / f"{kind}-{trial}"
            os.sync()
            if kind == "plain":
                seconds = timed(lambda p=path: plain_write(p, data, count))
            else:
                target = open_log(base / f"{kind}{trial}-0", scheduler)
                seconds = timed(
                    lambda t=target, k=kind: log_append(t, data, count, k == "validate")
                )
                if trial == trials - 1:
                    log, checked = (target, checked) if kind == "append" else (log, target)
                else:
                    target.close()
            runs[kind].append(seconds)
    result: dict[str, Any] = {"batch_bytes": len(data), "batches": count, "total_bytes": total,
                              "trials": trials}  # fmt: skip
    result["plain_os_write"] = rate(total, count, statistics.median(runs["plain"]))
    result["partition_log_append"] = rate(total, count, statistics.median(runs["append"]))
    result["validate_and_append"] = rate(total, count, statistics.median(runs["validate"]))
    result["append_vs_plain_write"] = round(result["partition_log_append"]["mb_per_s"]
                                            / result["plain_os_write"]["mb_per_s"], 3)  # fmt: skip
    assert log is not None and checked is not None
    result.update(bench_reads(log, base / f"plain-{trials - 1}", count))
    log.close()
    checked.close()
    scheduler.shutdown()
    return result


def bench_reads(log: PartitionLog, plain: Path, count: int) -> dict[str, Any]:
    drain = Drain()
    seconds_plain = timed(lambda: read_plain([plain], drain.sender))
    sent_plain = drain.received
    total = {"bytes": 0}
    seconds_log = timed(lambda: total.update(bytes=read_log(log, drain.sender)))
    drain.close()
    out = {
        "plain_sendfile": rate(sent_plain, count, seconds_plain),
        "partition_log_read_sendfile": rate(total["bytes"], count, seconds_log),
    }
    out["read_vs_plain_sendfile"] = round(
        out["partition_log_read_sendfile"]["mb_per_s"] / out["plain_sendfile"]["mb_per_s"], 3
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total-mb", type=int, default=128, help="data per run and batch size")
    parser.add_argument("--trials", type=int, default=3, help="runs of each kind (median kept)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "storage.json"
    )
    parser.add_argument("--dir", type=Path, help="where to write (default: a temp dir in /tmp)")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "storage",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "total_mb_per_run": args.total_mb,
            "trials": args.trials,
            "record_value_bytes": RECORD_VALUE,
            "read_chunk_bytes": READ_CHUNK,
            "fsync": "none (page cache)",
        },
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="weir-bench-", dir=args.dir) as scratch:
        for name, size in SIZES.items():
            report["results"][name] = bench_size(
                name, size, args.total_mb, Path(scratch), args.trials
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
