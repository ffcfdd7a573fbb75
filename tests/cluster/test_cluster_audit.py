"""Audit in a cluster of three: every broker counts the partitions it leads, and those that do
not lead `__audit` send their counts to the broker that does; after that broker is killed, the
others write to the new leader. `weir audit who-writes/who-reads` add the brokers' counts up to
what the client produced and read (each partition's size on its leader)."""

from __future__ import annotations

import json
from typing import Any

from cluster_brokers import (
    BrokerSet,
    ClusterBroker,
    create_topics,
    metadata_of,
    poll,
    start_three,
    wait_same_everywhere,
)
from cluster_processes import run_weir
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from weir.cluster.audit_log import read_entries
from weir.protocol.audit_records import AUDIT_TOPIC, PRODUCE

TOPIC = "metered"
PARTITIONS = 3
RECORDS = 300
CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "replica.lag.time.max.ms": 5000,
    "audit.enable": True,
    "audit.flush.interval.ms": 300,
}
TIMEOUT = 60


def bootstrap_of(brokers: list[ClusterBroker]) -> str:
    return ",".join(b.bootstrap for b in brokers)


def produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "writer", "acks": "all",
                         "linger.ms": 10, "log_level": 0})  # fmt: skip
    for i in range(count):
        producer.produce(TOPIC, b"%0100d" % i, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT) == 0


def read(bootstrap: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "reader",
                         "group.id": "readers", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = 0
    while got < count:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None
        got += 1
    consumer.close()


def topic_bytes(bootstrap: str, leaders: dict[int, int]) -> int:
    """TOPIC's bytes: each partition's size on its leader (DescribeLogDirs)."""
    done = run_weir("log-dirs", "describe", "--bootstrap-server", bootstrap)
    assert done.returncode == 0, done.stderr
    sizes = {}
    for broker in json.loads(done.stdout)["brokers"]:
        for log_dir in broker["logDirs"]:
            for replica in log_dir["partitions"]:
                topic, _, index = replica["partition"].rpartition("-")
                if topic == TOPIC and leaders[int(index)] == broker["broker"]:
                    sizes[int(index)] = replica["size"]
    assert sorted(sizes) == list(range(PARTITIONS))
    return sum(sizes.values())


def who(bootstrap: str, action: str) -> list[tuple[Any, ...]]:
    done = run_weir("audit", action, TOPIC, "--bootstrap-server", bootstrap, "--json")
    assert done.returncode == 0, done.stderr
    return [(c["principal"], c["client_id"], c["bytes"], c["records"])
            for c in json.loads(done.stdout)["clients"]]  # fmt: skip


def counting_brokers(bootstrap: str) -> set[int]:
    """The brokers whose produce counts of TOPIC are in `__audit`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit-test"})
    try:
        entries = read_entries(consumer)
    finally:
        consumer.close()
    return {e.broker for e in entries if e.topic == TOPIC and e.api == PRODUCE}


def expect_counts(bootstrap: str, writer: tuple[str, int, int],
                  reader: tuple[str, int, int]) -> None:  # fmt: skip
    """Wait for who-writes and who-reads to name one client each: (client id, bytes, records)."""
    for action, (client, size, records) in (("who-writes", writer), ("who-reads", reader)):
        expected = [("User:ANONYMOUS", client, size, records)]
        poll(lambda action=action, expected=expected: who(bootstrap, action) == expected,
             TIMEOUT, f"{action} to count {size} bytes of {records} records")  # fmt: skip


def test_brokers_that_do_not_lead_the_audit_partition_write_to_its_leader(
    zookeeper: Any, cluster_brokers: BrokerSet
) -> None:
    started = start_three(cluster_brokers, zookeeper.connect, CONFIG)
    brokers = list(started.values())
    bootstrap = bootstrap_of(brokers)
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), NewTopic(TOPIC, PARTITIONS, 3))
    view = wait_same_everywhere(brokers, TOPIC, PARTITIONS)
    leaders = view.leaders(TOPIC)
    assert sorted(leaders.values()) == [1, 2, 3]  # each broker leads one partition
    produce(bootstrap, RECORDS)
    read(bootstrap, RECORDS)

    audit_view = wait_same_everywhere(brokers, AUDIT_TOPIC, 1, timeout=TIMEOUT)
    audit_leader = audit_view.leaders(AUDIT_TOPIC)[0]
    assert len(audit_view.topics[AUDIT_TOPIC][0].replicas) == 3
    first_size = topic_bytes(bootstrap, leaders)
    expect_counts(bootstrap, ("writer", first_size, RECORDS), ("reader", first_size, RECORDS))
    assert counting_brokers(bootstrap) == {1, 2, 3}  # two of them through the audit leader

    started[audit_leader].kill()
    survivors = [b for b in brokers if b.node_id != audit_leader]
    bootstrap = bootstrap_of(survivors)
    poll(lambda: metadata_of(survivors[0].address).leaders(AUDIT_TOPIC).get(0)
         not in (None, -1, audit_leader), TIMEOUT, "a new leader of __audit")  # fmt: skip
    leaders = wait_same_everywhere(survivors, TOPIC, PARTITIONS, timeout=TIMEOUT).leaders(TOPIC)
    assert audit_leader not in leaders.values()
    produce(bootstrap, RECORDS)
    read(bootstrap, 2 * RECORDS)  # from the start again: everything is sent again
    size = topic_bytes(bootstrap, leaders)
    expect_counts(bootstrap, ("writer", size, 2 * RECORDS),
                  ("reader", first_size + size, 3 * RECORDS))  # fmt: skip
