"""Bad input to a cluster, with real processes: a node id that is already live, ZooKeeper that
cannot be reached at start (or comes up late), malformed znodes written behind the brokers'
backs, and topic names that collide or are not allowed."""

from __future__ import annotations

import time

import pytest
from cluster_brokers import (
    CHROOT,
    METADATA,
    METADATA_VERSION,
    SPREAD_TIMEOUT,
    ClusterBroker,
    create_topics,
    exchange,
    metadata_of,
    metadata_of_all,
    poll,
    start_three,
    wait_same_everywhere,
    wait_settled,
    zookeeper_view,
)
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.metadata.v12 import request as metadata_request

SESSION_TIMEOUT_S = 6
CONFIG = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_S * 1000,
    "offsets.topic.num.partitions": 3,
}
EXIT_TIMEOUT = 60  # a broker that must give up: Python start-up plus its own bound
INVALID_TOPIC_EXCEPTION = 17
POLICY_VIOLATION = 44


def admin_for(brokers) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "log_level": 0}
    )


def create_error(admin: AdminClient, topic: NewTopic) -> tuple[int, str]:
    """(error code, message) of a CreateTopics that must fail."""
    future = admin.create_topics([topic], request_timeout=30)[topic.topic]
    with pytest.raises(KafkaException) as failure:
        future.result()
    error = failure.value.args[0]
    return error.code(), error.str()


# ---- node ids ----------------------------------------------------------------------------------


def test_a_node_id_already_live_is_refused_by_name(zookeeper, cluster_brokers, zk_view):
    connect = f"{zookeeper.connect}{CHROOT}"
    first = cluster_brokers.add(2, connect, config=CONFIG)
    first.start()
    assert wait_settled([first]) == 2
    _, registered = zk_view.client.get(zk_view.path("/brokers/ids/2"))

    second = cluster_brokers.add(2, connect, config=CONFIG, name="second-2")
    second.spawn()
    code = second.wait_exit(EXIT_TIMEOUT)
    output = second.logs()
    assert code != 0
    assert "broker id 2 is still registered by session" in output  # it waited first, saying so
    assert "broker id 2 is already registered in ZooKeeper by another live broker" in output
    assert "Traceback" not in output, "a plain error, not a stack trace"
    assert "weir broker ready" not in output

    assert first.running()
    _, now = zk_view.client.get(zk_view.path("/brokers/ids/2"))
    assert (now.czxid, now.ephemeralOwner) == (registered.czxid, registered.ephemeralOwner)
    assert zk_view.json("/brokers/ids/2")["port"] == first.port
    view = metadata_of(first.address)
    assert view.brokers == {2: ("127.0.0.1", first.port, None)} and view.controller == 2
    create_topics(admin_for([first]), NewTopic("still-serving", 2, 1))
    wait_same_everywhere([first], "still-serving", 2)


def test_a_broker_restarted_right_after_kill_9_waits_for_its_old_session(
    zookeeper, cluster_brokers, zk_view, figure
):
    connect = f"{zookeeper.connect}{CHROOT}"
    broker = cluster_brokers.add(1, connect, config=CONFIG)
    broker.start()
    assert wait_settled([broker]) == 1
    _, crashed = zk_view.client.get(zk_view.path("/brokers/ids/1"))
    broker.kill()
    restarted = time.monotonic()
    broker.start(timeout=SESSION_TIMEOUT_S + 60)
    figure("restart right after kill -9 -> ready", time.monotonic() - restarted)
    output = broker.logs_since_start()
    assert "broker id 1 is still registered by session" in output
    assert "already registered in ZooKeeper by another live broker" not in output
    _, now = zk_view.client.get(zk_view.path("/brokers/ids/1"))
    assert now.ephemeralOwner != crashed.ephemeralOwner
    assert wait_settled([broker]) == 1
    create_topics(admin_for([broker]), NewTopic("after-the-crash", 1, 1))


# ---- ZooKeeper at start ------------------------------------------------------------------------


def test_unreachable_zookeeper_ends_the_broker_with_a_clear_error(
    zookeeper, cluster_brokers, figure
):
    zookeeper.stop()
    broker = cluster_brokers.add(
        1, f"{zookeeper.connect}{CHROOT}",
        config={**CONFIG, "zookeeper.connection.timeout.ms": 3000},
    )  # fmt: skip
    started = time.monotonic()
    broker.spawn()
    code = broker.wait_exit(EXIT_TIMEOUT)
    took = time.monotonic() - started
    figure("unreachable ZooKeeper (3 s connection timeout) -> exit", took)
    output = broker.logs()
    assert code != 0
    assert f"ZooKeeper at {zookeeper.connect} did not answer" in output
    assert "Traceback" not in output
    assert took < 3 + 15, "the connection timeout bounds the start"

    zookeeper.start()
    zookeeper.wait_ready()
    with zookeeper_view(zookeeper.connect, CHROOT) as view:
        assert view.children("/brokers/ids") == []


def test_a_broker_waits_for_zookeeper_that_comes_up_in_time(zookeeper, cluster_brokers, figure):
    zookeeper.stop()
    broker = cluster_brokers.add(
        1, f"{zookeeper.connect}{CHROOT}",
        config={**CONFIG, "zookeeper.connection.timeout.ms": 30_000},
    )  # fmt: skip
    broker.spawn()
    time.sleep(3)
    assert broker.running(), broker.logs()
    zookeeper.start()
    zookeeper.wait_ready()
    up = time.monotonic()
    broker.wait_ready()
    figure("ZooKeeper up -> broker ready", time.monotonic() - up)
    with zookeeper_view(zookeeper.connect, CHROOT) as view:
        assert view.live_brokers() == [1]
    assert wait_settled([broker]) == 1
    create_topics(admin_for([broker]), NewTopic("late", 1, 1))


# ---- malformed znodes --------------------------------------------------------------------------


def change_controller(cluster: dict[int, ClusterBroker], zk_view) -> tuple[int, int]:
    """Stop the controller cleanly (its /controller znode goes at once) and wait for its
    registration to go and for one new controller that every other broker names; (old, new)."""
    old = zk_view.controller()
    cluster[old].stop()
    poll(lambda: zk_view.controller() not in (None, old), SPREAD_TIMEOUT,
         "a new controller after a clean stop")  # fmt: skip
    # Its session may outlive the clean stop, keeping it "live" until the session expires
    # (test_a_cleanly_stopped_broker_can_start_again_at_once).
    poll(lambda: old not in zk_view.live_brokers(), SESSION_TIMEOUT_S + 4,
         f"/brokers/ids/{old} gone")  # fmt: skip
    survivors = [b for b in cluster.values() if b.node_id != old]
    return old, wait_one_controller(survivors, zk_view)


def wait_one_controller(brokers: list[ClusterBroker], zk_view, quiet_s: float = 3) -> int:
    """The controller, once /controller_epoch has not moved for `quiet_s` seconds and every
    broker names the controller /controller names; fails if that does not happen in time."""

    def settled() -> int | None:
        epoch, controller = zk_view.controller_epoch(), zk_view.controller()
        time.sleep(quiet_s)
        if (zk_view.controller_epoch(), zk_view.controller()) != (epoch, controller):
            return None
        views = metadata_of_all(brokers).values()
        return controller if all(v.controller == controller for v in views) else None

    controller = poll(settled, SPREAD_TIMEOUT + quiet_s,
                      "one controller, named by every broker, its epoch steady")  # fmt: skip
    return controller


def test_malformed_topic_and_broker_znodes_are_logged_and_skipped(
    zookeeper, cluster_brokers, zk_view
):
    cluster = start_three(cluster_brokers, zookeeper.connect, CONFIG)
    admin = admin_for(cluster.values())
    create_topics(admin, NewTopic("good", 3, 2))
    good = wait_same_everywhere(cluster.values(), "good", 3).topics["good"]

    zk_view.client.create(zk_view.path("/brokers/topics/bad"), b'{"version": 3, "partitions": ')
    zk_view.client.create(zk_view.path("/brokers/topics/no-id"), b'{"partitions": {"0": [1]}}')
    zk_view.client.create(zk_view.path("/brokers/ids/9"), b"[1, 2, 3]")
    zk_view.client.create(zk_view.path("/brokers/ids/junk"), b"{}")

    # Every broker logs what it skipped, and keeps serving.
    for broker in cluster.values():
        poll(lambda b=broker: "ignoring topic bad" in b.logs()
             and "ignoring topic no-id" in b.logs(),
             SPREAD_TIMEOUT, f"broker {broker.node_id} logs the malformed topics")  # fmt: skip
    for node_id, view in metadata_of_all(cluster.values()).items():
        assert sorted(view.brokers) == [1, 2, 3], f"broker {node_id}"
        assert view.topics["good"] == good
        assert "bad" not in view.topics and "no-id" not in view.topics
    create_topics(admin, NewTopic("after", 2, 3))
    wait_same_everywhere(cluster.values(), "after", 2)

    # A new controller reads every znode: it skips the malformed ones, says so, and carries on.
    old, new = change_controller(cluster, zk_view)
    survivors = [b for b in cluster.values() if b.node_id != old]
    logs = cluster[new].logs()
    assert "ignoring topic bad" in logs
    assert "ignoring a malformed broker registration: /brokers/ids/9" in logs
    assert "ignoring /brokers/ids/junk: not a broker id" in logs
    create_topics(admin_for(survivors), NewTopic("after-failover", 2, 2))
    wait_same_everywhere(survivors, "after-failover", 2)
    poll(lambda: all(p.leader not in (old, -1) for p in
                     wait_same_everywhere(survivors, "good", 3).topics["good"].values()),
         SPREAD_TIMEOUT, f"good's partitions led by others than {old}")  # fmt: skip

    # A broker starting now reads the same znodes, logs them and joins.
    cluster[old].start()
    poll(lambda: all(sorted(v.brokers) == [1, 2, 3]
                     for v in metadata_of_all(cluster.values()).values()),
         SPREAD_TIMEOUT, "the restarted broker is listed everywhere")  # fmt: skip
    assert "ignoring topic bad" in cluster[old].logs_since_start()
    wait_same_everywhere(cluster.values(), "after-failover", 2)


def test_a_malformed_partition_state_does_not_unseat_the_controller(
    zookeeper, cluster_brokers, zk_view
):
    cluster = start_three(cluster_brokers, zookeeper.connect, CONFIG)
    admin = admin_for(cluster.values())
    create_topics(admin, NewTopic("good", 3, 2), NewTopic("victim", 2, 3))
    wait_same_everywhere(cluster.values(), "good", 3)
    wait_same_everywhere(cluster.values(), "victim", 2)
    zk_view.client.set(zk_view.path("/brokers/topics/victim/partitions/0/state"), b"\xff garbage")

    old, new = change_controller(cluster, zk_view)
    survivors = [b for b in cluster.values() if b.node_id != old]
    poll(lambda: "ignoring the state of victim-0" in cluster[new].logs(), SPREAD_TIMEOUT,
         "the new controller logs the malformed state")  # fmt: skip
    create_topics(admin_for(survivors), NewTopic("after", 2, 2))
    wait_same_everywhere(survivors, "after", 2)


def test_a_deletion_request_for_a_missing_topic_is_dropped(zookeeper, cluster_brokers, zk_view):
    broker = cluster_brokers.add(1, f"{zookeeper.connect}{CHROOT}", config=CONFIG)
    broker.start()
    wait_settled([broker])
    # What a second DeleteTopics for the same topic, racing the first, leaves behind.
    zk_view.client.create(zk_view.path("/admin/delete_topics/ghost"))
    poll(lambda: zk_view.children("/admin/delete_topics") == [], SPREAD_TIMEOUT,
         "the request for a topic that does not exist is removed")  # fmt: skip
    assert wait_one_controller([broker], zk_view) == 1


# ---- topic names -------------------------------------------------------------------------------


def test_colliding_and_reserved_topic_names_are_refused(zookeeper, cluster_brokers, zk_view):
    broker: ClusterBroker = cluster_brokers.add(1, f"{zookeeper.connect}{CHROOT}", config=CONFIG)
    broker.start()
    wait_settled([broker])
    admin = admin_for([broker])
    create_topics(admin, NewTopic("a.b", 1, 1), NewTopic("x_y", 1, 1))

    for name, existing in (("a_b", "a.b"), ("x.y", "x_y")):
        code, message = create_error(admin, NewTopic(name, 1, 1))
        assert code == INVALID_TOPIC_EXCEPTION, message
        assert message == f"Topic '{name}' collides with existing topics: {existing}"
        assert not zk_view.exists(f"/brokers/topics/{name}")
    for name in (".", "..", "a" * 250, "white space", "sl/ash"):
        code, message = create_error(admin, NewTopic(name, 1, 1))
        assert code == INVALID_TOPIC_EXCEPTION, (name, message)
    assert zk_view.children("/brokers/topics") == ["a.b", "x_y"]
    create_topics(admin, NewTopic("a-b", 1, 1))  # '-' is not folded: no collision


def auto_create_error(broker: ClusterBroker, name: str) -> int:
    """The error code of a Metadata v12 that asks for `name` and allows auto-creation."""
    body = metadata_request.MetadataRequest(
        topics=(metadata_request.MetadataRequestTopic(topic_id=None, name=name),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    (topic,) = exchange(broker.address, METADATA, METADATA_VERSION, body).topics
    return int(topic.error_code)


def test_the_partition_limit_counts_the_cluster_in_zookeeper(zookeeper, cluster_brokers, zk_view):
    """The broker receiving the request checks the cluster's partition replicas in ZooKeeper
    (here 200 per broker, one broker, 53 kept for the internal topics) before it writes."""
    config = {**CONFIG, "max.partitions.per.broker": 200}
    broker: ClusterBroker = cluster_brokers.add(1, f"{zookeeper.connect}{CHROOT}", config=config)
    broker.start()
    wait_settled([broker])
    admin = admin_for([broker])
    code, message = create_error(admin, NewTopic("huge", 100_000, 1))
    assert code == POLICY_VIOLATION, message
    assert "limit of 200 (max.partitions.per.broker=200)" in message
    create_topics(admin, NewTopic("fits", 140, 1), timeout=60)
    grown = admin.create_partitions([NewPartitions("fits", 148)], request_timeout=30)["fits"]
    with pytest.raises(KafkaException) as failure:
        grown.result()
    assert failure.value.args[0].code() == POLICY_VIOLATION
    code, message = create_error(admin, NewTopic("one-too-many", 8, 1))
    assert code == POLICY_VIOLATION, message
    assert "7 more fit (53 kept for internal topics)" in message
    assert zk_view.children("/brokers/topics") == ["fits"]
    assert auto_create_error(broker, "fresh.one") == 5  # LEADER_NOT_AVAILABLE: created now
    assert auto_create_error(broker, "fresh_one") == INVALID_TOPIC_EXCEPTION  # collides
    assert zk_view.children("/brokers/topics") == ["fits", "fresh.one"]
