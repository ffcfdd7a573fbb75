"""The partition and replica state machines' transition tables (Kafka's valid previous states)."""

from __future__ import annotations

import itertools

import pytest
from controller_world import World

from weir.cluster.controller.context import PartitionReplica
from weir.cluster.controller.states import (
    PARTITION_TRANSITIONS,
    REPLICA_TRANSITIONS,
    IllegalStateTransitionError,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
)

P, R = PartitionState, ReplicaState

#: Kafka's `validPreviousStates`, written as "target: its previous states"
KAFKA_PARTITION_PREVIOUS = {
    P.NEW: {P.NON_EXISTENT},
    P.ONLINE: {P.NEW, P.ONLINE, P.OFFLINE},
    P.OFFLINE: {P.NEW, P.ONLINE, P.OFFLINE},
    P.NON_EXISTENT: {P.OFFLINE},
}
KAFKA_REPLICA_PREVIOUS = {
    R.NEW: {R.NON_EXISTENT},
    R.ONLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
    R.OFFLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
    R.DELETION_STARTED: {R.OFFLINE},
    R.DELETION_SUCCESSFUL: {R.DELETION_STARTED},
    R.DELETION_INELIGIBLE: {R.OFFLINE, R.DELETION_STARTED},
    R.NON_EXISTENT: {R.DELETION_SUCCESSFUL},
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(P, P)))
def test_partition_transitions_are_kafkas(current: P, target: P) -> None:
    if current in KAFKA_PARTITION_PREVIOUS[target]:
        check_partition_transition("t-0", current, target)
        assert target in PARTITION_TRANSITIONS[current]
    else:
        with pytest.raises(IllegalStateTransitionError, match="t-0"):
            check_partition_transition("t-0", current, target)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(R, R)))
def test_replica_transitions_are_kafkas(current: R, target: R) -> None:
    if current in KAFKA_REPLICA_PREVIOUS[target]:
        check_replica_transition("t-0 on 1", current, target)
        assert target in REPLICA_TRANSITIONS[current]
    else:
        with pytest.raises(IllegalStateTransitionError):
            check_replica_transition("t-0 on 1", current, target)


def test_a_reassignment_moves_replicas_through_the_table() -> None:
    """Adding a replica (NonExistent -> New -> Online) and dropping one (Online -> Offline ->
    deletion -> NonExistent) are paths of the replica table."""
    adding = [R.NON_EXISTENT, R.NEW, R.ONLINE]
    dropping = [R.ONLINE, R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT]
    for path in (adding, dropping):
        for current, target in itertools.pairwise(path):
            check_replica_transition("r", current, target)


def test_an_illegal_move_of_a_live_partition_raises_and_changes_nothing() -> None:
    world = World()
    world.add_broker(1)
    world.create_topic("t", [[1], [1]])
    controller = world.controller.controller
    machine = controller._partitions
    with pytest.raises(IllegalStateTransitionError):
        machine.transition([("t", 0), ("t", 1)], P.NEW)
    with pytest.raises(IllegalStateTransitionError):
        machine.transition([("t", 0)], P.NON_EXISTENT)  # Online must go Offline first
    assert controller.context.partition_states == {("t", 0): P.ONLINE, ("t", 1): P.ONLINE}
    replica = PartitionReplica("t", 0, 1)
    with pytest.raises(IllegalStateTransitionError):
        controller._replicas.transition([replica], R.DELETION_STARTED)  # not Offline yet
    assert controller.context.replica_states[replica] is R.ONLINE
