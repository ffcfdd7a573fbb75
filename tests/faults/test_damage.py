"""Damaged files on disk: what loading a partition log makes of them.

Each test writes a real log, stops it (cleanly, or as a crash would: files closed, nothing
flushed or trimmed, no clean-shutdown marker), damages a file the way disks and crashes do, and
loads the directory again. A user then checks what was kept, what is served, and what the load
report says; so do these tests, against what was appended, never against the log's own view.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from logcheck import (
    ServedBatch,
    TimestampScan,
    abandon,
    check_indexes,
    check_timestamps,
    read_all,
)

from weir.clock import FakeClock, FakeScheduler
from weir.records import (
    BatchSpec,
    Compression,
    Record,
    build_batch,
    iter_batches,
    iter_records,
    set_base_offset,
    set_partition_leader_epoch,
)
from weir.storage import LogConfig, LogManager, LogManagerConfig, PartitionLog
from weir.storage.checkpoint import OffsetCheckpointFile
from weir.storage.cleaner import LogCleaner
from weir.storage.files import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    SEGMENT_SUFFIXES,
    segment_name,
)

OpenLog = Callable[..., PartitionLog]

EPOCH = 3
CONFIG = LogConfig(
    segment_bytes=8192,
    index_interval_bytes=600,
    segment_index_bytes=1200,
    retention_ms=-1,  # the timestamps are fixed, not relative to the clock
)
BASE_TIMESTAMP = 1_700_000_000_000
KNOWN_REASONS = ("CRC mismatch", "torn batch", "unknown magic")


@dataclass(frozen=True, slots=True)
class Appended:
    """A batch as the log must store it (offsets assigned, epoch stamped)."""

    base_offset: int
    last_offset: int
    raw: bytes


def random_batch(rng: random.Random, n: int) -> bytes:
    count = rng.randint(1, 10)
    first = BASE_TIMESTAMP + 10 * n + rng.randint(-25, 5)
    stamps = [first + i * rng.randint(0, 2) for i in range(count)]
    if rng.random() < 0.2:
        rng.shuffle(stamps)
    records = [
        Record(
            offset=i,
            timestamp=stamps[i],
            key=b"k%d" % rng.randrange(50) if rng.random() < 0.7 else None,
            value=b"batch %d record %d " % (n, i) + rng.randbytes(rng.randint(0, 120)),
        )
        for i in range(count)
    ]
    return build_batch(records, spec=BatchSpec(compression=rng.choice(list(Compression))))


def append_batches(log: PartitionLog, rng: random.Random, count: int) -> list[Appended]:
    appended = []
    for n in range(count):
        buf = bytearray(random_batch(rng, n))
        info = log.append(bytes(buf), leader_epoch=EPOCH)
        set_base_offset(buf, info.first_offset)
        set_partition_leader_epoch(buf, EPOCH)
        appended.append(Appended(info.first_offset, info.last_offset, bytes(buf)))
    return appended


@dataclass(frozen=True, slots=True)
class FileBatch:
    position: int
    size: int
    base_offset: int


def file_batches(path: Path) -> list[FileBatch]:
    """The batches of an intact `.log` file, parsed from its bytes."""
    return [
        FileBatch(h.position, h.size, h.base_offset)
        for h in iter_batches(path.read_bytes(), verify_crc=True)
    ]


def checked_bytes(batch: FileBatch) -> Iterator[int]:
    """File positions of the batch whose damage recovery can see: the length, then magic, CRC
    and everything the CRC covers. The base offset and the leader epoch are outside the CRC in
    record batch v2 (brokers rewrite them in place), so no broker can tell them damaged."""
    yield from range(batch.position + 8, batch.position + 12)
    yield from range(batch.position + 16, batch.position + batch.size)


def damage(path: Path, start: int, length: int, rng: random.Random) -> None:
    """Flip bits in `length` bytes from `start`: every byte in the run really changes."""
    data = bytearray(path.read_bytes())
    for i in range(start, min(start + length, len(data))):
        data[i] ^= rng.randint(1, 255)
    path.write_bytes(bytes(data))


def assert_serves_exactly(log: PartitionLog, expected: list[Appended]) -> list[ServedBatch]:
    served = read_all(log)
    assert [(b.base_offset, b.raw) for b in served] == [(e.base_offset, e.raw) for e in expected]
    return served


def assert_every_offset_readable(log: PartitionLog, expected: list[Appended]) -> None:
    """A read at any offset starts with the batch holding it, whatever the index says."""
    by_offset = {o: e for e in expected for o in range(e.base_offset, e.last_offset + 1)}
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 1, max_offset=log.log_end_offset).data
        assert data is not None, f"nothing served at {offset}"
        first = next(iter_batches(data.read_bytes(), verify_crc=True))
        assert bytes(first.buf[: first.size]) == by_offset[offset].raw, f"read at {offset}"


def timestamp_scan(served: list[ServedBatch]) -> TimestampScan:
    return TimestampScan((r.offset, r.timestamp) for b in served for r in iter_records(b.header))


def all_timestamp_targets(scan: TimestampScan) -> list[int]:
    stamps = sorted(set(scan.timestamps))
    return sorted({t + d for t in stamps for d in (-1, 0, 1)})


def keeps_working(log: PartitionLog) -> None:
    """The loaded log takes the next append at its log end offset and serves it."""
    end = log.log_end_offset
    batch = build_batch([Record(offset=0, timestamp=BASE_TIMESTAMP, key=None, value=b"after")])
    assert log.append(batch, leader_epoch=EPOCH).first_offset == end
    data = log.read(end, 1 << 20, max_offset=log.log_end_offset).data
    assert data is not None
    assert [r.value for h in iter_batches(data.read_bytes()) for r in iter_records(h)] == [b"after"]


# ---- damage to the log itself, after a crash --------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_damage_in_the_tail_of_the_active_segment_is_cut_off(open_log: OpenLog, seed: int) -> None:
    rng = random.Random(seed)
    log = open_log(CONFIG)
    appended = append_batches(log, rng, rng.randint(40, 80))
    assert len(log.segments) > 2
    log.flush()  # the older segments are below the recovery point: only the active is rescanned
    recovery_point = log.recovery_point
    active = log.active_segment.log_path
    abandon(log)

    victims = file_batches(active)
    victim = rng.choice(victims[-3:])
    start = rng.choice(list(checked_bytes(victim)))
    size = active.stat().st_size
    damage(active, start, rng.randint(1, 16), rng)

    reopened = open_log(CONFIG, recovery_point=recovery_point, clean_shutdown=False)
    assert reopened.log_end_offset == victim.base_offset
    assert_serves_exactly(reopened, [a for a in appended if a.base_offset < victim.base_offset])
    dropped = size - victim.position
    [problem] = reopened.load_report.problems
    prefix = f"{active.name}: dropped {dropped} bytes from position {victim.position}: "
    assert problem.startswith(prefix) and any(r in problem for r in KNOWN_REASONS), problem
    assert reopened.load_report.truncated_bytes == dropped
    assert reopened.load_report.recovered_segments == 1
    assert active.stat().st_size == victim.position
    keeps_working(reopened)


@pytest.mark.parametrize("seed", range(4))
def test_a_torn_write_at_the_end_of_the_active_segment_is_cut_off(
    open_log: OpenLog, seed: int
) -> None:
    rng = random.Random(50 + seed)
    log = open_log(CONFIG)
    appended = append_batches(log, rng, 50)
    log.flush()
    recovery_point = log.recovery_point
    active = log.active_segment.log_path
    abandon(log)
    last = file_batches(active)[-1]
    os.truncate(active, last.position + rng.randrange(1, last.size))  # inside the header too

    reopened = open_log(CONFIG, recovery_point=recovery_point, clean_shutdown=False)
    assert reopened.log_end_offset == last.base_offset
    assert_serves_exactly(reopened, appended[:-1])
    [problem] = reopened.load_report.problems
    assert problem.startswith(f"{active.name}: dropped ") and "torn batch" in problem, problem
    keeps_working(reopened)


@pytest.mark.parametrize("seed", range(4))
def test_damage_inside_an_older_segment_above_the_recovery_point(
    open_log: OpenLog, seed: int
) -> None:
    rng = random.Random(100 + seed)
    log = open_log(CONFIG)
    appended = append_batches(log, rng, 120)
    assert len(log.segments) >= 6
    segments = [s.log_path for s in log.segments]
    recovery_point = log.segments[2].base_offset  # segments 0 and 1 are below it
    abandon(log)

    damaged, later = segments[3], segments[4:]
    candidates = file_batches(damaged)
    victim = candidates[len(candidates) // 2]
    damage(damaged, rng.choice(list(checked_bytes(victim))), rng.randint(1, 8), rng)
    size = damaged.stat().st_size

    reopened = open_log(CONFIG, recovery_point=recovery_point, clean_shutdown=False)
    assert reopened.log_end_offset == victim.base_offset
    assert_serves_exactly(reopened, [a for a in appended if a.base_offset < victim.base_offset])
    report = reopened.load_report
    assert report.recovered_segments == 2  # segments 2 and 3; 0 and 1 are trusted
    dropped = size - victim.position
    first, *deleted = report.problems
    prefix = f"{damaged.name}: dropped {dropped} bytes from position {victim.position}: "
    assert first.startswith(prefix) and any(r in first for r in KNOWN_REASONS), first
    assert deleted == [
        f"deleted {p.name}: segments after the damage in {damaged.name}" for p in later
    ]
    assert not [p for p in later for s in SEGMENT_SUFFIXES if p.with_suffix(s).exists()]
    assert reopened.active_segment.log_path == damaged
    keeps_working(reopened)


# ---- damaged and missing indexes ------------------------------------------------------------


def write_and_close(open_log: OpenLog, seed: int, count: int = 120) -> list[Appended]:
    """A log of several segments, stopped cleanly (indexes trimmed, final entries written)."""
    log = open_log(CONFIG)
    appended = append_batches(log, random.Random(seed), count)
    assert len(log.segments) >= 5
    log.close()
    return appended


def segment_file(log_dir: Path, n: int, suffix: str) -> Path:
    """The file with `suffix` of the n-th segment (by base offset) in `log_dir`."""
    logs = sorted(log_dir.glob("*.log"))
    return logs[n].with_suffix(suffix)


@pytest.mark.parametrize("cut", ["half", "mid-entry", "empty"])
def test_a_truncated_offset_index_still_serves_every_offset(
    open_log: OpenLog, log_dir: Path, cut: str
) -> None:
    appended = write_and_close(open_log, seed=7)
    index = segment_file(log_dir, 2, ".index")
    entries = index.stat().st_size // 8
    assert entries >= 4
    keep = {"half": entries // 2 * 8, "mid-entry": entries // 2 * 8 + 3, "empty": 0}[cut]
    os.truncate(index, keep)

    reopened = open_log(CONFIG, clean_shutdown=True, recovery_point=appended[-1].last_offset + 1)
    served = assert_serves_exactly(reopened, appended)
    assert_every_offset_readable(reopened, appended)
    check_indexes(reopened, served)
    keeps_working(reopened)


@pytest.mark.parametrize("segment", [1, -1], ids=["older", "active"])
def test_a_deleted_time_index_is_rebuilt(open_log: OpenLog, log_dir: Path, segment: int) -> None:
    appended = write_and_close(open_log, seed=11)
    time_index = segment_file(log_dir, segment, ".timeindex")
    time_index.unlink()

    reopened = open_log(CONFIG, clean_shutdown=True, recovery_point=appended[-1].last_offset + 1)
    assert f"rebuilding missing index {time_index.name}" in reopened.load_report.problems
    assert time_index.exists()
    served = assert_serves_exactly(reopened, appended)
    check_indexes(reopened, served)
    scan = timestamp_scan(served)
    check_timestamps(reopened, scan, all_timestamp_targets(scan))


@pytest.mark.parametrize("seed", range(3))
def test_garbage_over_an_offset_index_is_detected_and_rebuilt(
    open_log: OpenLog, log_dir: Path, seed: int
) -> None:
    appended = write_and_close(open_log, seed=20 + seed)
    index = segment_file(log_dir, 2, ".index")
    index.write_bytes(random.Random(seed).randbytes(index.stat().st_size))

    reopened = open_log(CONFIG, clean_shutdown=True, recovery_point=appended[-1].last_offset + 1)
    [problem] = reopened.load_report.problems
    assert problem.startswith(f"rebuilding indexes of {index.with_suffix('.log').name}: ")
    assert reopened.load_report.recovered_segments == 1
    served = assert_serves_exactly(reopened, appended)
    check_indexes(reopened, served)
    assert_every_offset_readable(reopened, appended)


def test_a_recovered_segment_keeps_its_largest_timestamp_after_another_crash(
    open_log: OpenLog,
) -> None:
    """Two crashes in a row. The first load rescans the older segments (they are above the
    recovery point); after it the recovery point passes them, so the second load trusts them
    as they are. Their largest timestamps must still be known, or timestamp lookups skip them.
    (Kafka's LogSegment.recover appends the final time-index entry for this reason.)"""
    log = open_log(CONFIG)
    append_batches(log, random.Random(5), 120)
    abandon(log)
    first = open_log(CONFIG, recovery_point=0, clean_shutdown=False)
    assert first.load_report.recovered_segments == len(first.segments)
    first.flush()
    recovery_point = first.recovery_point
    abandon(first)

    second = open_log(CONFIG, recovery_point=recovery_point, clean_shutdown=False)
    assert second.load_report.recovered_segments == 1  # only the active segment
    served = read_all(second)
    scan = timestamp_scan(served)
    check_timestamps(second, scan, all_timestamp_targets(scan))


# ---- damaged checkpoints --------------------------------------------------------------------

GARBAGE = {
    "binary": random.Random(1).randbytes(64),
    "empty": b"",
    "unknown-version": b"7\n1\ntopic 0 5\n",
    "short": b"0\n3\ntopic 0 5\n",
    "not-a-number": b"0\n1\ntopic 0 five\n",
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
@pytest.mark.parametrize("checkpoint", [RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_a_garbage_checkpoint_file_still_loads_everything(
    tmp_path: Path, clock: FakeClock, garbage: bytes, checkpoint: str, stop: str
) -> None:
    def manager() -> LogManager:
        return LogManager(tmp_path, CONFIG, clock, FakeScheduler(clock), LogManagerConfig())

    first = manager()
    log = first.get_or_create("topic", 0)
    appended = append_batches(log, random.Random(3), 60)
    segments = len(log.segments)
    if stop == "clean":
        first.close()
    else:
        first.checkpoint()
        abandon(log)
    (tmp_path / checkpoint).write_bytes(garbage)

    second = manager()
    reloaded = second.get("topic", 0)
    assert reloaded is not None
    assert_serves_exactly(reloaded, appended)
    if stop == "crash" and checkpoint == RECOVERY_POINT_CHECKPOINT:
        assert reloaded.load_report.recovered_segments == segments  # no recovery point: all
    assert ("topic", 0) in OffsetCheckpointFile(tmp_path / checkpoint).read()  # rewritten
    keeps_working(reloaded)
    second.close()


# ---- compaction interrupted by a crash ----------------------------------------------------------

COMPACT = LogConfig(
    segment_bytes=8192,
    index_interval_bytes=200,
    segment_index_bytes=1200,
    cleanup_policy=("compact",),
    retention_ms=-1,
)
GROUP = 4  # non-active segments, compacted into one `.cleaned` segment
# .cleaned -> .swap (3 files), each old segment -> .deleted (3 files each), .swap -> live (3)
RENAMES = 3 + 3 * GROUP + 3
BETWEEN_STEPS = list(range(0, RENAMES + 1, 3))


class SimulatedCrash(Exception):
    pass


def write_compactable_log(log: PartitionLog, now: int) -> None:
    """GROUP small segments with repeated keys (each ends with a batch of a key of its own, so
    the compacted segment spans the same offsets), then an active segment."""
    rng = random.Random(42)
    for segment in range(GROUP + 1):
        for n in range(6):
            count = rng.randint(1, 3)
            records = [
                Record(
                    offset=i,
                    timestamp=now - 1000 + n,
                    key=b"k%d" % rng.randrange(6),
                    value=b"s%d b%d r%d" % (segment, n, i),
                )
                for i in range(count)
            ]
            log.append(build_batch(records), leader_epoch=EPOCH)
        tail = Record(offset=0, timestamp=now - 1000, key=b"tail-%d" % segment, value=b"kept")
        log.append(build_batch([tail]), leader_epoch=EPOCH)
        if segment < GROUP:
            log.roll()
    log.flush()


def compact_with_crash(
    log: PartitionLog, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, after: int | None
) -> int:
    """Compact `log`, crashing (an exception at the rename) once `after` renames are done;
    return how many renames were done."""
    done = 0
    rename = os.rename

    def crashing_rename(src: str | Path, dst: str | Path) -> None:
        nonlocal done
        if done == after:
            raise SimulatedCrash
        rename(src, dst)
        done += 1

    with monkeypatch.context() as patch:
        patch.setattr(os, "rename", crashing_rename)
        with contextlib.suppress(SimulatedCrash):
            LogCleaner(clock).clean(log)
    return done


def interrupted_compaction(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, renames: int
) -> tuple[PartitionLog, list[bytes], list[bytes]]:
    """(the log loaded after a crash once `renames` renames of a compaction were done, the
    batches before compaction, the batches after a compaction that ran to its end)."""
    logs: dict[str, PartitionLog] = {}
    for name, crash_after in (("reference", None), ("crashed", renames)):
        scheduler = FakeScheduler(clock)  # never advanced: `.deleted` files stay, as in a crash
        log = PartitionLog(tmp_path / name / "topic-0", COMPACT, clock, scheduler)
        write_compactable_log(log, clock.milliseconds())
        logs[name] = log
        if name == "reference":
            before = [b.raw for b in read_all(log, gaps=True)]
            assert compact_with_crash(log, clock, monkeypatch, None) == RENAMES
            after = [b.raw for b in read_all(log, gaps=True)]
            assert after != before and len(log.segments) == 2
        else:
            assert compact_with_crash(log, clock, monkeypatch, crash_after) == renames
        abandon(log)
    crashed = logs["crashed"]
    reloaded = PartitionLog(
        crashed.directory,
        COMPACT,
        clock,
        FakeScheduler(clock),
        recovery_point=crashed.log_end_offset,
        clean_shutdown=False,
    )
    return reloaded, before, after


@pytest.mark.parametrize("renames", range(RENAMES + 1))
def test_an_interrupted_compaction_loads_the_old_or_the_new_contents(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, renames: int
) -> None:
    """Before `.swap` exists the compaction never happened; from then on it has."""
    log, before, after = interrupted_compaction(tmp_path, clock, monkeypatch, renames)
    try:
        served = read_all(log, gaps=True)
        assert [b.raw for b in served] == (before if renames == 0 else after)
        check_indexes(log, served)
        keeps_working(log)
    finally:
        abandon(log)


def leftovers(log: PartitionLog) -> list[str]:
    """Files in the log's directory that belong to no live segment."""
    live = {
        segment_name(s.base_offset) + suffix for s in log.segments for suffix in SEGMENT_SUFFIXES
    }
    return sorted(
        p.name for p in log.directory.iterdir() if p.name not in live | {LEADER_EPOCH_CHECKPOINT}
    )


@pytest.mark.parametrize("renames", BETWEEN_STEPS)
def test_a_compaction_interrupted_between_steps_leaves_no_files_behind(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, renames: int
) -> None:
    """Crashes after `.cleaned` was written, after it became `.swap`, after each old segment
    became `.deleted`, and after the swap went live."""
    log, _, _ = interrupted_compaction(tmp_path, clock, monkeypatch, renames)
    try:
        assert leftovers(log) == []
    finally:
        abandon(log)


@pytest.mark.parametrize("renames", sorted(set(range(RENAMES + 1)) - set(BETWEEN_STEPS)))
def test_a_compaction_interrupted_inside_a_segment_rename_leaves_no_files_behind(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, renames: int
) -> None:
    """Crashes between the renames of one segment's three files (`.log` first, then `.index`,
    then `.timeindex`): index files must not outlive their log, in any suffix."""
    log, _, _ = interrupted_compaction(tmp_path, clock, monkeypatch, renames)
    try:
        assert leftovers(log) == []
    finally:
        abandon(log)
