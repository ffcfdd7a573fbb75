"""Partition-level throttling by disk health on a real device: the broker's log directory is an
ext4 file system on a loop device with direct I/O. A reader of old offsets of one partition,
whose segments the test keeps evicting from the page cache, makes every read of it a real disk
read and keeps the device busy; a producer writes another partition of the same disk at a fixed
rate. The broker finds the device unhealthy (its utilisation over the threshold), throttles the
cold reader's partition to its rate (the reader slows to about that rate, told to back off
through the responses' throttle time) and the producer keeps its rate. Bad settings are refused
at start with their names."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerkit import (
    RDKAFKA_LOG,
    BrokerProcess,
    MiB,
    admin,
    evict_from_page_cache,
    loop_disk,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from waiting import poll

TOPIC = "disk-health"
COLD, WARM = 0, 1
PARTITION_RATE = 256 * 1024
PRODUCE_RATE = 400
RUN_S = 24.0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with loop_disk(tmp_path / "disk", tmp_path / "disk.img", 512 * MiB) as path:
        yield path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fill_cold_partition(bootstrap: str, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20,
                        "batch.size": 1_000_000, "log_level": 0})  # fmt: skip
    value = b"c" * 4000
    for i in range(size // len(value)):
        producer.produce(TOPIC, value, partition=COLD)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


class ColdReader(threading.Thread):
    """Reads the cold partition from its start, over and over (back to offset 0 on reaching
    `last`), until stopped; bytes read by second."""

    def __init__(self, bootstrap: str, last: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold-reader",
                                  "enable.auto.commit": False, "fetch.max.bytes": 4 * MiB,
                                  "max.partition.fetch.bytes": 4 * MiB,
                                  "log_level": 0}, logger=RDKAFKA_LOG)  # fmt: skip
        self.last, self.stop = last, stop
        self.by_second: dict[int, int] = {}

    def run(self) -> None:
        start = time.monotonic()
        self.consumer.assign([TopicPartition(TOPIC, COLD, OFFSET_BEGINNING)])
        try:
            while not self.stop.is_set() and time.monotonic() - start < RUN_S + 30:
                for message in self.consumer.consume(500, timeout=0.2):
                    if message.error() is not None:
                        continue
                    second = int(time.monotonic() - start)
                    self.by_second[second] = self.by_second.get(second, 0) + len(message)
                    if message.offset() >= self.last:
                        self.consumer.seek(TopicPartition(TOPIC, COLD, 0))
                        break
        finally:
            self.consumer.close()


def evicting(directory: Path, stop: threading.Event) -> None:
    while not stop.wait(0.1):
        evict_from_page_cache(directory)


@pytest.mark.slow
def test_a_cold_reader_is_throttled_and_a_producer_keeps_its_rate(disk: Path, figure) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(disk, config={
        "disk.throttle.enable": True, "disk.throttle.util.threshold": 0.05,
        "disk.throttle.await.ms.threshold": 10_000.0,
        "disk.throttle.partition.bytes.per.second": PARTITION_RATE,
        "disk.health.sample.interval.ms": 500, "log.segment.bytes": 8 * MiB,
        "metrics.port": metrics_port,
    })  # fmt: skip
    broker.start()
    try:
        client = admin(broker.bootstrap)  # kept until its future is done
        client.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        fill_cold_partition(broker.bootstrap, 48 * MiB)
        stop = threading.Event()
        reader = ColdReader(broker.bootstrap, 48 * MiB // 4000 - 1, stop)
        evictor = threading.Thread(target=evicting, args=(disk, stop), daemon=True)
        evictor.start()
        reader.start()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0,
                             "log_level": 0}, logger=RDKAFKA_LOG)  # fmt: skip
        acked_at: list[float] = []
        start = time.monotonic()

        def delivered(error: object, _message: object) -> None:
            if error is None:
                acked_at.append(time.monotonic() - start)

        sent = 0
        while time.monotonic() - start < RUN_S:
            while sent < int((time.monotonic() - start) * PRODUCE_RATE):
                producer.produce(TOPIC, b"w" * 1000, partition=WARM, on_delivery=delivered)
                sent += 1
            producer.poll(0.005)
        producer.flush(30)
        poll(lambda: "throttling cold reads of disk-health-0" in broker.logs(), 10,
             "the cold partition throttled", detail=lambda: broker.logs()[-3000:])  # fmt: skip
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                         timeout=10).read().decode()  # fmt: skip
        stop.set()
        reader.join(30)
        evictor.join(5)
    finally:
        broker.stop()
    assert 'kafka_log_diskhealth_throttled{partition="0",topic="disk-health"} 1.0' in metrics
    assert 'kafka_log_diskhealth_utilization{device="loop' in metrics
    throttled_at = next(s for s in range(int(RUN_S)) if s in reader.by_second)  # first read
    late = [reader.by_second.get(s, 0) for s in range(int(RUN_S) // 2, int(RUN_S) - 1)]
    early = max(reader.by_second.get(s, 0) for s in range(throttled_at, throttled_at + 3))
    late_rate = sum(late) / len(late)
    acked_late = sum(1 for t in acked_at if RUN_S / 2 <= t < RUN_S - 1) / (RUN_S / 2 - 1)
    figure("cold reader, first seconds (before the throttle)", early, "B/s")
    figure("cold reader, second half (throttled)", late_rate, "B/s")
    figure("producer on the same disk, second half", acked_late, "records/s")
    assert late_rate < 2 * PARTITION_RATE, reader.by_second
    assert early > 2 * late_rate, reader.by_second
    assert acked_late > 0.9 * PRODUCE_RATE, acked_late


def test_out_of_range_disk_throttle_settings_stop_the_broker_at_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", config={
        "disk.throttle.util.threshold": 1.5, "disk.throttle.partition.bytes.per.second": 0})
    with pytest.raises(RuntimeError, match="broker exited"):
        broker.start()
    logs = broker.logs()
    assert "disk.throttle.util.threshold must be above 0 and at most 1, not 1.5" in logs, logs
    assert "disk.throttle.partition.bytes.per.second must be at least 1, not 0" in logs, logs
