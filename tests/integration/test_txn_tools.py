"""Operator tools for transactions against a real broker: DescribeProducers shows where a
producer's open transaction starts on a partition, `weir txn find-hanging` names open
transactions that no coordinator knows (here: the coordinator's state was lost), but not ones a
coordinator is still running, and `weir txn abort` ends such a transaction so that
read_committed consumers move past it without seeing its records."""

from __future__ import annotations

import datetime
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32

from weir.cli.txn import OpenTransaction, connect, hanging
from weir.protocol.apis import ApiKey

TIMEOUT = 30
BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory("txn-tools")


def _open_transaction(broker: BrokerProcess) -> tuple[str, Producer]:
    topic = f"tools-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                         "log_level": 0})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    return topic, producer


def _describe_producers(broker: BrokerProcess, topic: str) -> list[tuple[int, int]]:
    with connect("127.0.0.1", broker.port) as conn:
        response = conn.call(ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=(
            TopicRequest(name=TopicName(topic), partition_indexes=(i32(0),)),)))  # fmt: skip
    [partition] = response.topics[0].partitions
    assert partition.error_code == 0
    return [(int(s.producer_id), int(s.current_txn_start_offset))
            for s in partition.active_producers]  # fmt: skip


def _txn(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "txn", *args, "--bootstrap-server",
         broker.bootstrap], capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _find_hanging(broker: BrokerProcess, topic: str) -> subprocess.CompletedProcess[str]:
    return _txn(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")


def _last_stable_offset(broker: BrokerProcess, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()},
                                 isolation_level=IsolationLevel.READ_COMMITTED)  # fmt: skip
    return int(futures[TopicPartition(topic, 0)].result(TIMEOUT).offset)


def _read_committed(broker: BrokerProcess, topic: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[str] = []
    try:
        for _ in range(20):
            values += [m.value().decode() for m in consumer.consume(100, timeout=0.5)
                       if m.error() is None]  # fmt: skip
            if len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def test_describe_producers_shows_an_open_transaction(broker):
    topic, producer = _open_transaction(broker)
    [(_, start)] = _describe_producers(broker, topic)
    assert start == 0
    producer.commit_transaction(TIMEOUT)
    [(_, start)] = _describe_producers(broker, topic)
    assert start == -1


def test_find_hanging_names_what_no_coordinator_knows_and_abort_ends_it(broker):
    topic, producer = _open_transaction(broker)
    running = _find_hanging(broker, topic)
    assert running.returncode == 0, running.stderr
    assert len(running.stdout.strip().splitlines()) == 1  # the header: the coordinator knows it

    del producer
    broker.kill()
    for state in broker.data_dir.glob("__transaction_state-*"):
        shutil.rmtree(state)
    broker.start()
    lost = _find_hanging(broker, topic)
    assert lost.returncode == 0, lost.stderr
    [_, row] = lost.stdout.strip().splitlines()
    assert row.split()[:2] == [topic, "0"]

    plain = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(3):
        plain.produce(topic, f"after-{i}".encode(), partition=0)
    assert plain.flush(TIMEOUT) == 0
    assert _last_stable_offset(broker, topic) == 0  # held at the hanging transaction's start
    [(producer_id, start)] = [(p, s) for p, s in _describe_producers(broker, topic) if s >= 0]

    nothing_there = _txn(broker, "abort", "--topic", topic, "--partition", "0",
                         "--start-offset", "3")  # fmt: skip
    assert nothing_there.returncode == 1
    assert "no open transaction starts at offset 3" in nothing_there.stderr
    half_named = _txn(broker, "abort", "--topic", topic, "--partition", "0",
                      "--producer-id", str(producer_id))  # fmt: skip
    assert half_named.returncode == 1
    assert "--producer-epoch is required" in half_named.stderr

    aborted = _txn(broker, "abort", "--topic", topic, "--partition", "0",
                   "--start-offset", str(start))  # fmt: skip
    assert aborted.returncode == 0, aborted.stderr
    assert _last_stable_offset(broker, topic) == 9  # 5 aborted, the marker, 3 plain records
    assert _read_committed(broker, topic, 3) == ["after-0", "after-1", "after-2"]
    assert len(_find_hanging(broker, topic).stdout.strip().splitlines()) == 1


def test_only_old_transactions_unknown_to_their_coordinator_hang():
    now = int(datetime.datetime(2026, 1, 1).timestamp() * 1000)
    old = OpenTransaction("t", 0, producer_id=7, producer_epoch=0, start_offset=10,
                          last_timestamp=now - 60_000)  # fmt: skip
    young = OpenTransaction("t", 1, producer_id=8, producer_epoch=0, start_offset=3,
                            last_timestamp=now - 1_000)  # fmt: skip
    elsewhere = OpenTransaction("t", 2, producer_id=9, producer_epoch=0, start_offset=5,
                                last_timestamp=now - 60_000)  # fmt: skip
    known = {7: ("Ongoing", {("t", 0)}), 8: None, 9: ("Ongoing", {("t", 0)})}
    assert hanging([old, young, elsewhere], known, now, max_timeout_ms=30_000) == [elsewhere]
    assert hanging([old], {7: ("CompleteCommit", set())}, now, 30_000) == [old]
    assert hanging([old], {7: None}, now, 30_000) == [old]
