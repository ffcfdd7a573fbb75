"""Broker benchmark with confluent-kafka, beside the machine's raw limits, in one run.

Starts `weir broker start` (single node) on an ephemeral port, then measures:
- produce: 1,000,000 x 100-byte and 200,000 x 1 KiB messages, acks=1 and acks=all, with the
  broker's CPU-seconds per million messages and per GB (from /proc, the broker process alone);
- consume: everything produced, read back from the beginning;
- produce at 1, 100, 1,000 and 5,000 partitions from one producer, messages round-robin;
- end-to-end latency percentiles at fixed rates (default 10,000 and 50,000 msgs/s), from
  confluent-kafka in Python and from `latency_client.c`, a client in C on librdkafka built here
  (Debian's librdkafka-dev, installed when run as root), one partition, 100-byte messages,
  linger.ms 1: produce-to-ack and produce-to-consume, with the slowest messages' send times;
- raw loopback TCP throughput and raw page-cache write throughput on the data disk.
With `--baseline REF` the same broker measurements run first on that commit (a temporary git
worktree of it, its C sources built in place) and the report has both, side by side.
Writes JSON to bench/results/broker.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
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
from confluent_kafka.admin import AdminClient, NewTopic

MB = 1e6


def start_broker(
    data_dir: Path, config: Path | None = None, source: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`weir broker start` on an ephemeral loopback port (with `config`, a TOML file, if given;
    from the sources under `source` instead of the installed ones, if given); returns the process
    and its address once it is ready. The other benchmarks use it too."""
    ready = data_dir.parent / "ready"
    command = [sys.executable, "-m", "weir.cli.main", "broker", "start", "--data-dir",
               str(data_dir), "--listen", "127.0.0.1:0", "--ready-file", str(ready)]  # fmt: skip
    if config is not None:
        command += ["--config", str(config)]
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
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


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(
    bootstrap: str, topic: str, count: int, size: int, acks: str, *,
    broker_pid: int, partitions: int = 0, time_limit: float = 300,
) -> dict[str, Any]:  # fmt: skip
    """`count` messages of `size` bytes (round-robin over `partitions` when given), and what
    they cost the broker. Stops early at `time_limit` seconds and reports what it finished."""
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

    cpu_before = cpu_seconds(broker_pid)
    started = time.perf_counter()
    sent = 0
    for sent in range(1, count + 1):
        while True:
            try:
                if partitions:
                    producer.produce(topic, value, partition=sent % partitions,
                                     on_delivery=delivered)  # fmt: skip
                else:
                    producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if sent % 10_000 == 0 and time.perf_counter() - started > time_limit:
            break
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    cpu = cpu_seconds(broker_pid) - cpu_before
    return {
        "messages": sent,
        "message_bytes": size,
        "acks": acks,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(sent / seconds),
        "mb_per_s": round(sent * size / seconds / MB, 1),
        "broker_cpu_s_per_million_msgs": round(cpu / sent * 1e6, 3),
        "broker_cpu_s_per_gb": round(cpu / (sent * size) * 1e9, 3),
        "failed": failures[0] + remaining,
    }


def partition_sweep(
    bootstrap: str, broker_pid: int, counts: list[int], messages: int, time_limit: float
) -> list[dict[str, Any]]:
    """One producer spreading 100-byte messages round-robin over 1, 100, ... partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3,
                         "socket.timeout.ms": 300_000})  # fmt: skip
    results: list[dict[str, Any]] = []
    for partitions in counts:
        topic = f"bench-partitions-{partitions}"
        try:
            created = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=300,
                                          operation_timeout=300)  # fmt: skip
            created[topic].result(300)
            result = produce(bootstrap, topic, messages, 100, "1", broker_pid=broker_pid,
                             partitions=partitions, time_limit=time_limit)  # fmt: skip
        except Exception as exc:  # a broker that cannot hold this many partitions: say so
            results.append({"partitions": partitions, "error": str(exc)})
            break
        result["partitions"] = partitions
        results.append(result)
        # Each size alone: a broker holds about three descriptors per partition.
        admin.delete_topics([topic], operation_timeout=300)[topic].result(300)
    base = results[0].get("msgs_per_s", 0) or 1
    for result in results:
        if "msgs_per_s" in result:
            result["share_of_one_partition_rate"] = round(result["msgs_per_s"] / base, 3)
    return results


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


LATENCY_CLIENT = Path(__file__).with_name("latency_client.c")
LIBRDKAFKA_HEADER = Path("/usr/include/librdkafka/rdkafka.h")


def build_latency_client(scratch: Path) -> Path:
    """Compile `latency_client.c` against Debian's librdkafka-dev (installed first when run as
    root, as scripts/bootstrap installs Debian packages)."""
    if not LIBRDKAFKA_HEADER.exists() and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "librdkafka-dev"], env=env,
                       check=True, capture_output=True)  # fmt: skip
    binary = scratch / "latency_client"
    subprocess.run(["cc", "-O2", "-o", str(binary), str(LATENCY_CLIENT), "-lrdkafka",
                    "-lpthread"], check=True)  # fmt: skip
    return binary


def c_latency(
    client: Path, bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: int = 1
) -> dict[str, Any]:
    """Produce-to-ack and produce-to-consume percentiles from the C client (acks=all, the
    client's default; idempotence off)."""
    done = subprocess.run([str(client), bootstrap, topic, str(rate), str(seconds),
                           str(linger_ms), "all"], check=True, capture_output=True,
                          timeout=seconds + 120)  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure_broker(source: Path | None, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Every broker measurement, on a fresh data directory, with the broker from `source`."""
    data_dir = scratch / ("baseline" if source else "current") / "data"
    data_dir.mkdir(parents=True)
    process, bootstrap = start_broker(data_dir, source=source)
    run: dict[str, Any] = {"produce": [], "consume": []}
    try:
        for count, size in ((args.small, 100), (args.large, 1024)):
            for acks in ("1", "all"):
                topic = f"bench-{size}-{acks}"
                run["produce"].append(
                    produce(bootstrap, topic, count, size, acks, broker_pid=process.pid)
                )
                result = consume(bootstrap, topic, count)
                result.update(message_bytes=size, acks=acks)
                run["consume"].append(result)
        run["latency"] = [
            latency(bootstrap, f"bench-latency-{rate}", rate, args.latency_seconds)
            for rate in args.rates
        ]
        run["c_latency"] = [
            c_latency(
                args.latency_client, bootstrap, f"bench-c-latency-{rate}-{n}", rate,
                args.latency_seconds,
            )
            for rate in args.rates
            for n in range(args.latency_runs)
        ]
        run["partitions"] = partition_sweep(
            bootstrap, process.pid, args.partitions, args.partition_messages, args.phase_seconds
        )
    finally:
        process.terminate()
        process.wait(60)
    return run


def baseline_checkout(ref: str, scratch: Path) -> Path:
    """A worktree of `ref` with its C sources built in place; returns its source directory."""
    repo = Path(__file__).resolve().parent.parent
    tree = scratch / "baseline-tree"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), ref],
                   check=True, capture_output=True)  # fmt: skip
    if (tree / "setup.py").exists():
        built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=tree, capture_output=True)  # fmt: skip
        if built.returncode != 0:
            _reuse_extensions(repo / "src", tree / "src")
    return tree / "src"


def _reuse_extensions(current: Path, baseline: Path) -> None:
    """Where setup.py cannot build in place (a setuptools newer than the tree's pyproject),
    the extensions of the current tree serve, if their C sources are the same."""
    for source in current.glob("weir/*/*.c"):
        other = baseline / source.relative_to(current)
        if not other.exists() or other.read_bytes() != source.read_bytes():
            raise RuntimeError(f"cannot build {other} and it differs from {source}")
        for built in source.parent.glob(f"{source.stem}.*.so"):
            shutil.copy2(built, other.parent / built.name)


def remove_checkout(scratch: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force",
                    str(scratch / "baseline-tree")], capture_output=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=1_000_000, help="100-byte messages")
    parser.add_argument("--large", type=int, default=200_000, help="1 KiB messages")
    parser.add_argument("--rates", type=int, nargs="+", default=[10_000, 50_000],
                        help="latency test rates")  # fmt: skip
    parser.add_argument("--latency-seconds", type=float, default=5)
    parser.add_argument("--latency-runs", type=int, default=3, help="C client runs per rate")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 100, 1000, 5000])
    parser.add_argument("--partition-messages", type=int, default=500_000)
    parser.add_argument("--phase-seconds", type=float, default=60,
                        help="a partition-sweep phase stops after this long")  # fmt: skip
    parser.add_argument("--baseline", help="a commit to measure first, side by side")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "broker.json"
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "broker",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "client": "confluent-kafka (librdkafka)",
            "partitions": "1, except the partition sweep",
            "broker_flush": "page cache (no fsync), as Kafka's default",
            "idempotence": "on with acks=all (Kafka's client default), off with acks=1",
            "linger_ms": "5 (throughput), 0 (Python latency), 1 (C latency)",
            "compression": "none",
            "baseline": args.baseline,
        },
    }
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as name:
        scratch = Path(name)
        args.latency_client = build_latency_client(scratch)
        report["raw"] = {
            "loopback_tcp": loopback_tcp(),
            "page_cache_write": page_cache_write(scratch),
        }
        if args.baseline:
            try:
                report["baseline"] = measure_broker(baseline_checkout(args.baseline, scratch),
                                                    args, scratch)  # fmt: skip
            finally:
                remove_checkout(scratch)
        report["current"] = measure_broker(None, args, scratch)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
