"""Transactions end to end through a real broker: confluent-kafka's and aiokafka's
transactional producers commit and abort, and read_committed consumers see exactly the
committed records, in order, never an aborted one and nothing of a transaction still open;
read_uncommitted consumers see everything; ListOffsets for read_committed answers the last
stable offset."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from weir.records import BatchSpec, Record, build_batch

TIMEOUT = 30
BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory("read-committed")


def _topic(broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"rc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(TIMEOUT)
    return name


def _producer(broker: BrokerProcess, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": transactional_id, "log_level": 0})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    return producer


def _read(broker: BrokerProcess, topic: str, isolation: str, settle_s: float = 3.0) -> list[str]:
    """Every value a fresh consumer with `isolation` reads, once nothing new came for
    `settle_s` seconds after the first."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    consumer.subscribe([topic])
    values: list[str] = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and not (
            values and time.monotonic() - quiet_since > settle_s
        ):
            for message in consumer.consume(500, timeout=0.3):
                if message.error() is None:
                    values.append(message.value().decode())
                    quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def _send(producer: Producer, topic: str, prefix: str, count: int) -> list[str]:
    values = [f"{prefix}-{i}" for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % 2)
    producer.flush(TIMEOUT)
    return values


def test_read_committed_sees_committed_records_only(broker):
    topic = _topic(broker)
    producer = _producer(broker, "rc-writer")
    producer.begin_transaction()
    first = _send(producer, topic, "first", 50)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    aborted = _send(producer, topic, "aborted", 50)
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    last = _send(producer, topic, "last", 20)
    producer.commit_transaction(TIMEOUT)

    committed = _read(broker, topic, "read_committed")
    assert sorted(committed) == sorted(first + last)
    for partition in (0, 1):  # in order within each partition
        mine = [v for v in committed if int(v.split("-")[1]) % 2 == partition]
        assert mine == [v for v in first + last if int(v.split("-")[1]) % 2 == partition]
    everything = _read(broker, topic, "read_uncommitted")
    assert sorted(everything) == sorted(first + aborted + last)


def test_an_open_transaction_holds_read_committed_back(broker):
    topic = _topic(broker)
    producer = _producer(broker, "rc-open")
    producer.begin_transaction()
    before = _send(producer, topic, "before", 10)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    pending = _send(producer, topic, "pending", 10)

    assert sorted(_read(broker, topic, "read_committed")) == sorted(before)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offsets",
                         "isolation.level": "read_committed", "log_level": 0})  # fmt: skip
    _, stable = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT, cached=False)
    consumer.close()
    assert stable == 6  # records 0-4, the commit marker at 5; the open transaction from 6

    producer.commit_transaction(TIMEOUT)
    assert sorted(_read(broker, topic, "read_committed")) == sorted(before + pending)


def test_aiokafka_transactions_and_read_committed(broker):
    topic = _topic(broker)

    async def run() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send_and_wait(topic, f"kept-{i}".encode(), partition=0)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send_and_wait(topic, f"dropped-{i}".encode(), partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest")  # fmt: skip
        await consumer.start()
        values: list[str] = []
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(values) < 5 and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(m.value.decode() for m in messages)
            await asyncio.sleep(1)  # anything after the committed five would show now
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(m.value.decode() for m in messages)
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [f"kept-{i}" for i in range(5)]


def test_aborted_transactions_stay_hidden_after_a_restart(broker):
    """Many small segments: the aborted transactions lie in segments older than the last two,
    and a restarted broker still knows them."""
    name = f"rc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=2, config={"segment.bytes": "512"})]
                        )[name].result(TIMEOUT)  # fmt: skip
    producer = _producer(broker, "rc-restart")
    kept: list[str] = []
    for round_ in range(24):
        producer.begin_transaction()
        values = _send(producer, name, f"r{round_}", 20)
        if round_ % 3 == 1:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            kept += values
    segments = list((broker.data_dir / f"{name}-0").glob("*.log"))
    assert len(segments) > 4, segments
    broker.kill()
    broker.start()
    assert sorted(_read(broker, name, "read_committed")) == sorted(kept)


def _raw_produce(broker: BrokerProcess, topic: str, batch: bytes, transactional_id: str | None):
    from kio.schema.produce.v9 import request as produce

    from weir.cli.txn import connect
    from weir.protocol.apis import ApiKey

    body = produce.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=0, records=batch),)),),
    )  # fmt: skip
    with connect("127.0.0.1", broker.port) as conn:
        response = conn.call(ApiKey.PRODUCE, 9, body)
    return response.responses[0].partition_responses[0].error_code


def test_transactional_and_control_batches_a_coordinator_did_not_start_are_refused(broker):
    topic = _topic(broker, partitions=1)
    record = Record(offset=0, timestamp=0, key=None, value=b"x")
    stray = build_batch([record], spec=BatchSpec(producer_id=424242, producer_epoch=0,
                                                 base_sequence=0, transactional=True))  # fmt: skip
    assert _raw_produce(broker, topic, stray, "nobody") == ErrorCode.invalid_producer_id_mapping
    assert _raw_produce(broker, topic, stray, None) == ErrorCode.invalid_txn_state
    marker = build_batch([record], spec=BatchSpec(producer_id=424242, producer_epoch=0,
                                                  base_sequence=-1, control=True,
                                                  transactional=True))  # fmt: skip
    assert _raw_produce(broker, topic, marker, "nobody") == ErrorCode.invalid_record
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "marks",
                         "log_level": 0})  # fmt: skip
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT) == (0, 0)
    consumer.close()
