"""The controller's partition and replica states and the transitions allowed between them
(Kafka's `PartitionStateMachine` and `ReplicaStateMachine` states).

Partitions:

    NonExistent --topic created--> New --leader elected--> Online
    Online <--leader lost / leader elected--> Offline --topic deleted--> NonExistent

Replicas (one per partition and assigned broker):

    NonExistent --assigned--> New --broker live--> Online <--broker gone / back--> Offline
    Offline --deletion asked--> ReplicaDeletionStarted --deleted--> ReplicaDeletionSuccessful
          --> NonExistent
    Offline or ReplicaDeletionStarted --broker cannot delete now--> ReplicaDeletionIneligible
          --broker back--> Online or Offline

The replica states are the ones Kafka's reassignment moves through: a replica being added goes
NonExistent -> New -> Online and catches up; one being dropped goes Online -> Offline ->
ReplicaDeletionStarted -> ReplicaDeletionSuccessful -> NonExistent.

`PARTITION_TRANSITIONS[state]` and `REPLICA_TRANSITIONS[state]` are the states each may move
to; `check_partition_transition` and `check_replica_transition` enforce them.
"""

from __future__ import annotations

import enum
from types import MappingProxyType


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


_P = PartitionState
_R = ReplicaState

PARTITION_TRANSITIONS = MappingProxyType({
    _P.NON_EXISTENT: frozenset({_P.NEW}),
    _P.NEW: frozenset({_P.ONLINE, _P.OFFLINE}),
    _P.ONLINE: frozenset({_P.ONLINE, _P.OFFLINE}),
    _P.OFFLINE: frozenset({_P.ONLINE, _P.OFFLINE, _P.NON_EXISTENT}),
})  # fmt: skip

REPLICA_TRANSITIONS = MappingProxyType({
    _R.NON_EXISTENT: frozenset({_R.NEW}),
    _R.NEW: frozenset({_R.ONLINE, _R.OFFLINE}),
    _R.ONLINE: frozenset({_R.ONLINE, _R.OFFLINE}),
    _R.OFFLINE: frozenset({_R.ONLINE, _R.OFFLINE, _R.DELETION_STARTED, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.DELETION_SUCCESSFUL, _R.DELETION_INELIGIBLE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.NON_EXISTENT}),
    _R.DELETION_INELIGIBLE: frozenset({_R.ONLINE, _R.OFFLINE}),
})  # fmt: skip


class IllegalStateTransitionError(Exception):
    """A partition or replica was asked to move to a state its current one does not lead to."""


def check_partition_transition(
    what: object, current: PartitionState, target: PartitionState
) -> None:
    if target not in PARTITION_TRANSITIONS[current]:
        raise IllegalStateTransitionError(
            f"partition {what} cannot go from {current.value} to {target.value}"
        )


def check_replica_transition(what: object, current: ReplicaState, target: ReplicaState) -> None:
    if target not in REPLICA_TRANSITIONS[current]:
        raise IllegalStateTransitionError(
            f"replica {what} cannot go from {current.value} to {target.value}"
        )
