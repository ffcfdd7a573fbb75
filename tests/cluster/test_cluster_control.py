"""A three-broker cluster (racks a, b, c) on one ZooKeeper, under a chroot, as clients see it:
one controller with an epoch, every broker answering Metadata alike (kcat, confluent-kafka,
kafka-python, and a raw request to each broker), topics placed on distinct brokers and racks,
records produced with acks=all read back through a consumer group, and topic deletion and growth
reaching every broker and ZooKeeper."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from collections import Counter

import pytest
from cluster_brokers import (
    SPREAD_TIMEOUT,
    ClusterBroker,
    MetadataView,
    ZooKeeperView,
    create_topics,
    metadata_of,
    metadata_of_all,
    poll,
    require_tool,
    start_three,
    wait_same_everywhere,
)
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from weir.cluster.placement import CONSISTENT_HASH, BrokerSpec, assign

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KafkaPythonTopic

RACKS = {1: "a", 2: "b", 3: "c"}
CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 10,
    "group.initial.rebalance.delay.ms": 0,
}
ADMIN_TIMEOUT = 30


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, CONFIG)


def bootstrap(brokers: dict[int, ClusterBroker]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def admin_at(broker: ClusterBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def check_placement(view: MetadataView, topic: str, replication: int) -> None:
    """No broker twice in a partition; with three racks, no rack twice either; each partition
    led by an in-sync replica with the whole replica set in sync (a new topic)."""
    for index, p in view.topics[topic].items():
        assert len(p.replicas) == replication, (index, p)
        assert len(set(p.replicas)) == replication, f"{topic}-{index}: a broker twice: {p}"
        racks = [RACKS[r] for r in p.replicas]
        assert len(set(racks)) == replication, f"{topic}-{index}: a rack twice: {p} {racks}"
        assert p.leader == p.replicas[0] and sorted(p.isr) == sorted(p.replicas), p
        assert p.offline == () and p.error_code == 0, p


def check_zookeeper_matches(zk: ZooKeeperView, view: MetadataView, topic: str) -> None:
    document = zk.json(f"/brokers/topics/{topic}")
    assert document["version"] == 3 and document["topic_id"]
    assert {int(p): tuple(r) for p, r in document["partitions"].items()} == {
        index: p.replicas for index, p in view.topics[topic].items()
    }
    for index, p in view.topics[topic].items():
        state = zk.json(f"/brokers/topics/{topic}/partitions/{index}/state")
        assert (state["leader"], state["leader_epoch"], tuple(state["isr"])) == (
            p.leader, p.leader_epoch, p.isr,
        ), (topic, index)  # fmt: skip
        assert state["controller_epoch"] >= 1


# ---- the controller and the broker list --------------------------------------------------------


def test_one_controller_and_every_broker_lists_the_cluster(cluster, zk_view, figure):
    kcat = require_tool("kcat")
    controller = zk_view.controller()
    assert controller in RACKS
    assert zk_view.controller_epoch() >= 1
    claims = [n for n, b in cluster.items() if f"broker {n} is the controller" in b.logs()]
    assert claims == [controller], "exactly one broker became the controller"
    assert zk_view.live_brokers() == [1, 2, 3]
    for node_id, broker in cluster.items():
        registration = zk_view.json(f"/brokers/ids/{node_id}")
        assert registration["host"] == "127.0.0.1" and registration["port"] == broker.port
        assert registration["rack"] == RACKS[node_id]
        assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]

    expected = {n: ("127.0.0.1", b.port, RACKS[n]) for n, b in cluster.items()}
    for node_id, view in metadata_of_all(cluster.values()).items():
        assert view.controller == controller, f"broker {node_id} names another controller"
        assert view.brokers == expected, f"broker {node_id}"

    for node_id, broker in cluster.items():
        started = time.monotonic()
        out = subprocess.run([kcat, "-L", "-J", "-b", broker.bootstrap, "-m", "15"],
                             capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
        figure(f"kcat -L against broker {node_id}", time.monotonic() - started)
        listing = json.loads(out.stdout)
        # librdkafka may ask another broker once it knows them; each broker's own answer is
        # compared above with a raw request
        assert listing["originating_broker"]["id"] in RACKS
        assert listing["controllerid"] == controller, f"kcat -b broker {node_id}"
        assert {b["id"]: b["name"] for b in listing["brokers"]} == {
            n: f"127.0.0.1:{b.port}" for n, b in cluster.items()
        }

    for broker in cluster.values():
        admin = admin_at(broker)  # kept: a client destroyed early fails its futures
        description = admin.describe_cluster(request_timeout=10).result()
        assert description.controller.id == controller
        assert {n.id: (n.port, n.rack) for n in description.nodes} == {
            n: (b.port, RACKS[n]) for n, b in cluster.items()
        }
        assert description.cluster_id == zk_view.json("/cluster/id")["id"]


# ---- topics from two client libraries ----------------------------------------------------------


def test_topics_from_two_clients_are_placed_and_served_alike(cluster, zk_view, figure):
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster), "log_level": 0})
    started = time.monotonic()
    create_topics(admin, NewTopic("orders", 6, 3))
    figure("CreateTopics 6 partitions RF 3 (confluent)", time.monotonic() - started)

    python_admin = KafkaAdminClient(
        bootstrap_servers=cluster[2].bootstrap, request_timeout_ms=ADMIN_TIMEOUT * 1000
    )
    try:
        python_admin.create_topics([
            KafkaPythonTopic("events", num_partitions=4, replication_factor=2),
            KafkaPythonTopic("pinned", replica_assignments={0: [3, 1], 1: [1, 2], 2: [2, 3]}),
        ])  # fmt: skip
    finally:
        python_admin.close()

    for topic, partitions, replication in (("orders", 6, 3), ("events", 4, 2), ("pinned", 3, 2)):
        view = wait_same_everywhere(cluster.values(), topic, partitions)
        check_placement(view, topic, replication)
        check_zookeeper_matches(zk_view, view, topic)
    pinned = wait_same_everywhere(cluster.values(), "pinned", 3).topics["pinned"]
    assert {i: p.replicas for i, p in pinned.items()} == {0: (3, 1), 1: (1, 2), 2: (2, 3)}
    orders = wait_same_everywhere(cluster.values(), "orders", 6).topics["orders"]
    assert Counter(p.leader for p in orders.values()) == {1: 2, 2: 2, 3: 2}, "leaders spread"

    # confluent-kafka bootstrapped at each broker shows what the broker that answered (librdkafka
    # picks any broker it knows) says in a raw Metadata request.
    by_address = {b.bootstrap: b for b in cluster.values()}
    for broker in cluster.values():
        admin = admin_at(broker)
        listed = admin.list_topics(timeout=10)
        answered = by_address[listed.orig_broker_name.split("/")[0]]
        for topic in ("orders", "events", "pinned"):
            seen = {i: (p.leader, tuple(p.replicas), tuple(p.isrs))
                    for i, p in listed.topics[topic].partitions.items()}  # fmt: skip
            raw = metadata_of(answered.address, [topic]).topics[topic]
            assert seen == {i: (p.leader, p.replicas, p.isr) for i, p in raw.items()}


def test_acks_all_records_come_back_through_a_consumer_group(cluster, figure):
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster), "log_level": 0})
    create_topics(admin, NewTopic("orders", 6, 3))
    wait_same_everywhere(cluster.values(), "orders", 6)

    producer = Producer({"bootstrap.servers": cluster[1].bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
    sent: dict[int, list[bytes]] = {}
    errors = []

    def delivered(err, message) -> None:
        if err is not None:
            errors.append(err)
        else:
            sent.setdefault(message.partition(), []).append(message.value())

    count = 3000
    started = time.monotonic()
    for i in range(count):
        producer.produce("orders", key=f"key-{i % 50}".encode(), value=f"value-{i}".encode(),
                         on_delivery=delivered)  # fmt: skip
        producer.poll(0)
    assert producer.flush(60) == 0
    figure("produce 3000 records acks=all (idempotent)", time.monotonic() - started)
    assert errors == []
    assert sum(len(v) for v in sent.values()) == count
    assert len(sent) == 6, "keys spread over every partition"

    consumer = Consumer({"bootstrap.servers": cluster[3].bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "log_level": 0})  # fmt: skip
    received: dict[int, list[bytes]] = {}
    started = time.monotonic()
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 60
        while sum(len(v) for v in received.values()) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            received.setdefault(message.partition(), []).append(message.value())
        figure("consume 3000 records through a group", time.monotonic() - started)
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=10)
    finally:
        consumer.close()
    assert received == sent, "every record, once, in produce order per partition"
    assert {tp.partition: tp.offset for tp in committed} == {p: len(v) for p, v in sent.items()}
    offsets_topic = wait_same_everywhere(cluster.values(), "__consumer_offsets", 10)
    check_placement(offsets_topic, "__consumer_offsets", 3)  # offsets.topic.replication.factor


# ---- the command line --------------------------------------------------------------------------


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_weir_topic_create_takes_replication_and_placement(cluster, zk_view):
    result = weir("topic", "create", "ring", "--partitions", "6", "--replication-factor", "3",
                  "--placement", "consistent-hash",
                  "--bootstrap-server", cluster[1].bootstrap)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "created topic ring\n"
    view = wait_same_everywhere(cluster.values(), "ring", 6)
    check_placement(view, "ring", 3)
    ring = assign(CONSISTENT_HASH, [BrokerSpec(n, r) for n, r in RACKS.items()], "ring", 6, 3)
    assert {i: p.replicas for i, p in view.topics["ring"].items()} == {
        i: tuple(r) for i, r in ring.items()
    }, "placed by the consistent-hash ring"
    config = zk_view.json("/config/topics/ring")["config"]
    assert config["replica.placement.strategy"] == CONSISTENT_HASH

    result = weir("topic", "create", "by-hand", "--replica-assignment", "2:3,3:1",
                  "--bootstrap-server", cluster[2].bootstrap)  # fmt: skip
    assert result.returncode == 0, result.stderr
    view = wait_same_everywhere(cluster.values(), "by-hand", 2)
    assert {i: p.replicas for i, p in view.topics["by-hand"].items()} == {0: (2, 3), 1: (3, 1)}

    result = weir("topic", "create", "too-wide", "--partitions", "1", "--replication-factor", "4",
                  "--bootstrap-server", cluster[3].bootstrap)  # fmt: skip
    assert result.returncode == 1
    assert "larger than available brokers: 3" in result.stderr


# ---- deletion and growth -----------------------------------------------------------------------


def test_deleted_and_grown_topics_reach_every_broker(cluster, zk_view, figure):
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster), "log_level": 0})
    create_topics(admin, NewTopic("doomed", 3, 3), NewTopic("growing", 2, 2))
    first_id = zk_view.json("/brokers/topics/doomed")["topic_id"]
    wait_same_everywhere(cluster.values(), "doomed", 3)
    wait_same_everywhere(cluster.values(), "growing", 2)
    assert all((b.data_dir / "doomed-0").is_dir() for b in cluster.values())

    started = time.monotonic()
    admin.delete_topics(["doomed"], request_timeout=ADMIN_TIMEOUT)["doomed"].result()

    def gone_everywhere() -> bool:
        views = metadata_of_all(cluster.values())
        return all("doomed" not in v.topics for v in views.values())

    poll(gone_everywhere, SPREAD_TIMEOUT, "doomed gone from every broker's metadata")
    figure("delete topic until gone from every broker", time.monotonic() - started)
    # Asked for by name, it is LEADER_NOT_AVAILABLE until the controller has deleted its
    # znodes, then UNKNOWN_TOPIC_OR_PARTITION.
    poll(lambda: all(metadata_of(b.address, ["doomed"]).topic_errors == {"doomed": 3}
                     for b in cluster.values()),
         SPREAD_TIMEOUT, "every broker answers UNKNOWN_TOPIC_OR_PARTITION for doomed")  # fmt: skip
    poll(lambda: not zk_view.exists("/brokers/topics/doomed"), SPREAD_TIMEOUT,
         "doomed's znodes deleted")  # fmt: skip
    assert not zk_view.exists("/config/topics/doomed")
    assert zk_view.children("/admin/delete_topics") == []
    poll(lambda: not any((b.data_dir / f"doomed-{i}").exists()
                         for b in cluster.values() for i in range(3)),
         SPREAD_TIMEOUT, "doomed's logs deleted on every broker")  # fmt: skip

    # The name can be used again: a new topic, with a new id.
    create_topics(admin, NewTopic("doomed", 1, 3))
    wait_same_everywhere(cluster.values(), "doomed", 1)
    assert zk_view.json("/brokers/topics/doomed")["topic_id"] != first_id

    started = time.monotonic()
    admin.create_partitions([NewPartitions("growing", 5)],
                            request_timeout=ADMIN_TIMEOUT)["growing"].result()  # fmt: skip
    view = wait_same_everywhere(cluster.values(), "growing", 5)
    figure("grow 2 -> 5 partitions until led on every broker", time.monotonic() - started)
    check_placement(view, "growing", 2)
    check_zookeeper_matches(zk_view, view, "growing")


def test_routine_events_are_logged_at_info_and_what_is_unsupported_said(cluster, zk_view):
    """Kafka's levels: controller elections, the live broker set and controlled shutdowns at
    INFO (shown by default), ELECTION_NOT_NEEDED (the usual answer of an election of every
    partition) not logged as a refusal, and a reassignment written by Kafka's old ZooKeeper tool
    carried out and logged at INFO."""
    controller = poll(lambda: zk_view.json("/controller")["brokerid"], SPREAD_TIMEOUT,
                      "a controller")  # fmt: skip
    logs = {n: b.logs() for n, b in cluster.items()}
    assert f"INFO weir.cluster.controller: broker {controller} is the controller" in (
        logs[controller]
    )
    warned = [line for text in logs.values() for line in text.splitlines() if " WARNING " in line]
    assert not [line for line in warned if "is the controller" in line or "live brokers" in line]
    create_topics(admin_at(cluster[1]), NewTopic("levels", 3, 3), timeout=ADMIN_TIMEOUT)
    elect = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "cluster", "elect-leaders", "--election-type",
         "preferred", "--all-topic-partitions", "--bootstrap-server", bootstrap(cluster)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert elect.returncode == 0, elect.stderr
    assert "Valid replica already elected for partitions" in elect.stdout
    reordered = zk_view.json("/brokers/topics/levels")["partitions"]["0"][::-1]
    reassignment = {"version": 1, "partitions": [{"topic": "levels", "partition": 0,
                                                  "replicas": reordered}]}  # fmt: skip
    zk_view.client.create(zk_view.path("/admin/reassign_partitions"),
                          json.dumps(reassignment).encode(), makepath=True)  # fmt: skip
    poll(lambda: not zk_view.exists("/admin/reassign_partitions"), SPREAD_TIMEOUT,
         "the reassignment carried out and its request removed")  # fmt: skip
    assert zk_view.json("/brokers/topics/levels")["partitions"]["0"] == reordered
    assert "INFO weir.cluster.controller: levels-0: reassigning" in cluster[controller].logs()
    stopping = next(n for n in cluster if n != controller)
    assert cluster[stopping].stop() == 0
    text = cluster[stopping].logs()
    assert "INFO weir.broker.cluster_node: controlled shutdown: leaderships moved" in text
    assert "WARNING weir.broker.cluster_node: controlled shutdown" not in text
    assert not any("refused ELECT_LEADERS" in b.logs() for b in cluster.values())
