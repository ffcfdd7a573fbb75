"""`weir operator` on a real skewed cluster: four brokers, a hot topic's replicas on brokers 1
and 2 only, a cold topic everywhere, idempotent acks=all producers running throughout.
`weir operator plan` measures the skew from the brokers' metrics; `weir operator balance` moves
replicas until the brokers' bytes in are even, a few moves at a time; a second plan measures
the spread again. Every acknowledged record is read back once, at its offset."""

from __future__ import annotations

import re
import time

import pytest
from cluster_brokers import create_topics
from confluent_kafka.admin import AdminClient, NewTopic
from operatorkit import (
    Load,
    bootstrap_of,
    check_nothing_lost,
    current_spread,
    start_four,
    weir_operator,
)

HOT, COLD = "hot", "cold"
#: hot: 4 partitions on brokers 1 and 2 only; cold: one partition led by each broker
HOT_ASSIGNMENT = [[1, 2], [2, 1], [1, 2], [2, 1]]
COLD_ASSIGNMENT = [[1, 2], [2, 3], [3, 4], [4, 1]]
HOT_RATE, COLD_RATE = 600, 40


@pytest.mark.slow
def test_a_hot_topic_on_two_of_four_brokers_is_balanced_with_nothing_lost(
    zookeeper, cluster_brokers, figure
) -> None:  # fmt: skip
    brokers = start_four(cluster_brokers, zookeeper)
    bootstrap = bootstrap_of(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(HOT, 4, replica_assignment=HOT_ASSIGNMENT),
                  NewTopic(COLD, 4, replica_assignment=COLD_ASSIGNMENT))  # fmt: skip
    loads = [Load(bootstrap, HOT, HOT_RATE), Load(bootstrap, COLD, COLD_RATE)]
    for load in loads:
        load.start()
    try:
        time.sleep(3)
        plan = weir_operator(brokers, "plan")
        assert plan.returncode == 0, plan.stderr
        before = current_spread(plan.stdout)
        balance = weir_operator(brokers, "balance", "--max-concurrent-moves", "2")
        assert balance.returncode == 0, balance.stdout + balance.stderr
        assert "moves done, 0 cancelled, 0 refused" in balance.stdout, balance.stdout
        again = weir_operator(brokers, "plan")
        assert again.returncode == 0, again.stderr
        after = current_spread(again.stdout)
    finally:
        for load in loads:
            load.stop()
    print(plan.stdout, balance.stdout, again.stdout, sep="\n")
    moves = len(re.findall(r"^started ", balance.stdout, re.M))
    figure("bytes-in max/min across brokers before balancing", before, "ratio")
    figure("bytes-in max/min across brokers after balancing", after, "ratio")
    figure("moves made", moves, "moves")
    assert before > 5, plan.stdout
    assert after < 1.6, again.stdout
    assert moves >= 2, balance.stdout
    replicas = {b for line in re.findall(r"^started hot-\d: \[.*\] -> \[(.*)\]", balance.stdout,
                                         re.M) for b in line.split(", ")}  # fmt: skip
    assert replicas & {"3", "4"}, balance.stdout
    for load in loads:
        check_nothing_lost(bootstrap, load)
        figure(f"{load.topic} records acknowledged and read back", load.total(), "records")


@pytest.mark.slow
def test_a_new_topic_is_placed_by_its_expected_traffic_before_any_arrives(
    zookeeper, cluster_brokers
) -> None:  # fmt: skip
    """Two idle topics on brokers 1 and 2 only: the one whose creator gave its expected rate
    (replica.placement.expected.bytes.per.second) counts its share of that rate as each
    partition's bytes in, so the plan spreads its bytes in evenly over the four brokers before
    any traffic arrives; the other counts for nothing but its replicas."""
    brokers = start_four(cluster_brokers, zookeeper)
    admin = AdminClient({"bootstrap.servers": bootstrap_of(brokers), "log_level": 0})
    expected = {"replica.placement.expected.bytes.per.second": "4000000"}
    create_topics(admin, NewTopic("expected", 4, replica_assignment=HOT_ASSIGNMENT,
                                  config=expected),
                  NewTopic("unknown", 4, replica_assignment=HOT_ASSIGNMENT))  # fmt: skip
    plan = weir_operator(brokers, "plan")
    assert plan.returncode == 0, plan.stderr
    rows = dict(re.findall(r"^(\d)\s+(\d+ -> \d+)", plan.stdout, re.M))
    # 4 replicas of 1 MB/s partitions each on brokers 1 and 2 (the unknown topic adds none)
    assert rows == {"1": "4000000 -> 2000000", "2": "4000000 -> 2000000",
                    "3": "0 -> 2000000", "4": "0 -> 2000000"}, plan.stdout  # fmt: skip
    moved = set(re.findall(r"^(\S+)-\d+\s+\S+\s+\S+\s+\d+$", plan.stdout, re.M))
    assert "expected" in moved, plan.stdout
