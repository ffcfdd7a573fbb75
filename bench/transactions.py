"""Transactions benchmark with confluent-kafka against a single-node broker, in one run:
- produce: `--messages` 100-byte messages with an idempotent producer (acks=all), and the same
  count with a transactional producer committing every `--per-transaction` messages (1,000 by
  default), each with the broker's CPU-seconds per million messages;
- consume: the transactional topic read from the beginning by a read_uncommitted and by a
  read_committed consumer (a tenth of the transactions aborted, so read_committed has aborted
  ranges to skip; both consumers read everything the log holds, read_committed delivers fewer).
- restart: a partition holding `--restart-transactions` transactions (a tenth aborted, over many
  segments) loaded as a broker start loads it, in-process: from its producer snapshot (after a
  clean shutdown) and by the full scan an older weir did (snapshots and `.txnindex` files
  removed, so the has-transactions marker forces a replay of every batch, which also rebuilds
  the indexes).
Ratios: transactional / idempotent produce rate, read_committed / read_uncommitted rate of
walking the same log (records in the log per second; read_committed delivers the committed
nine tenths of them), and full-scan / snapshot load time.
Writes JSON to bench/results/transactions-<time>.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from weir.broker.replica_manager import ReplicaManager
from weir.broker.txn.markers import control_batch
from weir.clock import SystemClock, ThreadScheduler
from weir.records import BatchSpec, Record, build_batch
from weir.storage import LogConfig, LogManager

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker import cpu_seconds, start_broker

MB = 1e6
SIZE = 100


def produce_idempotent(bootstrap: str, topic: str, count: int, broker_pid: int) -> dict[str, Any]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000, "log_level": 3})  # fmt: skip
    value = os.urandom(SIZE // 2).hex().encode()
    cpu, started = cpu_seconds(broker_pid), time.perf_counter()
    for i in range(count):
        _produce(producer, topic, value, i)
    assert producer.flush(120) == 0
    return _figures(count, time.perf_counter() - started, cpu_seconds(broker_pid) - cpu)


def produce_transactional(
    bootstrap: str, topic: str, count: int, per_transaction: int, broker_pid: int
) -> dict[str, Any]:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}",
                         "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000, "log_level": 3})  # fmt: skip
    producer.init_transactions(30)
    value = os.urandom(SIZE // 2).hex().encode()
    cpu, started = cpu_seconds(broker_pid), time.perf_counter()
    committed = aborted = 0
    for first in range(0, count, per_transaction):
        producer.begin_transaction()
        size = min(per_transaction, count - first)
        for i in range(first, first + size):
            _produce(producer, topic, value, i)
        if (first // per_transaction) % 10 == 9:
            producer.flush(60)  # on the broker before the abort (abort drops what is queued)
            producer.abort_transaction(60)
            aborted += size
        else:
            producer.commit_transaction(60)
            committed += size
    figures = _figures(count, time.perf_counter() - started, cpu_seconds(broker_pid) - cpu)
    figures.update(per_transaction=per_transaction, committed=committed, aborted=aborted)
    return figures


def _produce(producer: Producer, topic: str, value: bytes, i: int) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=i % 2)
            return
        except BufferError:
            producer.poll(0.01)


def _figures(count: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "messages": count,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(count / seconds),
        "mb_per_s": round(count * SIZE / seconds / MB, 1),
        "broker_cpu_s_per_million_msgs": round(cpu / count * 1e6, 3),
    }


def consume(
    bootstrap: str, topic: str, isolation: str, expected: int, in_log: int
) -> dict[str, Any]:
    """Read both partitions from the start until `expected` records have been delivered;
    `in_log` records lie in the log (log_msgs_per_s: the rate at which the log is walked)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "fetch.queue.backoff.ms": 1, "log_level": 3})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < expected and time.perf_counter() < deadline:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error() is None:
                got += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return {
        "isolation": isolation,
        "messages": got,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(got / seconds),
        "log_msgs_per_s": round(in_log / seconds),
    }


def restart(transactions: int) -> dict[str, Any]:
    """Load time of one partition with `transactions` transactions: from its snapshot, and by
    a full scan (snapshots and indexes removed, as an older weir left the partition)."""
    config = LogConfig(segment_bytes=1_000_000)
    with tempfile.TemporaryDirectory(prefix="weir-bench-restart-") as scratch:
        data = Path(scratch)
        replicas, scheduler = _open(data, config)
        _write_transactions(replicas, transactions)
        replicas.log_manager.close()
        scheduler.shutdown()
        snapshot = _timed_load(data, config)
        directory = next(data.glob("txn-0"))
        for path in [*directory.glob("*.snapshot"), *directory.glob("*.txnindex")]:
            path.unlink()
        full_scan = _timed_load(data, config)
    return {
        "transactions": transactions,
        "segments": snapshot["segments"],
        "snapshot": snapshot,
        "full_scan": full_scan,
        "full_scan_over_snapshot": round(full_scan["seconds"] / snapshot["seconds"], 1),
    }


def _open(data: Path, config: LogConfig) -> tuple[ReplicaManager, ThreadScheduler]:
    clock = SystemClock()
    scheduler = ThreadScheduler(clock)
    logs = LogManager(data, config, clock, scheduler, topic_configs={"txn": config})
    return ReplicaManager(logs, clock), scheduler


def _write_transactions(replicas: ReplicaManager, transactions: int) -> None:
    replicas.create_partitions("txn", 1, replicas.log_manager.default_config)
    value = os.urandom(SIZE // 2).hex().encode()
    for t in range(transactions):
        producer_id = 1000 + t % 16
        sequence = 10 * (t // 16)
        records = [Record(offset=i, timestamp=0, key=None, value=value) for i in range(10)]
        spec = BatchSpec(producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                         transactional=True)  # fmt: skip
        assert replicas.append("txn", 0, build_batch(records, spec=spec)).error is ErrorCode.none
        commit = t % 10 != 9
        marker = control_batch(producer_id, 0, 0, commit, 0)
        assert replicas.append_marker("txn", 0, marker, commit).error is ErrorCode.none


def _timed_load(data: Path, config: LogConfig) -> dict[str, Any]:
    started = time.perf_counter()
    replicas, scheduler = _open(data, config)
    seconds = time.perf_counter() - started
    partition = replicas.get("txn", 0)
    assert partition is not None
    figures = {"seconds": round(seconds, 3), "segments": len(partition.log.segments),
               "replayed_batches": partition.log.load_report.replayed_batches}  # fmt: skip
    replicas.log_manager.close()
    scheduler.shutdown()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--per-transaction", type=int, default=1_000)
    parser.add_argument("--restart-transactions", type=int, default=50_000)
    parser.add_argument("--restart-only", action="store_true",
                        help="measure the partition load only (no broker, no clients)")  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "transactions",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if not args.restart_only:
        result.update(_clients(args))
    result["restart"] = restart(args.restart_transactions)
    out = args.out or Path(__file__).parent / "results" / (
        f"transactions-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _clients(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="weir-bench-txn-") as scratch:
        process, bootstrap = start_broker(Path(scratch) / "data")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
            for future in admin.create_topics([NewTopic("plain", 2), NewTopic("txn", 2)]
                                              ).values():  # fmt: skip
                future.result(30)
            plain = produce_idempotent(bootstrap, "plain", args.messages, process.pid)
            txn = produce_transactional(bootstrap, "txn", args.messages, args.per_transaction,
                                        process.pid)  # fmt: skip
            uncommitted = consume(bootstrap, "txn", "read_uncommitted", args.messages,
                                  args.messages)  # fmt: skip
            committed = consume(bootstrap, "txn", "read_committed", txn["committed"],
                                args.messages)  # fmt: skip
        finally:
            process.terminate()
            process.wait(30)
    return {
        "produce": {"idempotent": plain, "transactional": txn,
                    "transactional_over_idempotent": round(
                        txn["msgs_per_s"] / plain["msgs_per_s"], 3)},
        "consume": {"read_uncommitted": uncommitted, "read_committed": committed,
                    "read_committed_over_read_uncommitted": round(
                        committed["log_msgs_per_s"] / uncommitted["log_msgs_per_s"], 3)},
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
