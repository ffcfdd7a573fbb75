"""The writer the crash test kills: appends deterministic batches to a real log until SIGKILL.

Run as `python crash_writer.py <data dir>`. It opens a LogManager with an fsync per append and a
short checkpoint interval, finds where the previous (killed) writer stopped, and appends batch
after batch. After each append returns it prints one acknowledgement line and flushes stdout::

    <first offset> <last offset> <sequence number>

Batch `n` of the stream is a pure function of `n` (`stream_batch`): its codec, record count,
keys, values, headers and timestamps all come from `random.Random(n)`, and every record value
starts with `seq=<n> rec=<i>|`. So the whole log is a prefix of one deterministic stream, and the
test can say exactly what every offset must hold. The test imports this module for that.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

from weir.clock import SystemClock, ThreadScheduler
from weir.records import (
    BatchSpec,
    Compression,
    Record,
    build_batch,
    iter_batches,
    iter_records,
)
from weir.storage import LogConfig, LogManager, LogManagerConfig, PartitionLog

TOPIC = "crash"
PARTITION = 0
LEADER_EPOCH = 0
BASE_TIMESTAMP = 1_700_000_000_000

# Small segments and indexes so that segments roll every few dozen batches, on size and on a full
# index alike; retention off because the record timestamps are fixed in the past.
LOG_CONFIG = LogConfig(
    flush_messages=1,
    segment_bytes=64 * 1024,
    index_interval_bytes=512,
    segment_index_bytes=480,
    retention_ms=-1,
)
MANAGER_CONFIG = LogManagerConfig(checkpoint_interval_ms=200)


@dataclass(frozen=True, slots=True)
class Shape:
    codec: Compression
    count: int
    value_sizes: tuple[int, int]
    huge: bool = False


def _shape(rng: random.Random) -> Shape:
    codec = rng.choice(list(Compression))
    kind = rng.random()
    if kind < 0.55:  # small: a few short records
        return Shape(codec, rng.randint(1, 8), (0, 120))
    if kind < 0.85:  # medium: many records, a batch above the index interval
        return Shape(codec, rng.randint(8, 60), (10, 200))
    if kind < 0.99:  # large: several pages, a batch of its own in a segment now and then
        return Shape(codec, rng.randint(1, 6), (1000, 6000))
    # huge: uncompressed, one write of many pages, which a kill can cut between two pages
    return Shape(Compression.NONE, 1, (150_000, 400_000), huge=True)


def is_huge(seq: int) -> bool:
    return _shape(random.Random(seq)).huge


def stream_records(seq: int) -> tuple[list[Record], Compression]:
    """The records (at offsets 0..n-1) and codec of batch `seq` of the stream."""
    rng = random.Random(seq)
    shape = _shape(rng)
    timestamps = _timestamps(rng, seq, shape.count)
    records = [
        Record(
            offset=i,
            timestamp=timestamps[i],
            key=None if rng.random() < 0.3 else b"key-%d" % rng.randrange(1000),
            value=b"seq=%d rec=%d|" % (seq, i) + _payload(rng, rng.randint(*shape.value_sizes)),
            headers=(("h", b"%d" % seq),) if rng.random() < 0.2 else (),
        )
        for i in range(shape.count)
    ]
    return records, shape.codec


def _timestamps(rng: random.Random, seq: int, count: int) -> list[int]:
    """Rising across the stream, jittered between batches, sometimes out of order inside one."""
    first = BASE_TIMESTAMP + 4 * seq + rng.randint(-60, 20)
    stamps = [first + i * rng.randint(0, 3) for i in range(count)]
    if rng.random() < 0.2:
        rng.shuffle(stamps)
    return stamps


def _payload(rng: random.Random, size: int) -> bytes:
    if rng.random() < 0.5:
        return rng.randbytes(size)
    return (b"weir %d " % rng.randrange(100) * (size // 6 + 1))[:size]


def stream_batch(seq: int) -> bytes:
    return build_stream_batch(*stream_records(seq))


def build_stream_batch(records: list[Record], codec: Compression) -> bytes:
    return build_batch(records, spec=BatchSpec(compression=codec))


def sequence_of(value: bytes | None) -> int:
    assert value is not None and value.startswith(b"seq=")
    return int(value[4 : value.index(b" ")])


def next_sequence(log: PartitionLog) -> int:
    """The sequence number after the last batch in the log (0 for an empty log)."""
    if log.log_end_offset == log.log_start_offset:
        return 0
    info = log.read(log.log_end_offset - 1, 1, max_offset=log.log_end_offset)
    assert info.data is not None
    *_, last = iter_batches(info.data.read_bytes(), verify_crc=True)
    *_, record = iter_records(last)
    return sequence_of(record.value) + 1


def main(data_dir: Path) -> None:
    manager = LogManager(data_dir, LOG_CONFIG, SystemClock(), ThreadScheduler(), MANAGER_CONFIG)
    log = manager.get_or_create(TOPIC, PARTITION)
    seq = next_sequence(log)
    while True:
        info = log.append(stream_batch(seq), leader_epoch=LEADER_EPOCH)
        sys.stdout.write(f"{info.first_offset} {info.last_offset} {seq}\n")
        sys.stdout.flush()
        seq += 1


if __name__ == "__main__":
    main(Path(sys.argv[1]))
