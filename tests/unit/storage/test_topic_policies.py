"""Topic configs the log engine honours: min.cleanable.dirty.ratio and max.compaction.lag.ms
in the cleaner, segment.jitter.ms and max.compaction.lag.ms in rolling, preallocate."""

from __future__ import annotations

import os

from storage_helpers import OpenLog, batch

from weir.clock import FakeClock
from weir.storage import LogConfig
from weir.storage.cleaner import LogCleaner

COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy=("compact",),
                    delete_retention_ms=1000, retention_ms=-1)  # fmt: skip


def fill(log, clock: FakeClock, keys: range, tag: bytes = b"v") -> None:  # type: ignore[no-untyped-def]
    for key in keys:
        value = tag + b"%d-" % key + b"x" * 40
        log.append(batch([value], timestamp=clock.milliseconds(), keys=[b"k%d" % key]),
                   leader_epoch=0)  # fmt: skip


def test_the_cleaner_waits_until_enough_of_the_log_is_dirty(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(LogConfig.from_properties({"min.cleanable.dirty.ratio": "0.5"}, COMPACT))
    cleaner = LogCleaner(clock)
    fill(log, clock, range(60))
    log.roll()
    assert cleaner.clean(log) == 0  # every key once: nothing to drop, but now all is clean
    assert cleaner.state_of(log).first_dirty_offset == log.log_end_offset
    fill(log, clock, range(5), b"w")  # a little dirt: below half of the cleanable bytes
    log.roll()
    before = [s.base_offset for s in log.segments]
    assert cleaner.clean(log) == 0 and [s.base_offset for s in log.segments] == before
    assert cleaner.state_of(log).first_dirty_offset < log.log_end_offset
    fill(log, clock, range(60), b"z")  # now most of it is dirty
    log.roll()
    assert cleaner.clean(log) > 0
    assert cleaner.state_of(log).first_dirty_offset == log.log_end_offset


def test_max_compaction_lag_cleans_a_little_dirt_once_it_is_old(
    open_log: OpenLog, clock: FakeClock
) -> None:
    config = LogConfig.from_properties(
        {"min.cleanable.dirty.ratio": "0.9", "max.compaction.lag.ms": "5000"}, COMPACT
    )
    log = open_log(config)
    cleaner = LogCleaner(clock)
    fill(log, clock, range(60))
    log.roll()
    cleaner.clean(log)
    fill(log, clock, range(3), b"w")
    log.roll()
    assert cleaner.clean(log) == 0
    clock.advance(5001)
    assert cleaner.clean(log) > 0


def test_tombstones_kept_by_one_pass_are_dropped_by_a_later_one(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(COMPACT)
    cleaner = LogCleaner(clock)
    log.append(batch([b"v"], timestamp=clock.milliseconds(), keys=[b"a"]), leader_epoch=0)
    log.append(batch([None], timestamp=clock.milliseconds(), keys=[b"a"]), leader_epoch=0)  # type: ignore[list-item]
    log.roll()
    cleaner.clean(log)
    assert cleaner.state_of(log).tombstones_due_ms == clock.milliseconds() + 1001
    clock.advance(500)
    assert cleaner.clean(log) == 0
    clock.advance(501)
    assert cleaner.clean(log) == 1 and cleaner.state_of(log).tombstones_due_ms is None


def test_segments_roll_early_by_their_jitter(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_ms=10_000, segment_jitter_ms=4_000))
    log.append(batch([b"a"], timestamp=clock.milliseconds()), leader_epoch=0)
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 4_000
    late = clock.milliseconds() + 10_000 - jitter + 1
    log.append(batch([b"b"], timestamp=late), leader_epoch=0)
    assert len(log.segments) == 2


def test_a_compacted_topic_rolls_in_time_for_max_compaction_lag(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(LogConfig(cleanup_policy=("compact",), max_compaction_lag_ms=1_000))
    now = clock.milliseconds()
    log.append(batch([b"a"], timestamp=now, keys=[b"k"]), leader_epoch=0)
    log.append(batch([b"b"], timestamp=now + 1_001, keys=[b"k"]), leader_epoch=0)
    assert len(log.segments) == 2


def test_preallocated_space_is_reserved_then_given_back_at_the_roll(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1 << 20, preallocate=True))
    log.append(batch([b"a" * 100]), leader_epoch=0)
    first = log.active_segment
    assert os.fstat(first.fd).st_blocks * 512 >= 1 << 20
    assert os.fstat(first.fd).st_size == first.size
    log.roll()
    assert os.fstat(first.fd).st_blocks * 512 < 1 << 16
    assert first.log_path.read_bytes()[: first.size] == first.log_path.read_bytes()
