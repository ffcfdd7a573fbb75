"""The per-partition offset tracker: a commit never passes an unfinished record."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.consumer.offsets import COMPACT_AFTER, OffsetTracker


def fetched_offsets(start: int, gaps: list[int]) -> list[int]:
    offsets, offset = [], start
    for gap in gaps:
        offsets.append(offset)
        offset += gap
    return offsets


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int | None, list[int], list[tuple[str, list[int]]]]:
    """A start, the fetched offsets (gaps allowed, as compaction leaves them), and a random
    interleaving of fetches (in order, in batches) and finishes (any subset, any order)."""
    start = draw(st.none() | st.integers(0, 10**12))
    gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=120))
    offsets = fetched_offsets(start or 0, gaps)
    rng = random.Random(draw(st.integers(0, 2**32)))
    steps: list[tuple[str, list[int]]] = []
    fetched = 0
    pending: list[int] = []
    while fetched < len(offsets) or pending:
        if fetched < len(offsets) and (not pending or rng.random() < 0.5):
            batch = offsets[fetched : fetched + rng.randint(1, 10)]
            fetched += len(batch)
            pending += batch
            steps.append(("fetch", batch))
        else:
            done = rng.sample(pending, rng.randint(1, len(pending)))
            if rng.random() < 0.3:
                done = sorted(done)  # in order, as a worker of an ordered lane finishes them
            pending = [o for o in pending if o not in set(done)]
            steps.append(("finish", done))
    return start, offsets, steps


@settings(max_examples=400, deadline=None)
@given(schedules())
def test_out_of_order_completion_never_commits_past_an_unfinished_record(
    schedule: tuple[int | None, list[int], list[tuple[str, list[int]]]],
) -> None:
    start, _offsets, steps = schedule
    tracker = OffsetTracker(start)
    unfinished: set[int] = set()
    last_fetched: int | None = None
    previous = tracker.committable()
    assert previous == start
    for action, offsets in steps:
        if action == "fetch":
            tracker.fetched(offsets)
            unfinished.update(offsets)
            last_fetched = offsets[-1]
        else:
            tracker.finished(offsets)
            unfinished.difference_update(offsets)
        committable = tracker.committable()
        assert committable is not None
        if unfinished:
            # as far as allowed, and no further: exactly the first unfinished record
            assert committable == min(unfinished)
        else:
            assert last_fetched is not None and committable == last_fetched + 1
        assert previous is None or committable >= previous, "the committable offset went back"
        assert tracker.unfinished == len(unfinished)
        previous = committable


def test_nothing_fetched_commits_nothing_new() -> None:
    assert OffsetTracker().committable() is None
    assert OffsetTracker(start=42).committable() == 42


def test_gaps_left_by_compaction_are_not_waited_for() -> None:
    tracker = OffsetTracker(start=10)
    tracker.fetched([10, 13, 20])
    tracker.finished([20, 10])
    assert tracker.committable() == 13
    tracker.finished([13])
    assert tracker.committable() == 21


def test_a_straggler_holds_back_a_long_finished_run_then_releases_it() -> None:
    tracker = OffsetTracker()
    count = COMPACT_AFTER * 3
    tracker.fetched(list(range(count)))
    tracker.finished(list(range(COMPACT_AFTER * 2)))  # in order: compacts
    tracker.finished(list(range(COMPACT_AFTER * 2 + 1, count)))
    assert tracker.committable() == COMPACT_AFTER * 2
    assert tracker.unfinished == 1
    tracker.finished([COMPACT_AFTER * 2])
    assert tracker.committable() == count
    assert tracker.unfinished == 0
    tracker.fetched([count + 5])
    assert tracker.committable() == count + 5


def test_offsets_fetched_twice_are_refused() -> None:
    tracker = OffsetTracker()
    tracker.fetched([5, 6, 7])
    with pytest.raises(ValueError, match="offset 7 fetched after 7"):
        tracker.fetched([7, 8])
