"""Burrow's lag rules over windows of observations."""

from __future__ import annotations

import pytest

from weir.cluster.consumer_lag import (
    GroupStatus,
    LagWindow,
    Observation,
    PartitionStatus,
    group_status,
    partition_status,
)


def window(*points: tuple[int, int], step_ms: int = 1000) -> list[Observation]:
    """(offset, lag) a second apart."""
    return [Observation(offset, lag, i * step_ms) for i, (offset, lag) in enumerate(points)]


NOW = 4000  # a second after the last of five


@pytest.mark.parametrize(
    ("points", "now", "expected"),
    [
        (((10, 5), (20, 0), (30, 5)), 3000, PartitionStatus.OK),  # caught up once
        (((10, 5), (20, 6), (30, 2), (40, 3), (50, 4)), NOW, PartitionStatus.OK),
        (((10, 5), (20, 6), (30, 7), (40, 8), (50, 9)), NOW, PartitionStatus.WARNING),
        (((10, 5), (10, 6), (10, 7), (10, 8), (10, 9)), NOW, PartitionStatus.STALL),
        (((10, 5), (10, 5), (10, 5), (10, 5), (10, 5)), NOW, PartitionStatus.STALL),
        (((10, 5), (30, 6), (20, 7), (40, 8), (50, 9)), NOW, PartitionStatus.REWIND),
        (((10, 5), (20, 6), (30, 7)), 60_000, PartitionStatus.STOP),  # no commit for long
        (((10, 5),), 1000, PartitionStatus.STOP),
        (((10, 5),), 0, PartitionStatus.OK),
        (((10, 0), (10, 0)), 60_000, PartitionStatus.OK),  # no lag: never an error
        ((), 0, PartitionStatus.OK),
    ],
)
def test_burrows_rules(points: tuple[tuple[int, int], ...], now: int, expected: PartitionStatus):
    assert partition_status(window(*points), now) is expected


def test_a_group_is_as_bad_as_its_worst_partition() -> None:
    assert group_status([]) is GroupStatus.OK
    assert group_status([PartitionStatus.OK, PartitionStatus.WARNING]) is GroupStatus.WARNING
    for bad in (PartitionStatus.STOP, PartitionStatus.STALL, PartitionStatus.REWIND):
        assert group_status([PartitionStatus.WARNING, bad]) is GroupStatus.ERROR


def test_a_window_keeps_its_size_and_a_sampler_keeps_only_changes() -> None:
    kept = LagWindow(size=3)
    for i in range(5):
        kept.add(Observation(i, 1, i))
    assert [o.offset for o in kept.observations] == [2, 3, 4]
    sampled = LagWindow()
    for t in range(4):
        sampled.add(Observation(7, 2, t), changes_only=True)
    assert len(sampled.observations) == 1
    sampled.add(Observation(7, 3, 5), changes_only=True)
    assert len(sampled.observations) == 2
