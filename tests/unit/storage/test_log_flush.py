"""Flushing a partition log: the sync runs without the log's lock (appends and reads go on while
the disk is slow), the recovery point moves only to where the log ended when the flush began,
a truncation meanwhile keeps it from moving at all, and a flush that `flush.messages` makes due
is either run by the append or handed over, with waiters told when it is done or failed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import OpenLog, all_values, batch

from weir import diskio
from weir.storage import LogConfig, PartitionLog
from weir.storage.errors import LogDirectoryError
from weir.storage.flush_stats import FLUSHES

STALL_MS = 1500


@pytest.fixture(autouse=True)
def no_faults_afterwards() -> Iterator[None]:
    yield
    diskio.install_faults(None)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"  # where `open_log` opens the log


def fill(log: PartitionLog, count: int, tag: bytes = b"v", **kwargs: bool) -> None:
    for i in range(count):
        log.append(batch([tag + b"%d" % i]), leader_epoch=0, **kwargs)


def stalled_flush(log: PartitionLog, log_dir: Path) -> threading.Thread:
    """A flush on another thread whose fdatasync of the log's segments stalls for STALL_MS."""
    diskio.install_faults(diskio.FaultPlan.parse(f"segment:sync:1+:delay={STALL_MS}:{log_dir}"))
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    time.sleep(0.3)  # well inside the stalled sync
    return flusher


def test_appends_and_reads_go_on_while_a_flush_waits_on_the_disk(
    open_log: OpenLog, log_dir: Path
) -> None:
    log = open_log(LogConfig())
    fill(log, 5)
    flusher = stalled_flush(log, log_dir)
    start = time.monotonic()
    log.append(batch([b"during"]), leader_epoch=0)
    values = all_values(log)
    took = time.monotonic() - start
    assert flusher.is_alive(), "the flush ended before the append: nothing was shown"
    assert took < 0.5, f"an append and a read waited {took:.3f}s for another thread's fdatasync"
    assert values[-1] == (5, b"during")
    flusher.join()
    assert log.recovery_point == 5  # where the log ended when the flush began
    diskio.install_faults(None)
    log.flush()
    assert log.recovery_point == 6


def test_a_truncation_during_a_flush_keeps_the_recovery_point_where_it_was(
    open_log: OpenLog, log_dir: Path
) -> None:
    log = open_log(LogConfig())
    fill(log, 5)
    flusher = stalled_flush(log, log_dir)
    log.truncate_to(2)
    fill(log, 3, b"new")  # offsets 2..4 again, none of them synced
    flusher.join()
    assert log.recovery_point == 0
    assert all_values(log)[2:] == [(2, b"new0"), (3, b"new1"), (4, b"new2")]


def test_a_due_flush_runs_in_the_append_unless_it_is_handed_over(open_log: OpenLog) -> None:
    log = open_log(LogConfig(flush_messages=2))
    fill(log, 2)
    assert log.recovery_point == 2  # no requester: the append flushed

    requests: list[int] = []
    told: list[bool] = []
    log.flush_requester = lambda: requests.append(log.log_end_offset)
    waits = []
    for value in (b"a", b"b", b"c"):
        end = log.append(batch([value]), leader_epoch=0, defer_sync=True).last_offset + 1
        waits.append(log.awaits_sync(end))
    assert waits == [False, True, True]  # the first of two records is acknowledged at once
    assert requests == [4]  # one request while it is pending
    assert log.recovery_point == 2 and log.awaits_sync(5)
    log.when_flushed(5, told.append)
    assert told == []
    log.flush()
    assert told == [True] and log.recovery_point == 5 and not log.awaits_sync(5)
    log.when_flushed(5, told.append)
    assert told == [True, True]  # flushed already: told at once


def test_a_failed_flush_tells_those_waiting(open_log: OpenLog, log_dir: Path) -> None:
    log = open_log(LogConfig())
    fill(log, 3)
    told: list[bool] = []
    log.when_flushed(3, told.append)
    diskio.install_faults(diskio.FaultPlan.parse(f"segment:sync:1:EIO:{log_dir}"))
    with pytest.raises(LogDirectoryError):
        log.flush()
    assert told == [False] and log.recovery_point == 0


def test_a_waiter_that_fails_does_not_stop_the_flush_or_the_others(open_log: OpenLog) -> None:
    log = open_log(LogConfig())
    fill(log, 3)
    told: list[bool] = []

    def closed_loop(_: bool) -> None:
        raise RuntimeError("Event loop is closed")

    log.when_flushed(3, closed_loop)
    log.when_flushed(3, told.append)
    log.flush()
    assert told == [True] and log.recovery_point == 3


def test_each_flush_is_timed_for_the_metrics(open_log: OpenLog) -> None:
    log = open_log(LogConfig())
    before = FLUSHES.copy()
    fill(log, 3)
    log.flush()
    after = FLUSHES.copy()
    assert after.count == before.count + 1
    assert after.sum_ns > before.sum_ns
    assert sum(after.buckets) == after.count
