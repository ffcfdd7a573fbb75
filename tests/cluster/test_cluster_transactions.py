"""Transactions on a three-broker cluster: the coordinator (the leader of the transactional
id's `__transaction_state` partition, replicated three ways) sends COMMIT and ABORT markers to
the leaders of the transaction's partitions with WriteTxnMarkers; read_committed consumers on
any broker see committed records only. An exactly-once consume-transform-produce loop keeps its
promise while the broker coordinating its transactions is killed with -9 and restarted."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cluster_brokers import ClusterBroker, create_topics, exchange, poll, start_three
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.static.primitive import i8

TIMEOUT = 60
PARTITIONS = 3
CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}
FIND_COORDINATOR, TRANSACTION = 10, 1
PROCESSOR = Path(__file__).resolve().parent.parent / "integration" / "eos_processor.py"


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, CONFIG)


def _topics(broker: ClusterBroker, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    create_topics(admin, *(NewTopic(n, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                           for n in names))  # fmt: skip


def _read_committed(broker: ClusterBroker, topic: str) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    quiet_since, deadline = time.monotonic(), time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 4:
            for message in consumer.consume(1000, timeout=0.3):
                if message.error() is None:
                    values[message.partition()].append(message.value())
                    quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def test_commit_and_abort_reach_every_partition_leader(cluster):
    _topics(cluster[1], "orders")
    producer = Producer({"bootstrap.servers": cluster[2].bootstrap, "transactional.id": "shop",
                         "log_level": 0})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    kept: list[bytes] = []
    for round_ in range(6):
        producer.begin_transaction()
        values = [f"{round_}-{i}".encode() for i in range(30)]
        for i, value in enumerate(values):
            producer.produce("orders", value, partition=i % PARTITIONS)
        producer.flush(TIMEOUT)
        if round_ % 2:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
            kept += values
    for reader in (cluster[1], cluster[3]):
        got = _read_committed(reader, "orders")
        assert sorted(v for vs in got.values() for v in vs) == sorted(kept)


@pytest.mark.slow
def test_exactly_once_survives_the_coordinator_killed(cluster, tmp_path):
    source, sink, total = "eos-in", "eos-out", 2000
    _topics(cluster[1], source, sink)
    producer = Producer({"bootstrap.servers": cluster[1].bootstrap, "enable.idempotence": True,
                         "log_level": 0})  # fmt: skip
    values = [f"record-{i:05d}".encode() for i in range(total)]
    for i, value in enumerate(values):
        producer.produce(source, value, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT) == 0
    bootstrap = ",".join(b.bootstrap for b in cluster.values())
    log_path = tmp_path / "processor.log"

    def processor() -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, str(PROCESSOR), bootstrap, source, sink, "eos-group",
                 "eos-txn", str(total), "5"], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip

    running = processor()
    time.sleep(3)
    assert running.poll() is None, log_path.read_text()
    coordinator = _transaction_coordinator(cluster[1], "eos-txn")
    cluster[coordinator].kill()
    time.sleep(8)
    cluster[coordinator].start()
    for _ in range(4):  # a processor that met a fatal error is started again, as a deployment would
        try:
            if running.wait(TIMEOUT * 2) == 0:
                break
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()
        running = processor()
    else:
        pytest.fail(log_path.read_text())
    got = _read_committed(cluster[2], sink)
    for partition in range(PARTITIONS):
        expected = [v.upper() for i, v in enumerate(values) if i % PARTITIONS == partition]
        assert got[partition] == expected, f"partition {partition}"


def _transaction_coordinator(broker: ClusterBroker, transactional_id: str) -> int:
    """The node id FindCoordinator names for `transactional_id` (key type 1)."""
    body = FindCoordinatorRequest(key=transactional_id, key_type=i8(TRANSACTION))

    def found() -> int | None:
        response = exchange(broker.address, FIND_COORDINATOR, 3, body)
        return int(response.node_id) if response.error_code == 0 else None

    node_id, _ = poll(found, TIMEOUT, f"the coordinator of {transactional_id}")
    return node_id
