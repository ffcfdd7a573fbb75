"""Leadership going back where it belongs, and consumers reading near them, with real brokers:
- `weir cluster elect-leaders` (ElectLeaders through confluent-kafka's admin client, answered
  by the controller) moves a partition back to its preferred replica once that is in sync again,
  and says which partitions needed nothing;
- with `auto.leader.rebalance.enable` the controller does so by itself after
  `leader.imbalance.check.interval.seconds`;
- with `replica.selector.class = "rack-aware"` a leader points a consumer that names its rack
  at the in-sync replica of that rack (KIP-392), which serves it up to its high watermark; a
  confluent-kafka consumer with `client.rack` then fetches from that replica and reads every
  acknowledged record once, in order."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest
from cluster_brokers import (
    SPREAD_TIMEOUT,
    ClusterBroker,
    create_topics,
    exchange,
    metadata_of,
    metadata_of_all,
    poll,
    start_three,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v11 import request as fetch_request

SESSION_TIMEOUT_S = 6
BASE_CONFIG = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_S * 1000,
    "offsets.topic.num.partitions": 3,
}
#: partition i prefers broker i + 1
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
RECORDS = 300
FETCH = 1
FETCH_VERSION = 11


def produce(bootstrap: str, topic: str, count: int, partition: int | None = None) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "log_level": 0})  # fmt: skip
    values = [f"{topic}-{i}".encode() for i in range(count)]
    failures: list[object] = []
    for value in values:
        if partition is None:
            producer.produce(topic, value, on_delivery=lambda e, _m: e and failures.append(e))
        else:
            producer.produce(topic, value, partition=partition,
                             on_delivery=lambda e, _m: e and failures.append(e))  # fmt: skip
    assert producer.flush(60) == 0
    assert not failures, failures
    return values


def create_assigned(broker: ClusterBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    config = {"min.insync.replicas": "2"}
    create_topics(admin, NewTopic(topic, num_partitions=len(ASSIGNMENT),
                                  replica_assignment=ASSIGNMENT, config=config))  # fmt: skip


def leaders_everywhere(brokers: dict[int, ClusterBroker], topic: str) -> dict[int, int] | None:
    """The partition leaders of `topic` when every running broker agrees on them."""
    views = list(metadata_of_all(b for b in brokers.values() if b.running()).values())
    leaders = {tuple(sorted(v.leaders(topic).items())) for v in views}
    if len(leaders) != 1:
        return None
    return dict(next(iter(leaders)))


def full_isr(broker: ClusterBroker, topic: str) -> bool:
    view = metadata_of(broker.address, [topic])
    return all(len(p.isr) == 3 for p in view.topics.get(topic, {}).values())


def move_leadership_off_broker_1(brokers: dict[int, ClusterBroker], topic: str) -> None:
    """Stop broker 1 (controlled shutdown), start it again and wait for a full ISR: partition
    0 is then led by another broker although broker 1, its preferred replica, is in sync."""
    brokers[1].stop()
    poll(lambda: (leaders_everywhere(brokers, topic) or {}).get(0, 1) != 1, SPREAD_TIMEOUT,
         "partition 0 led elsewhere")  # fmt: skip
    brokers[1].start()
    poll(lambda: full_isr(brokers[2], topic), 60, "broker 1 back in every ISR")


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def read_all(bootstrap: str, topic: str, count: int, **settings: object) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "log_level": 0, **settings})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        poll(lambda: _drain(consumer, values) >= count, 60, f"{count} records of {topic}")
    finally:
        consumer.close()
    return values


def _drain(consumer: Consumer, into: list[bytes]) -> int:
    for message in consumer.consume(500, timeout=0.5):
        if message.error() is None:
            into.append(message.value())
    return len(into)


@pytest.fixture
def manual_cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect,
                       {**BASE_CONFIG, "auto.leader.rebalance.enable": False})  # fmt: skip


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(manual_cluster):
    brokers = manual_cluster
    create_assigned(brokers[1], "pref")
    poll(lambda: leaders_everywhere(brokers, "pref") == {0: 1, 1: 2, 2: 3}, SPREAD_TIMEOUT,
         "each partition led by its preferred replica")  # fmt: skip
    values = produce(brokers[2].bootstrap, "pref", RECORDS)
    move_leadership_off_broker_1(brokers, "pref")
    assert leaders_everywhere(brokers, "pref")[0] != 1  # no rebalance: it stays moved

    done = weir("cluster", "elect-leaders", "--bootstrap-server", brokers[3].bootstrap,
                "--election-type", "preferred", "--topic", "pref")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions pref-0" in done.stdout
    assert "Valid replica already elected for partitions pref-1, pref-2" in done.stdout
    poll(lambda: leaders_everywhere(brokers, "pref") == {0: 1, 1: 2, 2: 3}, SPREAD_TIMEOUT,
         "partition 0 led by broker 1 again on every broker")  # fmt: skip

    again = weir("cluster", "elect-leaders", "--bootstrap-server", brokers[2].bootstrap,
                 "--election-type", "preferred", "--all-topic-partitions")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "Successfully" not in again.stdout
    assert "Valid replica already elected for partitions pref-0, pref-1, pref-2" in again.stdout

    unclean = weir("cluster", "elect-leaders", "--bootstrap-server", brokers[1].bootstrap,
                   "--election-type", "unclean", "--topic", "pref", "--partition", "1")  # fmt: skip
    assert unclean.returncode == 0, unclean.stderr
    assert "Valid replica already elected for partitions pref-1" in unclean.stdout

    assert sorted(read_all(brokers[1].bootstrap, "pref", RECORDS)) == sorted(values)


def test_elect_leaders_reports_unknown_partitions_and_bad_files(manual_cluster, tmp_path):
    brokers = manual_cluster
    create_assigned(brokers[1], "known")
    request = tmp_path / "election.json"
    request.write_text(json.dumps({"partitions": [{"topic": "known", "partition": 7}]}))
    unknown = weir("cluster", "elect-leaders", "--bootstrap-server", brokers[1].bootstrap,
                   "--election-type", "preferred", "--path-to-json-file", str(request))  # fmt: skip
    assert unknown.returncode == 1
    assert "known-7" in unknown.stderr
    request.write_text("{not json")
    broken = weir("cluster", "elect-leaders", "--bootstrap-server", brokers[1].bootstrap,
                  "--election-type", "preferred", "--path-to-json-file", str(request))  # fmt: skip
    assert broken.returncode == 2
    assert "weir:" in broken.stderr


def test_the_controller_rebalances_leaders_by_itself(zookeeper, cluster_brokers):
    config = {**BASE_CONFIG, "leader.imbalance.check.interval.seconds": 2}
    brokers = start_three(cluster_brokers, zookeeper.connect, config)
    create_assigned(brokers[1], "auto")
    values = produce(brokers[1].bootstrap, "auto", RECORDS)
    move_leadership_off_broker_1(brokers, "auto")
    poll(lambda: leaders_everywhere(brokers, "auto") == {0: 1, 1: 2, 2: 3}, 30,
         "partition 0 back on broker 1 without an admin request")  # fmt: skip
    assert sorted(read_all(brokers[3].bootstrap, "auto", RECORDS)) == sorted(values)


def raw_fetch(broker: ClusterBroker, topic: str, rack: str) -> object:
    body = fetch_request.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        topics=(fetch_request.FetchTopic(topic=topic, partitions=(
            fetch_request.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                         log_start_offset=-1, partition_max_bytes=1 << 20),
        )),),
        forgotten_topics_data=(),
        rack_id=rack,
    )  # fmt: skip
    response = exchange(broker.address, FETCH, FETCH_VERSION, body)
    [topic_response] = response.responses
    [partition] = topic_response.partitions
    return partition


def test_a_consumer_reads_from_the_in_sync_replica_of_its_rack(zookeeper, cluster_brokers):
    config = {**BASE_CONFIG, "replica.selector.class": "rack-aware"}
    brokers = start_three(cluster_brokers, zookeeper.connect, config, racks="abc")
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("near", num_partitions=1, replica_assignment=[[1, 2, 3]]))
    values = produce(brokers[1].bootstrap, "near", RECORDS, partition=0)
    poll(lambda: full_isr(brokers[1], "near"), 30, "a full ISR")

    pointed = raw_fetch(brokers[1], "near", "b")
    assert pointed.error_code == 0
    assert pointed.preferred_read_replica == 2
    assert not pointed.records
    here = raw_fetch(brokers[1], "near", "a")
    assert here.preferred_read_replica == -1 and here.records
    poll(lambda: raw_fetch(brokers[2], "near", "b").high_watermark == RECORDS, 15,
         "the follower's high watermark reaching the leader's")  # fmt: skip
    served = raw_fetch(brokers[2], "near", "b")
    assert served.error_code == 0 and served.records and served.preferred_read_replica == -1

    fetched_from: set[int] = set()

    def stats(text: str) -> None:
        for topic in json.loads(text).get("topics", {}).values():
            for index, partition in topic.get("partitions", {}).items():
                if index == "0" and partition.get("broker", -1) >= 0:
                    fetched_from.add(partition["broker"])

    consumer = Consumer({"bootstrap.servers": brokers[3].bootstrap, "group.id": "near-b",
                         "auto.offset.reset": "earliest", "client.rack": "b",
                         "statistics.interval.ms": 200, "stats_cb": stats,
                         "log_level": 0})  # fmt: skip
    consumer.subscribe(["near"])
    got: list[bytes] = []
    try:
        poll(lambda: _drain(consumer, got) >= RECORDS and 2 in fetched_from, 60,
             "every record, fetched from broker 2")  # fmt: skip
    finally:
        consumer.close()
    assert got == values
