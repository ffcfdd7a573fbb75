"""The controller's events (Kafka's `ControllerEvent`s), one frozen dataclass each.

ZooKeeper watches, the session listener, the balance timer and brokers' requests only create
events and queue them; the controller's thread handles them one at a time. An event that carries
a broker's request has a `reply` future: a controller answers it, and a broker that is not (or
no longer) the controller answers it None (`preempt`), which the request handler turns into
NOT_CONTROLLER, so the requester asks the controller it learns of next.
"""

from __future__ import annotations

import concurrent.futures
import enum
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from weir.cluster.controller.context import TopicPartition
from weir.cluster.znodes import PartitionState


class ElectionType(enum.IntEnum):
    """ElectLeaders' election types."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class IsrChange:
    """A leader's proposed ISR for one partition (AlterPartition)."""

    topic: str
    index: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IsrResult:
    topic: str
    index: int
    error_code: ErrorCode
    state: PartitionState | None = None
    partition_epoch: int = -1


class ControllerEvent:
    """Base of every event. `preempt` answers the event's requester, if it has one, as a
    broker that is not the controller does."""

    __slots__ = ()

    def preempt(self) -> None:
        """Events without a requester need no answer."""


@dataclass(frozen=True, slots=True, eq=False)
class _Request(ControllerEvent):
    reply: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future,
                                                  kw_only=True)  # fmt: skip

    def preempt(self) -> None:
        if not self.reply.done():
            self.reply.set_result(None)


# ---- controllership ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Elect(ControllerEvent):
    """Try to become the controller (at start, on a new session, when `/controller` went)."""


@dataclass(frozen=True, slots=True)
class ControllerChange(ControllerEvent):
    """`/controller` changed: `controller_id` holds it now (None: nobody, so elect)."""

    controller_id: int | None


@dataclass(frozen=True, slots=True)
class Expire(ControllerEvent):
    """The ZooKeeper session was lost: stop being the controller at once."""


@dataclass(frozen=True, slots=True)
class Shutdown(ControllerEvent):
    """The broker is stopping: resign and end the event thread."""


# ---- from watches (each carries the controllership it was registered in) -------------------------


@dataclass(frozen=True, slots=True)
class WatchedEvent(ControllerEvent):
    """An event from a watch or timer of one controllership (`generation`); a later one
    ignores it."""

    generation: int


@dataclass(frozen=True, slots=True)
class BrokerChange(WatchedEvent):
    """`/brokers/ids` changed."""


@dataclass(frozen=True, slots=True)
class TopicChange(WatchedEvent):
    """`/brokers/topics` changed: topics were created (or removed)."""


@dataclass(frozen=True, slots=True)
class PartitionModifications(WatchedEvent):
    """A topic's assignment znode changed: partitions were added."""

    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeletion(WatchedEvent):
    """`/admin/delete_topics` changed."""


@dataclass(frozen=True, slots=True)
class PreferredReplicaElection(WatchedEvent):
    """`/admin/preferred_replica_election` changed."""


@dataclass(frozen=True, slots=True)
class PartitionReassignment(WatchedEvent):
    """`/admin/reassign_partitions` changed."""


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection(WatchedEvent):
    """The leader balance's timer: `leader.imbalance.check.interval.seconds` went by."""


# ---- requests from brokers -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class ElectLeaders(_Request):
    """ElectLeaders. Reply: an error code per partition, or None (NOT_CONTROLLER)."""

    election_type: ElectionType
    partitions: tuple[TopicPartition, ...] | None


@dataclass(frozen=True, slots=True, eq=False)
class AlterPartitionReceived(_Request):
    """AlterPartition. Reply: an `IsrResult` per change, or None (NOT_CONTROLLER)."""

    broker_id: int
    broker_epoch: int
    changes: tuple[IsrChange, ...]


@dataclass(frozen=True, slots=True, eq=False)
class ControlledShutdown(_Request):
    """ControlledShutdown. Reply: (error code, partitions still led there), or None."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, eq=False)
class AlterPartitionReassignments(_Request):
    """AlterPartitionReassignments: a target replica list per partition (None cancels). Reply:
    (error code, message) per partition, or None (NOT_CONTROLLER)."""

    targets: tuple[tuple[TopicPartition, tuple[int, ...] | None], ...]


@dataclass(frozen=True, slots=True, eq=False)
class ListPartitionReassignments(_Request):
    """ListPartitionReassignments. Reply: (replicas, adding, removing) per partition moving,
    or None (NOT_CONTROLLER)."""

    partitions: tuple[TopicPartition, ...] | None
