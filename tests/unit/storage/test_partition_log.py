from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import OpenLog, all_values, batch, commit, readable_values

from weir.clock import FakeClock, FakeScheduler
from weir.records import BatchHeader, iter_batches, iter_records
from weir.storage import LogConfig, OffsetOutOfRangeError, PartitionLog
from weir.storage.config import TIMESTAMP_LOG_APPEND_TIME
from weir.storage.errors import InvalidOffsetError

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def test_append_assigns_offsets_and_stamps_the_leader_epoch(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append(batch([b"a", b"b", b"c"]), leader_epoch=4)
    second = log.append(batch([b"d"]), leader_epoch=5)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    headers = list(log.batches())
    assert [h.partition_leader_epoch for h in headers] == [4, 5]
    assert all(h.crc_ok() for h in headers)
    assert log.epoch_cache.entries == [(4, 0), (5, 3)]
    assert all_values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_segments_roll_on_size_and_reads_cross_them(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(40):
        log.append(batch([b"%03d" % i * 20]), leader_epoch=0)
    assert len(log.segments) > 3
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    assert all_values(log) == [(i, b"%03d" % i * 20) for i in range(40)]


def test_segments_roll_on_time(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_ms=1000))
    log.append(batch([b"x"], timestamp=clock.milliseconds()), leader_epoch=0)
    clock.advance(500)
    log.append(batch([b"y"], timestamp=clock.milliseconds()), leader_epoch=0)
    assert len(log.segments) == 1
    clock.advance(600)
    log.append(batch([b"z"], timestamp=clock.milliseconds()), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segments_roll_when_the_index_is_full(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 4))
    for i in range(12):
        log.append(batch([b"v%d" % i]), leader_epoch=0)
    assert len(log.segments) >= 2
    assert all(s.offset_index.entries <= 4 for s in log.segments)
    assert all_values(log) == [(i, b"v%d" % i) for i in range(12)]


def test_read_returns_whole_batches_within_max_bytes(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(10):
        log.append(batch([b"%d" % i * 100]), leader_epoch=0)
    commit(log)
    size = next(log.batches()).size
    info = log.read(2, 3 * size + size // 2)
    assert info.data is not None
    headers = list(iter_batches(info.data.read_bytes(), verify_crc=True))
    assert [h.base_offset for h in headers] == [2, 3, 4]


def test_read_returns_one_oversized_batch_kip74(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch([b"x" * 5000]), leader_epoch=0)
    commit(log)
    info = log.read(0, 100)
    assert info.data is not None and info.data.size > 5000
    assert log.read(0, 100, min_one_batch=False).data is None


def test_read_from_the_middle_of_a_batch_starts_at_that_batch(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch([b"a", b"b", b"c"]), leader_epoch=0)
    log.append(batch([b"d"]), leader_epoch=0)
    commit(log)
    info = log.read(1, 1 << 20)
    assert info.data is not None
    assert [h.base_offset for h in iter_batches(info.data.read_bytes())] == [0, 3]


def test_read_outside_the_log_is_out_of_range(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch([b"a"]), leader_epoch=0)
    assert log.read(1, 100).data is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)


def test_reads_stop_at_the_high_watermark_the_owner_sets(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(20):
        log.append(batch([b"%d" % i * 30]), leader_epoch=0)
    assert log.high_watermark == 0 and readable_values(log) == []  # appends do not move it
    log.update_high_watermark(7)
    assert [o for o, _ in readable_values(log)] == list(range(7))
    info = log.read(0, 1 << 20, max_offset=log.log_end_offset)
    assert info.data is not None and info.high_watermark == 7
    log.update_high_watermark(99)
    assert log.high_watermark == log.log_end_offset == 20  # never past the log end


def test_a_restart_restores_the_checkpointed_high_watermark(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    for i in range(10):
        log.append(batch([b"%d" % i * 30]), leader_epoch=0)
    log.close()
    again = PartitionLog(log.directory, SMALL, clock, scheduler, high_watermark=4)
    assert again.high_watermark == 4 and again.log_end_offset == 10
    again.close()
    past_the_end = PartitionLog(log.directory, SMALL, clock, scheduler, high_watermark=50)
    assert past_the_end.high_watermark == 10
    past_the_end.close()
    unknown = PartitionLog(log.directory, SMALL, clock, scheduler)
    assert unknown.high_watermark == 10  # none checkpointed: the log end
    unknown.close()


def test_a_flush_tells_the_owner_once_the_recovery_point_moved(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=3))
    seen: list[tuple[int, int]] = []
    log.on_flushed = lambda: seen.append((log.recovery_point, log.high_watermark))
    log.append(batch([b"a"]), leader_epoch=0)
    log.append(batch([b"b"]), leader_epoch=0)
    assert seen == [] and log.recovery_point == 0
    log.append(batch([b"c"]), leader_epoch=0)
    assert seen == [(3, 0)]  # flushed; the high watermark is the owner's to move


def test_flush_ms_policy(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(flush_ms=1000))
    log.append(batch([b"a"]), leader_epoch=0)
    log.flush_if_due()
    assert log.recovery_point == 0
    clock.advance(1001)
    log.flush_if_due()
    assert log.recovery_point == 1


def test_log_append_time_replaces_timestamps(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(message_timestamp_type=TIMESTAMP_LOG_APPEND_TIME))
    info = log.append(batch([b"a", b"b"], timestamp=5), leader_epoch=0)
    assert info.log_append_time == clock.milliseconds()
    header = next(log.batches())
    assert header.is_log_append_time and header.crc_ok()
    assert {r.timestamp for r in iter_records(header)} == {clock.milliseconds()}


def test_offset_for_timestamp_matches_a_linear_scan(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(50):
        log.append(batch([b"%d" % i * 20, b"y"], timestamp=1000 + 10 * i), leader_epoch=0)
    for target in (0, 1000, 1001, 1234, 1490, 1491):
        expected = next(
            ((o, 1000 + 10 * (o // 2)) for o in range(100) if 1000 + 10 * (o // 2) >= target), None
        )
        assert log.offset_for_timestamp(target) == expected
    assert log.max_timestamp_offset() == (98, 1490)  # the first record with the max


def test_truncate_to_removes_the_tail_and_later_segments(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(30):
        log.append(batch([b"%d" % i * 40]), leader_epoch=i // 10)
    commit(log)
    log.truncate_to(12)
    assert log.log_end_offset == 12 and log.high_watermark == 12
    assert [o for o, _ in all_values(log)] == list(range(12))
    assert log.epoch_cache.entries == [(0, 0), (1, 10)]
    info = log.append(batch([b"new"]), leader_epoch=3)
    assert info.first_offset == 12


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(10):
        log.append(batch([b"%d" % i * 100]), leader_epoch=0)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.append(batch([b"x"]), leader_epoch=1).first_offset == 500
    with pytest.raises(OffsetOutOfRangeError):
        log.read(10, 100)


def test_append_as_follower_keeps_offsets(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler
) -> None:
    leader = open_log(SMALL)
    for i in range(5):
        leader.append(batch([b"%d" % i, b"z"]), leader_epoch=2)
    commit(leader)
    info = leader.read(0, 1 << 20)
    assert info.data is not None
    raw = info.data.read_bytes()
    follower = PartitionLog(tmp_path / "topic-1", SMALL, clock, scheduler)
    try:
        assert follower.append_as_follower(raw) == 10
        assert all_values(follower) == all_values(leader)
        assert follower.epoch_cache.entries == [(2, 0)]
        with pytest.raises(InvalidOffsetError):
            follower.append_as_follower(raw)
    finally:
        follower.close()


def test_clean_restart_keeps_everything_without_rescanning(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(30):
        log.append(batch([b"%d" % i * 40], timestamp=i), leader_epoch=1)
    before = all_values(log)
    log.close()
    reopened = open_log(SMALL, clean_shutdown=True, recovery_point=log.recovery_point)
    assert reopened.load_report.recovered_segments == 0
    assert all_values(reopened) == before
    assert reopened.epoch_cache.entries == [(1, 0)]
    assert reopened.offset_for_timestamp(17) == (17, 17)
    assert reopened.append(batch([b"next"]), leader_epoch=1).first_offset == 30


def test_unclean_restart_rescans_from_the_recovery_point(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    for i in range(30):
        log.append(batch([b"%d" % i * 40]), leader_epoch=0)
    log.flush()
    boundary = log.segments[-2].base_offset
    for segment in log.segments:
        segment.close()
    reopened = open_log(SMALL, clean_shutdown=False, recovery_point=boundary)
    assert reopened.load_report.recovered_segments == 2
    assert [o for o, _ in all_values(reopened)] == list(range(30))


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(
    open_log: OpenLog, clock: FakeClock, scheduler: FakeScheduler
) -> None:
    log = open_log(LogConfig(segment_bytes=1000, retention_ms=10_000, file_delete_delay_ms=100))
    now = clock.milliseconds()
    for i in range(20):
        log.append(batch([b"%d" % i * 100], timestamp=now + i), leader_epoch=0)
    count = len(log.segments)
    assert log.delete_old_segments() == 0
    clock.advance(20_000)
    assert log.delete_old_segments() == count - 1
    assert len(log.segments) == 1 and log.log_start_offset == log.active_segment.base_offset
    leftovers = sorted(p.name for p in log.directory.iterdir() if p.name.endswith(".deleted"))
    assert leftovers
    clock.advance(101)
    assert not any(p.name.endswith(".deleted") for p in log.directory.iterdir())
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_size(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(LogConfig(segment_bytes=1000, retention_bytes=2500))
    for i in range(40):
        log.append(batch([b"%d" % i * 100], timestamp=clock.milliseconds()), leader_epoch=0)
    assert log.delete_old_segments() > 0
    assert 2500 <= log.size < 2500 + log.segments[0].size
    assert [o for o, _ in all_values(log, log.log_start_offset)][-1] == 39


def test_delete_records_moves_the_log_start_offset(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1000, index_interval_bytes=100, retention_ms=-1))
    for i in range(30):
        log.append(batch([b"%d" % i * 40]), leader_epoch=0)
    commit(log)
    log.increment_log_start_offset(15)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(14, 100)
    assert log.read(15, 100).data is not None
    removed = log.delete_old_segments()
    assert removed >= 1 and log.segments[0].base_offset <= 15 < log.segments[1].base_offset
    assert log.log_start_offset == 15
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(31)


def test_batches_keep_their_bytes_on_disk(open_log: OpenLog) -> None:
    log = open_log()
    original = bytearray(batch([b"k"], timestamp=99))
    log.append(bytes(original), leader_epoch=7)
    commit(log)
    stored = log.read(0, 100).data
    assert stored is not None
    raw = stored.read_bytes()
    assert raw[12:16] == (7).to_bytes(4, "big")
    assert raw[16:] == bytes(original[16:])
    assert BatchHeader(raw).crc == BatchHeader(bytes(original)).crc


def test_truncating_inside_a_batch_removes_that_whole_batch(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0))
    for i in range(6):
        log.append(batch([b"%d" % i, b"x", b"y"]), leader_epoch=0)
    log.truncate_to(10)  # inside the batch 9..11
    assert log.log_end_offset == 9
    segment = log.active_segment
    assert segment.offset_index.lookup(10**6)[1] < segment.size
    segment.validate_indexes()
    assert log.append(batch([b"z"]), leader_epoch=0).first_offset == 9
    assert [o for o, _ in all_values(log)] == list(range(10))
