"""A real broker on a small tmpfs that fills up (issue 17): a full disk is an operational state.

The data directory is a 24 MiB tmpfs (root needed: skipped locally without it, a failure in CI).
A spacer file fills it while an idempotent acks=all producer writes numbered 1 KB records, so the
disk fills under load; then space comes back and producing goes on. Whatever happens, every
acknowledged record must be read back (CRCs checked) exactly once at the offset its
acknowledgement named, with contiguous offsets, after a clean restart and after kill -9 too.

Also: SIGTERM while full exits 0 and leaves no empty checkpoint or `.tmp` file behind; a broker
started while full (after SIGTERM, and after kill -9) serves reads and takes writes once space
returns; DeleteRecords and topic deletion free space while the disk is full; offset commits go on
below `log.dir.min.free.bytes` while produces are refused.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from brokerkit import (
    KAFKA_STORAGE_ERROR,
    RDKAFKA_LOG,
    AckedProducer,
    BrokerProcess,
    MiB,
    RawClient,
    check_all,
    create_topic,
    delete_records,
    delete_topic,
    fill,
    free_bytes,
    leftovers,
    tmpfs,
    topics,
    value_for,
)
from confluent_kafka import Consumer, TopicPartition

from waiting import poll

DISK_BYTES = 24 * MiB
TOPIC = "full-disk"
RAW_SEQS = itertools.count(900_000_000)  # numbers of records produced by raw requests
StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """The broker's data directory: a fresh tmpfs. Its log, config and ready files stay outside."""
    with tmpfs(tmp_path / "broker", DISK_BYTES) as path:
        yield path


@pytest.fixture
def start_broker(disk: Path) -> Iterator[StartBroker]:
    started: list[BrokerProcess] = []

    def start(**config: object) -> BrokerProcess:
        broker = BrokerProcess(disk, config=config)
        started.append(broker)
        broker.start()
        return broker

    yield start
    for broker in started:
        if broker.process is not None:
            broker.kill()  # before the tmpfs is unmounted


def raw_produce(broker: BrokerProcess, topic: str) -> int:
    with RawClient(broker.port) as raw:
        return raw.produce(topic, value_for(next(RAW_SEQS)))


def assert_no_traceback(broker: BrokerProcess) -> None:
    logs = broker.logs()
    assert "Traceback" not in logs, logs[logs.index("Traceback") - 2000 :][:6000]


@pytest.mark.slow
@pytest.mark.parametrize("min_free", [MiB, 0], ids=["floor-1MiB", "no-floor-real-ENOSPC"])
def test_acknowledged_records_survive_a_full_disk(
    disk: Path, start_broker: StartBroker, min_free: int
) -> None:
    broker = start_broker(**{"log.dir.min.free.bytes": min_free, "log.segment.bytes": MiB})
    create_topic(broker.bootstrap, TOPIC)
    spacer = disk / "spacer"
    fill(spacer, leave=4 * MiB)

    producer = AckedProducer(broker.bootstrap, TOPIC)
    producer.produce_until_refused(max_records=20_000, max_seconds=45)
    acked_while_filling = len(producer.acked)
    assert acked_while_filling >= 1000, f"only {acked_while_filling} records fitted in 4 MiB"
    assert free_bytes(disk) < 2 * MiB, "delivery failed while the disk still had room"

    spacer.unlink()
    after = producer.produce(1000)
    missing = sorted(set(range(producer.next_seq - 1000, producer.next_seq)) - set(after))
    assert not missing, (
        f"{len(missing)} of 1000 records not acknowledged after space returned, e.g. "
        f"{[(s, producer.failed.get(s)) for s in missing[:3]]}"
    )
    served = check_all(broker.bootstrap, TOPIC, producer.acked)
    assert served >= len(producer.acked)

    assert broker.stop() == 0, broker.logs()[-5000:]
    broker.start()
    check_all(broker.bootstrap, TOPIC, producer.acked)

    broker.kill()
    broker.start()
    check_all(broker.bootstrap, TOPIC, producer.acked)
    assert_no_traceback(broker)


@pytest.mark.slow
def test_stop_and_start_while_the_disk_is_full(disk: Path, start_broker: StartBroker) -> None:
    broker = start_broker(
        **{
            "log.dir.min.free.bytes": 0,
            "log.segment.bytes": 256 * 1024,
            "log.flush.offset.checkpoint.interval.ms": 100,
        }
    )
    create_topic(broker.bootstrap, TOPIC)
    producer = AckedProducer(broker.bootstrap, TOPIC)
    assert len(producer.produce(500)) == 500
    spacer = disk / "spacer"
    fill(spacer, leave=0)
    assert free_bytes(disk) < 8192
    refused_once_full(broker, TOPIC)
    time.sleep(0.5)  # checkpoints are due every 100 ms: some are written while full

    code = broker.stop()
    assert code == 0, f"SIGTERM while full exited {code}:\n{broker.logs()[-5000:]}"
    assert not leftovers(disk), leftovers(disk)

    broker.start()  # still full
    assert free_bytes(disk) < 8192
    check_all(broker.bootstrap, TOPIC, producer.acked)
    refused_once_full(broker, TOPIC)

    broker.kill()  # and again after kill -9 while full: recovery must not need new space
    broker.start()
    check_all(broker.bootstrap, TOPIC, producer.acked)
    refused_once_full(broker, TOPIC)

    spacer.unlink()
    poll(lambda: raw_produce(broker, TOPIC) == 0, 10, "produce accepted once space returned")
    later = AckedProducer(broker.bootstrap, TOPIC, next_seq=100_000)
    assert len(later.produce(200)) == 200, later.failed
    check_all(broker.bootstrap, TOPIC, producer.acked | later.acked)

    assert broker.stop() == 0
    assert not leftovers(disk), leftovers(disk)
    assert_no_traceback(broker)


def refused_once_full(broker: BrokerProcess, topic: str, attempts: int = 8) -> int:
    """Produce single 1 KB records until one is refused with KAFKA_STORAGE_ERROR (a full disk
    may still take a few into the segment's last, partly used page); how many were taken."""
    for taken in range(attempts):
        error = raw_produce(broker, topic)
        if error == KAFKA_STORAGE_ERROR:
            return taken
        assert error == 0, error
    raise AssertionError(f"{attempts} produces to {topic} accepted on a full disk")


def _full_broker_with_data(
    disk: Path, start_broker: StartBroker, topic: str, min_free: int
) -> tuple[BrokerProcess, AckedProducer, int]:
    """A broker with 3,000 records (~3 MB) acknowledged in `topic` (256 KiB segments), a few more
    until its log rolled, and a disk full to the last byte, on which produces to `topic` and to
    another topic were refused (with `min_free`=0, by a write that failed with ENOSPC and was cut
    back). Also returns the high watermark of `topic`."""
    broker = start_broker(**{"log.dir.min.free.bytes": min_free, "log.segment.bytes": 256 * 1024})
    create_topic(broker.bootstrap, topic, **{"file.delete.delay.ms": "100"})
    create_topic(broker.bootstrap, "other")
    producer = AckedProducer(broker.bootstrap, topic)
    assert len(producer.produce(3000)) == 3000, producer.failed
    rolled = produce_until_rolled(broker, disk / f"{topic}-0", topic)
    fill(disk / "spacer", leave=0)
    taken = refused_once_full(broker, topic)
    refused_once_full(broker, "other")
    return broker, producer, 3000 + rolled + taken


def produce_until_rolled(broker: BrokerProcess, partition_dir: Path, topic: str) -> int:
    """Produce single 1 KB records until the log rolls, so that its active segment holds one
    record and its indexes no entry yet; how many were produced."""
    segments = len(list(partition_dir.glob("*.log")))
    for produced in range(1, 1000):
        assert raw_produce(broker, topic) == 0
        if len(list(partition_dir.glob("*.log"))) > segments:
            return produced
    raise AssertionError("no roll after 1000 records")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("to_high_watermark", "min_free"),
    [(True, 0), (True, MiB), (False, 0)],
    ids=["to-high-watermark-ENOSPC", "to-high-watermark-floor", "below-it-ENOSPC"],
)
def test_delete_records_frees_space_while_full(
    disk: Path, start_broker: StartBroker, to_high_watermark: bool, min_free: int
) -> None:
    broker, producer, high_watermark = _full_broker_with_data(disk, start_broker, TOPIC, min_free)
    before = high_watermark if to_high_watermark else 2000
    free_before = free_bytes(disk)
    assert delete_records(broker.bootstrap, TOPIC, before) == before

    poll(
        lambda: free_bytes(disk) >= free_before + MiB,
        10,
        f"DeleteRecords below offset {before} freeing 1 MiB of ~{before // 1000} MB "
        f"({free_before} bytes free before)",
    )
    later = AckedProducer(broker.bootstrap, TOPIC, next_seq=100_000)
    assert len(later.produce(200)) == 200, later.failed
    acked = producer.acked | later.acked
    check_all(broker.bootstrap, TOPIC, acked, expect_low=before)
    broker.restart()
    check_all(broker.bootstrap, TOPIC, acked, expect_low=before)
    assert_no_traceback(broker)


@pytest.mark.slow
def test_topic_deletion_frees_space_while_full(disk: Path, start_broker: StartBroker) -> None:
    broker, _, _ = _full_broker_with_data(disk, start_broker, "doomed", 0)
    free_before = free_bytes(disk)
    delete_topic(broker.bootstrap, "doomed")

    poll(
        lambda: free_bytes(disk) >= free_before + int(2.5 * MiB),
        10,
        f"deleting a topic of ~3 MB freeing 2.5 MiB ({free_before} bytes free before)",
    )
    assert "doomed" not in topics(broker.bootstrap)
    producer = AckedProducer(broker.bootstrap, "other")
    assert len(producer.produce(200)) == 200, producer.failed
    check_all(broker.bootstrap, "other", producer.acked)
    broker.restart()
    assert "doomed" not in topics(broker.bootstrap)
    check_all(broker.bootstrap, "other", producer.acked)
    assert_no_traceback(broker)


@pytest.mark.slow
def test_offset_commits_below_the_free_space_floor(disk: Path, start_broker: StartBroker) -> None:
    """`__consumer_offsets` is exempt from `log.dir.min.free.bytes`: below the floor produces are
    refused while a group's offset commits still succeed."""
    broker = start_broker(**{"log.dir.min.free.bytes": 2 * MiB})
    create_topic(broker.bootstrap, TOPIC)
    producer = AckedProducer(broker.bootstrap, TOPIC)
    assert len(producer.produce(100)) == 100
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "below-the-floor",
            "enable.auto.commit": False,
            "logger": RDKAFKA_LOG,
        }
    )
    try:
        partition = TopicPartition(TOPIC, 0, 10)
        consumer.commit(offsets=[partition], asynchronous=False)  # the group's offsets exist
        fill(disk / "spacer", leave=MiB)  # below the floor, with room left
        assert MiB // 2 < free_bytes(disk) < 2 * MiB
        poll(
            lambda: raw_produce(broker, TOPIC) == KAFKA_STORAGE_ERROR,
            5,
            "produce refused below log.dir.min.free.bytes",
        )
        for offset in (50, 100):
            committed = consumer.commit(
                offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False
            )
            assert committed is not None and committed[0].error is None, committed
            (stored,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
            assert stored.offset == offset, stored
    finally:
        consumer.close()
    assert broker.stop() == 0
