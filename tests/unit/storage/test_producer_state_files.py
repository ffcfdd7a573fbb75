"""Producer snapshots and aborted-transaction indexes as a partition log keeps them: snapshots at
every roll and at close, a load that resumes from the newest sound one (only the tail after it
is replayed), damaged files rebuilt from the log rather than trusted, and both kinds of file
going with the segments they describe (retention, truncation)."""

from __future__ import annotations

import dataclasses

from storage_helpers import OpenLog, batch

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, PartitionLog
from weir.storage.cleaner import LogCleaner
from weir.storage.files import TRANSACTIONS_MARKER
from weir.storage.producer_snapshot import ProducerSnapshotEntry, snapshot_path
from weir.storage.txn_index import AbortedTxn

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0)
COMPACT = dataclasses.replace(SMALL, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)


class Producers:
    """Stands in for the broker's producer state: one producer whose last offset is the log's
    last one."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        log.producer_state_source = self

    def __call__(self) -> list[ProducerSnapshotEntry]:
        last = self.log.log_end_offset - 1
        return [ProducerSnapshotEntry(7, 0, last_sequence=last, last_offset=last)]


def _fill(log: PartitionLog, scheduler: FakeScheduler, count: int, timestamp: int = 0) -> None:
    """Append `count` batches, with what the scheduler does meanwhile: each roll's producer
    snapshot is written there."""
    for i in range(count):
        log.append(batch([b"%04d" % i * 10], timestamp), leader_epoch=0)
        scheduler.run_due()


def _reopen(log: PartitionLog, open_log: OpenLog, *, crash: bool = False) -> PartitionLog:
    """The log as the next start sees it: after a clean close, or a kill -9 after its last
    flush (only what the recovery point covers is known to be on disk)."""
    recovery_point = log.recovery_point
    if not crash:
        log.close()
    return open_log(SMALL, recovery_point=recovery_point, clean_shutdown=not crash)


def test_each_roll_on_append_snapshots_the_state_as_of_the_new_segment(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 40)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    assert log.snapshots.offsets == bases[1:]
    snapshot = log.snapshots.read(bases[2])
    assert snapshot.entries[0].last_offset == bases[2] - 1  # the batches below it, no more


def test_a_clean_restart_replays_nothing(open_log: OpenLog, scheduler: FakeScheduler) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 40)
    end = log.log_end_offset
    reopened = _reopen(log, open_log)
    replay = reopened.producer_state_replay()
    assert list(replay.batches) == []
    assert replay.snapshot is not None and replay.snapshot.offset == end
    assert reopened.load_report.replayed_batches == 0


def test_after_a_crash_only_the_tail_past_the_last_snapshot_is_replayed(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 60)
    log.flush()
    _fill(log, scheduler, 5)  # not flushed: past the recovery point
    flushed = log.recovery_point
    reopened = _reopen(log, open_log, crash=True)
    replay = reopened.producer_state_replay()
    batches = list(replay.batches)
    assert replay.snapshot is not None
    assert replay.start_offset == max(o for o in log.snapshots.offsets if o <= flushed)
    assert [fields.base_offset for fields, _ in batches] == list(range(replay.start_offset, 65))
    assert reopened.load_report.replayed_batches == len(batches) < 15
    assert all(o <= flushed for o in reopened.snapshots.offsets)


def test_a_torn_snapshot_is_ignored_and_an_older_one_used(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 40)
    end = log.log_end_offset
    log.close()
    newest = snapshot_path(log.directory, end)
    newest.write_bytes(newest.read_bytes()[:-5])
    reopened = open_log(SMALL, recovery_point=end, clean_shutdown=True)
    replay = reopened.producer_state_replay()
    assert (
        replay.snapshot is not None and replay.snapshot.offset == reopened.segments[-1].base_offset
    )
    assert [f.base_offset for f, _ in replay.batches] == list(range(replay.start_offset, end))
    assert not newest.exists()
    assert any("ignoring producer snapshot" in p for p in reopened.load_report.problems)


def test_without_snapshots_a_log_with_transactions_is_replayed_whole(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    """A log an older weir wrote: the marker says it holds transactions, no snapshot says
    where their state stands."""
    log = open_log(SMALL)
    _fill(log, scheduler, 30)
    log.note_transactions()
    reopened = _reopen(log, open_log)
    assert not reopened.snapshots.offsets
    replay = reopened.producer_state_replay()
    assert replay.snapshot is None and replay.start_offset == 0
    assert len(list(replay.batches)) == 30
    assert (reopened.directory / TRANSACTIONS_MARKER).exists()


def test_aborted_transactions_are_indexed_where_their_marker_is_and_collected_across_segments(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    _fill(log, scheduler, 40)
    bases = [s.base_offset for s in log.segments]
    first = AbortedTxn(7, 1, bases[1] + 1, bases[1] + 2)
    second = AbortedTxn(8, bases[1] + 3, bases[3], bases[3] + 1)
    for txn in (first, second):
        log.index_aborted_txn(txn)
    assert log.segments[1].txn_index.entries() == [first]
    assert log.segments[3].txn_index.entries() == [second]
    assert not log.segments[2].txn_index.path.exists()
    assert log.collect_aborted_txns(0, 2) == [first]
    assert log.collect_aborted_txns(bases[1] + 2, bases[1] + 4) == [second]
    assert log.collect_aborted_txns(bases[3] + 1, 40) == []


def test_a_damaged_txnindex_is_rebuilt_by_replaying_from_before_its_segment(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 40)
    damaged = log.segments[2]
    log.index_aborted_txn(AbortedTxn(7, 0, damaged.base_offset, damaged.base_offset + 1))
    path = damaged.txn_index.path
    end = log.log_end_offset
    log.close()
    with path.open("ab") as file:
        file.write(b"\x00\x01\x02")  # a torn entry
    reopened = open_log(SMALL, recovery_point=end, clean_shutdown=True)
    assert not path.exists()
    assert any(path.name in p for p in reopened.load_report.problems)
    replay = reopened.producer_state_replay()
    assert replay.start_offset <= damaged.base_offset  # the replay re-indexes its aborts


def test_truncation_drops_snapshots_and_index_entries_past_the_point(
    open_log: OpenLog, scheduler: FakeScheduler
) -> None:
    log = open_log(SMALL)
    Producers(log)
    _fill(log, scheduler, 40)
    bases = [s.base_offset for s in log.segments]
    log.index_aborted_txn(AbortedTxn(7, 0, bases[2] + 1, bases[2] + 2))
    log.index_aborted_txn(AbortedTxn(8, 0, bases[2] + 3, bases[2] + 4))
    log.truncate_to(bases[2] + 2)
    assert log.snapshots.offsets == bases[1:3]
    assert log.collect_aborted_txns(0, 40) == [AbortedTxn(7, 0, bases[2] + 1, bases[2] + 2)]
    log.truncate_fully_and_start_at(100)
    assert log.snapshots.offsets == [] and not list(log.directory.glob("*.txnindex"))


def test_retention_deletes_the_snapshots_and_txnindex_of_old_segments(
    open_log: OpenLog, clock: FakeClock, scheduler: FakeScheduler
) -> None:
    log = open_log(dataclasses.replace(SMALL, retention_bytes=3000))
    Producers(log)
    _fill(log, scheduler, 40, clock.milliseconds())  # recent: only retention.bytes deletes
    for segment in log.segments[:-1]:
        log.index_aborted_txn(AbortedTxn(7, 0, segment.base_offset, segment.base_offset + 1))
    assert log.delete_old_segments() > 0
    clock.advance(1)
    scheduler.run_due()
    first = log.segments[0].base_offset
    names = [p.name for p in log.directory.iterdir()]
    assert not [n for n in names if n.endswith((".txnindex", ".snapshot", ".deleted"))
                and int(n.split(".")[0]) < first]  # fmt: skip
    assert any(n.endswith(".txnindex") for n in names) and log.snapshots.offsets[0] >= first


def test_compaction_output_keeps_the_aborted_transactions_of_its_inputs(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(COMPACT)
    for i in range(40):
        log.append(batch([b"v%04d" % i * 5], keys=[b"k%d" % (i % 3)]), leader_epoch=0)
    log.roll()
    marker = log.segments[1].base_offset
    log.index_aborted_txn(AbortedTxn(7, 0, marker, marker + 1))
    assert LogCleaner(clock).clean(log) > 0
    assert log.collect_aborted_txns(0, 40) == [AbortedTxn(7, 0, marker, marker + 1)]
