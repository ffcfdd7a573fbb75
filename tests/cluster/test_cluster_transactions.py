"""Transactions on a three-broker cluster: the coordinator (the leader of the transactional
id's `__transaction_state` partition, replicated three ways) sends COMMIT and ABORT markers to
the leaders of the transaction's partitions with WriteTxnMarkers; read_committed consumers on
any broker see committed records only. An exactly-once consume-transform-produce loop keeps its
promise while the broker coordinating its transactions is killed with -9 and restarted. A leader
whose producer's coordinator is another broker asks it (AddPartitionsToTxn v4, KIP-890) before
taking a producer's first transactional batch on a partition, and refuses a stray one."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cluster_brokers import (
    ClusterBroker,
    create_topics,
    exchange,
    poll,
    start_three,
    wait_same_everywhere,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i8, i16, i32

from weir.records import BatchSpec, Record, build_batch

TIMEOUT = 60
PARTITIONS = 3
CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}
FIND_COORDINATOR, TRANSACTION = 10, 1
PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN, DESCRIBE_PRODUCERS = 0, 22, 24, 26, 61
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

    node_id = poll(found, TIMEOUT, f"the coordinator of {transactional_id}")
    return node_id


def test_a_leader_refuses_a_batch_its_remote_coordinator_did_not_add(cluster):
    """Raw requests, as a producer that skips AddPartitionsToTxn would send them: refused
    (INVALID_TXN_STATE) before the partition is added, taken after, refused again once the
    transaction ended there."""
    _topics(cluster[1], "verified")
    leaders = wait_same_everywhere(cluster.values(), "verified", PARTITIONS).leaders("verified")
    coordinator = _transaction_coordinator(cluster[1], "stray")
    partition, leader = next((p, n) for p, n in sorted(leaders.items()) if n != coordinator)
    at_coordinator = cluster[coordinator].address

    def init() -> tuple[int, int] | None:
        body = InitProducerIdRequest(
            transactional_id="stray", transaction_timeout=datetime.timedelta(seconds=60)
        )
        response = exchange(at_coordinator, INIT_PRODUCER_ID, 1, body)
        ok = response.error_code == ErrorCode.none
        return (int(response.producer_id), int(response.producer_epoch)) if ok else None

    producer_id, epoch = poll(init, TIMEOUT, "a producer id for 'stray'")

    def send(sequence: int) -> ErrorCode:
        record = Record(offset=0, timestamp=0, key=None, value=f"v{sequence}".encode())
        batch = build_batch([record], spec=BatchSpec(
            producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
            transactional=True))  # fmt: skip
        body = produce.ProduceRequest(
            transactional_id="stray", acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(produce.TopicProduceData(name="verified", partition_data=(
                produce.PartitionProduceData(index=partition, records=batch),)),),
        )  # fmt: skip
        response = exchange(cluster[leader].address, PRODUCE, 9, body)
        return response.responses[0].partition_responses[0].error_code

    assert send(0) is ErrorCode.invalid_txn_state
    added = exchange(at_coordinator, ADD_PARTITIONS_TO_TXN, 3,
                     add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="stray", v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=i16(epoch), v3_and_below_topics=(
            add_partitions.AddPartitionsToTxnTopic(name="verified", partitions=(i32(partition),)),
        )))  # fmt: skip
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code \
        is ErrorCode.none  # fmt: skip
    assert send(0) is ErrorCode.none
    assert send(1) is ErrorCode.none  # the transaction is open there now: no second question
    ended = exchange(at_coordinator, END_TXN, 3, EndTxnRequest(
        transactional_id="stray", producer_id=producer_id, producer_epoch=i16(epoch),
        committed=True))  # fmt: skip
    assert ended.error_code is ErrorCode.none

    def closed_on_the_leader() -> bool:
        wanted = TopicRequest(name="verified", partition_indexes=(i32(partition),))
        response = exchange(cluster[leader].address, DESCRIBE_PRODUCERS, 0,
                            DescribeProducersRequest(topics=(wanted,)))  # fmt: skip
        states = response.topics[0].partitions[0].active_producers
        return all(s.current_txn_start_offset < 0 for s in states)

    poll(closed_on_the_leader, TIMEOUT, "the commit marker on the leader")
    # NOT_ENOUGH_REPLICAS (retried by producers) until the coordinator has completed the commit
    answer = poll(lambda: (e := send(2)) is not ErrorCode.not_enough_replicas and e,
                  TIMEOUT, "a final answer")  # fmt: skip
    assert answer is ErrorCode.invalid_txn_state
    assert sorted(v for vs in _read_committed(cluster[1], "verified").values() for v in vs) == [
        b"v0", b"v1"]  # fmt: skip
