from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from storage_helpers import batch

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, LogManagerConfig
from weir.storage.checkpoint import OffsetCheckpointFile

FAST = LogManagerConfig(
    retention_check_interval_ms=1000,
    flush_check_interval_ms=100,
    checkpoint_interval_ms=500,
    cleaner_backoff_ms=1000,
)


def manager(path: Path, clock: FakeClock, **configs: LogConfig) -> LogManager:
    return LogManager(
        path,
        LogConfig(segment_bytes=1000),
        clock,
        FakeScheduler(clock),
        FAST,
        {name.replace("_", "."): c for name, c in configs.items()},
    )


def test_logs_are_found_again_after_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    first = manager(tmp_path, clock)
    for partition in range(3):
        log = first.get_or_create("events.v1", partition)
        for i in range(partition + 1):
            log.append(batch([b"%d" % i]), leader_epoch=0)
    first.close()
    assert (tmp_path / ".weir-clean-shutdown").exists()
    second = manager(tmp_path, clock)
    assert sorted(tp for tp, _ in second) == [("events.v1", 0), ("events.v1", 1), ("events.v1", 2)]
    assert [second.logs[("events.v1", p)].log_end_offset for p in range(3)] == [1, 2, 3]
    assert all(log.load_report.recovered_segments == 0 for _, log in second)
    assert not (tmp_path / ".weir-clean-shutdown").exists()
    second.close()


def test_checkpoints_are_written_periodically(tmp_path: Path, clock: FakeClock) -> None:
    mgr = manager(tmp_path, clock, topic=LogConfig(flush_ms=50))
    log = mgr.get_or_create("topic", 0)
    log.append(batch([b"a", b"b"]), leader_epoch=0)
    clock.advance(600)
    points = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert points == {("topic", 0): 2}
    mgr.close()


def test_retention_runs_on_the_scheduler(tmp_path: Path, clock: FakeClock) -> None:
    mgr = manager(
        tmp_path,
        clock,
        short=LogConfig(segment_bytes=500, retention_ms=2000, file_delete_delay_ms=0),
    )
    log = mgr.get_or_create("short", 0)
    for i in range(20):
        log.append(batch([b"%d" % i * 100], timestamp=clock.milliseconds()), leader_epoch=0)
    segments = len(log.segments)
    clock.advance(1000)
    assert len(log.segments) == segments
    clock.advance(2000)
    assert len(log.segments) == 1
    assert log.log_start_offset == log.active_segment.base_offset
    mgr.close()


def test_deleting_a_partition_removes_its_directory(tmp_path: Path, clock: FakeClock) -> None:
    mgr = manager(tmp_path, clock)
    mgr.get_or_create("gone", 0).append(batch([b"x"]), leader_epoch=0)
    mgr.delete("gone", 0)
    assert mgr.get("gone", 0) is None
    assert not any(p.name.startswith("gone") for p in tmp_path.iterdir())
    mgr.close()
    assert sorted(tp for tp, _ in manager(tmp_path, clock)) == []


def test_a_detached_partition_can_be_made_again_before_its_files_are_deleted(
    tmp_path: Path, clock: FakeClock
) -> None:
    """StopReplica with delete: the loop only closes the log and renames its directory; the
    same partition may be created again at once (a move back), and the old files go later."""
    mgr = manager(tmp_path, clock)
    mgr.get_or_create("moved", 0).append(batch([b"old"]), leader_epoch=0)
    detached = mgr.detach_many([("moved", 0)])
    assert mgr.get("moved", 0) is None
    assert [p.name.endswith("-delete") for p, _ in detached] == [True]
    again = mgr.get_or_create("moved", 0)
    assert again.log_end_offset == 0, "a fresh log, not the old files"
    mgr.remove_detached(detached)
    assert not any(p.exists() for p, _ in detached)
    assert [d.name for d in tmp_path.iterdir() if d.name.startswith("moved")] == ["moved-0"]
    mgr.close()


def test_files_deleted_after_the_manager_closed_leave_its_checkpoints_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    mgr = manager(tmp_path, clock)
    mgr.get_or_create("kept", 0).append(batch([b"x"]), leader_epoch=0)
    mgr.get_or_create("moved", 0).append(batch([b"x"]), leader_epoch=0)
    detached = mgr.detach_many([("moved", 0)])
    mgr.close()
    mgr.remove_detached(detached)
    points = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert ("kept", 0) in points and ("moved", 0) not in points


def test_unclean_restart_recovers_from_checkpointed_recovery_points(
    tmp_path: Path, clock: FakeClock
) -> None:
    first = manager(tmp_path, clock)
    log = first.get_or_create("t", 0)
    for i in range(30):
        log.append(batch([b"%d" % i * 60]), leader_epoch=0)
    log.flush()
    first.checkpoint()
    log.append(batch([b"late"]), leader_epoch=0)
    log.flush()
    for segment in log.segments:  # crash: nothing closed cleanly, no marker
        segment.close()
    second = manager(tmp_path, clock)
    recovered = second.logs[("t", 0)]
    assert recovered.log_end_offset == 31
    assert recovered.load_report.recovered_segments == 1
    second.close()


def test_checkpoints_written_from_two_threads_at_once_are_all_written(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler's periodic checkpoint and a partition deletion on another thread both
    write the checkpoint files; neither may lose its temporary file to the other."""
    logs = manager(tmp_path, clock)
    partitions = 40
    for index in range(partitions):
        logs.get_or_create("t", index)
    stop = threading.Event()

    def checkpoint_repeatedly() -> None:
        while not stop.is_set():
            logs.checkpoint()

    writer = threading.Thread(target=checkpoint_repeatedly)
    with caplog.at_level(logging.WARNING, logger="weir.storage"):
        writer.start()
        try:
            for index in range(partitions):
                logs.delete("t", index)
        finally:
            stop.set()
            writer.join()
    assert [r.getMessage() for r in caplog.records if "not written" in r.getMessage()] == []
    assert OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read() == {}
