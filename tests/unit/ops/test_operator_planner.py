"""The operator's planner (weir.ops.operator.planner) and load arithmetic (load) on made-up
clusters: a hot topic on two of four brokers spread out, the hard rules (pools, racks, moving
partitions) never broken, leaders moved before data when that is enough, and rates from two
looks at brokers whose counters restarted."""

from __future__ import annotations

import pytest

from weir.ops.operator.load import (
    BrokerScrape,
    LoadHistory,
    PartitionCounters,
    PartitionLoad,
    parse_scrape,
    rates,
)
from weir.ops.operator.planner import BrokerInfo, PlanError, Planner, broker_loads, spread

MB = 1_000_000.0


def hot_cluster() -> tuple[list[BrokerInfo], dict[tuple[str, int], tuple[int, ...]],
                           dict[tuple[str, int], PartitionLoad]]:  # fmt: skip
    """Four brokers; `hot` (4 partitions, 1 MB/s each) on brokers 1 and 2 only; `cold`
    (8 partitions, 10 kB/s each) everywhere."""
    brokers = [BrokerInfo(b) for b in (1, 2, 3, 4)]
    assignment = {("hot", p): ((1, 2) if p % 2 else (2, 1)) for p in range(4)}
    assignment |= {("cold", p): (p % 4 + 1, (p + 1) % 4 + 1) for p in range(8)}
    loads = {tp: PartitionLoad(MB, 1000, MB, 50 * MB) if tp[0] == "hot"
             else PartitionLoad(10_000, 10, 10_000, MB) for tp in assignment}  # fmt: skip
    return brokers, assignment, loads


def bytes_in_spread(loads: dict[int, object]) -> float:
    values = [load.bytes_in for load in loads.values()]  # type: ignore[attr-defined]
    return max(values) / min(values)


def test_a_hot_topic_on_two_of_four_brokers_is_spread_over_all_four() -> None:
    brokers, assignment, loads = hot_cluster()
    plan = Planner(brokers, assignment, loads).plan()
    assert bytes_in_spread(plan.before) > 10
    assert bytes_in_spread(plan.after) < 1.3
    assert plan.imbalance_after < plan.imbalance_before / 10
    after = {**assignment, **plan.targets()}
    assert after.keys() == assignment.keys()
    for tp, replicas in after.items():
        assert len(set(replicas)) == len(replicas) == 2, tp
    hot_brokers = {b for tp, rs in after.items() if tp[0] == "hot" for b in rs}
    assert hot_brokers == {1, 2, 3, 4}
    assert plan.after == broker_loads([1, 2, 3, 4], after, loads)


def test_a_balanced_cluster_gets_no_moves() -> None:
    brokers = [BrokerInfo(b) for b in (1, 2, 3)]
    assignment = {("t", p): (p % 3 + 1, (p + 1) % 3 + 1) for p in range(6)}
    loads = {tp: PartitionLoad(1000, 10, 1000, MB) for tp in assignment}
    assert Planner(brokers, assignment, loads).plan().moves == []


def test_leadership_alone_is_moved_when_that_evens_the_load_out() -> None:
    """Every partition led by broker 1: the bytes out are evened by leaders, no data copied."""
    brokers = [BrokerInfo(b) for b in (1, 2)]
    assignment = {("t", p): (1, 2) for p in range(4)}
    loads = {tp: PartitionLoad(1000, 10, 100_000, MB) for tp in assignment}
    plan = Planner(brokers, assignment, loads).plan()
    assert plan.moves and all(m.leader_only and m.copy_bytes == 0 for m in plan.moves)
    assert sorted(plan.after[b].leaders for b in (1, 2)) == [2, 2]


def test_replicas_stay_in_their_topics_pool() -> None:
    brokers, assignment, loads = hot_cluster()
    pools = {1: "gold", 2: "gold", 3: "", 4: "gold"}
    brokers = [BrokerInfo(b.node_id, pool=pools[b.node_id]) for b in brokers]
    assignment = {tp: rs for tp, rs in assignment.items() if tp[0] == "hot"}
    plan = Planner(brokers, assignment, loads, topic_pools={"hot": "gold"}).plan()
    assert plan.moves
    for move in plan.moves:
        assert 3 not in move.after
    assert plan.after[3].replicas == 0


def test_a_topic_whose_pool_has_no_live_broker_is_a_clear_error() -> None:
    brokers, assignment, loads = hot_cluster()
    with pytest.raises(PlanError, match="no live broker is in pool 'silver'"):
        Planner(brokers, assignment, loads, topic_pools={"hot": "silver"})


def test_no_move_leaves_a_partition_in_fewer_racks() -> None:
    """Racks a, a, b, b: the hot partitions are on 1 (a) and 3 (b), and 2 and 4 are empty;
    every planned replica set still spans both racks."""
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    brokers = [BrokerInfo(b, racks[b]) for b in racks]
    assignment = {("hot", p): (1, 3) for p in range(4)}
    loads = {tp: PartitionLoad(MB, 1000, MB, 50 * MB) for tp in assignment}
    plan = Planner(brokers, assignment, loads).plan()
    assert plan.moves
    for tp, replicas in {**assignment, **plan.targets()}.items():
        assert {racks[r] for r in replicas} == {"a", "b"}, (tp, replicas)
    assert bytes_in_spread(plan.after) < 1.3


def test_partitions_already_moving_are_left_alone() -> None:
    brokers, assignment, loads = hot_cluster()
    moving = [("hot", 0), ("hot", 1)]
    plan = Planner(brokers, assignment, loads, moving=moving).plan()
    assert plan.skipped == moving
    assert not {m.partition for m in plan.moves} & set(moving)


def test_the_most_moves_is_kept() -> None:
    brokers, assignment, loads = hot_cluster()
    assert len(Planner(brokers, assignment, loads).plan(max_moves=1).moves) == 1
    with pytest.raises(PlanError):
        Planner(brokers, assignment, loads).plan(max_moves=-1)


def test_rates_sum_a_partitions_growth_over_brokers_and_survive_a_restarted_counter() -> None:
    """Leadership moved from broker 1 to 2 in the window: 1's counter grew by 1000, 2's
    started at 0 and reached 3000. Then broker 1 restarted: its counter went down."""
    early = {1: BrokerScrape(1, 0.0, {("t", 0): PartitionCounters(bytes_in=5000)}, {}),
             2: BrokerScrape(2, 0.0, {}, {})}  # fmt: skip
    late = {1: BrokerScrape(1, 2.0, {("t", 0): PartitionCounters(bytes_in=6000)},
                            {("t", 0): 700}),
            2: BrokerScrape(2, 2.0, {("t", 0): PartitionCounters(bytes_in=3000)},
                            {("t", 0): 900})}  # fmt: skip
    assert rates(early, late) == {("t", 0): PartitionLoad(bytes_in=2000.0, size=900.0)}
    restarted = {1: BrokerScrape(1, 4.0, {("t", 0): PartitionCounters(bytes_in=400)}, {}),
                 2: BrokerScrape(2, 4.0, {("t", 0): PartitionCounters(bytes_in=3000)}, {})}
    assert rates(late, restarted)[("t", 0)].bytes_in == 200.0


def test_the_median_of_windows_ignores_one_burst() -> None:
    history = LoadHistory(3)
    for bytes_in in (100.0, 90_000.0, 110.0):
        history.add({("t", 0): PartitionLoad(bytes_in=bytes_in)})
    assert history.median()[("t", 0)].bytes_in == 110.0


def test_a_brokers_metrics_page_is_read_into_counters_and_sizes() -> None:
    """The text as prometheus_client writes it (a counter's TYPE line names it with _total)."""
    text = (
        "# TYPE kafka_server_brokerpartitionmetrics_bytesin_total counter\n"
        'kafka_server_brokerpartitionmetrics_bytesin_total{topic="t",partition="1"} 4096.0\n'
        "# TYPE kafka_server_brokerpartitionmetrics_messagesin_total counter\n"
        'kafka_server_brokerpartitionmetrics_messagesin_total{topic="t",partition="1"} 8.0\n'
        "# TYPE kafka_log_log_size gauge\n"
        'kafka_log_log_size{topic="t",partition="1"} 12345.0\n'
        'kafka_log_log_size{topic="u",partition="0"} 10.0\n'
        "# TYPE kafka_server_replicamanager_leadercount gauge\n"
        "kafka_server_replicamanager_leadercount 3.0\n"
    )
    look = parse_scrape(7, 1.5, text)
    assert look.counters == {("t", 1): PartitionCounters(bytes_in=4096, messages_in=8)}
    assert look.sizes == {("t", 1): 12345, ("u", 0): 10}


def test_replicas_of_a_dead_broker_are_recreated_on_live_ones_of_the_pool_and_racks() -> None:
    """Broker 4 (rack b) is dead: each of its replicas goes to the live broker of rack b (3),
    keeping every partition in both racks; a partition of a pool without another live broker
    is reported, not moved."""
    racks = {1: "a", 2: "a", 3: "b"}
    brokers = [BrokerInfo(b, racks[b]) for b in racks]
    assignment = {("t", 0): (4, 1), ("t", 1): (2, 4), ("t", 2): (1, 3)}
    loads = {tp: PartitionLoad(1000, 10, 1000, MB) for tp in assignment}
    plan = Planner(brokers, assignment, loads).plan(heal={4})
    assert plan.targets() == {("t", 0): (3, 1), ("t", 1): (2, 3)}
    assert all(m.copy_bytes == MB for m in plan.moves)
    assert Planner(brokers, assignment, loads).plan().targets().keys().isdisjoint(
        {("t", 0), ("t", 1)})  # not healed yet: left alone  # fmt: skip

    pooled = [BrokerInfo(1, pool="p"), BrokerInfo(2), BrokerInfo(3)]
    plan = Planner(pooled, {("u", 0): (4, 1)}, {}, topic_pools={"u": "p"}).plan(heal={4})
    assert plan.moves == [] and plan.unhealed == [("u", 0)]


def test_each_pool_is_balanced_within_itself() -> None:
    """Pool "gold" (brokers 3, 4) carries a hot topic, the rest (1, 2) a cold one: the pools
    are not evened against each other, and within each the load ends even."""
    brokers = [BrokerInfo(1), BrokerInfo(2), BrokerInfo(3, pool="gold"), BrokerInfo(4, pool="gold")]
    assignment = {("hot", p): (3,) for p in range(4)} | {("cold", p): (1,) for p in range(4)}
    loads = {tp: PartitionLoad(MB if tp[0] == "hot" else 1000, 10, 0, MB) for tp in assignment}
    plan = Planner(brokers, assignment, loads, topic_pools={"hot": "gold"}).plan()
    assert spread(plan.before, "bytes_in", plan.pools) == float("inf")
    assert spread(plan.after, "bytes_in", plan.pools) == 1.0
    assert plan.imbalance_after == pytest.approx(0.0, abs=1e-9)
    assert spread(plan.after, "bytes_in") > 100  # across pools: left alone
