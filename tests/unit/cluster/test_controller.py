"""The controller on an in-memory ZooKeeper and fake time: what it writes to ZooKeeper and what
it tells brokers when brokers come and go, topics come and go, leaders ask for ISR changes,
brokers shut down, and admins or the balance timer ask for elections."""

from __future__ import annotations

import pytest
from controller_world import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    World,
    partitions_in,
    stopped_in,
)
from kio.schema.errors import ErrorCode

from weir.cluster import znodes
from weir.cluster.controller import ElectionType, IsrChange, LeaderBalance
from weir.cluster.controller.batch import LEADER_DURING_DELETE
from weir.cluster.controller.states import PartitionState as P
from weir.cluster.controller.states import ReplicaState as R
from weir.cluster.requests import TYPE_FULL
from weir.cluster.znodes import NO_LEADER


@pytest.fixture
def world() -> World:
    world = World()
    for node_id in (1, 2, 3):
        world.add_broker(node_id)
    return world


def test_the_first_broker_is_the_controller_and_the_next_one_takes_over(world: World) -> None:
    assert world.controller.node_id == 1
    assert world.controller.controller.epoch == 1
    world.expire(1)
    assert world.controller.node_id in (2, 3)
    assert world.controller.controller.epoch == 2
    data, _ = world.admin.get(znodes.CONTROLLER)
    assert znodes.parse_controller(data) == world.controller.node_id


def test_a_new_controller_is_never_seen_with_the_old_epoch(world: World) -> None:
    """`/controller` and the next `/controller_epoch` are written in one transaction: whoever
    sees the new controller's znode reads its epoch too."""
    seen: list[tuple[int | None, int]] = []

    def controller_changed(data: bytes | None, _stat: object) -> None:
        epoch, _ = world.admin.get(znodes.CONTROLLER_EPOCH)
        named = None if data is None else znodes.parse_controller(data)
        seen.append((named, znodes.parse_controller_epoch(epoch)))

    world.admin.watch_data(znodes.CONTROLLER, controller_changed)
    world.expire(1)
    world.run()
    successor = world.controller.node_id
    assert (successor, 2) in seen
    assert (successor, 1) not in seen
    data, _ = world.admin.get(znodes.CONTROLLER)
    assert znodes.parse_controller(data) == successor


def test_a_new_topic_gets_leaders_and_its_replicas_are_told(world: World) -> None:
    world.controller.forget_requests()
    world.create_topic("t", [[1, 2], [2, 3], [3, 1]])
    assert world.leaders("t", 3) == [1, 2, 3]
    assert world.state("t", 1).isr == (2, 3)
    controller = world.controller
    for broker, expected in {1: {("t", 0), ("t", 2)}, 2: {("t", 0), ("t", 1)}}.items():
        (request,) = controller.requests(broker, LEADER_AND_ISR)
        assert set(partitions_in(request)) == expected
        assert all(p.is_new for p in partitions_in(request).values())
    for broker in (1, 2, 3):
        (metadata,) = controller.requests(broker, UPDATE_METADATA)
        assert set(partitions_in(metadata)) == {("t", 0), ("t", 1), ("t", 2)}
    context = controller.controller.context
    assert set(context.partition_states.values()) == {P.ONLINE}
    assert set(context.replica_states.values()) == {R.ONLINE}


def test_a_lost_broker_s_leaderships_go_to_the_isr_or_offline(world: World) -> None:
    world.create_topic("t", [[2, 3], [2], [3, 2]])
    before = world.state("t", 0)
    world.controller.forget_requests()
    world.expire(2)
    led = world.state("t", 0)
    assert (led.leader, led.isr, led.leader_epoch) == (3, (3,), before.leader_epoch + 1)
    assert world.state("t", 1).leader == NO_LEADER
    assert world.state("t", 1).isr == (2,), "the last ISR member is kept for a clean election"
    assert world.state("t", 2).isr == (3,)
    controller = world.controller
    states = controller.controller.context.partition_states
    assert (states[("t", 0)], states[("t", 1)]) == (P.ONLINE, P.OFFLINE)
    (request,) = controller.requests(3, LEADER_AND_ISR)
    assert partitions_in(request)[("t", 0)].leader == 3
    assert controller.requests(2, LEADER_AND_ISR) == []
    controller.forget_requests()
    world.come_back(2)
    assert world.state("t", 1).leader == 2
    assert states[("t", 1)] is P.ONLINE
    (full,) = controller.requests(2, LEADER_AND_ISR)
    assert full.type_ == TYPE_FULL, "a broker that came back is told all it replicates at once"
    assert set(partitions_in(full)) == {("t", 0), ("t", 1), ("t", 2)}


def test_unclean_election_gives_a_leaderless_partition_a_live_replica(world: World) -> None:
    world.create_topic("t", [[2, 3]], {"unclean.leader.election.enable": "true"})
    world.create_topic("clean", [[2, 3]])
    world.expire(3)
    world.expire(2)
    world.come_back(3)
    assert world.state("t", 0).leader == 3
    assert world.state("t", 0).isr == (3,)
    assert world.state("clean", 0).leader == NO_LEADER


def test_controlled_shutdown_moves_leaderships_and_leaves_the_isrs(world: World) -> None:
    world.create_topic("t", [[2, 3], [3, 2], [2]])
    controller = world.controller
    controller.forget_requests()
    future = controller.controller.controlled_shutdown(2, -1)
    world.run()
    error, remaining = future.result(timeout=0)
    assert error == ErrorCode.none
    assert remaining == [("t", 2)], "a partition with no other replica stays until 2 is gone"
    assert (world.state("t", 0).leader, world.state("t", 0).isr) == (3, (3,))
    assert world.state("t", 1).isr == (3,)
    assert controller.requests(2, LEADER_AND_ISR) == []
    assert set(partitions_in(controller.requests(3, LEADER_AND_ISR)[0])) == {("t", 0), ("t", 1)}
    assert controller.requests(2, UPDATE_METADATA), "the stopping broker still learns leaders"


def test_controlled_shutdown_refuses_unknown_brokers_and_stale_epochs(world: World) -> None:
    controller = world.controller.controller
    unknown = controller.controlled_shutdown(9, -1)
    stale = controller.controlled_shutdown(2, 12345)
    world.run()
    assert unknown.result(timeout=0) == (ErrorCode.broker_not_available, [])
    assert stale.result(timeout=0) == (ErrorCode.stale_broker_epoch, [])


def _alter(world: World, broker: int, change: IsrChange, broker_epoch: int = -1) -> object:
    future = world.controller.controller.alter_partition(broker, broker_epoch, [change])
    world.run()
    (result,) = future.result(timeout=0)
    return result


def test_alter_partition_accepts_the_current_leader_at_the_current_epochs(world: World) -> None:
    world.create_topic("t", [[1, 2, 3]])
    world.expire(3)
    world.come_back(3)
    state, version = world.state("t", 0), world.zk_version("t", 0)
    world.controller.forget_requests()
    result = _alter(world, 1, IsrChange("t", 0, state.leader_epoch, version, (1, 2, 3)))
    assert result.error_code == ErrorCode.none
    assert result.state.isr == (1, 2, 3) and result.partition_epoch == version + 1
    assert world.state("t", 0).isr == (1, 2, 3)
    assert world.state("t", 0).leader_epoch == state.leader_epoch, "an ISR change keeps it"
    assert world.controller.requests(2, LEADER_AND_ISR) == []
    assert ("t", 0) in partitions_in(world.controller.requests(2, UPDATE_METADATA)[0])


@pytest.mark.parametrize(
    ("broker", "leader_epoch_delta", "version_delta", "isr", "expected"),
    [
        (1, 0, -1, (1, 2), ErrorCode.invalid_update_version),
        (1, -1, 0, (1, 2), ErrorCode.fenced_leader_epoch),
        (2, 0, 0, (1, 2), ErrorCode.fenced_leader_epoch),
        (1, 0, 0, (1, 2, 7), ErrorCode.ineligible_replica),
    ],
    ids=["stale partition epoch", "stale leader epoch", "not the leader", "not a replica"],
)
def test_alter_partition_fences_stale_requests(
    world: World, broker: int, leader_epoch_delta: int, version_delta: int,
    isr: tuple[int, ...], expected: ErrorCode,
) -> None:  # fmt: skip
    world.create_topic("t", [[1, 2, 3]])
    world.expire(3)
    world.come_back(3)
    before, version = world.state("t", 0), world.zk_version("t", 0)
    change = IsrChange("t", 0, before.leader_epoch + leader_epoch_delta, version + version_delta,
                       isr)  # fmt: skip
    assert _alter(world, broker, change).error_code == expected
    assert (world.state("t", 0), world.zk_version("t", 0)) == (before, version)


def test_alter_partition_from_a_stale_broker_epoch_is_refused(world: World) -> None:
    world.create_topic("t", [[1, 2]])
    change = IsrChange("t", 0, 0, world.zk_version("t", 0), (1,))
    assert _alter(world, 1, change, broker_epoch=999).error_code == ErrorCode.stale_broker_epoch
    assert world.state("t", 0).isr == (1, 2)


def test_a_deleted_topic_s_replicas_are_stopped_and_its_znodes_go(world: World) -> None:
    world.create_topic("t", [[1, 2], [2, 3]])
    world.create_topic("kept", [[3]])
    controller = world.controller
    controller.forget_requests()
    world.delete_topic("t")
    assert stopped_in(controller.requests(2, STOP_REPLICA)[0]) == {("t", 0): True, ("t", 1): True}
    assert stopped_in(controller.requests(1, STOP_REPLICA)[0]) == {("t", 0): True}
    (metadata,) = controller.requests(3, UPDATE_METADATA)
    assert {p.leader for p in partitions_in(metadata).values()} == {LEADER_DURING_DELETE}
    for path in (znodes.topic_path("t"), znodes.topic_config_path("t"),
                 znodes.delete_request_path("t")):  # fmt: skip
        assert world.admin.exists(path) is None, path
    context = controller.controller.context
    assert set(context.partition_states) == {("kept", 0)}
    assert {r.topic for r in context.replica_states} == {"kept"}


def test_preferred_election_moves_leadership_back(world: World) -> None:
    world.create_topic("t", [[1, 2], [2, 1]])
    world.expire(1)
    world.come_back(1)
    _isr_back(world, "t", 0, (1, 2))
    controller = world.controller.controller
    assert world.leaders("t", 2) == [2, 2]
    future = controller.elect_leaders(ElectionType.PREFERRED, [("t", 0), ("t", 1), ("x", 0)])
    world.run()
    assert future.result(timeout=0) == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.election_not_needed,
        ("x", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert world.leaders("t", 2) == [1, 2]


def test_the_preferred_replica_election_znode_is_carried_out_and_removed(world: World) -> None:
    world.create_topic("t", [[1, 2]])
    world.expire(1)
    world.come_back(1)
    _isr_back(world, "t", 0, (1, 2))
    world.admin.create(znodes.PREFERRED_REPLICA_ELECTION,
                       b'{"version":1,"partitions":[{"topic":"t","partition":0}]}')  # fmt: skip
    world.run()
    assert world.state("t", 0).leader == 1
    assert world.admin.exists(znodes.PREFERRED_REPLICA_ELECTION) is None


def test_the_leader_balance_gives_preferred_replicas_their_leadership_back() -> None:
    world = World()
    balance = LeaderBalance(enabled=True, check_interval_s=30, per_broker_percentage=10)
    for node_id in (1, 2):
        world.add_broker(node_id, balance=balance)
    world.create_topic("t", [[2, 1], [1, 2]])
    world.expire(2)
    world.come_back(2)
    _isr_back(world, "t", 0, (1, 2))
    assert world.leaders("t", 2) == [1, 1]
    world.advance(29_000)
    assert world.leaders("t", 2) == [1, 1], "not before the check interval"
    world.advance(1_000)
    assert world.leaders("t", 2) == [2, 1]


def test_requests_are_answered_not_controller_after_resignation(world: World) -> None:
    world.create_topic("t", [[1, 2]])
    old = world.controller
    queued = old.controller.elect_leaders(ElectionType.PREFERRED, None)
    world.zk.expire(old.session)  # the session goes before the queued request is handled
    world.run()
    assert queued.result(timeout=0) is None
    assert not old.controller.active
    later = old.controller.alter_partition(1, -1, [IsrChange("t", 0, 0, 0, (1,))])
    assert later.result(timeout=0) is None
    assert old.controller.controlled_shutdown(2, -1).result(timeout=0) is None
    assert world.controller.node_id != old.node_id


def test_a_replaced_controller_s_writes_are_fenced(world: World) -> None:
    world.create_topic("t", [[1, 2]])
    paused = world.controller
    paused.forget_requests()
    _, stat = world.admin.get(znodes.CONTROLLER_EPOCH)
    world.admin.set(znodes.CONTROLLER_EPOCH, b"7", stat.version)  # another controller's epoch
    world.expire(2)
    assert world.state("t", 0).controller_epoch == 8, "written by the controller of epoch 8"
    assert world.controller.controller.epoch == 8
    sent_at_epoch_1 = [
        body
        for broker in (1, 3)
        for key in (LEADER_AND_ISR, UPDATE_METADATA)
        for body in paused.requests(broker, key)
        if body.controller_epoch == 1
    ]
    assert sent_at_epoch_1 == []


def _isr_back(world: World, topic: str, index: int, isr: tuple[int, ...]) -> None:
    """The leader adds a returned follower back to the ISR (AlterPartition), as a broker does
    once it has caught up."""
    state = world.state(topic, index)
    change = IsrChange(topic, index, state.leader_epoch, world.zk_version(topic, index), isr)
    assert _alter(world, state.leader, change).error_code == ErrorCode.none
