from __future__ import annotations

import random

from storage_helpers import OpenLog, batch

from weir.clock import FakeClock
from weir.records import BatchSpec, Compression, Record, build_batch, iter_records
from weir.storage import LogConfig
from weir.storage.cleaner import LogCleaner

COMPACT = LogConfig(
    segment_bytes=2000,
    index_interval_bytes=200,
    cleanup_policy=("compact",),
    delete_retention_ms=1000,
    retention_ms=-1,
)


def records_of(log) -> list[tuple[int, bytes | None, bytes | None]]:  # type: ignore[no-untyped-def]
    return [(r.offset, r.key, r.value) for h in log.batches() for r in iter_records(h)]


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(COMPACT)
    rng = random.Random(7)
    latest: dict[bytes, tuple[int, bytes]] = {}
    for i in range(300):
        key = b"k%d" % rng.randrange(20)
        value = b"v%d-" % i + b"x" * rng.randrange(30)
        info = log.append(
            batch([value], timestamp=clock.milliseconds(), keys=[key]), leader_epoch=0
        )
        latest[key] = (info.first_offset, value)
    log.roll()
    end = log.log_end_offset
    rewritten = LogCleaner(clock).clean(log)
    assert rewritten > 0
    kept = records_of(log)
    assert sorted(kept) == sorted((o, k, v) for k, (o, v) in latest.items())
    assert log.log_end_offset == end
    assert log.append(batch([b"after"], keys=[b"k1"]), leader_epoch=0).first_offset == end
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.directory.iterdir())


def test_compaction_preserves_offsets_inside_compressed_batches(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(COMPACT)
    now = clock.milliseconds()
    records = [
        Record(offset=i, timestamp=now, key=b"k%d" % (i % 3), value=b"%d" % i) for i in range(9)
    ]
    log.append(build_batch(records, spec=BatchSpec(compression=Compression.ZSTD)), leader_epoch=3)
    log.roll()
    LogCleaner(clock).clean(log)
    headers = list(log.batches())
    assert len(headers) == 1
    header = headers[0]
    assert (header.base_offset, header.last_offset) == (0, 8)
    assert header.compression is Compression.ZSTD and header.crc_ok()
    assert header.partition_leader_epoch == 3
    assert [(r.offset, r.value) for r in iter_records(header)] == [(6, b"6"), (7, b"7"), (8, b"8")]


def test_tombstones_survive_delete_retention_then_go(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(COMPACT)
    now = clock.milliseconds()
    log.append(batch([b"v1"], timestamp=now, keys=[b"a"]), leader_epoch=0)
    log.append(batch([b"v2"], timestamp=now, keys=[b"b"]), leader_epoch=0)
    log.append(batch([None], timestamp=now, keys=[b"a"]), leader_epoch=0)  # type: ignore[list-item]
    log.roll()
    cleaner = LogCleaner(clock)
    cleaner.clean(log)
    assert records_of(log) == [(1, b"b", b"v2"), (2, b"a", None)]
    clock.advance(1001)
    cleaner.clean(log)
    assert records_of(log) == [(1, b"b", b"v2")]


def test_the_active_segment_and_recent_segments_are_not_compacted(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(LogConfig(cleanup_policy=("compact",), min_compaction_lag_ms=5000))
    now = clock.milliseconds()
    for i in range(5):
        log.append(batch([b"%d" % i], timestamp=now, keys=[b"same"]), leader_epoch=0)
    assert LogCleaner(clock).clean(log) == 0  # all in the active segment
    log.roll()
    assert LogCleaner(clock).clean(log) == 0  # younger than min.compaction.lag.ms
    clock.advance(5001)
    assert LogCleaner(clock).clean(log) == 1
    assert records_of(log) == [(4, b"same", b"4")]


def test_compacted_log_survives_a_restart(open_log: OpenLog, clock: FakeClock) -> None:
    log = open_log(COMPACT)
    for i in range(100):
        log.append(
            batch([b"%d" % i * 10], timestamp=clock.milliseconds(), keys=[b"k%d" % (i % 7)]),
            leader_epoch=0,
        )
    log.roll()
    LogCleaner(clock).clean(log)
    before = records_of(log)
    log.close()
    reopened = open_log(COMPACT, clean_shutdown=False)
    assert not reopened.load_report.problems
    assert records_of(reopened) == before
    assert reopened.log_end_offset == 100
