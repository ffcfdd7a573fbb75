"""The segment a log prepares ahead of its roll: made on the scheduler once the active segment is
halfway full, renamed into place by the roll (no file is created in the append that rolls), and
not used once the log's config changed; a crash leaves its files, which a load removes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from storage_helpers import OpenLog, all_values, batch

from weir.clock import FakeScheduler
from weir.storage import LogConfig, PartitionLog

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)
VALUE = b"x" * 150  # a batch of about 220 bytes: a segment rolls after four


def spare_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".next"))


def append(log: PartitionLog, i: int) -> None:
    log.append(batch([VALUE + b"%d" % i]), leader_epoch=0)


def test_the_roll_renames_the_segment_made_ahead_into_place(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    for i in range(3):
        append(log, i)
    assert spare_files(log.directory) == []  # prepared on the scheduler, not in the append
    scheduler.run_due()
    [spare_log] = [n for n in spare_files(log.directory) if ".log" in n]
    inode = os.stat(log.directory / spare_log).st_ino
    while len(log.segments) == 1:
        append(log, 9)
    assert spare_files(log.directory) == []
    assert os.stat(log.segments[-1].log_path).st_ino == inode
    assert log.segments[-1].base_offset == log.log_end_offset - 1
    assert [v for _, v in all_values(log)][-1] == VALUE + b"9"


def test_a_spare_made_under_an_older_config_is_not_used(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    for i in range(3):
        append(log, i)
    scheduler.run_due()
    assert spare_files(log.directory)
    log.config = dataclasses.replace(SMALL, segment_index_bytes=4096)
    while len(log.segments) == 1:
        append(log, 9)
    assert spare_files(log.directory) == []
    assert log.segments[0].offset_index.max_index_size == SMALL.segment_index_bytes
    assert log.segments[-1].offset_index.max_index_size == 4096


def test_a_load_removes_a_spare_a_crash_left(open_log: OpenLog, scheduler: FakeScheduler) -> None:
    log = open_log(SMALL)
    for i in range(3):
        append(log, i)
    scheduler.run_due()
    assert spare_files(log.directory)
    end = log.log_end_offset
    for segment in log.segments:  # a crash: nothing closed in order
        segment.close()
    reopened = open_log(SMALL)
    assert spare_files(log.directory) == []
    assert reopened.log_end_offset == end and len(reopened.segments) == 1
