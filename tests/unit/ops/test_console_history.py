"""The console's samples: throughput from log end offsets, lag series and Burrow statuses."""

from __future__ import annotations

from weir.cluster.consumer_lag import GroupStatus, PartitionStatus
from weir.ops.console.history import History, rates

T0 = 1_700_000_000_000


def test_rates_are_per_second_between_samples():
    assert rates([(T0, 0), (T0 + 2000, 10), (T0 + 3000, 10), (T0 + 4000, 4)]) == [
        (T0 + 2000, 5.0), (T0 + 3000, 0.0), (T0 + 4000, 0.0)]  # fmt: skip
    assert rates([(T0, 5)]) == []


def test_a_topics_throughput_adds_up_its_partitions():
    history = History()
    history.record_topics(T0, {("orders", 0): 10, ("orders", 1): 0, ("audit", 0): 3})
    history.record_topics(T0 + 1000, {("orders", 0): 15, ("orders", 1): 5, ("audit", 0): 3})
    assert history.throughput("orders") == [(T0 + 1000, 10.0)]
    assert history.throughput("audit") == [(T0 + 1000, 0.0)]
    assert history.last_sample_ms == T0 + 1000


def test_topics_and_groups_gone_from_the_cluster_are_forgotten():
    history = History()
    history.record_topics(T0, {("old", 0): 1})
    history.record_groups(T0, {"gone": {("old", 0): (0, 1)}})
    history.record_topics(T0 + 1000, {("new", 0): 1})
    history.record_groups(T0 + 1000, {})
    assert history.throughput("old") == []
    assert history.group_status("gone", T0 + 2000) is None


def test_only_the_last_samples_are_kept():
    history = History(limit=3)
    for i in range(10):
        history.record_topics(T0 + i * 1000, {("t", 0): i})
    assert [t for t, _ in history.throughput("t")] == [T0 + 8000, T0 + 9000]


def test_lag_series_total_and_per_partition():
    history = History()
    history.record_groups(T0, {"g": {("t", 0): (2, 10), ("t", 1): (5, 5)}})
    history.record_groups(T0 + 1000, {"g": {("t", 0): (4, 10), ("t", 1): (5, 7)}})
    assert history.lag("g") == {
        "total": [(T0, 8), (T0 + 1000, 8)],
        "t-0": [(T0, 8), (T0 + 1000, 6)],
        "t-1": [(T0, 0), (T0 + 1000, 2)],
    }
    assert history.lag("unknown") == {"total": []}


def test_statuses_follow_burrow():
    history = History()
    assert history.group_status("g", T0) is None  # not sampled yet
    history.record_groups(T0, {"g": {("t", 0): (10, 10), ("t", 1): (3, 9)}})
    # no commit since, lag left: partition 1 stopped (as `weir group lag` judges a sampler's view)
    statuses = history.statuses("g", T0 + 5000)
    assert statuses == {("t", 0): PartitionStatus.OK, ("t", 1): PartitionStatus.STOP}
    assert history.group_status("g", T0 + 5000) is GroupStatus.ERROR


def test_a_consumer_that_keeps_up_is_ok():
    history = History()
    for i in range(5):
        history.record_groups(T0 + i * 1000, {"g": {("t", 0): (i * 10, i * 10 + 2)}})
    assert history.group_status("g", T0 + 4500) is GroupStatus.OK
