"""The partition and replica state machines (Kafka's `PartitionStateMachine` and
`ReplicaStateMachine`): every change of a partition's or replica's state goes through them, and
a move the tables of `weir.cluster.controller.states` do not allow raises.

`PartitionStateMachine.write_leadership` is the one way a leader or ISR changes: the new states
are written to ZooKeeper (fenced, conditionally on each znode's version), the context follows,
the partitions become Online (a leader) or Offline (none), and LeaderAndIsr for their replicas
and UpdateMetadata for every live broker join the event's request batch. Who leads is decided
before, by `weir.cluster.elections`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from weir.cluster.controller.batch import ControllerBrokerRequestBatch
from weir.cluster.controller.context import (
    ControllerContext,
    Leadership,
    PartitionReplica,
    TopicPartition,
)
from weir.cluster.controller.states import (
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
)
from weir.cluster.controller.zk import ControllerZkClient
from weir.cluster.zk_client import ZooKeeperError
from weir.cluster.znodes import NO_LEADER
from weir.cluster.znodes import PartitionState as LeaderAndIsr

log = logging.getLogger(__package__)


def _log_moves(kind: str, moves: Counter[tuple[str, str]]) -> None:
    for (current, target), count in sorted(moves.items()):
        level = logging.DEBUG if current == target else logging.INFO
        log.log(level, "%d %s %s -> %s", count, kind, current, target)


class PartitionStateMachine:
    """Thread-safety (docs/threads.md): the controller's event thread only."""

    def __init__(self, context: ControllerContext, zk: ControllerZkClient,
                 batch: ControllerBrokerRequestBatch) -> None:  # fmt: skip
        self._context = context
        self._zk = zk
        self._batch = batch

    def state(self, tp: TopicPartition) -> PartitionState:
        return self._context.partition_states.get(tp, PartitionState.NON_EXISTENT)

    def initialize(self, partitions: Iterable[TopicPartition]) -> None:
        """States read from ZooKeeper by a new controller (Kafka's initializePartitionState):
        New without a leader and ISR yet, Online with a live leader, else Offline."""
        for tp in partitions:
            leadership = self._context.leadership.get(tp)
            if leadership is None:
                state = PartitionState.NEW
            elif self._context.is_live(leadership.state.leader):
                state = PartitionState.ONLINE
            else:
                state = PartitionState.OFFLINE
            self._context.partition_states[tp] = state

    def transition(self, partitions: Iterable[TopicPartition], target: PartitionState) -> None:
        """Move `partitions` to `target`; IllegalStateTransitionError (and no change at all) if
        one may not."""
        wanted = [(tp, self.state(tp)) for tp in partitions]
        for tp, current in wanted:
            check_partition_transition(f"{tp[0]}-{tp[1]}", current, target)
        for tp, _ in wanted:
            if target is PartitionState.NON_EXISTENT:
                self._context.partition_states.pop(tp, None)
            else:
                self._context.partition_states[tp] = target
        _log_moves("partitions", Counter((c.value, target.value) for _, c in wanted))
        if wanted:
            self._count_states()

    def _count_states(self) -> None:
        states = self._context.partition_states
        stats = self._context.stats
        stats.partitions = len(states)
        stats.offline_partitions = sum(s is PartitionState.OFFLINE for s in states.values())

    def write_leadership(
        self, states: Mapping[TopicPartition, LeaderAndIsr], *, create: bool = False,
        is_new: bool = False, tell_replicas: bool = True, except_broker: int | None = None,
    ) -> set[TopicPartition]:  # fmt: skip
        """Write new leaders and ISRs (creating the state znodes if `create`), then move each
        written partition Online or Offline and add the requests that tell brokers: LeaderAndIsr
        to its replicas (if `tell_replicas`; never to `except_broker`), UpdateMetadata to every
        live broker. A write refused by ZooKeeper reloads that partition's state instead. The
        partitions written."""
        versions = None if create else {tp: self._context.leadership[tp].zk_version
                                        for tp in states}  # fmt: skip
        outcome = self._zk.write_states(states, versions)
        written = set()
        for tp, version in outcome.items():
            if isinstance(version, ZooKeeperError):
                log.warning("%s-%d: state not written (%r); reloading it", *tp, version)
                self._reload(tp)
                continue
            before = self._context.leadership.get(tp)
            self._context.leadership[tp] = Leadership(states[tp], version)
            self._count_election(before.state if before is not None else None, states[tp])
            written.add(tp)
        online = {tp for tp in written if states[tp].leader != NO_LEADER}
        self.transition(online, PartitionState.ONLINE)
        self.transition(written - online, PartitionState.OFFLINE)
        for tp in sorted(written):
            self._tell(tp, is_new, tell_replicas, except_broker)
        return written

    def _count_election(self, before: LeaderAndIsr | None, after: LeaderAndIsr) -> None:
        """An existing partition given a leader it did not have (a new partition's first
        leader is not counted); unclean when the new leader was not in the ISR before."""
        if before is None or after.leader in (NO_LEADER, before.leader):
            return
        stats = self._context.stats
        stats.leader_elections += 1
        if after.leader not in before.isr:
            stats.unclean_leader_elections += 1

    def _tell(self, tp: TopicPartition, is_new: bool, tell_replicas: bool,
              except_broker: int | None) -> None:  # fmt: skip
        if tell_replicas:
            replicas = [r for r in self._context.replicas(tp) if r != except_broker]
            self._batch.add_leader_and_isr(replicas, tp, is_new=is_new)
        self._batch.add_update_metadata(self._context.live_brokers, [tp])

    def _reload(self, tp: TopicPartition) -> None:
        loaded = self._zk.partition_state(tp)
        if loaded is None:
            self._context.leadership.pop(tp, None)
        else:
            self._context.leadership[tp] = Leadership(*loaded)


class ReplicaStateMachine:
    """Thread-safety (docs/threads.md): the controller's event thread only."""

    def __init__(self, context: ControllerContext, batch: ControllerBrokerRequestBatch) -> None:
        self._context = context
        self._batch = batch

    def state(self, replica: PartitionReplica) -> ReplicaState:
        return self._context.replica_states.get(replica, ReplicaState.NON_EXISTENT)

    def initialize(self, partitions: Iterable[TopicPartition]) -> None:
        """States for a new controller (Kafka's initializeReplicaState): New while the
        partition has no leader and ISR yet, else Online on a live broker, Offline on another."""
        for tp in partitions:
            for replica in self._context.replicas_of(tp):
                if tp not in self._context.leadership:
                    state = ReplicaState.NEW
                elif self._context.is_live(replica.broker):
                    state = ReplicaState.ONLINE
                else:
                    state = ReplicaState.OFFLINE
                self._context.replica_states[replica] = state

    def transition(self, replicas: Iterable[PartitionReplica], target: ReplicaState) -> None:
        """Move `replicas` to `target`; IllegalStateTransitionError (and no change at all) if
        one may not. Moving to ReplicaDeletionStarted asks a live broker to stop and delete the
        replica (StopReplica with delete)."""
        wanted = [(r, self.state(r)) for r in replicas]
        for replica, current in wanted:
            check_replica_transition(replica, current, target)
        for replica, _ in wanted:
            if target is ReplicaState.NON_EXISTENT:
                self._context.replica_states.pop(replica, None)
            else:
                self._context.replica_states[replica] = target
            if target is ReplicaState.DELETION_STARTED and self._context.is_live(replica.broker):
                self._batch.add_stop_replica(replica.broker, replica.partition, delete=True)
        _log_moves("replicas", Counter((c.value, target.value) for _, c in wanted))

    def on_partitions(
        self, partitions: Iterable[TopicPartition], brokers: Collection[int] | None = None
    ) -> list[PartitionReplica]:
        """The replicas of `partitions` (only those on `brokers`, if given)."""
        return [r for tp in partitions for r in self._context.replicas_of(tp)
                if brokers is None or r.broker in brokers]  # fmt: skip

    def start(self, partitions: Iterable[TopicPartition]) -> None:
        """Replicas of partitions that now have a leader: Online where the broker is live,
        Offline elsewhere."""
        replicas = self.on_partitions(partitions)
        live = [r for r in replicas if self._context.is_live(r.broker)]
        self.transition(live, ReplicaState.ONLINE)
        self.transition([r for r in replicas if r not in live], ReplicaState.OFFLINE)

    def start_new(self, replicas: Iterable[PartitionReplica]) -> None:
        """Replicas just added to a partition (New): Online where the broker is live, Offline
        elsewhere."""
        added = list(replicas)
        live = [r for r in added if self._context.is_live(r.broker)]
        self.transition(live, ReplicaState.ONLINE)
        self.transition([r for r in added if r not in live], ReplicaState.OFFLINE)

    def delete(self, partitions: Iterable[TopicPartition]) -> None:
        """Replicas of deleted partitions (`delete_replicas`)."""
        self.delete_replicas(self.on_partitions(partitions))

    def delete_replicas(self, replicas: Iterable[PartitionReplica]) -> None:
        """Replicas leaving (a deleted topic, a reassignment), through Kafka's deletion states.
        The brokers' answers are not awaited: a replica is taken as deleted once StopReplica is
        queued (a broker that is down keeps its files)."""
        leaving = list(replicas)
        for target in (ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED,
                       ReplicaState.DELETION_SUCCESSFUL, ReplicaState.NON_EXISTENT):  # fmt: skip
            self.transition(leaving, target)
