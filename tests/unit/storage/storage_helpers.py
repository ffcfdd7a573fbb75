"""Helpers shared by the storage unit tests."""

from __future__ import annotations

from collections.abc import Callable

from weir.records import Record, build_batch, iter_batches, iter_records
from weir.storage import PartitionLog

OpenLog = Callable[..., PartitionLog]


def batch(values: list[bytes], timestamp: int = 0, keys: list[bytes | None] | None = None) -> bytes:
    keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(offset=i, timestamp=timestamp, key=k, value=v)
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    return build_batch(records)


def all_values(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record the log holds from `start` to its log end offset."""
    return _values(log, start, log.log_end_offset)


def readable_values(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record a consumer may read from `start`: up to the high
    watermark."""
    return _values(log, start, None)


def _values(log: PartitionLog, start: int, bound: int | None) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = start
    end = log.high_watermark if bound is None else bound
    while offset < end:
        info = log.read(offset, 1 << 20, max_offset=bound)
        if info.data is None:
            break
        for header in iter_batches(info.data.read_bytes(), verify_crc=True):
            out += [(r.offset, r.value) for r in iter_records(header) if r.offset >= start]
            offset = header.next_offset
    return out


def commit(log: PartitionLog) -> None:
    """What a partition's leader alone does after an append: its high watermark to the log
    end offset."""
    log.update_high_watermark(log.log_end_offset)
