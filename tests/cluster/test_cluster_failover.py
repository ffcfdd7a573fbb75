"""Failover with real processes, `zookeeper.session.timeout.ms` = 6000: a controller killed with
SIGKILL is replaced by one with a higher epoch that carries on; a broker killed with SIGKILL
loses its leaderships to in-sync replicas on every broker's metadata within the session timeout
(plus a margin) and rejoins when restarted; a controller paused past its session (SIGSTOP) is
fenced: after SIGCONT it controls nothing, and requests carrying its old epoch are refused.

Data lives only on a partition's leader until replication exists, so nothing here expects
records to survive a change of leader; a partition whose only replica comes back keeps them."""

from __future__ import annotations

import time

import pytest
from cluster_brokers import (
    CHROOT,
    SPREAD_TIMEOUT,
    ClusterBroker,
    MetadataView,
    PartitionView,
    create_topics,
    exchange,
    metadata_of,
    metadata_of_all,
    poll,
    start_three,
    timed_poll,
    wait_same_everywhere,
    wait_settled,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from weir.cluster.requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    leader_and_isr_request,
    stop_replica_request,
    update_metadata_request,
)
from weir.cluster.requests import PartitionView as RequestedPartition
from weir.cluster.znodes import BrokerRegistration, PartitionState, parse_topic_id

SESSION_TIMEOUT_S = 6
CONFIG = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_S * 1000,
    "offsets.topic.num.partitions": 3,
}
#: ZooKeeper expires a session between one and two ticks (2 s) after its timeout; then a watch
#: fires, an election runs and requests go out. 10 s is the margin the issue allows.
FAILOVER_BOUND_S = SESSION_TIMEOUT_S + 10
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
STALE_CONTROLLER_EPOCH = 11
LEADER_NOT_AVAILABLE = 5


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, CONFIG)


def admin_for(brokers) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "log_level": 0}
    )


def others(cluster: dict[int, ClusterBroker], node_id: int) -> list[ClusterBroker]:
    return [b for n, b in cluster.items() if n != node_id]


def everyone_names_controller(brokers: list[ClusterBroker], controller: int) -> bool:
    return all(v.controller == controller for v in metadata_of_all(brokers).values())


# ---- the controller dies ----------------------------------------------------------------------


def test_killed_controller_is_replaced_with_a_higher_epoch(cluster, zk_view, figure):
    old, old_epoch = zk_view.controller(), zk_view.controller_epoch()
    admin = admin_for(cluster.values())
    create_topics(admin, NewTopic("before", 3, 3))
    before = wait_same_everywhere(cluster.values(), "before", 3).topics["before"]
    survivors = others(cluster, old)

    killed_at = time.monotonic()
    cluster[old].kill()
    new, elected_s = timed_poll(
        lambda: (c := zk_view.controller()) not in (None, old) and c,
        FAILOVER_BOUND_S,
        "a new controller in /controller",
    )
    figure("controller kill -9 -> new /controller", elected_s)
    new_epoch = zk_view.controller_epoch()
    assert new_epoch > old_epoch
    assert f"broker {new} is the controller (epoch {new_epoch})" in cluster[new].logs()
    poll(lambda: everyone_names_controller(survivors, new), SPREAD_TIMEOUT,
         "the survivors name the new controller")  # fmt: skip
    figure("controller kill -9 -> survivors' Metadata names the new one",
           time.monotonic() - killed_at)  # fmt: skip
    assert elected_s < FAILOVER_BOUND_S

    # The new controller moved the old one's leaderships and removed it from every ISR ...
    moved = wait_same_everywhere(survivors, "before", 3).topics["before"]
    for index, p in moved.items():
        assert old not in p.isr and p.offline == (old,), p
        assert p.leader_epoch == before[index].leader_epoch + 1, (before[index], p)
        state = zk_view.json(f"/brokers/topics/before/partitions/{index}/state")
        assert state["controller_epoch"] == new_epoch
    # ... and carries on: a topic created now gets leaders on the survivors.
    create_topics(admin_for(survivors), NewTopic("after", 4, 2))
    after = wait_same_everywhere(survivors, "after", 4).topics["after"]
    assert all(old not in p.replicas and p.leader in p.replicas for p in after.values())


def test_stopped_controller_hands_over(cluster, zk_view, figure):
    """SIGTERM: the controller resigns (its /controller znode goes at once) and closes its
    ZooKeeper session; the others elect a controller that moves its leaderships."""
    old, old_epoch = zk_view.controller(), zk_view.controller_epoch()
    create_topics(admin_for(cluster.values()), NewTopic("before", 3, 3))
    before = wait_same_everywhere(cluster.values(), "before", 3).topics["before"]
    survivors = others(cluster, old)

    stopped_at = time.monotonic()
    assert cluster[old].stop() == 0
    stop_s = time.monotonic() - stopped_at
    for broker in survivors:
        poll(lambda b=broker: failed_over(metadata_of(b.address), old, before, "before"),
             FAILOVER_BOUND_S, f"broker {broker.node_id} shows the handover")  # fmt: skip
    handover_s = time.monotonic() - stopped_at
    figure("controller SIGTERM -> process exited", stop_s)
    figure("controller SIGTERM -> new leaders on every survivor's Metadata", handover_s)
    assert zk_view.controller() in (b.node_id for b in survivors)
    assert zk_view.controller_epoch() == old_epoch + 1
    assert f"broker {old} is no longer the controller" in cluster[old].logs()
    # Its session should be closed, so the handover should not wait for it to expire; a race
    # sometimes keeps it open (test_a_cleanly_stopped_broker_can_start_again_at_once).
    assert handover_s < FAILOVER_BOUND_S


# ---- a broker dies and comes back --------------------------------------------------------------


def produce(broker: ClusterBroker, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "log_level": 0})
    for i in range(count):
        producer.produce(topic, value=f"record-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def read_partition(broker: ClusterBroker, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


def failed_over(
    view: MetadataView, victim: int, before: dict[int, PartitionView], topic: str
) -> bool:
    """Every partition of `topic` has dropped `victim`: a new leader from the old ISR with the
    leader epoch one higher where it led, and it is out of the ISR and offline everywhere."""
    now = view.topics.get(topic, {})
    if sorted(now) != sorted(before):
        return False
    for index, old in before.items():
        p = now[index]
        if victim in p.isr or victim not in p.offline or p.leader == victim:
            return False
        if p.leader not in old.isr or p.leader_epoch != old.leader_epoch + 1:
            return False
    return True


def test_killed_broker_loses_leadership_to_the_isr_and_rejoins(cluster, zk_view, figure):
    controller = zk_view.controller()
    victim = next(n for n in (3, 2, 1) if n != controller)
    survivors = others(cluster, victim)
    admin = admin_for(cluster.values())
    create_topics(admin, NewTopic("replicated", 6, 3))
    create_topics(admin, NewTopic("solo", 1, replica_assignment=[[victim]]))
    before = wait_same_everywhere(cluster.values(), "replicated", 6).topics["replicated"]
    assert any(p.leader == victim for p in before.values())
    wait_same_everywhere(cluster.values(), "solo", 1)
    produce(cluster[victim], "solo", 100)

    killed_at = time.monotonic()
    cluster[victim].kill()
    for broker in survivors:
        poll(lambda b=broker: failed_over(metadata_of(b.address), victim, before, "replicated"),
             FAILOVER_BOUND_S, f"broker {broker.node_id} shows the failover")  # fmt: skip
    failover_s = time.monotonic() - killed_at
    figure("broker kill -9 -> new leaders on every survivor's Metadata", failover_s)
    assert failover_s < FAILOVER_BOUND_S
    views = metadata_of_all(survivors)
    assert all(victim not in v.brokers for v in views.values())
    for view in views.values():
        assert view.topics["replicated"] == views[survivors[0].node_id].topics["replicated"]
        # Its only replica is gone: no leader, the last ISR kept for a clean election later.
        [solo] = view.topics["solo"].values()
        assert (solo.error_code, solo.leader, solo.isr, solo.offline) == (
            LEADER_NOT_AVAILABLE, -1, (victim,), (victim,),
        )  # fmt: skip
    assert zk_view.live_brokers() == sorted(b.node_id for b in survivors)

    restarted_at = time.monotonic()
    cluster[victim].start()

    def rejoined() -> bool:
        views = metadata_of_all(cluster.values())
        return all(
            victim in v.brokers
            and len(v.topics.get("replicated", {})) == 6  # a broker just started may lack it
            and all(not p.offline for p in v.topics["replicated"].values())
            and v.leaders("solo") == {0: victim}
            for v in views.values()
        )

    poll(rejoined, SPREAD_TIMEOUT, f"broker {victim} listed again, solo led by it")
    figure("restart -> listed again with its partitions", time.monotonic() - restarted_at)
    assert zk_view.live_brokers() == [1, 2, 3]
    replicated = wait_same_everywhere(cluster.values(), "replicated", 6).topics["replicated"]
    assert all(p.leader != victim for p in replicated.values()), "no leadership taken back"
    assert read_partition(cluster[victim], "solo", 100) == [
        f"record-{i}".encode() for i in range(100)
    ], "the only replica's log came back with it"


# ---- a paused controller is fenced -------------------------------------------------------------


def stale_requests(
    zk_view, target: ClusterBroker, old: int, old_epoch: int, topic: str
) -> dict[str, int]:
    """UpdateMetadata, LeaderAndIsr and StopReplica (delete) as the old controller would send
    them, to `target`, with its own broker epoch; each request's top-level error code."""
    registration = zk_view.json(f"/brokers/ids/{target.node_id}")
    _, stat = zk_view.client.get(zk_view.path(f"/brokers/ids/{target.node_id}"))
    broker_epoch = stat.czxid
    document = zk_view.json(f"/brokers/topics/{topic}")
    replicas = tuple(document["partitions"]["0"])
    view = RequestedPartition(
        topic=topic,
        topic_id=parse_topic_id(document["topic_id"]),
        index=0,
        # The old controller claims it leads partition 0 with a far newer leader epoch.
        state=PartitionState(leader=old, leader_epoch=1000, isr=(old,), controller_epoch=old_epoch),
        zk_version=1000,
        replicas=replicas,
    )
    only_old = [BrokerRegistration(node_id=old, host=registration["host"], port=1)]
    bodies = {
        "UpdateMetadata": (UPDATE_METADATA, UPDATE_METADATA_VERSION,
                           update_metadata_request(old, old_epoch, broker_epoch, [view],
                                                   only_old)),
        "LeaderAndIsr": (LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
                         leader_and_isr_request(old, old_epoch, broker_epoch, [view], only_old)),
        "StopReplica": (STOP_REPLICA, STOP_REPLICA_VERSION,
                        stop_replica_request(old, old_epoch, broker_epoch, [(topic, 0)],
                                             delete=True)),
    }  # fmt: skip
    return {
        name: int(exchange(target.address, key, version, body).error_code)
        for name, (key, version, body) in bodies.items()
    }


def test_paused_controller_is_fenced_after_it_resumes(cluster, zk_view, figure):
    old, old_epoch = zk_view.controller(), zk_view.controller_epoch()
    survivors = others(cluster, old)
    create_topics(admin_for(cluster.values()), NewTopic("before", 3, 3))
    wait_same_everywhere(cluster.values(), "before", 3)

    paused_at = time.monotonic()
    cluster[old].pause()
    new, elected_s = timed_poll(
        lambda: (c := zk_view.controller()) not in (None, old) and c,
        FAILOVER_BOUND_S,
        "a new controller, the old one paused",
    )
    figure("controller SIGSTOP -> new /controller", elected_s)
    new_epoch = zk_view.controller_epoch()
    assert new_epoch > old_epoch
    poll(lambda: everyone_names_controller(survivors, new), SPREAD_TIMEOUT,
         "the survivors name the new controller")  # fmt: skip
    wait_same_everywhere(survivors, "before", 3)

    # Requests with the old epoch are refused, and change nothing.
    target = next(b for b in survivors if b.node_id != new)
    seen = metadata_of(target.address)
    log_dir = target.data_dir / "before-0"
    assert log_dir.is_dir()
    assert stale_requests(zk_view, target, old, old_epoch, "before") == {
        "UpdateMetadata": STALE_CONTROLLER_EPOCH,
        "LeaderAndIsr": STALE_CONTROLLER_EPOCH,
        "StopReplica": STALE_CONTROLLER_EPOCH,
    }
    assert metadata_of(target.address) == seen
    assert log_dir.is_dir(), "a stale StopReplica deleted nothing"

    resumed_at = time.monotonic()
    cluster[old].resume()
    poll(lambda: everyone_names_controller(list(cluster.values()), new), SPREAD_TIMEOUT,
         "every broker, the resumed one too, names the new controller")  # fmt: skip
    poll(lambda: sorted(metadata_of(cluster[old].address).brokers) == [1, 2, 3], SPREAD_TIMEOUT,
         "the resumed broker registered again")  # fmt: skip
    figure("SIGCONT -> the old controller's broker names the new one",
           time.monotonic() - resumed_at)  # fmt: skip
    figure("paused for", resumed_at - paused_at)

    # The old controller carries nothing out: a topic created through its broker is made by
    # the new controller (partition states carry the new epoch).
    create_topics(AdminClient({"bootstrap.servers": cluster[old].bootstrap, "log_level": 0}),
                  NewTopic("after", 3, 3))  # fmt: skip
    wait_same_everywhere(cluster.values(), "after", 3)
    for index in range(3):
        state = zk_view.json(f"/brokers/topics/after/partitions/{index}/state")
        assert state["controller_epoch"] == new_epoch
    assert zk_view.controller() == new
    assert zk_view.controller_epoch() == new_epoch, "no election after the resume"
    refusals = [b.node_id for b in cluster.values()
                if f"refusing a request of controller epoch {old_epoch}" in b.logs()]  # fmt: skip
    print(f"brokers that refused epoch {old_epoch}: {refusals} (the test's target: {target})")
    logs = cluster[old].logs()
    assert f"broker {old} is the controller (epoch {old_epoch})" in logs
    assert f"broker {new} is the controller" not in logs


def test_a_controller_that_lost_its_session_says_so(zookeeper, cluster_brokers, zk_view):
    brokers = cluster_brokers.start_cluster(
        f"{zookeeper.connect}{CHROOT}", 2, config={**CONFIG, "zookeeper.session.timeout.ms": 3000}
    )
    old = wait_settled(brokers.values())
    [other] = [b for n, b in brokers.items() if n != old]
    brokers[old].pause()
    poll(lambda: zk_view.controller() == other.node_id, FAILOVER_BOUND_S,
         "the other broker is the controller")  # fmt: skip
    brokers[old].resume()
    poll(lambda: metadata_of(brokers[old].address).controller == other.node_id, SPREAD_TIMEOUT,
         "the resumed broker names the new controller")  # fmt: skip
    assert "Session has expired" in brokers[old].logs()
    poll(lambda: f"broker {old} is no longer the controller" in brokers[old].logs(), 5,
         "the old controller's log says it is no longer the controller")  # fmt: skip


CLEAN_RESTARTS = 20


@pytest.mark.slow
def test_a_cleanly_stopped_broker_can_start_again_at_once(zookeeper, cluster_brokers, zk_view):
    """A clean stop closes the ZooKeeper session, so the registration goes at once and the same
    node id can start again right away (as a Kafka broker can). Repeated, since the race that
    breaks it does not happen at every stop."""
    broker = cluster_brokers.add(1, f"{zookeeper.connect}{CHROOT}", config=CONFIG)
    broker.start()
    for attempt in range(CLEAN_RESTARTS):
        wait_settled([broker])
        assert broker.stop() == 0
        exited_at = time.monotonic()
        poll(lambda: zk_view.live_brokers() == [], SESSION_TIMEOUT_S + 4, "/brokers/ids/1 gone")
        gone_s = time.monotonic() - exited_at
        assert gone_s < 2, f"stop {attempt + 1}: /brokers/ids/1 went {gone_s:.1f} s after exit"
        broker.start()
