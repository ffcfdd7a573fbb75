from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from weir.cluster.placement import (
    CONSISTENT_HASH,
    KAFKA,
    Assignment,
    BrokerSpec,
    HashRing,
    PartitionCountError,
    PlacementError,
    ReplicationFactorError,
    UnknownStrategyError,
    add_partitions_start_index,
    assign,
    consistent_hash_assignment,
    kafka_assignment,
    replica_key,
    replicas_moved,
    ring_position,
    virtual_rack_groups,
)


def plain(*ids: int) -> list[BrokerSpec]:
    return [BrokerSpec(node) for node in ids]


def racked(racks: str | Sequence[str]) -> list[BrokerSpec]:
    """Brokers 0, 1, … on the given racks, in order."""
    return [BrokerSpec(node, rack) for node, rack in enumerate(racks)]


def replica_counts(assignment: Assignment) -> Counter[int]:
    return Counter(node for replicas in assignment.values() for node in replicas)


# ---------------------------------------------------------------------------------------------
# Kafka's assignment, against tables worked out by hand.
# Notation: L is the broker list (ids sorted, or rack-alternated), n = len(L), s the replica
# shift; partition p's first replica is L[(p + start) % n], its j-th follower candidate sits
# 1 + (s' + j) % (n - 1) places after it (s' = s without racks, s * rack count with racks);
# s grows by one at every p > 0 with p % n == 0.


def test_kafka_without_racks_six_brokers_ten_partitions() -> None:
    # start 2, so s = 2: follower offsets 1 + (2 + j) % 5 = 3, 4 until p = 6, then s = 3:
    # offsets 4, 5. p0: first 2 → 2+3, 2+4 = 5, 0.  p6: first (6+2)%6 = 2 → 2+4, 2+5 = 0, 1.
    expected = {
        0: [2, 5, 0],
        1: [3, 0, 1],
        2: [4, 1, 2],
        3: [5, 2, 3],
        4: [0, 3, 4],
        5: [1, 4, 5],
        6: [2, 0, 1],
        7: [3, 1, 2],
        8: [4, 2, 3],
        9: [5, 3, 4],
    }
    assert kafka_assignment(plain(*range(6)), 10, 3, start_index=2) == expected


def test_kafka_orders_brokers_by_id_and_takes_a_separate_shift() -> None:
    # L = 10, 20, 30, 40, 50 (given shuffled); start 1, s = 3: offsets 1 + (3 + j) % 4 = 4, 1.
    # p0: first 1 → positions 0, 2.  p5 (5 % 5 == 0): s = 4, offsets 1, 2; first (5+1)%5 = 1.
    brokers = plain(40, 10, 50, 30, 20)
    expected = {
        0: [20, 10, 30],
        1: [30, 20, 40],
        2: [40, 30, 50],
        3: [50, 40, 10],
        4: [10, 50, 20],
        5: [20, 30, 40],
    }
    assert kafka_assignment(brokers, 6, 3, start_index=1, replica_shift=3) == expected


def test_kafka_added_partitions_continue_the_round_robin() -> None:
    # As in Kafka, the shift starts again from the fixed value and grows only at a multiple of
    # n met while assigning: p10 and p11 use s = 2 (p10: first 0 → 3, 4), p12 uses s = 3.
    added = kafka_assignment(plain(*range(6)), 3, 3, start_index=2, start_partition=10)
    assert added == {10: [0, 3, 4], 11: [1, 4, 5], 12: [2, 0, 1]}


def test_kafka_rack_aware_documented_example() -> None:
    # rack1: 0, 5; rack2: 3, 4; rack3: 1, 2 → L = 0, 3, 1, 5, 4, 2 (racks 1,2,3,1,2,3).
    # Start 0, s = 0: offsets 1 + k % 5 = 1, 2; consecutive entries are on different racks, so
    # nothing is skipped.  p6: s = 1, s' = 3, offsets 1 + (3 + k) % 5 = 4, 5 → L[4], L[5] = 4, 2.
    brokers = racked(["rack1", "rack3", "rack3", "rack2", "rack2", "rack1"])
    expected = {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
        7: [3, 2, 0],
        8: [1, 0, 3],
    }
    assert kafka_assignment(brokers, 9, 3, start_index=0) == expected


def test_kafka_rack_aware_skips_a_rack_that_already_has_a_replica() -> None:
    # Same L; start 2, s = 2, s' = 6: offsets 1 + (6 + k) % 5 = 2, 3, 4, … An offset of 3 lands
    # on the leader's rack and is skipped.  p0: leader L[2] = 1 (rack3); k0: L[4] = 4 (rack2);
    # k1: L[5] = 2 (rack3, skipped); k2: L[0] = 0 (rack1).
    brokers = racked(["rack1", "rack3", "rack3", "rack2", "rack2", "rack1"])
    expected = {
        0: [1, 4, 0],
        1: [5, 2, 3],
        2: [4, 0, 1],
        3: [2, 3, 5],
        4: [0, 1, 4],
        5: [3, 5, 2],
    }
    assert kafka_assignment(brokers, 6, 3, start_index=2) == expected


def test_kafka_rack_aware_with_uneven_racks() -> None:
    # a: 0, 1, 2; b: 3; c: 4 → L = 0, 3, 4, 1, 2 (racks a, b, c, a, a), n = 5, 3 racks.
    # Start 0, s = 0: offsets 1 + k % 4.  p2: leader L[2] = 4 (c); k0: L[3] = 1 (a);
    # k1: L[4] = 2 (a, skipped); k2: L[0] = 0 (a, skipped); k3: L[1] = 3 (b).
    # p5: s = 1, s' = 3, offsets 4, 1, 2, …: k0: L[4] = 2 (a, skipped); k1: 3; k2: 4.
    # Brokers 3 and 4, alone on their racks, hold a replica of every partition.
    expected = {
        0: [0, 3, 4],
        1: [3, 4, 1],
        2: [4, 1, 3],
        3: [1, 3, 4],
        4: [2, 3, 4],
        5: [0, 3, 4],
        6: [3, 0, 4],
    }
    assert kafka_assignment(racked("aaabc"), 7, 3, start_index=0) == expected


def test_kafka_with_fewer_racks_than_replicas_fills_every_rack_first() -> None:
    # a: 0, 1; b: 2, 3 → L = 0, 2, 1, 3. p0: 0 (a), then 2 (b); both racks now hold one, so
    # the rack rule lapses and L[2] = 1 (a) is taken.
    assert kafka_assignment(racked("aabb"), 2, 3, start_index=0) == {0: [0, 2, 1], 1: [2, 1, 3]}


def test_kafka_draws_start_then_shift_from_the_given_random() -> None:
    draws = random.Random(7)
    start, shift = draws.randrange(6), draws.randrange(6)
    fixed = kafka_assignment(plain(*range(6)), 12, 3, start_index=start, replica_shift=shift)
    assert kafka_assignment(plain(*range(6)), 12, 3, rng=random.Random(7)) == fixed


@pytest.mark.parametrize(("leader", "expected"), [(3, 1), (4, 2), (1, 0), (9, 0)])
def test_add_partitions_start_index(leader: int, expected: int) -> None:
    assert add_partitions_start_index(plain(5, 1, 3), leader) == expected


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("strategy", [KAFKA, CONSISTENT_HASH])
def test_refuses_impossible_requests(strategy: str) -> None:
    with pytest.raises(PartitionCountError, match="partitions must be larger than 0"):
        assign(strategy, plain(0, 1), "t", 0, 1)
    with pytest.raises(ReplicationFactorError, match="must be larger than 0"):
        assign(strategy, plain(0, 1), "t", 1, 0)
    with pytest.raises(
        ReplicationFactorError,
        match=r"^Replication factor: 3 larger than available brokers: 2\.$",
    ):
        assign(strategy, plain(0, 1), "t", 1, 3)
    with pytest.raises(PlacementError, match="rack for all of them or for none"):
        assign(strategy, [BrokerSpec(0, "a"), BrokerSpec(1)], "t", 1, 1)
    with pytest.raises(PlacementError, match="unique"):
        assign(strategy, plain(0, 0), "t", 1, 1)
    with pytest.raises(PlacementError, match="weights"):
        assign(strategy, [BrokerSpec(0, weight=0)], "t", 1, 1)


def test_errors_carry_kafka_error_codes() -> None:
    assert PartitionCountError.error_code == 37  # INVALID_PARTITIONS
    assert ReplicationFactorError.error_code == 38  # INVALID_REPLICATION_FACTOR
    assert UnknownStrategyError.error_code == 40  # INVALID_CONFIG
    assert issubclass(PlacementError, ValueError)


def test_unknown_strategy_names_the_allowed_values() -> None:
    with pytest.raises(UnknownStrategyError, match=r"'round-robin'.*kafka, consistent-hash"):
        assign("round-robin", plain(0, 1), "t", 1, 1)


def test_rack_groups_need_enough_whole_racks() -> None:
    with pytest.raises(PlacementError, match="4 virtual rack groups from 3 racks"):
        consistent_hash_assignment(racked("abc"), "t", 1, 1, rack_groups=4)
    with pytest.raises(PlacementError, match="every broker to have a rack"):
        virtual_rack_groups(plain(0, 1), 1)


# ---------------------------------------------------------------------------------------------
# Dispatch


def test_assign_dispatches_on_the_strategy_name() -> None:
    brokers = racked("abcabc")
    assert assign(KAFKA, brokers, "orders", 8, 3, start_index=1) == kafka_assignment(
        brokers, 8, 3, start_index=1
    )
    assert assign(CONSISTENT_HASH, brokers, "orders", 8, 3, vnodes=8) == (
        consistent_hash_assignment(brokers, "orders", 8, 3, vnodes=8)
    )


# ---------------------------------------------------------------------------------------------
# Properties of both strategies

RACKS = ("r1", "r2", "r3", "r4")


@st.composite
def clusters(draw: st.DrawFn) -> list[BrokerSpec]:
    ids = draw(st.lists(st.integers(0, 99), min_size=1, max_size=10, unique=True))
    with_racks = draw(st.booleans())
    return [
        BrokerSpec(
            node,
            draw(st.sampled_from(RACKS)) if with_racks else None,
            draw(st.integers(1, 3)),
        )
        for node in ids
    ]


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[BrokerSpec], int, int, int]:
    brokers = draw(clusters())
    partitions = draw(st.integers(1, 40))
    replication_factor = draw(st.integers(1, len(brokers)))
    start_partition = draw(st.integers(0, 20))
    return brokers, partitions, replication_factor, start_partition


def place(
    strategy: str, brokers: Sequence[BrokerSpec], partitions: int, rf: int, start_partition: int
) -> Assignment:
    if strategy == KAFKA:
        options: dict[str, int] = {"start_index": 3}
    else:
        options = {"vnodes": 8}
    return assign(
        strategy, brokers, "orders", partitions, rf, start_partition=start_partition, **options
    )


@pytest.mark.parametrize("strategy", [KAFKA, CONSISTENT_HASH])
@settings(max_examples=150, deadline=None)
@given(request=requests(), seed=st.integers(0, 2**32))
def test_every_partition_gets_distinct_brokers_on_distinct_racks(
    strategy: str, request: tuple[list[BrokerSpec], int, int, int], seed: int
) -> None:
    brokers, partitions, rf, start_partition = request
    assignment = place(strategy, brokers, partitions, rf, start_partition)
    assert list(assignment) == list(range(start_partition, start_partition + partitions))
    rack_of = {b.node_id: b.rack for b in brokers}
    rack_count = len({b.rack for b in brokers})
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= rack_of.keys()
        if brokers[0].rack is not None:
            # Distinct racks while there are enough; otherwise every rack is used.
            assert len({rack_of[node] for node in replicas}) == min(rf, rack_count)
    shuffled = list(brokers)
    random.Random(seed).shuffle(shuffled)
    assert place(strategy, shuffled, partitions, rf, start_partition) == assignment


@settings(max_examples=150, deadline=None)
@given(request=requests(), start=st.integers(0, 50))
def test_kafka_leaders_are_dealt_round_robin(
    request: tuple[list[BrokerSpec], int, int, int], start: int
) -> None:
    brokers, partitions, rf, _ = request
    leaders = Counter(
        replicas[0]
        for replicas in kafka_assignment(brokers, partitions, rf, start_index=start).values()
    )
    low, high = partitions // len(brokers), -(-partitions // len(brokers))
    assert all(low <= leaders[b.node_id] <= high for b in brokers)


@settings(max_examples=100, deadline=None)
@given(brokers=clusters(), partitions=st.integers(1, 40), gone=st.integers(0, 9))
def test_consistent_hash_removing_a_broker_moves_only_its_partitions(
    brokers: list[BrokerSpec], partitions: int, gone: int
) -> None:
    assume(len(brokers) >= 3)
    brokers = [BrokerSpec(b.node_id, None, b.weight) for b in brokers]
    removed = brokers[gone % len(brokers)].node_id
    remaining = [b for b in brokers if b.node_id != removed]
    before = consistent_hash_assignment(brokers, "orders", partitions, 2, vnodes=8)
    after = consistent_hash_assignment(remaining, "orders", partitions, 2, vnodes=8)
    for partition, replicas in before.items():
        if removed not in replicas:
            assert after[partition] == replicas


# ---------------------------------------------------------------------------------------------
# The consistent-hash ring


def test_ring_points_and_replica_keys_follow_the_documented_format() -> None:
    digest = hashlib.md5(b"broker-7-v3").digest()
    assert ring_position("broker-7-v3") == int.from_bytes(digest[:8], "big")
    assert replica_key("orders", 12, 2) == "orders-12-2"
    assert BrokerSpec(7).ring_name == "broker-7"
    assert BrokerSpec(7, host="kafka-a.example").ring_name == "kafka-a.example"


def test_ring_has_vnodes_per_unit_of_weight() -> None:
    ring = HashRing([BrokerSpec(1), BrokerSpec(2, weight=3)], vnodes=10)
    assert len(ring) == 40


def test_ring_lookup_takes_the_first_point_at_or_after_the_key() -> None:
    ring = HashRing([BrokerSpec(1, host="a"), BrokerSpec(2, host="b")], vnodes=1)
    # A key on a point belongs to that point's broker.
    assert ring.owner("a-v0") == 1
    assert ring.owner("b-v0") == 2
    # A key past the last point wraps to the first.
    first, last = sorted([(ring_position("a-v0"), 1), (ring_position("b-v0"), 2)])
    beyond = next(k for k in map(str, range(10_000)) if ring_position(k) > last[0])
    assert ring.owner(beyond) == first[1]


def test_consistent_hash_grows_a_topic_without_moving_its_partitions() -> None:
    brokers = plain(*range(6))
    whole = consistent_hash_assignment(brokers, "orders", 30, 3)
    first = consistent_hash_assignment(brokers, "orders", 20, 3)
    added = consistent_hash_assignment(brokers, "orders", 10, 3, start_partition=20)
    assert whole == first | added


@pytest.mark.parametrize("n", [5, 10])
def test_adding_a_broker_moves_about_one_in_n_plus_one_replicas(n: int) -> None:
    partitions = 1000
    total = partitions * 3
    before, after = plain(*range(n)), plain(*range(n + 1))
    hashed = replicas_moved(
        consistent_hash_assignment(before, "orders", partitions, 3),
        grown := consistent_hash_assignment(after, "orders", partitions, 3),
    )
    dealt = replicas_moved(
        kafka_assignment(before, partitions, 3, start_index=0),
        kafka_assignment(after, partitions, 3, start_index=0),
    )
    assert 0.5 / (n + 1) < hashed / total < 2 / (n + 1)
    assert hashed < dealt
    # What moves goes to the new broker.
    assert replica_counts(grown)[n] >= 0.9 * hashed


def test_weight_skews_load_proportionally() -> None:
    brokers = [BrokerSpec(node, weight=2 if node == 0 else 1) for node in range(10)]
    counts = replica_counts(consistent_hash_assignment(brokers, "orders", 2000, 3))
    light = sum(counts[node] for node in range(1, 10)) / 9
    assert 1.5 < counts[0] / light < 2.5


def test_virtual_rack_groups_balance_capacity_without_splitting_racks() -> None:
    # Rack sizes a 1, b 2, c 4, d 2, e 3; largest first to the emptiest group:
    # c → 0; e → 1; b → 2; d → 2 (loads 4, 3, 2); a → 1 (loads 4, 3, 4) → 4 | 4 | 4.
    groups = virtual_rack_groups(racked("abbccccddeee"), 3)
    assert groups == {
        "c": "group-0",
        "e": "group-1",
        "b": "group-2",
        "d": "group-2",
        "a": "group-1",
    }


def test_virtual_rack_groups_count_weight_as_capacity() -> None:
    # x: one broker of weight 3; y, z: one of weight 1 each. By weight z joins y (loads 3, 1);
    # by machine count it would join x (loads 1, 1, tie to group 0).
    brokers = [BrokerSpec(0, "x", weight=3), BrokerSpec(1, "y"), BrokerSpec(2, "z")]
    assert virtual_rack_groups(brokers, 2) == {"x": "group-0", "y": "group-1", "z": "group-1"}


def test_rack_groups_even_out_load_on_uneven_racks() -> None:
    # 12 brokers on racks of 4, 3, 2, 2, 1 machines: three groups of four machines each carry
    # one replica of every partition, on three different physical racks.
    brokers = racked("aaaabbbccdde")
    partitions = 2000
    grouped = consistent_hash_assignment(brokers, "orders", partitions, 3, rack_groups=3)
    group_of = virtual_rack_groups(brokers, 3)
    rack_of = {b.node_id: b.rack for b in brokers}
    for replicas in grouped.values():
        assert len({group_of[str(rack_of[node])] for node in replicas}) == 3
        assert len({rack_of[node] for node in replicas}) == 3
    mean = partitions * 3 / len(brokers)
    assert max(replica_counts(grouped).values()) / mean < 1.25
    # Kafka's rack-alternated assignment of the same racks is far from even.
    dealt = replica_counts(kafka_assignment(brokers, partitions, 3, start_index=0)).values()
    assert max(dealt) / mean > 1.5
    assert min(dealt) / mean < 0.7
