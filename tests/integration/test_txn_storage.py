"""Transactions on disk through a real broker: confluent-kafka's transactional producer commits
and aborts over many segments, the broker is killed with -9 and restarted, and a read_committed
consumer still sees exactly the committed records (the aborted-transaction list, now read from
the `.txnindex` files, still hides the aborted ones) while read_uncommitted sees them all; then
retention removes old segments together with their `.txnindex` and `.snapshot` files."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from broker_process import BrokerProcess
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

TIMEOUT = 30
TRANSACTIONS = 24
PER_TRANSACTION = 10
BrokerFactory = Callable[..., BrokerProcess]


def _read_all(broker: BrokerProcess, topic: str, isolation: str) -> list[str]:
    """Every value a fresh consumer with `isolation` reads up to the partition's end."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.partition.eof": True, "enable.auto.commit": False,
                         "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[str] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                return values
            assert error is None, error
            values.append(message.value().decode())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {TIMEOUT}s after {len(values)} records")


def _write(broker: BrokerProcess, topic: str) -> tuple[list[str], list[str]]:
    """(committed values, every value) of TRANSACTIONS transactions, about half aborted."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                         "transactional.id": f"writer-{topic}"})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    rng = random.Random(22)
    committed, everything = [], []
    for t in range(TRANSACTIONS):
        values = [f"t{t}-{i}-" + "x" * 80 for i in range(PER_TRANSACTION)]
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value.encode(), partition=0)
        producer.flush(TIMEOUT)
        everything += values
        if t % 4 == 3 or rng.random() < 0.5:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            committed += values
    return committed, everything


def _files(directory: Path, suffix: str) -> list[int]:
    return sorted(int(p.name.split(".", 1)[0]) for p in directory.glob(f"*{suffix}"))


def test_aborted_records_stay_hidden_after_kill_9_and_retention_takes_the_files(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory("txn-storage", **{"log.retention.check.interval.ms": 300})
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, config={
        "segment.bytes": "4096", "file.delete.delay.ms": "0"})])[topic].result(TIMEOUT)  # fmt: skip
    committed, everything = _write(broker, topic)
    assert 0 < len(committed) < len(everything)
    directory = broker.data_dir / f"{topic}-0"
    assert len(_files(directory, ".log")) > 5 and _files(directory, ".txnindex")

    broker.kill()
    broker.start()
    assert _read_all(broker, topic, "read_committed") == committed
    assert _read_all(broker, topic, "read_uncommitted")[: len(everything)] == everything
    assert _files(directory, ".txnindex") and _files(directory, ".snapshot")

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "8192",
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and len(_files(directory, ".log")) > 3:
        time.sleep(0.2)
    first = _files(directory, ".log")[0]
    assert first > 0
    stale = [o for s in (".txnindex", ".snapshot") for o in _files(directory, s) if o < first]
    assert stale == []
    kept = set(_read_all(broker, topic, "read_uncommitted"))
    kept_committed = [v for v in committed if v in kept]
    assert _read_all(broker, topic, "read_committed") == kept_committed
