"""The controller's decisions about partition leaders and ISRs, as pure functions.

They follow Kafka's ZooKeeper-era controller:
- a new partition's leader is its first live replica, its ISR every live replica, epoch 0;
- a partition whose leader is gone gets the first replica (in assignment order) that is live and
  in the ISR; with none, only `unclean.leader.election.enable` lets any live replica lead (its
  log may lack acknowledged records). Otherwise it has no leader (-1) and keeps the last ISR, so
  that the replica with the data can take over when it returns;
- a follower that goes away leaves the ISR, unless it is the last member;
- every change of leader or ISR made by the controller bumps the leader epoch;
- leader balance: a broker that does not lead more than `leader.imbalance.per.broker.percentage`
  of the partitions it is the preferred replica of gets those back where it is in the ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import TypeVar

from weir.cluster.znodes import NO_LEADER, PartitionState

K = TypeVar("K", bound=Hashable)


def new_partition_state(
    replicas: Sequence[int], live: Collection[int], controller_epoch: int
) -> PartitionState | None:
    """The first state of a new partition; None while none of its replicas is live."""
    alive = [r for r in replicas if r in live]
    if not alive:
        return None
    return PartitionState(
        leader=alive[0], leader_epoch=0, isr=tuple(alive), controller_epoch=controller_epoch
    )


def elect_offline_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean: bool
) -> tuple[int, bool] | None:
    """(leader, clean) for a partition without a live leader, or None if none may lead."""
    for replica in replicas:
        if replica in live and replica in isr:
            return replica, True
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica, False
    return None


def after_live_change(
    state: PartitionState,
    replicas: Sequence[int],
    live: Collection[int],
    controller_epoch: int,
    *,
    unclean: bool,
) -> PartitionState | None:
    """The partition's state once the live broker set is `live`; None if it stays as it is."""
    isr = tuple(r for r in state.isr if r in live)
    if state.leader in live:
        if isr == state.isr:
            return None
        return PartitionState(
            leader=state.leader,
            leader_epoch=state.leader_epoch + 1,
            isr=isr,
            controller_epoch=controller_epoch,
        )
    choice = elect_offline_leader(replicas, state.isr, live, unclean=unclean)
    if choice is None:
        if state.leader == NO_LEADER:
            return None
        # No replica may lead: keep the last ISR member so a clean election can follow.
        kept = isr or state.isr[-1:] or (state.leader,)
        return PartitionState(
            leader=NO_LEADER,
            leader_epoch=state.leader_epoch + 1,
            isr=kept,
            controller_epoch=controller_epoch,
        )
    leader, clean = choice
    new_isr = isr if clean else (leader,)
    return PartitionState(
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        isr=new_isr,
        controller_epoch=controller_epoch,
    )


def preferred_leader(
    state: PartitionState, replicas: Sequence[int], live: Collection[int], controller_epoch: int
) -> PartitionState | None:
    """Leadership moved to the preferred (first) replica, if it is live, in the ISR and not
    already the leader; None otherwise."""
    preferred = replicas[0] if replicas else NO_LEADER
    if preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(
        leader=preferred,
        leader_epoch=state.leader_epoch + 1,
        isr=state.isr,
        controller_epoch=controller_epoch,
    )


def imbalanced(
    partitions: Mapping[K, tuple[Sequence[int], PartitionState]],
    live: Collection[int],
    per_broker_percentage: int,
) -> list[K]:
    """The partitions (keys of `partitions`: replicas and state) to give back to their
    preferred replica: for every live broker whose share of preferred partitions led elsewhere
    is above `per_broker_percentage`, those where it is in the ISR."""
    preferred_for: dict[int, list[K]] = {}
    for key, (replicas, _) in partitions.items():
        if replicas:
            preferred_for.setdefault(replicas[0], []).append(key)
    moves: list[K] = []
    for broker, keys in preferred_for.items():
        if broker not in live:
            continue
        not_led = [k for k in keys if partitions[k][1].leader != broker]
        if len(not_led) * 100 > per_broker_percentage * len(keys):
            moves.extend(k for k in not_led if broker in partitions[k][1].isr)
    return moves
