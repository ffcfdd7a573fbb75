"""Planning moves that even out the load the brokers measured.

A broker's load is what its replicas cost it, from each partition's measured load (`load`):

- bytes in: every replica takes in what is produced to its partition (the leader from
  producers, each follower from the leader);
- bytes out: the leader sends what consumers fetch and a copy of what is produced to each
  follower;
- disk: the size of each replica's log;
- replicas and leaders: counts.

The plan is greedy. Each step tries every replica of every partition on every other broker it
may go to, and every other replica of a partition as its leader, and takes the one change that
lowers the imbalance most; it stops when no change lowers it by more than a small share, or at
`max_moves` partitions moved. The imbalance is, for each of the five loads, the sum over brokers
of the squared distance from the mean of the brokers of the same tenant pool (as a share of the
mean: each pool is balanced within itself), weighted by the goal's place in the order the
design gives them: network in and out first, then disk, then replica and leader counts. A
leadership change is a reordering of a partition's replicas (the first is the preferred leader,
elected once the moves are done), so it copies nothing.

Replicas on dead brokers that are to be healed come first: each is re-created on the live
broker of its topic's pool that leaves the partition in the most racks, and of those the one
that leaves the load most even. Partitions with a replica on another dead broker are left alone.

Hard rules, never traded against balance: a replica goes only to a live broker in its topic's
pool (`replica.placement.pool`; a topic without one stays on brokers without one), and a move
never leaves a partition's replicas in fewer racks than they were in. Partitions already moving
are left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from weir.ops.operator.load import PartitionLoad, TopicPartition

#: each load's weight in the imbalance, by its goal's priority
WEIGHTS = {"bytes_in": 4.0, "bytes_out": 4.0, "disk": 2.0, "replicas": 1.0, "leaders": 1.0}
#: a step must lower the imbalance by at least this share of where it started
MIN_GAIN = 0.002
DEFAULT_MAX_MOVES = 50


class PlanError(ValueError):
    """The cluster cannot be planned for as asked."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    rack: str | None = None
    pool: str = ""


@dataclass(slots=True)
class BrokerLoad:
    """What a broker's replicas cost it: bytes a second in and out, bytes on disk, counts."""

    bytes_in: float = 0.0
    bytes_out: float = 0.0
    disk: float = 0.0
    replicas: float = 0.0
    leaders: float = 0.0

    def add(self, other: BrokerLoad, sign: float = 1.0) -> None:
        for name in WEIGHTS:
            setattr(self, name, getattr(self, name) + sign * getattr(other, name))


@dataclass(frozen=True, slots=True)
class Move:
    """A partition's replicas now and as planned (the first is the preferred leader)."""

    partition: TopicPartition
    before: tuple[int, ...]
    after: tuple[int, ...]
    #: bytes the new replicas copy
    copy_bytes: float

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.after if r not in self.before)

    @property
    def leader_only(self) -> bool:
        return set(self.before) == set(self.after)


@dataclass(frozen=True, slots=True)
class Plan:
    moves: list[Move]
    #: each live broker's load now (leaders as they are) and once the plan is done
    before: dict[int, BrokerLoad]
    after: dict[int, BrokerLoad]
    imbalance_before: float
    imbalance_after: float
    #: (topic, partition) skipped because they were moving already
    skipped: list[TopicPartition] = field(default_factory=list)
    #: partitions with a replica on a dead broker that no live broker may take
    unhealed: list[TopicPartition] = field(default_factory=list)
    #: each live broker's pool
    pools: dict[int, str] = field(default_factory=dict)

    def targets(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {move.partition: move.after for move in self.moves}


def replica_cost(load: PartitionLoad, replication_factor: int, leader: bool) -> BrokerLoad:
    """What one replica of a partition with `load` costs its broker."""
    if not leader:
        return BrokerLoad(bytes_in=load.bytes_in, disk=load.size, replicas=1)
    out = load.bytes_out + load.bytes_in * (replication_factor - 1)
    return BrokerLoad(load.bytes_in, out, load.size, 1, 1)


def broker_loads(
    brokers: Sequence[int],
    assignment: Mapping[TopicPartition, Sequence[int]],
    loads: Mapping[TopicPartition, PartitionLoad],
    leaders: Mapping[TopicPartition, int] | None = None,
) -> dict[int, BrokerLoad]:
    """Each broker's load under `assignment`, led by `leaders` (by default each partition's
    first replica). Brokers outside `brokers` are counted too (a dead one keeps its replicas)."""
    out = {b: BrokerLoad() for b in brokers}
    idle = PartitionLoad()
    for tp, replicas in assignment.items():
        leader = replicas[0] if leaders is None else leaders.get(tp, -1)
        for r in replicas:
            cost = replica_cost(loads.get(tp, idle), len(replicas), r == leader)
            out.setdefault(r, BrokerLoad()).add(cost)
    return out


def imbalance(
    loads: Mapping[int, BrokerLoad], brokers: Sequence[int],
    pools: Mapping[int, str] | None = None,
) -> float:  # fmt: skip
    """The weighted sum of each load's squared relative distance from the mean of the brokers
    of its pool (`pools`: broker -> pool; by default one pool)."""
    pools = pools or {}
    means = _pool_means(loads, brokers, pools)
    return sum(_share(loads[b], means[pools.get(b, "")]) for b in brokers)


def spread(loads: Mapping[int, BrokerLoad], name: str, pools: Mapping[int, str] | None = None
           ) -> float:  # fmt: skip
    """The largest broker's `name` load over the smallest's, in the pool where it is widest
    (inf when a broker of a busy pool has none; 1 when no broker has any)."""
    pools = pools or {}
    by_pool: dict[str, list[float]] = {}
    for b, load in loads.items():
        by_pool.setdefault(pools.get(b, ""), []).append(getattr(load, name))
    widest = 1.0
    for values in by_pool.values():
        if max(values) <= 0:
            continue
        widest = max(widest, max(values) / min(values) if min(values) > 0 else float("inf"))
    return widest


class Planner:
    """Plans moves over `brokers` (the live ones) for `assignment` with measured `loads`."""

    def __init__(
        self,
        brokers: Sequence[BrokerInfo],
        assignment: Mapping[TopicPartition, Sequence[int]],
        loads: Mapping[TopicPartition, PartitionLoad],
        *,
        topic_pools: Mapping[str, str] | None = None,
        leaders: Mapping[TopicPartition, int] | None = None,
        moving: Sequence[TopicPartition] = (),
    ) -> None:
        if not brokers:
            raise PlanError("no live broker to plan for")
        self.brokers = {b.node_id: b for b in brokers}
        self.ids = sorted(self.brokers)
        self.pools = {b.node_id: b.pool for b in brokers}
        self.assignment = {tp: tuple(rs) for tp, rs in assignment.items()}
        self.loads = dict(loads)
        self.topic_pools = dict(topic_pools or {})
        self.leaders = dict(leaders) if leaders is not None else None
        self.moving = set(moving)
        self._check_pools()

    def _check_pools(self) -> None:
        pools = {b.pool for b in self.brokers.values()}
        for topic in sorted({tp[0] for tp in self.assignment}):
            pool = self.topic_pools.get(topic, "")
            if pool not in pools:
                where = f"pool {pool!r}" if pool else "no pool"
                raise PlanError(f"topic {topic}: no live broker is in {where}, where its "
                                "replicas must be (replica.placement.pool)")  # fmt: skip

    def plan(self, max_moves: int = DEFAULT_MAX_MOVES, heal: Collection[int] = ()) -> Plan:
        """The moves that even the load out, at most `max_moves` partitions; first, each
        replica on a broker of `heal` (dead ones) is re-created on a live broker, whatever the
        count. Partitions with a replica on another dead broker are left alone."""
        if max_moves < 0:
            raise PlanError(f"the most moves must be 0 or more, not {max_moves}")
        current = dict(self.assignment)
        loads = broker_loads(self.ids, current, self.loads)
        changed: set[TopicPartition] = set()
        unhealed = []
        gone = set(heal) - set(self.ids)
        for tp in sorted(current):
            for dead in [r for r in current[tp] if r in gone and tp not in self.moving]:
                target = self._replacement(current[tp], loads, tp, dead)
                if target is None:
                    unhealed.append(tp)
                    break
                self._apply(loads, tp, current[tp], target)
                current[tp] = target
                changed.add(tp)
        start = imbalance(loads, self.ids, self.pools)
        while True:
            best = self._best_step(current, loads, changed, max_moves)
            if best is None:
                break
            gain, tp, target = best
            if gain <= max(MIN_GAIN * start, 1e-9):
                break
            self._apply(loads, tp, current[tp], target)
            current[tp] = target
            changed.add(tp)
        moves = [
            Move(tp, self.assignment[tp], current[tp], sum(
                self.loads.get(tp, PartitionLoad()).size
                for r in current[tp] if r not in self.assignment[tp]))
            for tp in sorted(changed) if current[tp] != self.assignment[tp]
        ]  # fmt: skip
        before = self._live(broker_loads(self.ids, self.assignment, self.loads, self.leaders))
        after = self._live(broker_loads(self.ids, current, self.loads))
        return Plan(moves, before, after, imbalance(before, self.ids, self.pools),
                    imbalance(after, self.ids, self.pools),
                    sorted(self.moving & set(self.assignment)), unhealed,
                    self.pools)  # fmt: skip

    def _live(self, loads: dict[int, BrokerLoad]) -> dict[int, BrokerLoad]:
        return {b: loads[b] for b in self.ids}

    def _replacement(
        self, replicas: tuple[int, ...], loads: dict[int, BrokerLoad], tp: TopicPartition,
        dead: int,
    ) -> tuple[int, ...] | None:  # fmt: skip
        """`replicas` with `dead` replaced by the live broker of the topic's pool that leaves
        the partition in the most racks, and of those the one that leaves the load most even;
        None if there is none."""
        pool = self.topic_pools.get(tp[0], "")
        best: tuple[tuple[int, float], tuple[int, ...]] | None = None
        load = self.loads.get(tp, PartitionLoad())
        for new in self.ids:
            if new in replicas or self.brokers[new].pool != pool:
                continue
            target = tuple(new if r == dead else r for r in replicas)
            racks = {self.brokers[r].rack for r in target if r in self.brokers}
            trial = {b: replace(loads[b]) for b in self.ids}
            _change(trial, load, replicas, target)
            key = (-len(racks - {None}), imbalance(trial, self.ids, self.pools))
            if best is None or key < best[0]:
                best = (key, target)
        return None if best is None else best[1]

    def _best_step(
        self,
        current: dict[TopicPartition, tuple[int, ...]],
        loads: dict[int, BrokerLoad],
        changed: set[TopicPartition],
        max_moves: int,
    ) -> tuple[float, TopicPartition, tuple[int, ...]] | None:
        """The change that lowers the imbalance most: (by how much, partition, new replicas).
        Moves keep every load's total, so the means stay put and only the brokers a change
        touches are scored again."""
        means, live = _pool_means(loads, self.ids, self.pools), set(self.ids)
        best: tuple[float, TopicPartition, tuple[int, ...]] | None = None
        for tp, replicas in current.items():
            if tp in self.moving or (tp not in changed and len(changed) >= max_moves):
                continue
            if not live.issuperset(replicas):
                continue
            load = self.loads.get(tp, PartitionLoad())
            for target in self._candidates(tp, replicas):
                touched = {r: replace(loads[r]) for r in {*replicas, *target} if r in live}
                gain = sum(_share(touched[r], means[self.pools[r]]) for r in touched)
                _change(touched, load, replicas, target)
                gain -= sum(_share(touched[r], means[self.pools[r]]) for r in touched)
                if best is None or gain > best[0]:
                    best = (gain, tp, target)
        return best

    def _candidates(self, tp: TopicPartition, replicas: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Every other leader of the partition, and every replica swapped for a broker it may go
        to (in the same place in the list)."""
        out = [(r, *(x for x in replicas if x != r)) for r in replicas[1:]]
        pool = self.topic_pools.get(tp[0], "")
        racks = self._racks(replicas)
        for i in range(len(replicas)):
            for new in self.ids:
                if new in replicas or self.brokers[new].pool != pool:
                    continue
                target = (*replicas[:i], new, *replicas[i + 1:])
                if racks is not None and len(self._racks(target) or ()) < len(racks):
                    continue
                out.append(target)
        return out

    def _racks(self, replicas: Sequence[int]) -> set[str] | None:
        """The racks of `replicas`, or None when one of them has none (or is not live)."""
        racks = set()
        for r in replicas:
            info = self.brokers.get(r)
            if info is None or info.rack is None:
                return None
            racks.add(info.rack)
        return racks

    def _apply(
        self,
        loads: dict[int, BrokerLoad],
        tp: TopicPartition,
        before: tuple[int, ...],
        after: tuple[int, ...],
    ) -> None:
        _change(loads, self.loads.get(tp, PartitionLoad()), before, after)


def _change(
    loads: dict[int, BrokerLoad], load: PartitionLoad, before: tuple[int, ...],
    after: tuple[int, ...],
) -> None:  # fmt: skip
    """`loads` with a partition's replicas changed from `before` to `after`."""
    for r in before:
        if r in loads:
            loads[r].add(replica_cost(load, len(before), r == before[0]), -1.0)
    for r in after:
        loads.setdefault(r, BrokerLoad()).add(replica_cost(load, len(after), r == after[0]))


def _pool_means(
    loads: Mapping[int, BrokerLoad], brokers: Sequence[int], pools: Mapping[int, str]
) -> dict[str, dict[str, float]]:
    """Each pool's mean of each load over its brokers."""
    members: dict[str, list[int]] = {}
    for b in brokers:
        members.setdefault(pools.get(b, ""), []).append(b)
    return {pool: {name: sum(getattr(loads[b], name) for b in ids) / len(ids)
                   for name in WEIGHTS} for pool, ids in members.items()}  # fmt: skip


def _share(load: BrokerLoad, means: Mapping[str, float]) -> float:
    """One broker's part of the imbalance."""
    total = 0.0
    for name, weight in WEIGHTS.items():
        mean = means[name]
        if mean > 0:
            distance: float = (getattr(load, name) - mean) / mean
            total += weight * distance * distance
    return total
