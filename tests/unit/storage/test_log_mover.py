"""Moving a partition's log to another log directory (AlterReplicaLogDirs): the future log
filled from the current one, the swap, and what a crash in the middle leaves at the next start.
Real files in two directories, fake time."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import all_values, batch, commit

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, PartitionLog
from weir.storage.log_mover import FutureLog
from weir.storage.txn_index import AbortedTxn

TOPIC = "moving"


def manager(dirs: list[Path], clock: FakeClock) -> LogManager:
    return LogManager(dirs, LogConfig(segment_bytes=600), clock, FakeScheduler(clock))


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "dir-a", tmp_path / "dir-b"]


def fill(log: PartitionLog, start: int, count: int, epoch: int = 0) -> None:
    for i in range(start, start + count):
        log.append(batch([b"record-%04d" % i, b"second-%04d" % i]), leader_epoch=epoch)
    commit(log)


def copy_until_caught_up(moving: FutureLog, step_bytes: int = 500) -> int:
    steps = 0
    while not moving.copy_step(step_bytes).caught_up:
        steps += 1
    return steps


def the_other(mgr: LogManager, log: PartitionLog) -> int:
    """The index of the directory `log` is not in."""
    return 1 if log.directory.parent == mgr.dirs[0].path else 0


def test_a_moved_log_reads_back_the_same_from_its_new_directory(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 30, epoch=1)
    fill(source, 30, 10, epoch=3)
    source.index_aborted_txn(AbortedTxn(producer_id=7, first_offset=4, last_offset=9,
                                        last_stable_offset=4))  # fmt: skip
    source.increment_log_start_offset(6)
    source.update_high_watermark(70)
    target = mgr.dirs[the_other(mgr, source)]
    old_path = source.directory
    before = all_values(source, 6)
    epochs = list(source.epoch_cache.entries)

    moving = mgr.create_future_log(TOPIC, 0, target)
    assert moving.log.directory.name.startswith(f"{TOPIC}-0.")
    assert moving.log.directory.name.endswith("-future")
    assert copy_until_caught_up(moving) > 3, "the copy went in several steps"
    fill(source, 40, 5, epoch=3)  # appended while the copy went on: `finish` copies them
    source.update_high_watermark(75)
    assert moving.offset_lag == 10
    moved, old = mgr.replace_current_with_future(TOPIC, 0)
    mgr.complete_move(moved, old)

    assert moved.directory == target.path / f"{TOPIC}-0"
    assert not old_path.exists() and not list(old_path.parent.glob(f"{TOPIC}-0*"))
    assert mgr.get(TOPIC, 0) is moved and mgr.log_dir_of(TOPIC, 0) is target
    assert mgr.future_of(TOPIC, 0) is None
    assert all_values(moved, 6) == before + [
        (80 + 2 * i + k, b"%s-%04d" % (name, 40 + i))
        for i in range(5) for k, name in enumerate((b"record", b"second"))
    ]  # fmt: skip
    assert (moved.log_start_offset, moved.high_watermark, moved.log_end_offset) == (6, 75, 90)
    assert moved.epoch_cache.entries[-1] == epochs[-1]
    assert moved.collect_aborted_txns(0, 90) == [AbortedTxn(7, 4, 9, 4)]
    segments = len(moved.segments)
    for i in range(45, 60):  # appends go on into the new directory, past a roll
        moved.append(batch([b"after-%04d" % i]), leader_epoch=3)
    assert moved.log_end_offset == 105 and len(moved.segments) > segments
    mgr.close()

    again = manager(dirs, clock)
    reloaded = again.get(TOPIC, 0)
    assert reloaded is not None and reloaded.directory == target.path / f"{TOPIC}-0"
    assert (reloaded.log_start_offset, reloaded.high_watermark, reloaded.log_end_offset) == (
        6, 75, 105)  # fmt: skip
    assert all_values(reloaded, 6)[: len(before)] == before
    again.close()


def test_a_partial_future_log_is_resumed_at_the_next_start(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 40)
    before = all_values(source)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    for _ in range(3):
        assert not moving.copy_step(300).caught_up
    future_dir, copied = moving.log.directory, moving.log.log_end_offset
    with (future_dir / f"{moving.log.segments[-1].base_offset:020d}.log").open("ab") as torn:
        torn.write(b"\x00\x00\x00\x00\x00\x00\x00\x50half a batch")
    # a crash: nothing closed, nothing checkpointed since the copy began

    again = manager(dirs, clock)
    reloaded = again.get(TOPIC, 0)
    assert reloaded is not None and reloaded.directory == source.directory
    assert all_values(reloaded) == before, "the current log is intact"
    resumed = again.future_of(TOPIC, 0)
    assert resumed is not None and resumed.log.directory == future_dir
    assert 0 < resumed.log.log_end_offset <= copied, "the torn tail was cut"
    copy_until_caught_up(resumed)
    moved, old = again.replace_current_with_future(TOPIC, 0)
    again.complete_move(moved, old)
    assert all_values(moved) == before
    again.close()


def test_a_future_log_closed_with_its_broker_is_resumed_where_it_stood(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 40)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    moving.copy_step(300)
    copied = moving.log.log_end_offset
    mgr.close()
    again = manager(dirs, clock)
    resumed = again.future_of(TOPIC, 0)
    assert resumed is not None and resumed.log.log_end_offset == copied
    assert [m.tp for m in again.futures()] == [(TOPIC, 0)]
    again.delete(TOPIC, 0)
    assert not resumed.log.directory.exists()
    again.close()


def test_a_crash_between_the_swaps_renames_completes_the_move_at_the_next_start(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 40)
    before = all_values(source)
    target = mgr.dirs[the_other(mgr, source)]
    moving = mgr.create_future_log(TOPIC, 0, target)
    copy_until_caught_up(moving)
    moving.finish()
    moving.log.close()
    # the swap's first rename happened, the second did not
    source.directory.rename(source.directory.with_name(f"{TOPIC}-0.0123abcd-delete"))

    again = manager(dirs, clock)
    reloaded = again.get(TOPIC, 0)
    assert reloaded is not None and reloaded.directory == target.path / f"{TOPIC}-0"
    assert all_values(reloaded) == before
    assert not list(source.directory.parent.glob(f"{TOPIC}-0*"))
    again.close()


def test_the_copy_follows_a_truncation_of_the_current_log(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 20, epoch=1)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    copy_until_caught_up(moving)
    source.truncate_to(24)  # a follower whose log diverged from its new leader's
    fill(source, 100, 10, epoch=2)
    copy_until_caught_up(moving)
    moving.finish()
    assert all_values(moving.log) == all_values(source)
    assert moving.log.epoch_cache.entries == [(1, 0), (2, 24)]
    mgr.close()


def test_the_copy_starts_again_when_retention_passed_it(dirs: list[Path], clock: FakeClock) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 40)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    moving.copy_step(100)
    source.increment_log_start_offset(60)
    source.delete_old_segments(retention=False)
    copy_until_caught_up(moving)
    moving.finish()
    assert moving.log.log_start_offset == 60
    assert all_values(moving.log, 60) == all_values(source, 60)
    mgr.close()


def test_deleting_a_moving_partition_deletes_its_future_log_too(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 10)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    moving.copy_step(100)
    mgr.delete(TOPIC, 0)
    assert not moving.log.directory.exists() and not source.directory.exists()
    assert mgr.future_of(TOPIC, 0) is None
    mgr.close()


def test_a_partition_named_for_a_directory_before_it_exists_is_created_there(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    first = mgr.get_or_create(TOPIC, 0)
    crowded = mgr.dirs[0] if first.directory.parent == dirs[0] else mgr.dirs[1]
    mgr.prefer_dir(TOPIC, 1, crowded)
    assert mgr.get_or_create(TOPIC, 1).directory.parent == crowded.path
    mgr.close()


def test_a_log_with_every_record_deleted_moves_as_an_empty_log_at_its_end(
    dirs: list[Path], clock: FakeClock
) -> None:
    mgr = manager(dirs, clock)
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 20)
    source.increment_log_start_offset(40)
    source.delete_old_segments(retention=False)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    assert moving.copy_step(500).caught_up
    moved, old = mgr.replace_current_with_future(TOPIC, 0)
    mgr.complete_move(moved, old)
    assert (moved.log_start_offset, moved.log_end_offset, moved.high_watermark) == (40, 40, 40)
    fill(moved, 20, 1)
    assert all_values(moved, 40) == [(40, b"record-0020"), (41, b"second-0020")]
    mgr.close()


def test_a_sync_waited_for_on_the_old_log_is_answered_by_the_new_one(
    dirs: list[Path], clock: FakeClock
) -> None:
    config = LogConfig(segment_bytes=600, flush_messages=1)
    mgr = LogManager(dirs, config, clock, FakeScheduler(clock), topic_configs={TOPIC: config})
    source = mgr.get_or_create(TOPIC, 0)
    fill(source, 0, 10)
    moving = mgr.create_future_log(TOPIC, 0, mgr.dirs[the_other(mgr, source)])
    copy_until_caught_up(moving)
    source.append(batch([b"acks-all"]), leader_epoch=0, defer_sync=True)  # its flush waits
    answers: list[bool] = []
    source.when_flushed(21, answers.append)
    assert source.awaits_sync(21) and answers == []
    moved, old = mgr.replace_current_with_future(TOPIC, 0)
    assert moved.awaits_sync(21), "a produce acknowledged after the swap still waits"
    mgr.complete_move(moved, old)
    assert answers == [True] and moved.recovery_point == 21
    mgr.close()
