"""Replication throttles on the leader's side, on fake time: a listed, out-of-sync follower gets
no records while the leader's measured rate is over `leader.replication.throttled.rate`, and
the bytes it is sent count; in-sync followers and unlisted partitions are never held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_replication import Leader

from weir.broker.quota_rate import QuotaWindow
from weir.broker.replica_manager import ReplicaManager
from weir.broker.replication_quota import FOLLOWER, LEADER, ReplicationQuota
from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, LogManagerConfig

MOVING = 3  # the replica a reassignment adds, out of the ISR
IN_SYNC = 1
BOUND = 1000  # bytes a second
#: less than the twenty batches a test writes in a second
SMALL_BOUND = 100
WINDOW = QuotaWindow(samples=11, size_ms=1000, min_windows=1)


def throttled(**listed: tuple[str, ...]) -> LogConfig:
    return LogConfig.from_properties(
        {name.replace("_", "."): ",".join(value) for name, value in listed.items()}, LogConfig()
    )


LISTED = throttled(leader_replication_throttled_replicas=("0:0", "0:1"))


@pytest.fixture
def leader(tmp_path: Path, clock: FakeClock) -> Iterator[Leader]:
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=0)
    replicas.replication_quotas.set_bounds(SMALL_BOUND, SMALL_BOUND)
    yield Leader(replicas, clock)
    logs.close()


@pytest.mark.parametrize(
    ("side", "replicas", "listed"),
    [
        (LEADER, ("0:0",), True),
        (LEADER, ("*",), True),
        (LEADER, ("0:1", "1:0"), False),
        (LEADER, (), False),
        (FOLLOWER, ("0:0",), True),
    ],
)
def test_a_topic_lists_this_brokers_replicas(
    side: str, replicas: tuple[str, ...], listed: bool
) -> None:
    config = throttled(**{f"{side}_replication_throttled_replicas": replicas})
    quota = ReplicationQuota(side, 0, WINDOW, BOUND)
    assert quota.listed(config, 0) is listed
    other_side = ReplicationQuota(LEADER if side == FOLLOWER else FOLLOWER, 0, WINDOW, BOUND)
    assert not other_side.listed(config, 0) or replicas == ()


def test_no_bound_holds_nothing() -> None:
    quota = ReplicationQuota(LEADER, 0, WINDOW)
    quota.record(10**12, 0)
    assert not quota.enabled
    assert not quota.holds(LISTED, 0, in_sync=False, now_ms=0)


def test_the_rate_holds_until_it_falls_back_within_the_bound() -> None:
    quota = ReplicationQuota(LEADER, 0, WINDOW, BOUND)
    assert not quota.holds(LISTED, 0, in_sync=False, now_ms=0)
    quota.record(20 * BOUND, 0)  # twenty times what the one second it is measured over allows
    assert quota.holds(LISTED, 0, in_sync=False, now_ms=0)
    assert not quota.holds(LISTED, 0, in_sync=True, now_ms=0)
    assert quota.hold_ms(0) > 0
    assert not quota.holds(LISTED, 0, in_sync=False, now_ms=21_000)


def test_an_out_of_sync_listed_follower_gets_no_records_over_the_bound(
    leader: Leader, clock: FakeClock
) -> None:
    leader.lead(replicas=(0, IN_SYNC, MOVING), isr=(0, IN_SYNC), config=LISTED)
    for _ in range(20):
        leader.produce(count=10)
    error, _, batches = leader.fetch(MOVING, 0)
    assert error.name == "none" and len(batches) == 20
    assert leader.replicas.replication_quotas.leader.exceeded(clock.monotonic_ms())
    # held: its offset still counts, no records come
    error, _, batches = leader.fetch(MOVING, 5)
    assert error.name == "none" and batches == []
    # the in-sync follower of the same partition is not held
    error, _, batches = leader.fetch(IN_SYNC, 0)
    assert len(batches) == 20
    clock.advance(60_000)
    error, _, batches = leader.fetch(MOVING, 0)
    assert len(batches) == 20


def test_a_partition_no_topic_lists_is_never_held(leader: Leader) -> None:
    leader.lead(replicas=(0, IN_SYNC, MOVING), isr=(0, IN_SYNC), config=LogConfig())
    for _ in range(20):
        leader.produce(count=10)
    for _ in range(3):
        _, _, batches = leader.fetch(MOVING, 0)
        assert len(batches) == 20
    assert leader.replicas.replication_quotas.leader.rate(0) == 0


def test_a_steady_copy_is_held_to_the_bound_through_window_expiry() -> None:
    """A copier reading 100-byte chunks whenever it is not held, for 30 s: about the bound
    every second, never a burst of many windows' worth."""
    quota = ReplicationQuota(LEADER, 0, WINDOW, BOUND)
    sent_by_second = [0] * 30
    for now in range(0, 30_000, 10):
        while not quota.holds(LISTED, 0, in_sync=False, now_ms=now):
            quota.record(100, now)
            sent_by_second[now // 1000] += 100
    assert max(sent_by_second) <= 2 * BOUND, sent_by_second
    assert abs(sum(sent_by_second) / 30 - BOUND) <= 0.1 * BOUND, sent_by_second
