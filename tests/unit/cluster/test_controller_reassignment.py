"""Partition reassignment on the controller (in-memory ZooKeeper, fake time): the phases Kafka's
controller goes through, kept in the topic's assignment znode; cancelling; a new controller
finishing a move; `/admin/reassign_partitions`; and the requests refused."""

from __future__ import annotations

from typing import Any

import pytest
from controller_world import LEADER_AND_ISR, STOP_REPLICA, World, partitions_in, stopped_in
from kio.schema.errors import ErrorCode

from weir.cluster import znodes
from weir.cluster.controller import IsrChange
from weir.cluster.controller.context import PartitionReplica
from weir.cluster.controller.states import ReplicaState as R

TP = ("t", 0)


@pytest.fixture
def world() -> World:
    world = World()
    for node_id in (1, 2, 3, 4):
        world.add_broker(node_id)
    world.create_topic("t", [[1, 2]])
    return world


def alter(world: World, targets: dict[tuple[str, int], tuple[int, ...] | None]) -> dict[Any, Any]:
    future = world.controller.controller.alter_partition_reassignments(targets)
    world.run()
    outcome = future.result(timeout=0)
    assert outcome is not None
    return {tp: ErrorCode(code) for tp, (code, _) in outcome.items()}


def ongoing(world: World) -> dict[Any, Any]:
    future = world.controller.controller.list_partition_reassignments(None)
    world.run()
    result = future.result(timeout=0)
    assert result is not None
    return result


def assignment(world: World) -> znodes.TopicAssignment:
    data, _ = world.admin.get(znodes.topic_path("t"))
    return znodes.parse_assignment("t", data)


def grow_isr(world: World, isr: tuple[int, ...]) -> None:
    """The partition's leader reports the new replicas caught up (AlterPartition)."""
    state, version = world.state(*TP), world.zk_version(*TP)
    change = IsrChange(*TP, state.leader_epoch, version, isr)
    future = world.controller.controller.alter_partition(state.leader, -1, [change])
    world.run()
    (result,) = future.result(timeout=0)
    assert result.error_code == ErrorCode.none


def test_a_move_adds_the_targets_waits_for_the_isr_then_drops_the_old_replicas(
    world: World,
) -> None:
    before = world.state(*TP)
    controller = world.controller
    controller.forget_requests()
    assert alter(world, {TP: (3, 4)}) == {TP: ErrorCode.none}
    moving = assignment(world)
    assert (moving.partitions[0], moving.adding[0], moving.removing[0]) == ((3, 4, 1, 2), (3, 4),
                                                                           (1, 2))  # fmt: skip
    assert ongoing(world) == {TP: ((3, 4, 1, 2), (3, 4), (1, 2))}
    started = world.state(*TP)
    assert (started.leader, started.leader_epoch, started.isr) == (
        before.leader, before.leader_epoch + 1, before.isr)
    for broker in (1, 2, 3, 4):  # every replica of RS hears of it, the new ones to follow
        (request,) = controller.requests(broker, LEADER_AND_ISR)
        assert list(partitions_in(request)[TP].replicas) == [3, 4, 1, 2]
    assert controller.requests(1, STOP_REPLICA) == []

    grow_isr(world, (1, 2, 3))  # one target replica is not in sync yet: nothing moves
    assert assignment(world).adding[0] == (3, 4)
    controller.forget_requests()
    grow_isr(world, (1, 2, 3, 4))
    done = world.state(*TP)
    assert done.leader == 3 and done.isr == (3, 4)
    assert done.leader_epoch == started.leader_epoch + 1
    final = assignment(world)
    assert (final.partitions[0], dict(final.adding), dict(final.removing)) == ((3, 4), {}, {})
    assert ongoing(world) == {}
    for broker in (1, 2):
        assert stopped_in(controller.requests(broker, STOP_REPLICA)[0]) == {TP: True}
    for broker in (3, 4):
        assert partitions_in(controller.requests(broker, LEADER_AND_ISR)[-1])[TP].leader == 3
    states = controller.controller.context.replica_states
    assert {r.broker for r in states if r.partition == TP} == {3, 4}


def test_a_leader_that_stays_keeps_leading(world: World) -> None:
    leader = world.state(*TP).leader
    alter(world, {TP: (leader, 3)})
    grow_isr(world, (1, 2, 3))
    assert world.state(*TP).leader == leader
    assert assignment(world).partitions[0] == (leader, 3)


def test_cancelling_goes_back_to_the_original_replicas_and_drops_the_new_ones(
    world: World,
) -> None:
    alter(world, {TP: (3, 4)})
    controller = world.controller
    controller.forget_requests()
    assert alter(world, {TP: None}) == {TP: ErrorCode.none}
    final = assignment(world)
    assert (final.partitions[0], dict(final.adding), dict(final.removing)) == ((1, 2), {}, {})
    assert ongoing(world) == {}
    for broker in (3, 4):
        assert stopped_in(controller.requests(broker, STOP_REPLICA)[0]) == {TP: True}
    assert world.state(*TP).isr == (1, 2)


def test_a_new_target_replaces_a_move_under_way(world: World) -> None:
    alter(world, {TP: (3, 4)})
    controller = world.controller
    controller.forget_requests()
    alter(world, {TP: (1, 3)})
    moving = assignment(world)
    assert (moving.partitions[0], moving.adding[0], moving.removing[0]) == ((1, 3, 2), (3,), (2,))
    assert stopped_in(controller.requests(4, STOP_REPLICA)[0]) == {TP: True}
    assert controller.requests(3, STOP_REPLICA) == []


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        ({("t", 5): (1, 2)}, ErrorCode.unknown_topic_or_partition),
        ({("nope", 0): (1, 2)}, ErrorCode.unknown_topic_or_partition),
        ({TP: ()}, ErrorCode.invalid_replica_assignment),
        ({TP: (3, 3)}, ErrorCode.invalid_replica_assignment),
        ({TP: (3, 9)}, ErrorCode.invalid_replica_assignment),
        ({TP: None}, ErrorCode.no_reassignment_in_progress),
    ],
    ids=["no such partition", "no such topic", "empty", "duplicate", "unknown broker",
         "cancel without a move"],
)  # fmt: skip
def test_bad_requests_are_refused_and_nothing_is_written(
    world: World, targets: dict[Any, Any], expected: ErrorCode
) -> None:
    before = (assignment(world), world.state(*TP))
    assert alter(world, targets) == {tp: expected for tp in targets}
    assert (assignment(world), world.state(*TP)) == before
    assert ongoing(world) == {}


def test_one_bad_partition_does_not_stop_the_others(world: World) -> None:
    world.create_topic("u", [[1]])
    outcome = alter(world, {TP: (3, 9), ("u", 0): (2,)})
    assert outcome == {TP: ErrorCode.invalid_replica_assignment, ("u", 0): ErrorCode.none}


def test_a_new_controller_finishes_a_move_its_predecessor_started(world: World) -> None:
    world.create_topic("v", [[2, 3]])
    v = ("v", 0)
    alter(world, {v: (3, 4)})
    assert world.controller.node_id == 1
    world.expire(1)
    context = world.controller.controller.context
    assert world.controller.node_id != 1
    assert context.assignment(v).adding == (4,) and context.assignment(v).removing == (2,)
    assert context.replica_states[PartitionReplica("v", 0, 4)] is R.ONLINE
    state, version = world.state(*v), world.zk_version(*v)
    future = world.controller.controller.alter_partition(
        state.leader, -1, [IsrChange(*v, state.leader_epoch, version, (2, 3, 4))]
    )
    world.run()
    assert future.result(timeout=0)[0].error_code == ErrorCode.none
    data, _ = world.admin.get(znodes.topic_path("v"))
    final = znodes.parse_assignment("v", data)
    assert (final.partitions[0], dict(final.adding)) == ((3, 4), {})
    assert world.state(*v).leader == 3 and world.state(*v).isr == (3, 4)


def test_the_reassign_partitions_znode_is_carried_out_and_removed(world: World) -> None:
    world.admin.create(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment({TP: (2, 3)}))
    world.run()
    assert assignment(world).adding[0] == (3,)
    assert world.admin.exists(znodes.REASSIGN_PARTITIONS) is not None  # until it is done
    grow_isr(world, (1, 2, 3))
    assert assignment(world).partitions[0] == (2, 3)
    assert world.admin.exists(znodes.REASSIGN_PARTITIONS) is None


def test_an_impossible_request_in_the_znode_is_dropped_from_it(world: World) -> None:
    world.create_topic("u", [[1]])
    world.admin.create(znodes.REASSIGN_PARTITIONS,
                       znodes.encode_reassignment({TP: (9,), ("u", 0): (1, 2)}))  # fmt: skip
    world.run()
    data, _ = world.admin.get(znodes.REASSIGN_PARTITIONS)
    assert znodes.parse_reassignment(data) == {("u", 0): (1, 2)}
