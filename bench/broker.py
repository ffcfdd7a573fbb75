"""Broker benchmark with confluent-kafka, beside the machine's raw limits, in one run.

Starts `weir broker start` (single node) on an ephemeral port, then measures:
- produce: 1,000,000 x 100-byte and 200,000 x 1 KiB messages, acks=1 and acks=all;
- consume: everything produced, read back from the beginning;
- end-to-end latency percentiles at a fixed rate (default 50,000 msgs/s);
- raw loopback TCP throughput and raw page-cache write throughput on the data disk.
Writes JSON to bench/results/broker.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

MB = 1e6


def start_broker(data_dir: Path, config: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`weir broker start` on an ephemeral loopback port (with `config`, a TOML file, if given);
    returns the process and its address once it is ready. The other benchmarks use it too."""
    ready = data_dir.parent / "ready"
    command = [sys.executable, "-m", "weir.cli.main", "broker", "start", "--data-dir",
               str(data_dir), "--listen", "127.0.0.1:0", "--ready-file", str(ready)]  # fmt: skip
    if config is not None:
        command += ["--config", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("broker did not start")
        time.sleep(0.05)
    return process, ready.read_text().strip()


def loopback_tcp(total: int = 2 * 1024**3, chunk: int = 1024 * 1024) -> dict[str, float]:
    listener = socket.create_server(("127.0.0.1", 0))
    received = [0]

    def drain() -> None:
        conn, _ = listener.accept()
        buf = bytearray(chunk)
        while n := conn.recv_into(buf):
            received[0] += n
        conn.close()

    thread = threading.Thread(target=drain)
    thread.start()
    sender = socket.create_connection(listener.getsockname())
    data = os.urandom(chunk)
    started = time.perf_counter()
    for _ in range(total // chunk):
        sender.sendall(data)
    sender.close()
    thread.join()
    seconds = time.perf_counter() - started
    listener.close()
    return {
        "bytes": received[0],
        "seconds": round(seconds, 3),
        "mb_per_s": round(received[0] / seconds / MB, 1),
    }


def page_cache_write(
    directory: Path, total: int = 1024**3, chunk: int = 1024 * 1024
) -> dict[str, float]:
    path = directory / "raw-write"
    data = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    started = time.perf_counter()
    for _ in range(total // chunk):
        os.write(fd, data)
    seconds = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return {
        "bytes": total,
        "seconds": round(seconds, 3),
        "mb_per_s": round(total / seconds / MB, 1),
    }


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str) -> dict[str, Any]:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
        "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151, "enable.idempotence": acks == "all",
        "log_level": 3,
    })  # fmt: skip
    value = os.urandom(size // 2).hex().encode()[:size]
    failures = [0]

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures[0] += 1

    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    return {
        "messages": count,
        "message_bytes": size,
        "acks": acks,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(count / seconds),
        "mb_per_s": round(count * size / seconds / MB, 1),
        "failed": failures[0] + remaining,
    }


def consume(bootstrap: str, topic: str, expected: int) -> dict[str, Any]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        # librdkafka pauses a partition for fetch.queue.backoff.ms (default 1 s) whenever its
        # local queue passes queued.min.messages; a reader that drains as fast as it can wants
        # the next fetch at once.
        "fetch.queue.backoff.ms": 1, "log_level": 3,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    size = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < expected and time.perf_counter() < deadline:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error() is None:
                got += 1
                size += len(message.value())
    seconds = time.perf_counter() - started
    consumer.close()
    return {
        "messages": got,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(got / seconds),
        "mb_per_s": round(size / seconds / MB, 1),
    }


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-latency", "enable.auto.commit": False,
        "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "log_level": 3,
        "socket.nagle.disable": True,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                         "log_level": 3, "socket.nagle.disable": True})  # fmt: skip
    total = int(rate * seconds)
    samples: list[float] = []
    done = threading.Event()
    producer.produce(topic, struct.pack(">q", time.time_ns()))  # create the topic, warm up
    producer.flush(30)
    warm_deadline = time.monotonic() + 30
    while not consumer.consume(num_messages=1, timeout=0.5) and time.monotonic() < warm_deadline:
        pass

    def receive() -> None:
        while len(samples) < total and not done.is_set():
            message = consumer.poll(0.1)  # one at a time: a batch call would wait to fill up
            if message is not None and message.error() is None:
                (sent,) = struct.unpack(">q", message.value()[:8])
                samples.append((time.time_ns() - sent) / 1e6)

    receiver = threading.Thread(target=receive)
    receiver.start()
    tick = 0.005
    per_tick = max(1, int(rate * tick))
    started = time.perf_counter()
    for sent in range(0, total, per_tick):
        target = started + sent / rate
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        for _ in range(per_tick):
            producer.produce(topic, struct.pack(">q", time.time_ns()) + b"x" * 92)
        producer.poll(0)
    producer.flush(30)
    receiver.join(timeout=60)
    done.set()
    consumer.close()
    samples.sort()

    def pct(p: float) -> float:
        return round(samples[min(len(samples) - 1, int(len(samples) * p))], 3) if samples else -1

    return {
        "rate_msgs_per_s": rate,
        "messages": len(samples),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "mean_ms": round(statistics.fmean(samples), 3) if samples else -1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=1_000_000, help="100-byte messages")
    parser.add_argument("--large", type=int, default=200_000, help="1 KiB messages")
    parser.add_argument("--rate", type=int, default=50_000, help="latency test rate")
    parser.add_argument("--latency-seconds", type=float, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "broker.json"
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "broker",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "client": "confluent-kafka (librdkafka)",
            "partitions": 1,
            "broker_flush": "page cache (no fsync), as Kafka's default",
            "idempotence": "on with acks=all (Kafka's client default), off with acks=1",
            "linger_ms": 5,
            "compression": "none",
        },
    }
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as scratch:
        data_dir = Path(scratch) / "data"
        report["raw"] = {
            "loopback_tcp": loopback_tcp(),
            "page_cache_write": page_cache_write(Path(scratch)),
        }
        process, bootstrap = start_broker(data_dir)
        try:
            report["produce"], report["consume"] = [], []
            for count, size in ((args.small, 100), (args.large, 1024)):
                for acks in ("1", "all"):
                    topic = f"bench-{size}-{acks}"
                    report["produce"].append(produce(bootstrap, topic, count, size, acks))
                    result = consume(bootstrap, topic, count)
                    result.update(message_bytes=size, acks=acks)
                    report["consume"].append(result)
            report["latency"] = latency(bootstrap, "bench-latency", args.rate, args.latency_seconds)
        finally:
            process.terminate()
            process.wait(30)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
