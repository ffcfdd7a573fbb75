"""Exactly-once consume-transform-produce through a real broker with confluent-kafka's
transactions: output records and input offsets are committed together
(send_offsets_to_transaction, TxnOffsetCommit), so a processor killed with -9 at random moments
and started again, or a broker killed with -9 and restarted under it, leaves an output topic in
which a read_committed reader finds every input record exactly once, in input order per
partition — no loss, no duplicate, no aborted record."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 60
PARTITIONS = 3
PROCESSOR = Path(__file__).with_name("eos_processor.py")
BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory("eos", **{"group.initial.rebalance.delay.ms": 0})


def _setup(broker: BrokerProcess, total: int) -> tuple[str, str, list[bytes]]:
    name = uuid.uuid4().hex[:8]
    source, sink = f"in-{name}", f"out-{name}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(source, PARTITIONS), NewTopic(sink, PARTITIONS)]
                                      ).values():  # fmt: skip
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "log_level": 0})  # fmt: skip
    values = [f"record-{i:05d}".encode() for i in range(total)]
    for i, value in enumerate(values):
        producer.produce(source, value, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT) == 0
    return source, sink, values


def _processor(
    broker: BrokerProcess, source: str, sink: str, total: int, batch: int = 50
) -> subprocess.Popen:
    """The processor (at most `batch` records per transaction), its output appended to
    processor.log beside the broker's files."""
    with open(_log(broker), "ab") as log:
        return subprocess.Popen([sys.executable, str(PROCESSOR), broker.bootstrap, source, sink,
                                 f"group-{source}", f"txn-{source}", str(total), str(batch)],
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip


def _log(broker: BrokerProcess) -> Path:
    return broker.data_dir.parent / "processor.log"


def _read_committed(broker: BrokerProcess, sink: str, total: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(sink, p, 0) for p in range(PARTITIONS)])
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + TIMEOUT
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 3:
            for message in consumer.consume(1000, timeout=0.3):
                if message.error() is None:
                    by_partition[message.partition()].append(message.value())
                    quiet_since = time.monotonic()
    finally:
        consumer.close()
    return by_partition


def _check(values: list[bytes], output: dict[int, list[bytes]]) -> None:
    for partition in range(PARTITIONS):
        expected = [v.upper() for i, v in enumerate(values) if i % PARTITIONS == partition]
        got = output[partition]
        assert len(got) == len(set(got)), f"partition {partition}: a record appears twice"
        assert got == expected, f"partition {partition}: {len(got)} of {len(expected)} records"


def _run_to_end(processor: subprocess.Popen) -> int:
    try:
        return processor.wait(TIMEOUT * 4)
    finally:
        if processor.poll() is None:
            processor.kill()


def test_consume_transform_produce_commits_each_input_once(broker):
    total = 600
    source, sink, values = _setup(broker, total)
    processor = _processor(broker, source, sink, total)
    assert _run_to_end(processor) == 0, _log(broker).read_text()
    _check(values, _read_committed(broker, sink, total))


@pytest.mark.slow
def test_a_processor_killed_at_random_moments_still_writes_each_input_once(broker):
    total = 3000
    source, sink, values = _setup(broker, total)
    rng = random.Random(20261125)
    kills = 0
    for _ in range(8):
        processor = _processor(broker, source, sink, total, batch=1)
        time.sleep(rng.uniform(1.0, 3.0))
        if processor.poll() is not None:
            break
        processor.send_signal(signal.SIGKILL)
        processor.wait()
        kills += 1
    processor = _processor(broker, source, sink, total)
    assert _run_to_end(processor) == 0, _log(broker).read_text()
    assert kills >= 3
    _check(values, _read_committed(broker, sink, total))


@pytest.mark.slow
def test_the_broker_killed_mid_transaction_recovers_and_each_input_is_written_once(broker):
    total = 3000
    source, sink, values = _setup(broker, total)
    processor = _processor(broker, source, sink, total, batch=1)
    time.sleep(2.5)
    assert processor.poll() is None, "the processor finished before the broker was killed"
    broker.kill()
    if processor.poll() is None:
        processor.kill()
        processor.wait()
    broker.start()
    processor = _processor(broker, source, sink, total)
    assert _run_to_end(processor) == 0, _log(broker).read_text()
    _check(values, _read_committed(broker, sink, total))
