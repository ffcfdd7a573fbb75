"""What the controller knows of the cluster (Kafka's `ControllerContext`): live brokers, each
partition's replica assignment, leader and ISR, and the state of every partition and replica.

Loaded from ZooKeeper when a broker becomes the controller, kept current by its events, cleared
when it resigns. Only the controller's state machines and event handlers change it.

Thread-safety (docs/threads.md): not thread-safe; owned by the controller's event thread
(`weir-controller`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from weir.cluster.controller.states import PartitionState, ReplicaState
from weir.cluster.controller.stats import ControllerStats
from weir.cluster.requests import PartitionView
from weir.cluster.znodes import BrokerRegistration, TopicAssignment
from weir.cluster.znodes import PartitionState as LeaderAndIsr

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionReplica:
    """One replica: a partition on a broker (Kafka's `PartitionAndReplica`)."""

    topic: str
    index: int
    broker: int

    @property
    def partition(self) -> TopicPartition:
        return self.topic, self.index


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas in preference order (the first is the preferred leader). While a
    reassignment runs (Kafka's `adding_replicas` / `removing_replicas`), `replicas` holds the
    old and new sets together; `adding` and `removing` say which is which."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def preferred(self) -> int | None:
        return self.replicas[0] if self.replicas else None

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas before the reassignment under way (all of them when there is none)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas the reassignment under way moves to (all of them when there is none)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @classmethod
    def moving(cls, original: tuple[int, ...], target: tuple[int, ...]) -> ReplicaAssignment:
        """A reassignment from `original` to `target` (Kafka's `fromOldAndNewReplicas`): the
        target's replicas first, then the original's that are leaving."""
        replicas = tuple(dict.fromkeys(target + original))
        return cls(replicas, tuple(r for r in target if r not in original),
                   tuple(r for r in original if r not in target))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Leadership:
    """A partition's leader and ISR as its state znode holds them, and that znode's version
    (the partition epoch, which conditional writes check)."""

    state: LeaderAndIsr
    zk_version: int


@dataclass(slots=True)
class ControllerContext:
    """Thread-safety (docs/threads.md): the controller's event thread only."""

    #: this controller's epoch and the version of `/controller_epoch` it wrote
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    #: brokers that asked to shut down: they lead nothing new until they are gone
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    leadership: dict[TopicPartition, Leadership] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionReplica, ReplicaState] = field(default_factory=dict)
    stats: ControllerStats = field(default_factory=ControllerStats)

    def reset(self) -> None:
        self.epoch, self.epoch_zk_version = 0, -1
        self.stats.offline_partitions = self.stats.partitions = 0
        for table in (self.live_brokers, self.topic_ids, self.assignments, self.leadership,
                      self.partition_states, self.replica_states):  # fmt: skip
            table.clear()
        self.shutting_down.clear()

    # ---- topics and assignments ------------------------------------------------------------------

    def add_topic(self, topic: TopicAssignment) -> list[TopicPartition]:
        """Record a topic's assignment; its partitions not known before."""
        known = self.assignments.setdefault(topic.name, {})
        self.topic_ids[topic.name] = topic.topic_id
        new = [(topic.name, i) for i in sorted(topic.partitions) if i not in known]
        for index, replicas in topic.partitions.items():
            known[index] = ReplicaAssignment(tuple(replicas), tuple(topic.adding.get(index, ())),
                                             tuple(topic.removing.get(index, ())))  # fmt: skip
        return new

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        return self.assignments.get(tp[0], {}).get(tp[1])

    def reassigning(self) -> list[TopicPartition]:
        """Partitions with a reassignment under way."""
        return [(t, i) for t, indexes in self.assignments.items()
                for i, a in indexes.items() if a.is_reassigning]  # fmt: skip

    def remove_topic(self, topic: str) -> None:
        for index in self.assignments.pop(topic, {}):
            self.leadership.pop((topic, index), None)
        self.topic_ids.pop(topic, None)

    def partitions(self) -> list[TopicPartition]:
        return [(t, i) for t, indexes in self.assignments.items() for i in indexes]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [(topic, i) for i in self.assignments.get(topic, {})]

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        assignment = self.assignments.get(tp[0], {}).get(tp[1])
        return assignment.replicas if assignment is not None else ()

    def replicas_of(self, tp: TopicPartition) -> list[PartitionReplica]:
        return [PartitionReplica(tp[0], tp[1], broker) for broker in self.replicas(tp)]

    def is_replica(self, broker: int, tp: TopicPartition) -> bool:
        return broker in self.replicas(tp)

    def replicated_by(self, broker: int) -> list[TopicPartition]:
        """The partitions with a leader and ISR that `broker` holds a replica of."""
        return [tp for tp in self.leadership if self.is_replica(broker, tp)]

    def without_leadership(self) -> list[TopicPartition]:
        """Partitions with no state znode yet: new, or not started while no replica was live."""
        return [tp for tp in self.partitions() if tp not in self.leadership]

    # ---- brokers ---------------------------------------------------------------------------------

    def is_live(self, broker: int) -> bool:
        return broker in self.live_brokers

    def eligible_leaders(self) -> set[int]:
        """Live brokers that may take a leadership: not shutting down."""
        return set(self.live_brokers) - self.shutting_down

    # ---- views -----------------------------------------------------------------------------------

    def view(self, tp: TopicPartition, *, is_new: bool = False) -> PartitionView | None:
        leadership = self.leadership.get(tp)
        if leadership is None:
            return None
        return PartitionView(
            topic=tp[0], topic_id=self.topic_ids[tp[0]], index=tp[1], state=leadership.state,
            zk_version=leadership.zk_version, replicas=self.replicas(tp), is_new=is_new,
        )  # fmt: skip
