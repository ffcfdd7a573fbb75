"""Partition reassignment, as Kafka's controller does it in ZooKeeper mode
(`onPartitionReassignment`): a partition moves from its original replicas (ORS) to a target set
(TRS) without a moment when fewer than its in-sync replicas hold what was acknowledged.

Asked for by AlterPartitionReassignments (through the controller) or by the
`/admin/reassign_partitions` znode that Kafka's ZooKeeper-based tools write. Each move:

1. Start: the topic's assignment znode gets RS = TRS + (ORS - TRS) with `adding_replicas`
   (TRS - ORS) and `removing_replicas` (ORS - TRS), so a controller that takes over later
   resumes the move from there; the leader epoch is bumped and LeaderAndIsr goes to every replica
   in RS, so the new replicas (NonExistent -> New -> Online) create their logs and follow.
2. The new replicas catch up and the leader adds them to the ISR (AlterPartition).
3. Complete, once every replica of TRS is in the ISR: a leader from TRS (the current one if it
   stays, else the first in-sync live replica of TRS), the ISR cut to TRS, the leader epoch
   bumped; then the assignment znode says TRS alone, the leaving replicas are told to stop and
   delete their logs (Offline -> ReplicaDeletionStarted -> ... -> NonExistent), and the request
   leaves `/admin/reassign_partitions` (which goes once it is empty).

A new target for a partition already moving replaces the old one (replicas that were being added
and are not in the new target are stopped and deleted); a cancel (no target) moves back to the
original replicas the same way. A reorder of the same replicas changes only the preferred order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from weir.cluster import znodes
from weir.cluster.controller.context import (
    ControllerContext,
    PartitionReplica,
    ReplicaAssignment,
    TopicPartition,
)
from weir.cluster.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from weir.cluster.controller.states import ReplicaState
from weir.cluster.controller.zk import ControllerZkClient
from weir.cluster.placement import POOL_CONFIG, pool_refusal
from weir.cluster.zk_client import BadVersionError, NoNodeError
from weir.cluster.znodes import PartitionState

log = logging.getLogger(__package__)

#: a partition's answer to AlterPartitionReassignments: (error, message)
Outcome = tuple[ErrorCode, str | None]
DONE: Outcome = (ErrorCode.none, None)


class Pools:
    """The pools of topics and brokers as ZooKeeper has them now, read once per request: a
    broker's pool is read from its registration, which it rewrites when its `broker.pool`
    changes at run time (the controller's own list of live brokers learns only of brokers
    coming and going)."""

    def __init__(self, zk: ControllerZkClient) -> None:
        self._zk = zk
        self._topics: dict[str, str] = {}
        self._brokers: dict[int, str] | None = None

    def of_topic(self, topic: str) -> str:
        pool = self._topics.get(topic)
        if pool is None:
            pool = self._topics[topic] = self._zk.topic_configs(topic).get(POOL_CONFIG) or ""
        return pool

    def of_broker(self, broker: int) -> str:
        if self._brokers is None:
            self._brokers = {b: r.pool or "" for b, r in self._zk.live_brokers().items()}
        return self._brokers.get(broker, "")


class Reassignments:
    """Thread-safety (docs/threads.md): the controller's event thread only."""

    def __init__(self, context: ControllerContext, partitions: PartitionStateMachine,
                 replicas: ReplicaStateMachine, zk: ControllerZkClient) -> None:  # fmt: skip
        self._context = context
        self._partitions = partitions
        self._replicas = replicas
        self._zk = zk

    # ---- requests --------------------------------------------------------------------------------

    def alter(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]
              ) -> dict[TopicPartition, Outcome]:  # fmt: skip
        """AlterPartitionReassignments: start, replace or (None) cancel each partition's move.
        A partition's answer is its error; the valid ones are all started."""
        pools = Pools(self._zk)
        outcomes = {tp: self._check(tp, target, pools) for tp, target in targets.items()}
        for tp, target in targets.items():
            if outcomes[tp] is DONE:
                outcomes[tp] = self._start(tp, self._target(tp, target))
        self.maybe_complete(tp for tp, outcome in outcomes.items() if outcome is DONE)
        return outcomes

    def ongoing(self, partitions: Iterable[TopicPartition] | None
                ) -> dict[TopicPartition, ReplicaAssignment]:  # fmt: skip
        """ListPartitionReassignments: the moves under way (of `partitions`, if named)."""
        wanted = self._context.reassigning() if partitions is None else partitions
        return {tp: a for tp in wanted
                if (a := self._context.assignment(tp)) is not None and a.is_reassigning}

    def on_request_znode(self) -> None:
        """`/admin/reassign_partitions` changed: start the moves it lists that are not under
        way yet; those that cannot be made leave it, logged."""
        requested = self._zk.reassignment_request()
        if requested is None:
            return
        kept = {}
        for tp, target in requested.items():
            outcome = self._check(tp, target, Pools(self._zk))
            if outcome is DONE:
                outcome = self._start(tp, target)
            if outcome is DONE:
                kept[tp] = target
            else:
                log.warning("%s: %s-%d not reassigned: %s (%s)", znodes.REASSIGN_PARTITIONS,
                            *tp, outcome[0].name.upper(), outcome[1])  # fmt: skip
        self.maybe_complete(kept)
        self._forget_requested(requested, keep=lambda tp: tp in kept and self._moving(tp))

    def resume(self) -> None:
        """A new controller: finish the moves its predecessor started, start those asked for."""
        self.maybe_complete(self._context.reassigning())
        self.on_request_znode()

    # ---- validation ------------------------------------------------------------------------------

    def _check(
        self, tp: TopicPartition, target: tuple[int, ...] | None, pools: Pools
    ) -> Outcome:
        """DONE if the move may start; else its error."""
        assignment = self._context.assignment(tp)
        if assignment is None:
            return ErrorCode.unknown_topic_or_partition, f"no partition {tp[0]}-{tp[1]}"
        if target is None:
            if not assignment.is_reassigning:
                return (ErrorCode.no_reassignment_in_progress,
                        f"no reassignment of {tp[0]}-{tp[1]} is in progress")  # fmt: skip
            return DONE
        if not target:
            return ErrorCode.invalid_replica_assignment, "the replica list is empty"
        if len(set(target)) != len(target):
            return (ErrorCode.invalid_replica_assignment,
                    f"duplicate replica ids in {list(target)}")  # fmt: skip
        unknown = sorted(set(target) - set(self._context.live_brokers))
        if unknown:
            return (ErrorCode.invalid_replica_assignment,
                    f"brokers {unknown} are not registered in the cluster")  # fmt: skip
        pool = pools.of_topic(tp[0])
        outside = sorted(b for b in target if pools.of_broker(b) != pool)
        if outside:
            return ErrorCode.invalid_replica_assignment, pool_refusal(outside, pool)
        if tp not in self._context.leadership:
            return ErrorCode.leader_not_available, f"{tp[0]}-{tp[1]} has no leader yet"
        return DONE

    def _target(self, tp: TopicPartition, target: tuple[int, ...] | None) -> tuple[int, ...]:
        if target is not None:
            return target
        assignment = self._context.assignment(tp)
        assert assignment is not None
        return assignment.original

    # ---- the move --------------------------------------------------------------------------------

    def _moving(self, tp: TopicPartition) -> bool:
        assignment = self._context.assignment(tp)
        return assignment is not None and assignment.is_reassigning

    def _start(self, tp: TopicPartition, target: tuple[int, ...]) -> Outcome:
        current = self._context.assignment(tp)
        assert current is not None
        if current.is_reassigning and current.target == target:
            return DONE  # under way already
        moving = ReplicaAssignment.moving(current.original, target)
        dropped = [r for r in current.replicas if r not in moving.replicas]
        if not dropped and moving == current:
            return DONE
        state = self._context.leadership[tp].state
        leader = self._leader_among(moving.replicas, state)
        if leader is None:
            return (ErrorCode.leader_not_available,
                    f"no live in-sync replica of {list(moving.replicas)} can lead")  # fmt: skip
        try:
            self._zk.write_assignments(tp[0], {tp[1]: (moving.replicas, moving.adding,
                                                       moving.removing)})  # fmt: skip
        except NoNodeError:
            return ErrorCode.unknown_topic_or_partition, f"topic {tp[0]} is gone"
        except BadVersionError:
            return (ErrorCode.unknown_server_error,
                    f"topic {tp[0]}'s assignment kept changing; try again")  # fmt: skip
        self._context.assignments[tp[0]][tp[1]] = moving
        added = [PartitionReplica(*tp, b) for b in moving.adding
                 if self._replicas.state(PartitionReplica(*tp, b)) is ReplicaState.NON_EXISTENT]
        self._replicas.transition(added, ReplicaState.NEW)
        isr = tuple(r for r in state.isr if r in moving.replicas) or (leader,)
        self._partitions.write_leadership({tp: self._bumped(state, leader, isr)})
        self._replicas.start_new(added)
        self._drop(tp, dropped)
        log.info("%s-%d: reassigning %s -> %s (adding %s, removing %s)", *tp,
                 list(current.target), list(target), list(moving.adding),
                 list(moving.removing))  # fmt: skip
        return DONE

    def maybe_complete(self, partitions: Iterable[TopicPartition]) -> None:
        """Complete the moves whose target replicas are all in the ISR now."""
        for tp in list(partitions):
            assignment = self._context.assignment(tp)
            leadership = self._context.leadership.get(tp)
            if assignment is None or leadership is None or not assignment.is_reassigning:
                continue
            state = leadership.state
            target = assignment.target
            if not set(target) <= set(state.isr):
                continue
            leader = self._leader_among(target, state)
            if leader is None:
                continue  # until one of the target may lead
            self._complete(tp, assignment, state, leader)

    def _complete(self, tp: TopicPartition, assignment: ReplicaAssignment,
                  state: PartitionState, leader: int) -> None:  # fmt: skip
        target = assignment.target
        self._context.assignments[tp[0]][tp[1]] = ReplicaAssignment(target)
        isr = tuple(r for r in target if r in state.isr)
        written = self._partitions.write_leadership({tp: self._bumped(state, leader, isr)})
        if tp not in written:
            self._context.assignments[tp[0]][tp[1]] = assignment
            return
        try:
            self._zk.write_assignments(tp[0], {tp[1]: (target, (), ())})
        except NoNodeError:
            return  # the topic is being deleted
        self._drop(tp, list(assignment.removing))
        requested = self._zk.reassignment_request()
        if requested is not None and tp in requested:
            self._forget_requested(requested, keep=lambda other: other != tp)
        log.info("%s-%d: reassignment to %s complete (leader %d)", *tp, list(target), leader)

    def _leader_among(self, replicas: tuple[int, ...], state: PartitionState) -> int | None:
        """The current leader if it is one of `replicas` and may lead, else the first of them
        that is in sync and may lead; None if none may."""
        eligible = self._context.eligible_leaders()
        if state.leader in replicas and state.leader in eligible:
            return state.leader
        return next((r for r in replicas if r in state.isr and r in eligible), None)

    def _bumped(self, state: PartitionState, leader: int, isr: tuple[int, ...]) -> PartitionState:
        return PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                              controller_epoch=self._context.epoch)  # fmt: skip

    def _drop(self, tp: TopicPartition, brokers: list[int]) -> None:
        """Replicas leaving the partition: stopped, their logs deleted."""
        self._replicas.delete_replicas([PartitionReplica(*tp, b) for b in brokers])

    def _forget_requested(self, requested: Mapping[TopicPartition, tuple[int, ...]],
                          keep: Callable[[TopicPartition], bool]) -> None:  # fmt: skip
        """Rewrite `/admin/reassign_partitions` with the requests `keep` keeps."""
        remaining = {tp: target for tp, target in requested.items() if keep(tp)}
        if remaining != requested:
            self._zk.write_reassignment_request(remaining)
