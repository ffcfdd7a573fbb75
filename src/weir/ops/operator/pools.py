"""Handing a broker from one tenant pool to another (`weir operator pool move-broker`).

A broker takes only replicas of its own pool's topics, so before it changes pool it is emptied:
each of its replicas is re-created on another live broker of the same pool (the planner's
choice, as for a dead broker: as many racks as before, the most even load). Only when every
move is done is its `broker.pool` changed (a dynamic broker config; the broker rewrites its
registration, where placement and the controller read pools). It then holds nothing; balancing
gives it its share of the new pool's topics.

Refused with nothing changed: a broker that is not live, already in the pool, or with a
partition moving; a partition no other broker of the pool may take (too few brokers left for
its replicas).
"""

from __future__ import annotations

from weir.ops.operator.load import PartitionLoad, TopicPartition
from weir.ops.operator.planner import Plan, PlanError, Planner
from weir.ops.operator.survey import ClusterState


def emptying_plan(
    state: ClusterState, node_id: int, to_pool: str, loads: dict[TopicPartition, PartitionLoad]
) -> Plan:
    """The moves that empty `node_id` within its pool before it joins `to_pool`."""
    live = {b.node_id: b for b in state.brokers}
    broker = live.get(node_id)
    if broker is None:
        raise PlanError(f"broker {node_id} is not a live broker of the cluster")
    if broker.pool == to_pool:
        where = f"pool {to_pool!r}" if to_pool else "no pool"
        raise PlanError(f"broker {node_id} is in {where} already")
    held = [tp for tp, replicas in state.assignment.items() if node_id in replicas]
    moving = sorted(set(held) & set(state.moving))
    if moving:
        names = ", ".join(f"{t}-{p}" for t, p in moving)
        raise PlanError(f"partitions of broker {node_id} are moving ({names}); try once done")
    others = [b for b in state.brokers if b.node_id != node_id]
    topics = {tp[0] for tp in held}
    planner = Planner(others, {tp: state.assignment[tp] for tp in held}, loads,
                      topic_pools={t: p for t, p in state.topic_pools.items() if t in topics},
                      leaders=state.leaders)  # fmt: skip
    plan = planner.plan(max_moves=0, heal={node_id})
    if plan.unhealed:
        names = ", ".join(f"{t}-{p}" for t, p in plan.unhealed)
        where = f"pool {broker.pool!r}" if broker.pool else "no pool"
        raise PlanError(f"broker {node_id} cannot be emptied: no other broker of {where} may "
                        f"take a replica of {names}")  # fmt: skip
    return plan
