"""Crash recovery with real processes: a writer is killed with SIGKILL, again and again.

Each round starts `crash_writer.py` on the same data directory, lets it append (an fsync per
append) for a random moment after its first acknowledgement, and kills it. Every other kill is
aimed at the write of a huge batch instead: a kill cuts a write only between two pages, so random
kills seldom tear one. The directory is then copied as the kill left it and the copy is loaded
in-process as the next start would load it (no clean-shutdown marker, recovery points from the
checkpoint file); the next writer recovers the original on its own. What must hold after every
kill:

* every acknowledged batch is served at its acknowledged offsets, byte for byte;
* offsets run contiguously from 0 to the log end offset and every batch's CRC is valid: nothing
  after a torn write is served; a batch written but not acknowledged may survive, intact;
* so the log is exactly a prefix of the writer's deterministic stream;
* offset and time indexes agree with the data, and timestamp lookups with a linear scan;
* the next writer carries on exactly where the inspection of the copy said the log ends.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from crash_writer import (
    LEADER_EPOCH,
    LOG_CONFIG,
    MANAGER_CONFIG,
    PARTITION,
    TOPIC,
    build_stream_batch,
    is_huge,
    stream_records,
)
from logcheck import ServedBatch, TimestampScan, check_indexes, check_timestamps, read_all

from weir.clock import FakeClock, FakeScheduler
from weir.records import Record, iter_records, set_base_offset, set_partition_leader_epoch
from weir.storage import LoadReport, LogManager, PartitionLog
from weir.storage.checkpoint import OffsetCheckpointFile
from weir.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    SEGMENT_SUFFIXES,
    parse_base_offset,
)

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 40
SEED = 20261121
ACK_TIMEOUT_S = 60.0
AIM_EVERY = 2  # every other kill is aimed at the write of a huge batch
AIM_WINDOW_S = (0.001, 0.005)  # after the ack before it: build, roll, then the write
RECENT_SEGMENTS = 25  # where the last kills' recoveries happened
SAMPLED_SEGMENTS = 15


@dataclass(frozen=True, slots=True)
class Ack:
    first_offset: int
    last_offset: int
    seq: int


class Stream:
    """What the log must hold: the writer's deterministic stream, worked out as far as needed."""

    def __init__(self) -> None:
        self.ends: list[int] = []  # ends[n]: the offset after batch n
        self.stored: list[bytes] = []  # batch n as the log must store it
        self.scan = TimestampScan()
        self._undecoded: dict[int, list[Record]] = {}

    def base(self, seq: int) -> int:
        self.extend_to(seq - 1)
        return self.ends[seq - 1] if seq else 0

    def end(self, seq: int) -> int:
        self.extend_to(seq)
        return self.ends[seq]

    def extend_to(self, seq: int) -> None:
        while len(self.ends) <= seq:
            n, base = len(self.ends), (self.ends[-1] if self.ends else 0)
            records, codec = stream_records(n)
            buf = bytearray(build_stream_batch(records, codec))
            set_base_offset(buf, base)  # what the log does on append
            set_partition_leader_epoch(buf, LEADER_EPOCH)
            self.stored.append(bytes(buf))
            self.ends.append(base + len(records))
            self.scan.extend((base + r.offset, r.timestamp) for r in records)
            self._undecoded[n] = [replace(r, offset=base + r.offset) for r in records]

    def take_records(self, seq: int) -> list[Record] | None:
        """Batch `seq`'s records the first time they are asked for, then None."""
        self.extend_to(seq)
        return self._undecoded.pop(seq, None)


@dataclass
class Inspection:
    batches: int  # how many batches of the stream the log holds
    report: LoadReport


class Inspector:
    """Checks a loaded log against the stream."""

    def __init__(self) -> None:
        self.stream = Stream()
        self.acknowledged = 0  # batches 0 .. acknowledged-1 were acknowledged by some writer
        self._rng = random.Random(SEED + 1)

    def inspect(self, log: PartitionLog) -> Inspection:
        served = read_all(log)
        for seq, batch in enumerate(served):
            self._check_batch(seq, batch)
        count = len(served)
        assert self.acknowledged <= count <= self.acknowledged + 1, (
            f"the log holds {count} batches; {self.acknowledged} were acknowledged and at most "
            "one more was being written"
        )
        assert log.log_end_offset == self.stream.base(count)
        check_indexes(log, served)
        self._check_timestamps(log, served)
        # A kill leaves the page cache behind, so whatever was written before it is whole: the
        # only damage is a torn write at the end of the last segment; no index is ever rebuilt.
        torn = f"{log.active_segment.log_path.name}: dropped "
        for problem in log.load_report.problems:
            assert problem.startswith(torn) and "torn batch" in problem, log.load_report
        return Inspection(count, log.load_report)

    def _check_batch(self, seq: int, batch: ServedBatch) -> None:
        self.stream.extend_to(seq)
        assert batch.raw == self.stream.stored[seq], (
            f"batch {seq} at offset {batch.base_offset} ({batch.segment}@{batch.position}) "
            "differs from what was appended"
        )
        records = self.stream.take_records(seq)
        if records is not None:  # the bytes are the same every time: decoding once will do
            assert list(iter_records(batch.header)) == records, f"records of batch {seq}"

    def _check_timestamps(self, log: PartitionLog, served: list[ServedBatch]) -> None:
        """Segments' largest timestamps (a stale segment maximum misdirects exactly those
        lookups), some random timestamps, and both ends."""
        scan = self.stream.scan
        low, high = min(scan.timestamps), scan.max_entry(log.log_end_offset)[1]
        maxima: dict[str, int] = {}
        for batch in served:
            maxima[batch.segment] = max(maxima.get(batch.segment, -1), batch.max_timestamp)
        per_segment = list(maxima.values())
        targets = per_segment[-RECENT_SEGMENTS:]
        targets += self._rng.sample(per_segment, min(SAMPLED_SEGMENTS, len(per_segment)))
        targets += [self._rng.randint(low - 100, high + 10) for _ in range(10)]
        targets += [low - 100, low, high, high + 1]
        check_timestamps(log, scan, targets)


def open_manager(data_dir: Path) -> LogManager:
    clock = FakeClock()
    return LogManager(data_dir, LOG_CONFIG, clock, FakeScheduler(clock), MANAGER_CONFIG)


def partition_log(manager: LogManager) -> PartitionLog:
    log = manager.get(TOPIC, PARTITION)
    assert log is not None, f"{TOPIC}-{PARTITION} was not found in {manager.data_dir}"
    return log


def run_writer_until_killed(
    data_dir: Path, work: Path, linger_s: float, aim_at: int | None = None
) -> list[Ack]:
    """Start the writer and SIGKILL it `linger_s` after its first acknowledgement, or, when
    aiming at batch `aim_at`, that long after the acknowledgement of the batch before it.
    Return the acknowledgements the writer completed."""
    acks_path, errors_path = work / "acks", work / "stderr"
    work.mkdir()
    with open(acks_path, "wb") as out, open(errors_path, "wb") as err:
        writer = subprocess.Popen(
            [sys.executable, str(WRITER), str(data_dir)], stdout=out, stderr=err
        )
    try:
        _wait_for_ack(writer, acks_path, errors_path, 0 if aim_at is None else aim_at - 1)
        time.sleep(linger_s)
        assert writer.poll() is None, f"writer exited early: {errors_path.read_text()}"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        if writer.poll() is None:
            os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    return read_acks(acks_path)


def read_acks(path: Path) -> list[Ack]:
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]  # a line cut by the kill was not acknowledged
    return [Ack(*map(int, line.split())) for line in complete.splitlines()]


def last_acknowledged(path: Path) -> int:
    """The sequence number of the last complete acknowledgement line, -1 if none."""
    data = path.read_bytes()
    end = data.rfind(b"\n")
    return -1 if end < 0 else int(data[data.rfind(b"\n", 0, end) + 1 : end].split()[2])


def _wait_for_ack(writer: subprocess.Popen[bytes], acks: Path, errors: Path, seq: int) -> None:
    """Poll until batch `seq` (or a later one) is acknowledged."""
    deadline = time.monotonic() + ACK_TIMEOUT_S
    while last_acknowledged(acks) < seq:
        if writer.poll() is not None:
            pytest.fail(f"writer exited with {writer.returncode}: {errors.read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"batch {seq} not acknowledged within {ACK_TIMEOUT_S} s")
        time.sleep(0.0002)


def next_huge_batch(after: int) -> int:
    return next(seq for seq in itertools.count(after + 1) if is_huge(seq))


def check_acks(acks: list[Ack], stream: Stream, first_seq: int) -> None:
    """The writer went on from where the log ended, and got the offsets the stream implies."""
    assert acks, "the writer was killed before any acknowledgement was complete"
    assert [a.seq for a in acks] == list(range(first_seq, first_seq + len(acks)))
    for ack in acks:
        expected = (stream.base(ack.seq), stream.end(ack.seq) - 1)
        assert (ack.first_offset, ack.last_offset) == expected, f"ack of batch {ack.seq}"


def snapshot(data_dir: Path, copy: Path) -> None:
    """Copy the data directory as the kill left it. Segments wholly below the checkpointed
    recovery point are hard-linked instead (copying every file every round made the test
    quadratic). Loading only reads them, unless it finds them damaged, which `Inspector.inspect`
    reports as a failure anyway."""
    points = OffsetCheckpointFile(data_dir / RECOVERY_POINT_CHECKPOINT).read()
    recovery_point = points.get((TOPIC, PARTITION), 0)
    bases = sorted(parse_base_offset(p) for p in data_dir.glob(f"*/*{LOG_SUFFIX}"))
    flushed = {base for base, after in itertools.pairwise(bases) if after <= recovery_point}

    def link_or_copy(src: str, dst: str) -> None:
        path = Path(src)
        if path.name.endswith(SEGMENT_SUFFIXES) and parse_base_offset(path) in flushed:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(data_dir, copy, copy_function=link_or_copy)


def inspect_copy(data_dir: Path, copy: Path, inspector: Inspector) -> Inspection:
    """Load a copy of the directory as the kill left it; abandon it as a crash would, too."""
    assert not (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    snapshot(data_dir, copy)
    log = partition_log(open_manager(copy))
    try:
        return inspector.inspect(log)
    finally:
        for segment in log.segments:
            segment.close()
        shutil.rmtree(copy)


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_append(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    inspector = Inspector()
    batches = torn_tails = survivors = 0
    for round_no in range(ROUNDS):
        work = tmp_path / f"round-{round_no}"
        if round_no % AIM_EVERY == AIM_EVERY - 1:
            # Random kills seldom land inside a write, and only a multi-page write can be cut
            # (the kernel checks for a fatal signal between pages): aim some at a huge batch.
            target = next_huge_batch(batches)
            acks = run_writer_until_killed(data_dir, work, rng.uniform(*AIM_WINDOW_S), target)
        else:
            acks = run_writer_until_killed(data_dir, work, rng.uniform(0.02, 0.3))
        try:
            check_acks(acks, inspector.stream, first_seq=batches)
            inspector.acknowledged = acks[-1].seq + 1
            found = inspect_copy(data_dir, tmp_path / "inspect", inspector)
        except AssertionError as exc:
            exc.add_note(f"after kill {round_no + 1} of {ROUNDS} (acks in {work / 'acks'})")
            raise
        torn_tails += found.report.truncated_bytes > 0
        survivors += found.batches > inspector.acknowledged
        batches = found.batches

    manager = open_manager(data_dir)  # the last kill recovered in place, then a clean restart
    assert inspector.inspect(partition_log(manager)).batches == batches
    manager.close()
    manager = open_manager(data_dir)
    log = partition_log(manager)
    assert log.load_report.recovered_segments == 0 and log.load_report.problems == []
    assert inspector.inspect(log).batches == batches
    segments = len(log.segments)
    manager.close()

    with capsys.disabled():
        print(
            f"\ncrash test: {ROUNDS} SIGKILL rounds, {batches} batches "
            f"({inspector.stream.base(batches)} records, {segments} segments); "
            f"torn tails cut on load: {torn_tails} ({ROUNDS // AIM_EVERY} kills aimed at a huge "
            f"write); unacknowledged batches kept: {survivors}; "
            f"{time.monotonic() - started:.1f} s"
        )
