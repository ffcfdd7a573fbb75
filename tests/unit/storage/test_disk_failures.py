"""The log engine on a disk that refuses writes: faults injected at chosen calls (diskio's fault
plan), since a real disk fails only where and when it likes. What must hold after every fault:
the failed append left nothing behind, what was appended before and after is read back intact at
its offsets, and a reload finds the same log."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import OpenLog, all_values, batch, commit

from weir import diskio
from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, LogManagerConfig, PartitionLog
from weir.storage.errors import LogDirectoryError, LogWriteError
from weir.storage.files import LOG_START_OFFSET_CHECKPOINT

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=100)


@pytest.fixture(autouse=True)
def no_faults_afterwards() -> Iterator[None]:
    yield
    diskio.install_faults(None)


def inject(text: str) -> None:
    diskio.install_faults(diskio.FaultPlan.parse(text))


def fill(log: PartitionLog, count: int, tag: bytes = b"v") -> list[tuple[int, bytes]]:
    acked = []
    for i in range(count):
        value = tag + b"%04d" % i * 10
        info = log.append(batch([value]), leader_epoch=0)
        commit(log)
        acked.append((info.first_offset, value))
    return acked


def reload(log: PartitionLog, tmp_path: Path, clock: FakeClock) -> PartitionLog:
    """Close the log's files without flushing (as a crash would) and load it again."""
    for segment in log.segments:
        segment.close()
    return PartitionLog(log.directory, log.config, clock, FakeScheduler(clock))


@pytest.mark.parametrize("call", [1, 7, 23])
def test_a_full_disk_refuses_one_append_and_leaves_no_trace(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock, call: int
) -> None:
    log = open_log(SMALL)
    acked = fill(log, 30, b"a")
    inject(f"segment:write:{call}:ENOSPC")
    refused = 0
    for i in range(40):
        value = b"b%04d" % i * 10
        sizes = [s.size for s in log.segments]
        try:
            info = log.append(batch([value]), leader_epoch=0)
        except LogWriteError as exc:
            assert isinstance(exc.__cause__, OSError) and exc.__cause__.errno == errno.ENOSPC
            refused += 1
            assert [s.size for s in log.segments] == sizes
            continue
        acked.append((info.first_offset, value))
    assert refused == 1
    assert [o for o, _ in acked] == list(range(len(acked)))
    assert all_values(log) == acked
    again = reload(log, tmp_path, clock)
    assert all_values(again) == acked
    assert again.load_report.truncated_bytes == 0


def test_index_entries_a_full_disk_has_no_room_for_are_skipped(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock
) -> None:
    """Indexes only shorten scans: the batches are appended, and found, without them."""
    log = open_log(SMALL)
    acked = fill(log, 30, b"a")
    inject("index:write:1+:ENOSPC")
    acked += fill(log, 60, b"b")
    assert all_values(log) == acked
    assert [log.read(o, 100).data.first_offset for o, _ in acked[::7]] == [o for o, _ in acked[::7]]  # type: ignore[union-attr]
    diskio.install_faults(None)
    again = reload(log, tmp_path, clock)
    assert all_values(again) == acked


def test_recovery_on_a_full_disk_loads_the_log_without_its_index_entries(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(SMALL)
    acked = fill(log, 60)
    inject("index:write:1+:ENOSPC")
    for segment in log.segments:
        segment.close()
    again = PartitionLog(log.directory, log.config, clock, FakeScheduler(clock))  # no clean mark
    assert all_values(again) == acked


def test_an_io_error_on_an_index_undoes_the_append(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    fill(log, 30)
    end, size = log.log_end_offset, log.active_segment.size
    inject("index:write:1:EIO")
    with pytest.raises(LogDirectoryError):
        fill(log, 20)
    assert log.active_segment.size <= size or log.log_end_offset > end


def test_a_torn_write_is_cut_back_before_the_next_append(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    fill(log, 3)
    size = log.active_segment.size
    inject("segment:write:1:ENOSPC")
    with pytest.raises(LogWriteError):
        log.append(batch([b"x" * 500]), leader_epoch=0)
    assert log.active_segment.size == size
    assert log.directory.joinpath(log.active_segment.log_path.name).stat().st_size == size
    info = log.append(batch([b"after"]), leader_epoch=0)
    assert info.first_offset == 3 and all_values(log, 3) == [(3, b"after")]


def test_an_io_error_is_a_directory_failure(open_log: OpenLog) -> None:
    log = open_log(SMALL)
    fill(log, 3)
    inject("segment:write:1:EIO")
    with pytest.raises(LogDirectoryError):
        log.append(batch([b"x"]), leader_epoch=0)
    assert log.log_end_offset == 3
    assert log.active_segment.size == os.fstat(log.active_segment.fd).st_size


def test_an_append_that_cannot_be_undone_leaves_the_log_unusable_until_reloaded(
    open_log: OpenLog, tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(SMALL)
    acked = fill(log, 5)
    inject("segment:write:1:ENOSPC,segment:truncate:1:EIO")
    with pytest.raises(LogDirectoryError):
        log.append(batch([b"x" * 300]), leader_epoch=0)
    log.take_offline("test")
    with pytest.raises(LogDirectoryError):
        log.append(batch([b"y"]), leader_epoch=0)
    with pytest.raises(LogDirectoryError):
        log.read(0, 1000)
    diskio.install_faults(None)
    again = reload(log, tmp_path, clock)
    assert all_values(again) == acked
    assert again.load_report.truncated_bytes > 0  # the torn half batch, cut by recovery


def test_a_segment_that_cannot_be_created_keeps_the_previous_one_active(
    open_log: OpenLog,
) -> None:
    log = open_log(LogConfig(segment_bytes=300, index_interval_bytes=100))
    acked = fill(log, 2)
    segments = len(log.segments)
    inject("index:truncate:1+:ENOSPC")
    with pytest.raises(LogWriteError):
        acked += fill(log, 20)
    assert len(log.segments) == segments
    assert sorted(p.name for p in log.directory.iterdir() if p.suffix == ".log") == [
        s.log_path.name for s in log.segments
    ]
    diskio.install_faults(None)
    offset = log.log_end_offset
    acked += fill(log, 10, b"c")
    assert acked[-1][0] == offset + 9
    assert all_values(log) == acked
    log.close()


def test_a_failed_flush_takes_the_directory_offline(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=1))
    inject("segment:sync:1:EIO")
    with pytest.raises(LogDirectoryError):
        log.append(batch([b"x"]), leader_epoch=0)


def test_checkpoints_that_cannot_be_written_keep_the_previous_file(
    tmp_path: Path, clock: FakeClock
) -> None:
    manager = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig())
    log = manager.get_or_create("t", 0)
    fill(log, 10)
    log.increment_log_start_offset(4)
    manager.checkpoint()
    before = (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text()
    log.increment_log_start_offset(6)
    inject("checkpoint:write:1+:ENOSPC")
    manager.checkpoint()
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text() == before
    assert not list(tmp_path.rglob("*.tmp"))
    manager.close()
    diskio.install_faults(None)
    again = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig())
    assert again.logs[("t", 0)].log_end_offset == 10
    again.close()


def test_one_failed_directory_takes_only_its_partitions_offline(
    tmp_path: Path, clock: FakeClock
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig())
    logs = {p: manager.get_or_create("t", p) for p in range(4)}
    placed = {p: manager.log_dir_of("t", p) for p in range(4)}
    assert sorted(str(d.path) for d in placed.values() if d) == sorted(map(str, dirs * 2))
    acked = {p: fill(logs[p], 5) for p in range(4)}
    failing = dirs[0]
    inject(f"segment:write:1+:EIO:{failing}")
    for p, log in logs.items():
        try:
            acked[p] += fill(log, 1, b"z")
        except LogDirectoryError as exc:
            assert placed[p] is not None and placed[p].path == failing
            manager.take_offline("t", p, str(exc))
    offline = {p for p in range(4) if logs[p].offline_reason is not None}
    assert offline == {p for p in range(4) if placed[p] and placed[p].path == failing}
    assert len(offline) == 2 and manager.offline_partitions == {("t", p) for p in offline}
    with pytest.raises(LogDirectoryError):
        manager.get_or_create("t", min(offline))
    assert manager.log_dir_of("t", 9) is None
    assert manager.get_or_create("t", 9).directory.parent == dirs[1]
    manager.close()
    assert not (failing / ".weir-clean-shutdown").exists()
    assert (dirs[1] / ".weir-clean-shutdown").exists()
    diskio.install_faults(None)
    again = LogManager(dirs, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig())
    for p in range(4):
        assert all_values(again.logs[("t", p)]) == acked[p]
    again.close()


def test_a_partition_in_two_directories_stops_the_start(tmp_path: Path, clock: FakeClock) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        (d / "t-0").mkdir(parents=True)
    with pytest.raises(Exception, match="is in both"):
        LogManager(dirs, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig())


def test_deleting_records_to_the_end_frees_the_active_segment(
    open_log: OpenLog, scheduler: FakeScheduler, clock: FakeClock
) -> None:
    log = open_log(LogConfig(file_delete_delay_ms=10))
    fill(log, 20)
    log.increment_log_start_offset(log.high_watermark)
    assert log.delete_old_segments(retention=False) == 1
    clock.advance(11)
    assert [p.name for p in log.directory.glob("*.log")] == [log.active_segment.log_path.name]
    assert log.active_segment.base_offset == 20 and log.log_start_offset == 20
    assert log.append(batch([b"next"]), leader_epoch=0).first_offset == 20
