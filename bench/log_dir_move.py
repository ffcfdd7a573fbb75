"""Moves between a broker's log directories (AlterReplicaLogDirs): how fast a partition's log is
copied to the other directory, unthrottled and under
`replica.alter.log.dirs.io.max.bytes.per.second`, and what a producer sees meanwhile.

One broker with two log directories on the same disk. A partition is filled with SIZE_MB of
1 KiB records (confluent-kafka, acks=all), then moved back and forth: first without a throttle,
then with THROTTLE bytes/s, each time while a producer keeps sending acks=all records one at a
time and their round trips are timed (the swap holds the partition's appends for its last
bytes; the broker logs how long). The probe's figures with no move under way are
taken first, for comparison. A move's time runs from `weir reassign execute`'s request to
DescribeLogDirs showing the replica in its new directory alone.

Usage: python bench/log_dir_move.py [--size-mb 200] [--throttle 20000000]
       [--out bench/results/log_dir_move.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from weir.cli.logdirs import execute_log_dir_moves
from weir.protocol.client_settings import ClientSecurity

TOPIC = "bench-move"
RECORD = b"x" * 1024


def start(base: Path, dirs: list[Path]) -> tuple[subprocess.Popen[bytes], str, Path]:
    config, ready, log = base / "broker.toml", base / "ready", base / "broker.log"
    config.write_text(f'"log.dirs" = "{",".join(map(str, dirs))}"\n')
    command = [sys.executable, "-m", "weir.cli.main", "broker", "start", "--config", str(config),
               "--listen", "127.0.0.1:0", "--ready-file", str(ready)]  # fmt: skip
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"broker did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return process, ready.read_text().split()[0], log


def fill(bootstrap: str, size_mb: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1 << 20})  # fmt: skip
    for _ in range(size_mb * 1024):
        while True:
            try:
                producer.produce(TOPIC, RECORD, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def where(dirs: list[Path]) -> Path:
    [found] = [d for d in dirs if (d / f"{TOPIC}-0").is_dir()]
    return found


class Prober:
    """acks=all records one at a time; each round trip timed."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.producer.produce(TOPIC, b"probe", partition=0)
            self.producer.flush(30)
            self.times.append(time.perf_counter() - started)

    def __enter__(self) -> Prober:
        self.producer.produce(TOPIC, b"warm-up", partition=0)  # connection and metadata first
        self.producer.flush(30)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def probed(probe: Prober) -> dict[str, Any]:
    return {
        "probe_produces": len(probe.times),
        "probe_p50_ms": round(statistics.median(probe.times) * 1000, 2),
        "probe_p99_ms": round(statistics.quantiles(probe.times, n=100)[98] * 1000, 2),
        "probe_max_ms": round(max(probe.times) * 1000, 2),
    }


def baseline(bootstrap: str, seconds: float) -> dict[str, Any]:
    """The probe's round trips with no move under way."""
    with Prober(bootstrap) as probe:
        time.sleep(seconds)
    return probed(probe)


def move(bootstrap: str, dirs: list[Path], throttle: int | None) -> dict[str, Any]:
    source = where(dirs)
    target = next(d for d in dirs if d != source)
    size = sum(f.stat().st_size for f in (source / f"{TOPIC}-0").glob("*.log"))
    with Prober(bootstrap) as probe:
        started = time.monotonic()
        moves = {(TOPIC, 0, 0): str(target)}
        assert execute_log_dir_moves(bootstrap, ClientSecurity(), moves, throttle)
        while (source / f"{TOPIC}-0").exists() or not (target / f"{TOPIC}-0").is_dir():
            time.sleep(0.02)
        seconds = time.monotonic() - started
        time.sleep(0.5)
    return {
        "bytes": size,
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / seconds / 1e6, 1),
        "throttle_bytes_per_s": throttle,
        **probed(probe),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--throttle", type=int, default=20_000_000)
    out = Path(__file__).parent / "results" / "log_dir_move.json"
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-bench-move-") as tmp:
        base = Path(tmp)
        dirs = [base / "dir-a", base / "dir-b"]
        process, bootstrap, log = start(base, dirs)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
            fill(bootstrap, args.size_mb)
            results = {
                "no_move": baseline(bootstrap, 3.0),
                "unthrottled": move(bootstrap, dirs, 2**63 - 1),
                "throttled": move(bootstrap, dirs, args.throttle),
            }
        finally:
            process.terminate()
            process.wait(30)
        held = [int(m) for m in re.findall(r"appends held (\d+) ms", log.read_text())]
    report = {
        "host": platform.node(),
        "python": platform.python_version(),
        "size_mb": args.size_mb,
        "swap_appends_held_ms": held,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
