"""What the operator's cluster tests share: four brokers serving metrics, idempotent acks=all
load that records every acknowledged offset, `weir operator` as a child process, and the check
that every acknowledged record is read back once, at its offset. It imports no pytest."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from typing import Any

from cluster_brokers import CHROOT, BrokerSet, ClusterBroker, start_together, wait_settled
from cluster_processes import free_port
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

CONFIG = {"zookeeper.session.timeout.ms": 6000, "offsets.topic.num.partitions": 2,
          "replica.lag.time.max.ms": 5000}  # fmt: skip
VALUE_BYTES = 500
#: the longest a load runs (tests stop it sooner)
LOAD_LIMIT_S = 300.0
SPREAD = re.compile(r"bytes-in max/min across brokers: (\S+) -> (\S+)")


def start_four(cluster_brokers: BrokerSet, zookeeper: Any) -> dict[int, ClusterBroker]:
    brokers = {
        node_id: cluster_brokers.add(node_id, f"{zookeeper.connect}{CHROOT}",
                                     config={**CONFIG, "metrics.port": free_port()})
        for node_id in (1, 2, 3, 4)
    }  # fmt: skip
    start_together(brokers.values())
    wait_settled(brokers.values())
    return brokers


def bootstrap_of(brokers: dict[int, ClusterBroker]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


class Load(threading.Thread):
    """Idempotent acks=all records to `topic`'s `partitions` at `rate` a second until stopped;
    the offsets acknowledged, by partition, with their values."""

    def __init__(self, bootstrap: str, topic: str, rate: int, partitions: int = 4) -> None:
        super().__init__(daemon=True)
        self.topic, self.rate, self.partitions = topic, rate, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "log_level": 0})  # fmt: skip
        self.acked: dict[int, dict[int, bytes]] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        self.acked.setdefault(message.partition(), {})[message.offset()] = message.value()

    def run(self) -> None:
        sent, start = 0, time.monotonic()
        while not self.stopping.is_set() and time.monotonic() - start < LOAD_LIMIT_S:
            due = int((time.monotonic() - start) * self.rate)
            while sent < due:
                value = f"{self.topic}-{sent:09d}".encode().ljust(VALUE_BYTES, b".")
                self.producer.produce(self.topic, value, partition=sent % self.partitions,
                                      on_delivery=self.delivered)  # fmt: skip
                sent += 1
            self.producer.poll(0.01)
        self.producer.flush(60)

    def stop(self) -> None:
        self.stopping.set()
        self.join(90)

    def total(self) -> int:
        return sum(len(offsets) for offsets in self.acked.values())


def weir_operator(
    brokers: dict[int, ClusterBroker], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "operator", *args, "--bootstrap-server",
         bootstrap_of(brokers), "--window-seconds", "3", "--windows", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def current_spread(output: str) -> float:
    """The largest broker's bytes in over the smallest's, now, from a plan's output."""
    found = SPREAD.search(output)
    assert found, output
    return float(found.group(1))


def read_back(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, dict[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: dict[int, dict[int, bytes]] = {p: {} for p in ends}
    deadline = time.monotonic() + 60
    try:
        while any(len(seen[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None, message.error()
                offset = message.offset()
                assert offset not in seen[message.partition()], f"offset {offset} twice"
                seen[message.partition()][offset] = message.value()
    finally:
        consumer.close()
    return seen


def check_nothing_lost(bootstrap: str, load: Load) -> None:
    """Every record `load` had acknowledged is read back at its offset with its value."""
    assert not load.errors, load.errors[:5]
    ends = {p: max(offsets) + 1 for p, offsets in load.acked.items()}
    seen = read_back(bootstrap, load.topic, ends)
    for partition, acked in load.acked.items():
        lost = [o for o in acked if seen[partition].get(o) != acked[o]]
        assert not lost, f"{load.topic}-{partition}: {len(lost)} acknowledged records lost"


class OperatorProcess:
    """`weir operator start` as a child, its output kept line by line."""

    def __init__(self, brokers: dict[int, ClusterBroker], zookeeper: str, name: str,
                 *args: str) -> None:  # fmt: skip
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "weir.cli.main", "operator", "start", "--zookeeper",
             zookeeper, "--id", name, "--zookeeper-session-timeout-ms", "4000",
             "--bootstrap-server", bootstrap_of(brokers), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM; the seconds it took to exit."""
        start = time.monotonic()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"operator {self.name} still running {timeout:g}s after "
                                     f"SIGTERM:\n{self.output()}") from None
        self._close()
        return time.monotonic() - start

    def _close(self) -> None:
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self._close()
