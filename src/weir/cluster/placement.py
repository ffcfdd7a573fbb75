"""Replica placement: which brokers hold the replicas of each partition of a topic.

The broker config `replica.placement.strategy` names one of two strategies. Both return an
assignment, `{partition: [broker id, ...]}`, whose first replica is the preferred leader.

`kafka` — Kafka's default assignment (`kafka_assignment`).
    Brokers are taken in id order; partition p's first replica is broker (p + start index) mod n,
    its followers follow at a distance set by a replica shift that grows by one each time the
    partitions wrap around the brokers. When every broker has a rack, the broker list is first
    rack-alternated (one broker of each rack in turn) and a follower skips a broker whose rack
    already holds a replica of the partition, until every rack holds one.
    Guarantees: no broker holds two replicas of a partition; with a fixed start, every broker
    leads ⌊P/n⌋ or ⌈P/n⌉ of P partitions; with racks, a partition's replicas sit on distinct racks
    while there are at least as many racks as replicas. Load is even only when racks hold equal
    numbers of brokers, and adding a broker re-deals a share of the assignment that grows with
    the cluster.

`consistent-hash` — a hash ring with virtual nodes (`consistent_hash_assignment`, `HashRing`).
    Every broker owns `vnodes * weight` points on a ring of 64-bit positions; a replica's key
    hashes to a position and the replica goes to the first point clockwise whose broker is
    neither already chosen for the partition nor on a rack that already holds one of its replicas
    (while some rack holds none). Racks may be merged into a few virtual rack groups of equal
    capacity (`virtual_rack_groups`); the rack rule then applies to the groups.
    Guarantees: the same brokers (in any order), topic and partition always give the same
    replicas; no broker holds two replicas of a partition; with at least as many racks (or
    groups) as replicas, a partition's replicas sit on distinct racks (groups, hence racks).
    Statistically: a broker's share of replicas follows its weight, and adding a broker to n
    moves about 1/(n+1) of the replicas, nearly all of them to the new broker.

Everything here is a pure function of its arguments: no I/O, no clock, no metadata store. The
controller calls it when a topic is created or grows and records the result itself.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

KAFKA = "kafka"
CONSISTENT_HASH = "consistent-hash"
STRATEGIES = (KAFKA, CONSISTENT_HASH)

# Points per unit of weight: enough that brokers' ring shares stay close to their weights (the
# bench reports the skew) while a ring of tens of brokers still builds in milliseconds.
DEFAULT_VNODES = 256

Assignment = dict[int, list[int]]


class PlacementError(ValueError):
    """A placement request that cannot be met."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class PartitionCountError(PlacementError):
    error_code = 37  # INVALID_PARTITIONS


class ReplicationFactorError(PlacementError):
    error_code = 38  # INVALID_REPLICATION_FACTOR


class UnknownStrategyError(PlacementError):
    error_code = 40  # INVALID_CONFIG


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """What placement knows of a broker: its id, its `broker.rack`, its relative capacity
    (`weight`, used by the consistent-hash ring only) and the name its ring points are derived
    from (`host`, default `broker-<node_id>`)."""

    node_id: int
    rack: str | None = None
    weight: int = 1
    host: str | None = None

    @property
    def ring_name(self) -> str:
        return self.host if self.host is not None else f"broker-{self.node_id}"


# ---------------------------------------------------------------------------------------------
# Checks shared by both strategies


#: the topic config pinning a topic to a pool of brokers
POOL_CONFIG = "replica.placement.pool"


def no_broker_in_pool(pool: str) -> str:
    where = f"pool {pool!r}" if pool else "no pool (brokers without broker.pool)"
    return f"No live broker is in {where}; name a pool with replica.placement.pool."


def pool_refusal(brokers: Sequence[int], pool: str) -> str:
    """Why replicas on `brokers` break a topic's pool."""
    where = f"pool {pool!r}" if pool else "no pool"
    return (f"Brokers {list(brokers)} are not in {where}, where the topic's replicas must be "
            "(replica.placement.pool).")  # fmt: skip


def _check_request(brokers: Sequence[BrokerSpec], partitions: int, replication_factor: int) -> None:
    if partitions <= 0:
        raise PartitionCountError(f"Number of partitions must be larger than 0, got {partitions}.")
    if replication_factor <= 0:
        raise ReplicationFactorError(
            f"Replication factor must be larger than 0, got {replication_factor}."
        )
    if replication_factor > len(brokers):
        raise ReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    ids = [broker.node_id for broker in brokers]
    if len(set(ids)) != len(ids):
        raise PlacementError(f"Broker ids must be unique, got {sorted(ids)}.")
    light = [broker.node_id for broker in brokers if broker.weight <= 0]
    if light:
        raise PlacementError(f"Broker weights must be at least 1; brokers {light} have less.")


def _rack_aware(brokers: Sequence[BrokerSpec]) -> bool:
    """True when every broker has a rack, False when none has; a mix is refused, as a partial
    rack map would place replicas on racks nobody declared."""
    unracked = sorted(broker.node_id for broker in brokers if broker.rack is None)
    if not unracked:
        return True
    if len(unracked) == len(brokers):
        return False
    raise PlacementError(
        f"Not every broker has a rack (brokers {unracked} have none): "
        "rack-aware placement needs a rack for all of them or for none."
    )


def replicas_moved(before: Mapping[int, Sequence[int]], after: Mapping[int, Sequence[int]]) -> int:
    """Replicas that must be copied to go from `before` to `after`: for every partition, the
    brokers in its new replica set that were not in its old one (a reordering moves no data)."""
    return sum(len(set(replicas) - set(before.get(p, ()))) for p, replicas in after.items())


# ---------------------------------------------------------------------------------------------
# Kafka's default assignment


def kafka_assignment(
    brokers: Sequence[BrokerSpec],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> Assignment:
    """Kafka's default assignment of partitions `start_partition` … `start_partition +
    partitions - 1` to `brokers`.

    `start_index` (the list position of partition 0's first replica) and `replica_shift` (the
    followers' initial distance) are drawn from `rng` when not given; as in Kafka, a fixed
    `start_index` also fixes the shift to the same value unless `replica_shift` says otherwise.
    The shift grows by one at every partition id (from `start_partition` on) that is a positive
    multiple of the broker count. To add partitions to a topic the way Kafka does, pass its
    partition count as `start_partition` and `add_partitions_start_index(...)` as `start_index`.
    """
    _check_request(brokers, partitions, replication_factor)
    racks = _rack_aware(brokers)
    ordered = _rack_alternated(brokers) if racks else sorted(b.node_id for b in brokers)
    chooser = rng if rng is not None else random.Random()
    fixed_start = start_index is not None
    if start_index is None:
        start_index = chooser.randrange(len(ordered))
    if replica_shift is None:
        replica_shift = start_index if fixed_start else chooser.randrange(len(ordered))
    rack_of = {b.node_id: b.rack for b in brokers}
    assignment: Assignment = {}
    shift = replica_shift
    for partition in range(start_partition, start_partition + partitions):
        if partition > 0 and partition % len(ordered) == 0:
            shift += 1
        first = (partition + start_index) % len(ordered)
        if racks:
            assignment[partition] = _rack_aware_replicas(
                ordered, rack_of, first, shift, replication_factor
            )
        else:
            assignment[partition] = [ordered[first]] + [
                ordered[_follower_index(first, shift, j, len(ordered))]
                for j in range(replication_factor - 1)
            ]
    return assignment


def add_partitions_start_index(brokers: Sequence[BrokerSpec], partition_zero_leader: int) -> int:
    """The start index Kafka uses when a topic grows: the id-order position of the first broker
    whose id is at least that of partition 0's first replica (0 if there is none)."""
    ids = sorted(broker.node_id for broker in brokers)
    return next((i for i, node in enumerate(ids) if node >= partition_zero_leader), 0)


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """List position of the j-th follower candidate: 1 … n-1 places after the first replica, so
    a candidate is never the first replica itself."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_alternated(brokers: Sequence[BrokerSpec]) -> list[int]:
    """Broker ids taking one broker from each rack in turn (racks by name, brokers by id), e.g.
    rack1: 0, 5; rack2: 3, 4; rack3: 1, 2 → 0, 3, 1, 5, 4, 2."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker in sorted(brokers, key=lambda b: b.node_id):
        assert broker.rack is not None
        by_rack[broker.rack].append(broker.node_id)
    queues = [iter(by_rack[rack]) for rack in sorted(by_rack)]
    ordered: list[int] = []
    while len(ordered) < len(brokers):
        ordered.extend(node for queue in queues if (node := next(queue, None)) is not None)
    return ordered


def _rack_aware_replicas(
    ordered: list[int], rack_of: Mapping[int, str | None], first: int, shift: int, count: int
) -> list[int]:
    """The replicas of one partition on a rack-alternated list. Candidates come from one
    sequence of follower positions (its counter runs on across followers); a candidate is
    skipped if its rack already holds a replica while some rack holds none, or if it already
    holds one itself (every broker holds one only when count exceeds n, which is refused)."""
    rack_count = len(set(rack_of.values()))
    replicas = [ordered[first]]
    racks_used = {rack_of[replicas[0]]}
    candidate = 0
    while len(replicas) < count:
        broker = ordered[_follower_index(first, shift * rack_count, candidate, len(ordered))]
        candidate += 1
        rack = rack_of[broker]
        if rack in racks_used and len(racks_used) < rack_count:
            continue
        if broker in replicas:
            continue
        replicas.append(broker)
        racks_used.add(rack)
    return replicas


# ---------------------------------------------------------------------------------------------
# Consistent hashing with virtual nodes


def ring_position(key: str) -> int:
    """A key's place on the ring: the first 8 bytes of its MD5 digest, unsigned big-endian."""
    digest = hashlib.md5(key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def replica_key(topic: str, partition: int, replica: int) -> str:
    """The hashed name of a partition's replica number `replica`: `<topic>-<partition>-<replica>`.
    The separators keep names distinct (topic `t1`, partition 23 is not topic `t12`, partition
    3); the two numbers never contain `-`, so the last two fields are always read back as such."""
    return f"{topic}-{partition}-{replica}"


class HashRing:
    """A consistent-hash ring over brokers. Broker b owns `vnodes * b.weight` points, the i-th at
    `ring_position(f"{b.ring_name}-v{i}")`; the point list is sorted once (ties, which 64-bit
    positions make vanishingly rare, by broker id) and looked up by binary search.

    Immutable after construction, so safe to share between threads."""

    def __init__(self, brokers: Sequence[BrokerSpec], vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes <= 0:
            raise PlacementError(f"Virtual nodes per unit of weight must be positive: {vnodes}.")
        points = sorted(
            (ring_position(f"{broker.ring_name}-v{i}"), broker.node_id)
            for broker in brokers
            for i in range(vnodes * broker.weight)
        )
        self._positions = [position for position, _ in points]
        self._owners = [node for _, node in points]
        self._rack_of = {broker.node_id: broker.rack for broker in brokers}
        self._rack_count = len({b.rack for b in brokers if b.rack is not None})

    def __len__(self) -> int:
        return len(self._positions)

    def owner(self, key: str) -> int:
        """The broker owning the first point at or after the key's position (wrapping)."""
        return self._owners[self._index_of(key)]

    def replicas(self, topic: str, partition: int, replication_factor: int) -> list[int]:
        """Replica j of the partition: walk clockwise from its key's position to the first point
        of a broker not yet chosen whose rack holds no replica yet (the rack rule lapses once
        every rack holds one, and never applies to rack-less brokers)."""
        chosen: list[int] = []
        racks_used: set[str] = set()
        for replica in range(replication_factor):
            broker = self._first_eligible(
                self._index_of(replica_key(topic, partition, replica)), chosen, racks_used
            )
            chosen.append(broker)
            if (rack := self._rack_of[broker]) is not None:
                racks_used.add(rack)
        return chosen

    def replacement(self, topic: str, partition: int, slot: int, staying: Sequence[int]) -> int:
        """The broker the ring gives replica number `slot` of the partition when the other
        replicas are `staying`: the first eligible point clockwise from that replica's key (so
        a broker leaving the ring hands each of its replicas to the broker the ring would have
        chosen without it, and nothing else moves)."""
        racks_used = {rack for b in staying if (rack := self._rack_of.get(b)) is not None}
        start = self._index_of(replica_key(topic, partition, slot))
        return self._first_eligible(start, list(staying), racks_used)

    def _index_of(self, key: str) -> int:
        return bisect.bisect_left(self._positions, ring_position(key)) % len(self._positions)

    def _clockwise(self, start: int) -> Iterator[int]:
        size = len(self._owners)
        return (self._owners[(start + step) % size] for step in range(size))

    def _first_eligible(self, start: int, chosen: list[int], racks_used: set[str]) -> int:
        rack_rule = len(racks_used) < self._rack_count
        for broker in self._clockwise(start):
            if broker in chosen or (rack_rule and self._rack_of[broker] in racks_used):
                continue
            return broker
        raise ReplicationFactorError("More replicas requested than the ring has brokers.")


def virtual_rack_groups(brokers: Sequence[BrokerSpec], groups: int) -> dict[str, str]:
    """Merge physical racks into `groups` virtual rack groups (`group-0`, `group-1`, …) of as
    equal capacity (sum of broker weights; the machine count when all weights are 1) as whole
    racks allow. A rack is never split between groups, so replicas on distinct groups are on
    distinct racks, and equal groups carry equal load however unevenly machines sit in racks.

    Racks go largest first (ties by name) to the group with the least capacity so far (ties by
    group number). Returns `{rack: group}`."""
    if not _rack_aware(brokers):
        raise PlacementError("Virtual rack groups need every broker to have a rack.")
    capacity: dict[str, int] = defaultdict(int)
    for broker in brokers:
        assert broker.rack is not None
        capacity[broker.rack] += broker.weight
    if not 0 < groups <= len(capacity):
        raise PlacementError(
            f"Cannot form {groups} virtual rack groups from {len(capacity)} racks "
            "without splitting a rack."
        )
    loads = [0] * groups
    mapping: dict[str, str] = {}
    for rack in sorted(capacity, key=lambda r: (-capacity[r], r)):
        target = min(range(groups), key=lambda g: (loads[g], g))
        loads[target] += capacity[rack]
        mapping[rack] = f"group-{target}"
    return mapping


def consistent_hash_assignment(
    brokers: Sequence[BrokerSpec],
    topic: str,
    partitions: int,
    replication_factor: int,
    *,
    vnodes: int = DEFAULT_VNODES,
    start_partition: int = 0,
    rack_groups: int | None = None,
) -> Assignment:
    """Place partitions `start_partition` … `start_partition + partitions - 1` of `topic` on a
    `HashRing` of `brokers` with `vnodes` points per unit of weight. With `rack_groups`, racks
    are first merged by `virtual_rack_groups` and the rack rule applies to the groups. Each
    partition depends only on the brokers, the topic and its own number, so growing a topic
    leaves its existing partitions where they are."""
    _check_request(brokers, partitions, replication_factor)
    _rack_aware(brokers)
    if rack_groups is not None:
        grouping = virtual_rack_groups(brokers, rack_groups)
        brokers = [replace(b, rack=grouping[b.rack]) for b in brokers if b.rack is not None]
    ring = HashRing(brokers, vnodes)
    return {
        partition: ring.replicas(topic, partition, replication_factor)
        for partition in range(start_partition, start_partition + partitions)
    }


# ---------------------------------------------------------------------------------------------
# Strategy dispatch


def _kafka(
    brokers: Sequence[BrokerSpec], topic: str, partitions: int, replication_factor: int, **kw: Any
) -> Assignment:
    return kafka_assignment(brokers, partitions, replication_factor, **kw)


_STRATEGY_TABLE: dict[str, Callable[..., Assignment]] = {
    KAFKA: _kafka,
    CONSISTENT_HASH: consistent_hash_assignment,
}


def assign(
    strategy: str,
    brokers: Sequence[BrokerSpec],
    topic: str,
    partitions: int,
    replication_factor: int,
    **kw: Any,
) -> Assignment:
    """Place a topic's partitions with the strategy named by `replica.placement.strategy`;
    `kw` goes to that strategy's function."""
    place = _STRATEGY_TABLE.get(strategy)
    if place is None:
        raise UnknownStrategyError(
            f"Unknown replica placement strategy {strategy!r}; "
            f"allowed values are {', '.join(STRATEGIES)}."
        )
    return place(brokers, topic, partitions, replication_factor, **kw)
