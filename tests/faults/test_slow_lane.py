"""The slow lane on a real device, with and without it in the same run: the broker's log
directory is an ext4 file system on a loop device with direct I/O; a consumer reads old offsets
of one partition whose segment files the test keeps evicting from the page cache, so its fetches
read the disk; a producer writes another partition one record at a time. Without the lane
(`num.slow.lane.threads = 0`) the disk reads run on the event loop and the producer's
acknowledgements wait behind them; with it, the reader's connection is moved to the lane after
its first slow send. The test checks the move and that the reader reads as before; the
producer's p99 with and without the lane are recorded as figures (how much the loop stalls
depends on how slow the disk is that day, so they are not asserted)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerkit import RDKAFKA_LOG, BrokerProcess, MiB, admin, evict_from_page_cache, loop_disk
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

TOPIC = "slow-lane"
COLD, WARM = 0, 1
COLD_BYTES = 48 * MiB
VALUE = b"c" * 4000
RUN_S = 12.0
PRODUCE_EVERY_S = 0.005


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with loop_disk(tmp_path / "disk", tmp_path / "disk.img", 512 * MiB) as path:
        yield path


def cold_reading(bootstrap: str, stop: threading.Event, read: list[int]) -> None:
    """Read the cold partition from its start over and over until `stop`; bytes into `read`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cold",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 4 * MiB,
                         "fetch.max.bytes": 4 * MiB, "log_level": 0},
                        logger=RDKAFKA_LOG)  # fmt: skip
    last = COLD_BYTES // len(VALUE) - 1
    consumer.assign([TopicPartition(TOPIC, COLD, OFFSET_BEGINNING)])
    deadline = time.monotonic() + RUN_S + 30
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is None:
                    read[0] += len(message)
                    if message.offset() >= last:
                        consumer.seek(TopicPartition(TOPIC, COLD, 0))
                        break
    finally:
        consumer.close()


def evicting(disk: Path, stop: threading.Event) -> None:
    """Keep the segments out of the page cache until `stop`."""
    while not stop.wait(0.05):
        evict_from_page_cache(disk, "*.log")


def produce_latencies(bootstrap: str) -> list[float]:
    """One record at a time to the warm partition for RUN_S; each one's seconds to its ack."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                         "log_level": 0}, logger=RDKAFKA_LOG)  # fmt: skip
    latencies: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        sent = time.monotonic()
        producer.produce(TOPIC, b"w" * 200, partition=WARM,
                         on_delivery=lambda err, _m, sent=sent: latencies.append(
                             time.monotonic() - sent) if err is None else None)  # fmt: skip
        producer.poll(PRODUCE_EVERY_S)
    producer.flush(30)
    return latencies


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(len(ordered) * 0.99)]


def run_phase(disk: Path, threads: int) -> tuple[float, float, int, str]:
    """(producer p99 s, median s, cold bytes read, broker log) with `threads` lane threads."""
    broker = BrokerProcess(disk, config={"num.slow.lane.threads": threads,
                                         "slow.lane.send.threshold.ms": 5.0,
                                         "log.segment.bytes": 8 * MiB})  # fmt: skip
    broker.start()
    try:
        stop, read = threading.Event(), [0]
        reader = threading.Thread(target=cold_reading, args=(broker.bootstrap, stop, read),
                                  daemon=True)  # fmt: skip
        evictor = threading.Thread(target=evicting, args=(disk, stop), daemon=True)
        reader.start()
        evictor.start()
        time.sleep(1)
        latencies = produce_latencies(broker.bootstrap)
        stop.set()
        reader.join(30)
        evictor.join(5)
        logs = broker.logs()
    finally:
        broker.stop()
    return p99(latencies), sorted(latencies)[len(latencies) // 2], read[0], logs


@pytest.mark.slow
def test_the_slow_lane_keeps_a_cold_readers_disk_reads_off_a_producers_path(
    disk: Path, figure
) -> None:  # fmt: skip
    setup = BrokerProcess(disk, config={"log.segment.bytes": 8 * MiB})
    setup.start()
    try:
        client = admin(setup.bootstrap)
        client.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": setup.bootstrap, "acks": 1, "linger.ms": 20,
                             "batch.size": 1_000_000, "log_level": 0})  # fmt: skip
        for i in range(COLD_BYTES // len(VALUE)):
            producer.produce(TOPIC, VALUE, partition=COLD)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
    finally:
        setup.stop()
    without_p99, without_median, without_read, _ = run_phase(disk, 0)
    with_p99, with_median, with_read, logs = run_phase(disk, 2)
    figure("producer p99 beside a cold reader, no lane", without_p99, "s")
    figure("producer p99 beside a cold reader, slow lane", with_p99, "s")
    figure("producer median, no lane", without_median, "s")
    figure("producer median, slow lane", with_median, "s")
    figure("cold bytes read, no lane", without_read, "B")
    figure("cold bytes read, slow lane", with_read, "B")
    assert "moved to the slow lane" in logs, logs[-3000:]
    assert with_read > COLD_BYTES  # the reader still reads: the lane moves its reads, not it
    assert without_read > COLD_BYTES
