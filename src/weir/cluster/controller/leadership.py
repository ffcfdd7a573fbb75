"""The controller's changes of leadership asked for by brokers, admins and its own timer:
- leader elections (ElectLeaders through any broker, or `/admin/preferred_replica_election`):
  preferred ones move a partition's leadership back to its first replica when that is live and
  in the ISR; unclean ones give a leaderless partition any live replica;
- the leader balance (`auto.leader.rebalance.enable`): every
  `leader.imbalance.check.interval.seconds`, a broker that leads fewer than
  (100 - `leader.imbalance.per.broker.percentage`)% of the partitions it is preferred for gets
  them back, as Kafka's controller does;
- AlterPartition: a leader's ISR change, accepted only from the current leader at the current
  leader epoch and partition epoch (the state znode's version);
- controlled shutdown: a stopping broker's leaderships move to other in-sync replicas and it
  leaves the ISRs, so clients see only a retriable NOT_LEADER.
Every change goes through `PartitionStateMachine.write_leadership`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from weir.cluster import elections, znodes
from weir.cluster.controller.context import ControllerContext, TopicPartition
from weir.cluster.controller.events import ElectionType, IsrChange, IsrResult
from weir.cluster.controller.state_machines import PartitionStateMachine
from weir.cluster.controller.zk import ControllerZkClient
from weir.cluster.znodes import NO_LEADER, PartitionState

log = logging.getLogger(__package__)


@dataclass(frozen=True, slots=True)
class LeaderBalance:
    """`auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds` and
    `leader.imbalance.per.broker.percentage`."""

    enabled: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


class LeadershipChanges:
    """Thread-safety (docs/threads.md): the controller's event thread only."""

    def __init__(self, context: ControllerContext, partitions: PartitionStateMachine,
                 zk: ControllerZkClient, balance: LeaderBalance,
                 schedule_balance_check: Callable[[], None]) -> None:  # fmt: skip
        self._context = context
        self._partitions = partitions
        self._zk = zk
        self._balance = balance
        self._schedule_balance_check = schedule_balance_check

    # ---- elections -------------------------------------------------------------------------------

    def elect_leaders(
        self, election_type: ElectionType, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, int]:
        wanted = sorted(self._context.leadership) if partitions is None else list(partitions)
        return dict(self.run_election(election_type, wanted))

    def on_preferred_replica_election(self) -> None:
        """`/admin/preferred_replica_election` (kafka-preferred-replica-election.sh's znode):
        run the election for the listed partitions, then remove the request."""
        wanted = self._zk.preferred_election_request()
        if wanted is None:
            return
        known = [tp for tp in wanted if tp in self._context.leadership]
        self.run_election(ElectionType.PREFERRED, known)
        self._zk.delete(znodes.PREFERRED_REPLICA_ELECTION)

    def run_election(self, election_type: ElectionType, wanted: list[TopicPartition]
                     ) -> dict[TopicPartition, ErrorCode]:  # fmt: skip
        """Run one kind of election over `wanted`; write and send the leaders that change. An
        error code per partition, as ElectLeaders answers."""
        errors: dict[TopicPartition, ErrorCode] = {}
        states = {}
        for tp in wanted:
            outcome = self._elect(election_type, tp)
            if isinstance(outcome, PartitionState):
                states[tp] = outcome
            else:
                errors[tp] = outcome
        moved = self._partitions.write_leadership(states)
        for tp in states:
            errors[tp] = ErrorCode.none if tp in moved else ErrorCode.eligible_leaders_not_available
        if moved:
            log.info("%s leaders elected for %d partitions", election_type.name.lower(),
                     len(moved))  # fmt: skip
        return errors

    def _elect(self, election_type: ElectionType, tp: TopicPartition
               ) -> PartitionState | ErrorCode:  # fmt: skip
        leadership = self._context.leadership.get(tp)
        if leadership is None:
            return ErrorCode.unknown_topic_or_partition
        replicas = self._context.replicas(tp)
        current = leadership.state
        eligible = self._context.eligible_leaders()
        if election_type is ElectionType.PREFERRED:
            if replicas and current.leader == replicas[0]:
                return ErrorCode.election_not_needed
            state = elections.preferred_leader(current, replicas, eligible, self._context.epoch)
            missing = ErrorCode.preferred_leader_not_available
        else:
            if self._context.is_live(current.leader):
                return ErrorCode.election_not_needed
            state = elections.after_live_change(current, replicas, eligible, self._context.epoch,
                                                unclean=True)  # fmt: skip
            missing = ErrorCode.eligible_leaders_not_available
        if state is None or state.leader == NO_LEADER:
            return missing
        return state

    # ---- leader balance --------------------------------------------------------------------------

    def on_balance_check(self) -> None:
        self._schedule_balance_check()
        imbalanced = self.imbalanced_partitions()
        if imbalanced:
            log.info("leader imbalance: moving %d partitions to their preferred leader",
                     len(imbalanced))  # fmt: skip
            self.run_election(ElectionType.PREFERRED, imbalanced)

    def imbalanced_partitions(self) -> list[TopicPartition]:
        """Partitions to move back to their preferred leader now (`elections.imbalanced`)."""
        context = self._context
        return elections.imbalanced(
            {tp: (context.replicas(tp), led.state) for tp, led in context.leadership.items()},
            context.eligible_leaders(),
            self._balance.per_broker_percentage,
        )

    # ---- AlterPartition --------------------------------------------------------------------------

    def alter_partition(self, broker_id: int, broker_epoch: int,
                        changes: Sequence[IsrChange]) -> list[IsrResult]:  # fmt: skip
        registration = self._context.live_brokers.get(broker_id)
        if registration is None or broker_epoch not in (-1, registration.epoch):
            return [IsrResult(c.topic, c.index, ErrorCode.stale_broker_epoch) for c in changes]
        results: dict[TopicPartition, IsrResult] = {}
        states = {}
        for change in changes:
            outcome = self._check_isr_change(broker_id, change)
            if isinstance(outcome, PartitionState):
                states[(change.topic, change.index)] = outcome
            else:
                results[(change.topic, change.index)] = outcome
        written = self._partitions.write_leadership(states, tell_replicas=False)
        for tp in states:
            results[tp] = self._isr_result(tp, tp in written)
        return [results[(c.topic, c.index)] for c in changes]

    def _check_isr_change(self, broker_id: int, change: IsrChange) -> PartitionState | IsrResult:
        """The partition's new state, or the result that refuses the change."""
        tp = (change.topic, change.index)
        leadership = self._context.leadership.get(tp)
        if leadership is None:
            return IsrResult(*tp, ErrorCode.unknown_topic_or_partition)
        state = leadership.state
        if state.leader != broker_id or change.leader_epoch != state.leader_epoch:
            return IsrResult(*tp, ErrorCode.fenced_leader_epoch)
        if change.partition_epoch != leadership.zk_version:
            return IsrResult(*tp, ErrorCode.invalid_update_version)
        replicas = self._context.replicas(tp)
        isr = tuple(r for r in replicas if r in change.isr)
        if set(change.isr) - set(replicas) or not all(self._context.is_live(r) for r in isr):
            return IsrResult(*tp, ErrorCode.ineligible_replica)
        return PartitionState(leader=state.leader, leader_epoch=state.leader_epoch, isr=isr,
                              controller_epoch=self._context.epoch)  # fmt: skip

    def _isr_result(self, tp: TopicPartition, written: bool) -> IsrResult:
        leadership = self._context.leadership.get(tp)
        if not written or leadership is None:
            return IsrResult(*tp, ErrorCode.invalid_update_version)
        log.info("%s-%d: ISR now %s", *tp, list(leadership.state.isr))
        return IsrResult(*tp, ErrorCode.none, leadership.state, leadership.zk_version)

    # ---- controlled shutdown ---------------------------------------------------------------------

    def controlled_shutdown(self, broker_id: int, broker_epoch: int
                            ) -> tuple[int, list[TopicPartition]]:  # fmt: skip
        context = self._context
        registration = context.live_brokers.get(broker_id)
        if registration is None:
            return ErrorCode.broker_not_available, []
        if broker_epoch not in (-1, registration.epoch):
            return ErrorCode.stale_broker_epoch, []
        context.shutting_down.add(broker_id)
        states = {}
        for tp in context.leadership:
            if context.is_replica(broker_id, tp):
                state = self._without(broker_id, tp)
                if state is not None:
                    states[tp] = state
        written = self._partitions.write_leadership(states, except_broker=broker_id)
        remaining = sorted(tp for tp, led in context.leadership.items()
                           if led.state.leader == broker_id)  # fmt: skip
        log.info("broker %d is shutting down: %d partitions changed, %d still led there",
                 broker_id, len(written), len(remaining))  # fmt: skip
        return ErrorCode.none, remaining

    def _without(self, broker_id: int, tp: TopicPartition) -> PartitionState | None:
        """The partition's state with `broker_id` neither leading nor in the ISR; None where
        no other replica may lead (it leads until it is gone) or nothing changes."""
        state = self._context.leadership[tp].state
        isr = tuple(r for r in state.isr if r != broker_id)
        leader = state.leader
        if leader == broker_id:
            eligible = self._context.eligible_leaders()
            choice = next((r for r in self._context.replicas(tp) if r in isr and r in eligible),
                          None)  # fmt: skip
            if choice is None:
                return None
            leader = choice
        elif broker_id not in state.isr or not isr:
            return None
        return PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                              controller_epoch=self._context.epoch)  # fmt: skip
